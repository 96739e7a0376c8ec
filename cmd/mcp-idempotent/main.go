// Command mcp-idempotent is a proxy in front of any MCP server that makes
// retried tool calls safe: a retried call attaches to the execution that
// already happened instead of running again.
//
//	mcp-idempotent [flags] -- COMMAND ARGS...
//	mcp-idempotent demo
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/mcp-idempotent/mcp-idempotent/internal/cli"
)

func main() {
	// A client that goes away closes the pipe the proxy answers on. Left
	// to the runtime, the first write to it kills the process (SIGPIPE),
	// with calls in flight unrecorded; noticed, the write fails with
	// EPIPE and the proxy winds down as at the end of its input.
	// (signal.Ignore would leave the upstream ignoring it too.)
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
	stops := []os.Signal{syscall.SIGTERM}
	// A hangup (the terminal or ssh session that ran the proxy closed)
	// would kill it outright, calls in flight unanswered and the journal
	// unsealed: it stops the proxy as SIGTERM does. Unless nohup ignores
	// it: Notify would undo that. Likewise SIGINT, which a shell ignores
	// for a job it starts in the background (`mcp-idempotent ... &` in a
	// script): a Ctrl-C meant for the script must not stop the proxy.
	for _, sig := range []os.Signal{os.Interrupt, syscall.SIGHUP} {
		if !signal.Ignored(sig) {
			stops = append(stops, sig)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), stops...)
	err := cli.Run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "mcp-idempotent:", err)
		if hint := cli.UsageHint(err); hint != "" {
			fmt.Fprintln(os.Stderr, hint)
		}
		os.Exit(cli.ExitCode(err))
	}
}
