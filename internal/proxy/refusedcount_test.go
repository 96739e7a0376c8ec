package proxy

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/fingerprint"
	"github.com/mcp-idempotent/mcp-idempotent/internal/intercept"
	"github.com/mcp-idempotent/mcp-idempotent/internal/policy"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record/memstore"
)

// labels is an observer that keeps each decision with its labels, as
// "tool listed class decision", a shadow decision's marked "shadow".
type labels struct {
	mu      sync.Mutex
	counted []string
}

func (l *labels) add(s string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.counted = append(l.counted, s)
}

func (l *labels) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.counted)
}

func (l *labels) Decision(tool intercept.Tool, class policy.Class, decision string) {
	l.add(fmt.Sprintf("%s %v %s %s", tool.Name, tool.Listed, class, decision))
}

func (l *labels) ShadowDecision(tool intercept.Tool, class policy.Class, decision string) {
	l.add(fmt.Sprintf("shadow %s %v %s %s", tool.Name, tool.Listed, class, decision))
}

func (*labels) Attempt(intercept.Tool, int, string, time.Duration) {}
func (*labels) Transition(intercept.Tool, record.State)            {}
func (*labels) Upstream(intercept.Tool, time.Duration)             {}

// labelledRig is a rig whose proxy, in shadow mode if shadow, counts
// into the returned labels.
func labelledRig(t *testing.T, shadow bool) (*rig, *labels) {
	t.Helper()
	l := &labels{}
	in := intercept.New(intercept.Options{Store: memstore.New(memstore.Options{}), Hasher: fingerprint.NewRandom(), Observer: l, Shadow: shadow})
	return newRigOptions(t, 0, Options{Interceptor: in}), l
}

// TestMalformedCallCountedUnderItsTool: a call whose arguments are not
// an object is refused in normal mode and passed upstream as it came in
// shadow mode; either way it is counted invalid (in shadow mode as what
// it would have become), under its tool as the upstream's listing names
// it, which it waits for as any call does.
func TestMalformedCallCountedUnderItsTool(t *testing.T) {
	for _, shadow := range []bool{false, true} {
		t.Run(fmt.Sprint("shadow=", shadow), func(t *testing.T) {
			r, l := labelledRig(t, shadow)
			const call = `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"charge_card","arguments":[1]}}`
			r.client.send(t, call)
			if got := r.upstream.next(t, "upstream"); !strings.Contains(got, `"method":"tools/list"`) {
				t.Fatalf("the upstream got %s; want the proxy's listing first", got)
			}
			r.upstream.send(t, `{"jsonrpc":"2.0","id":"mcp-idempotent:1","result":{"tools":[{"name":"charge_card","inputSchema":{"type":"object"}}]}}`)
			want := []string{"charge_card true side_effect invalid"}
			if shadow {
				if got := r.upstream.next(t, "upstream"); got != call {
					t.Fatalf("the upstream got %s; want the call as it came", got)
				}
				r.upstream.send(t, `{"jsonrpc":"2.0","id":2,"result":{"content":[]}}`)
				want = []string{"charge_card true side_effect passed_through", "shadow charge_card true side_effect invalid"}
			}
			got := r.client.next(t, "client")
			if refused := strings.Contains(got, `"error"`); refused == shadow {
				t.Errorf("the client got %s", got)
			}
			if c := l.all(); !slices.Equal(c, want) {
				t.Errorf("counted %q; want %q", c, want)
			}
		})
	}
}

// TestBatchedCallCounted: a tools/call in a batch refused is counted
// invalid, in shadow mode too, where a batch refused for another reason
// went nowhere either. The batch is answered at once: a tool not listed
// yet is counted unlisted.
func TestBatchedCallCounted(t *testing.T) {
	for _, shadow := range []bool{false, true} {
		t.Run(fmt.Sprint("shadow=", shadow), func(t *testing.T) {
			r, l := labelledRig(t, shadow)
			// In shadow mode the call would pass, but for the ping's id.
			r.client.send(t, `[{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"charge_card","arguments":{}}},{"jsonrpc":"2.0","id":"mcp-idempotent:9","method":"ping"}]`)
			if got := r.client.next(t, "client"); !strings.Contains(got, `"id":4,"error"`) {
				t.Fatalf("the client got %s; want the batch refused", got)
			}
			want := []string{"charge_card false side_effect invalid"}
			if c := l.all(); !slices.Equal(c, want) {
				t.Errorf("counted %q; want %q", c, want)
			}
		})
	}
}

