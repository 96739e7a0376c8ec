// Command relay is a bare byte relay, the baseline of the latency benchmark in
// package bench: it costs one extra process hop and nothing else.
//
// Usage:
//
//	relay -- COMMAND ARGS...
//
// It starts COMMAND, copies its own stdin to the child's stdin and the child's
// stdout to its own stdout with io.Copy (no framing, no parsing), passes
// stderr through, and exits with the child's status when the child exits.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	if len(args) > 0 && args[0] == "--" {
		args = args[1:]
	}
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, "usage: relay -- COMMAND ARGS...")
		return 2
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stderr = os.Stderr
	// Pipes and io.Copy rather than handing our descriptors to the child:
	// the bytes must really pass through this process.
	childIn, err := cmd.StdinPipe()
	if err != nil {
		fmt.Fprintln(os.Stderr, "relay:", err)
		return 1
	}
	childOut, err := cmd.StdoutPipe()
	if err != nil {
		fmt.Fprintln(os.Stderr, "relay:", err)
		return 1
	}
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "relay:", err)
		return 1
	}
	go func() {
		_, _ = io.Copy(childIn, os.Stdin)
		// Our stdin closed: close the child's, so it sees EOF and exits.
		_ = childIn.Close()
	}()
	_, _ = io.Copy(os.Stdout, childOut)
	if err := cmd.Wait(); err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) && exit.ExitCode() > 0 {
			return exit.ExitCode()
		}
		fmt.Fprintln(os.Stderr, "relay:", err)
		return 1
	}
	return 0
}
