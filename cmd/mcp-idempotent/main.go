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
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
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