// TestRefusedAsItCameCounted: a tools/call refused as it came, for its
// envelope, its id or its _meta, is counted invalid under its tool, in
// shadow mode too, where it went nowhere either.
func TestRefusedAsItCameCounted(t *testing.T) {
	refused := []struct{ name, frame, answer string }{
		{"version", `{"jsonrpc":"1.0","id":5,"method":"tools/call","params":{"name":"charge_card","arguments":{}}}`, "-32600"},
		{"protocol", `{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"charge_card","arguments":{},"_meta":{"io.modelcontextprotocol/protocolVersion":"1999-01-01"}}}`, "1999-01-01"},
		{"token", `{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"charge_card","arguments":{},"_meta":{"progressToken":"mcp-idempotent:p"}}}`, "reserved"},
		{"id", `{"jsonrpc":"2.0","id":"mcp-idempotent:5","method":"tools/call","params":{"name":"charge_card","arguments":{}}}`, "reserved"},
		{"meta", `{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"charge_card","arguments":{},"_meta":{"mcp-idempotent/key":"a","mcp-idempotent/key":"b"}}}`, "-32602"},
	}
	for _, shadow := range []bool{false, true} {
		for _, rc := range refused {
			t.Run(fmt.Sprint("shadow=", shadow, "/", rc.name), func(t *testing.T) {
				r, l := labelledRig(t, shadow)
				r.client.send(t, rc.frame)
				if got := r.client.next(t, "client"); !strings.Contains(got, `"error"`) || !strings.Contains(got, rc.answer) {
					t.Fatalf("the client got %s; want the call refused (%s)", got, rc.answer)
				}
				want := []string{"charge_card false side_effect invalid"}
				if c := l.all(); !slices.Equal(c, want) {
					t.Errorf("counted %q; want %q", c, want)
				}
			})
		}
	}
}

// TestInUseCallCounted: a tools/call refused because another call still
// under way holds its id is counted invalid under its tool.
func TestInUseCallCounted(t *testing.T) {
	for _, shadow := range []bool{false, true} {
		t.Run(fmt.Sprint("shadow=", shadow), func(t *testing.T) {
			r, l := labelledRig(t, shadow)
			r.client.send(t, `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`)
			r.upstream.next(t, "upstream")
			r.upstream.send(t, `{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"charge_card","inputSchema":{"type":"object"}}]}}`)
			r.client.next(t, "client")
			r.client.send(t, `{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"charge_card","arguments":{"n":1}}}`)
			r.upstream.next(t, "upstream") // under way, not answered
			r.client.send(t, `{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"charge_card","arguments":{"n":2}}}`)
			if got := r.client.next(t, "client"); !strings.Contains(got, "already in use") {
				t.Fatalf("the client got %s; want the id refused as in use", got)
			}
			c := l.all()
			if n := slices.Index(c, "charge_card true side_effect invalid"); n < 0 || slices.Contains(c[n+1:], c[n]) {
				t.Errorf("counted %q; want the refused call counted invalid once", c)
			}
		})
	}
}

// TestUnportableIDCallCounted: a call that would go upstream under the
// client's own id, which a server could read as another, is refused and
// counted invalid, not passed_through: nothing went upstream.
func TestUnportableIDCallCounted(t *testing.T) {
	for _, shadow := range []bool{false, true} {
		t.Run(fmt.Sprint("shadow=", shadow), func(t *testing.T) {
			r, l := labelledRig(t, shadow)
			r.client.send(t, `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`)
			r.upstream.next(t, "upstream")
			r.upstream.send(t, `{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"echo","inputSchema":{"type":"object"},"annotations":{"readOnlyHint":true}}]}}`)
			r.client.next(t, "client")
			r.client.send(t, `{"jsonrpc":"2.0","id":9007199254740993,"method":"tools/call","params":{"name":"echo","arguments":{}}}`)
			if got := r.client.next(t, "client"); !strings.Contains(got, "-32600") {
				t.Fatalf("the client got %s; want the call refused", got)
			}
			want := []string{"echo true read_only invalid"}
			if c := l.all(); !slices.Equal(c, want) {
				t.Errorf("counted %q; want %q", c, want)
			}
		})
	}
}
