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
