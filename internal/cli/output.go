package cli

import (
	"errors"
	"fmt"
	"io"
	"syscall"
)

// An outputWriter keeps the first error a write to w returned, and
// drops the writes after it: a command's output to a full disk
// (activity show > FILE) would otherwise end short, and the command
// exit 0.
type outputWriter struct {
	w   io.Writer
	err error
}

func (o *outputWriter) Write(p []byte) (int, error) {
	if o.err != nil {
		return 0, o.err
	}
	n, err := o.w.Write(p)
	if err != nil {
		o.err = err
	}
	return n, err
}

// runOutput runs cmd with stdout kept by an outputWriter, and fails it
// if its output could not all be written.
func runOutput(stdout io.Writer, cmd func(stdout io.Writer) error) error {
	o := &outputWriter{w: stdout}
	err := cmd(o)
	if o.err == nil || (err != nil && err != o.err) {
		return err
	}
	// The output failed: cmd gave no error, or the write's own, as
	// --json's encoder does.
	if errors.Is(o.err, syscall.EPIPE) {
		// A reader that went away (| head) took all it wanted.
		return nil
	}
	return fmt.Errorf("writing the output: %w", o.err)
}
