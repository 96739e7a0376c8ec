package proxy

import (
	"strings"
	"sync"

	"github.com/mcp-idempotent/mcp-idempotent/internal/policy"
)

// ToolWarnings holds what the log said of each tool whose policy has
// keys without effect (policy.NoEffect), so that a listing that comes
// again, in the same session or another, says it again only of a tool
// whose warning changed.
type ToolWarnings struct {
	mu   sync.Mutex
	said map[string]string // tool name: what the log said of it
	// dropped holds, by tool name, the schema defaults the log said were
	// left out (fingerprintable).
	dropped map[string]string
}

// NewToolWarnings returns a ToolWarnings that has said nothing yet.
func NewToolWarnings() *ToolWarnings {
	return &ToolWarnings{said: make(map[string]string), dropped: make(map[string]string)}
}

// noteDropped reports whether the log has yet to say that the defaults
// named in members, of tool name's inputSchema, were left out, and notes
// that it will. A tool with none left out is forgotten.
func (w *ToolWarnings) noteDropped(name string, members []string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(members) == 0 {
		delete(w.dropped, name)
		return false
	}
	said := strings.Join(members, "\x00")
	if w.dropped[name] == said {
		return false
	}
	w.dropped[name] = said
	return true
}

// note reports whether the log has yet to say that some keys of p, the
// policy of tool name, have no effect, and notes that it will. A tool
// whose keys all count again is forgotten, to be warned of anew if it
// comes back.
func (w *ToolWarnings) note(name string, p *policy.Policy) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if p.NoEffect == nil {
		delete(w.said, name)
		return false
	}
	said := p.NoEffect.File + "\x00" + strings.Join(p.NoEffect.Keys, ",") + "\x00" + p.Source
	if w.said[name] == said {
		return false
	}
	w.said[name] = said
	return true
}
