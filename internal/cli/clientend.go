package cli

import (
	"os"
	"runtime"
	"strconv"
	"strings"

	"github.com/mcp-idempotent/mcp-idempotent/internal/journal"
)

// A clientEnd says what the transport knows of a session's client, for
// the journal's session lines.
type clientEnd struct {
	client journal.SessionClient
	// endReason says why the transport ended the session; nil or ""
	// means the client closed it.
	endReason func() string
}

// parentProcess names the process that started this one: over stdio, the
// client. Only Linux tells its command name (/proc); elsewhere nil.
func parentProcess() *journal.Parent {
	if runtime.GOOS != "linux" {
		return nil
	}
	pid := os.Getppid()
	if pid <= 1 {
		return nil // the parent is gone: the process was adopted
	}
	p := &journal.Parent{PID: pid}
	if comm, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm"); err == nil {
		p.Command = strings.TrimSpace(string(comm))
	}
	return p
}
