package cli

import (
	"context"
	"io"
)

func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return usagef("demo: not built yet")
}
