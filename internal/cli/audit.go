package cli

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/mcp-idempotent/mcp-idempotent/internal/journal"
)

const auditUsage = `Usage:
  mcp-idempotent audit verify FILE    check an activity journal (--journal FILE):
                                      every line whole, and chained to the one before it
`

func runAudit(args []string, stdout io.Writer) error {
	if len(args) == 0 {
		return usagef("audit: say verify")
	}
	switch args[0] {
	case "verify":
		if len(args) != 2 {
			return usagef("audit verify takes one FILE")
		}
		return auditVerify(args[1], stdout)
	}
	return usagef("audit: unknown subcommand %q", args[0])
}

// auditVerify checks the journal at path. It needs no lock: a proxy may
// be appending, and then the last line may be read half written and be
// reported torn; every line before it is still checked.
func auditVerify(path string, stdout io.Writer) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("verifying journal: %w", err)
	}
	defer f.Close()
	n, err := journal.Verify(f)
	if le, ok := errors.AsType[*journal.LineError](err); ok {
		// FILE:LINE: as compilers write it, so an editor jumps there.
		return fmt.Errorf("%s:%d: does not verify: %s (%s before it)", path, le.Line, le.Reason, linesVerify(n))
	}
	if err != nil {
		return fmt.Errorf("verifying journal %s: %w", path, err)
	}
	fmt.Fprintf(stdout, "%s: %s\n", path, linesVerify(n))
	return nil
}

func linesVerify(n int) string {
	if n == 1 {
		return "1 line verifies"
	}
	return fmt.Sprintf("%d lines verify", n)
}
