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
	"log"
	"os"
	"os/signal"
	"syscall"

	"github.com/mcp-idempotent/mcp-idempotent/internal/cli"
	_ "github.com/mcp-idempotent/mcp-idempotent/internal/quietinit"
)

func main() {
	// Silenced while the packages initialized (internal/quietinit).
	log.SetOutput(os.Stderr)
	// A client that goes away closes the pipe the proxy answers on. Left
	// to the runtime, the first write to it kills the process (SIGPIPE),
	// with calls in flight unrecorded; noticed, the write fails with
	// EPIPE and the proxy winds down as at the end of its input.
	// (signal.Ignore would leave the upstream ignoring it too.)
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
	// A hangup (the terminal or ssh session that ran the proxy closed)
	// would kill it outright, calls in flight unanswered and the journal
	// unsealed: it stops the proxy as SIGTERM does. A shell ignores SIGINT
	// for a job it starts in the background (`mcp-idempotent ... &` in a
	// script): a Ctrl-C meant for the script must not stop the proxy, so
	// an ignored signal stays ignored (cli.StopContext).
	ctx, stop := cli.StopContext(context.Background())
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
