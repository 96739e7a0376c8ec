package proxy

import (
	"encoding/json"
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

// decisions counts an interceptor's decisions, and in shadow mode what
// they would have been.
type decisions struct {
	mu             sync.Mutex
	counted, shown map[string]int // Decision's, ShadowDecision's
}

func (d *decisions) Decision(_ string, _ policy.Class, decision string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.counted[decision]++
}

func (d *decisions) ShadowDecision(_ string, _ policy.Class, decision string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.shown[decision]++
}

func (*decisions) Attempt(string, int, string, time.Duration) {}
func (*decisions) Transition(string, record.State)            {}
func (*decisions) Upstream(string, time.Duration)             {}

// total is the decisions counted so far, shadow ones where there are.
func (d *decisions) total() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := 0
	for _, c := range d.shown {
		n += c
	}
	if n == 0 {
		for _, c := range d.counted {
			n += c
		}
	}
	return n
}

// retriesScript is a client's retries: charges A and B, each sent again
// once it was answered, and charge C sent again while the upstream still
// holds the first. It returns the decisions and the tools/call frames the
// upstream got, and checks that every call was answered.
func retriesScript(t *testing.T, shadow bool) (*decisions, []string, *memstore.Store) {
	d := &decisions{counted: map[string]int{}, shown: map[string]int{}}
	store := memstore.New(memstore.Options{})
	in := intercept.New(intercept.Options{Store: store, Hasher: fingerprint.NewRandom(), Observer: d, Shadow: shadow})
	r := newRigWith(t, 0, in)

	var mu sync.Mutex
	var calls []string
	gotC := make(chan struct{}, 2)
	releaseC := make(chan struct{})
	stop := make(chan struct{})
	defer close(stop)
	go func() { // the upstream: answers every request, holding C's
		for {
			var f []byte
			select {
			case f = <-r.upstream.frames:
			case <-stop:
				return
			}
			var m struct {
				ID     json.RawMessage
				Method string
				Params struct{ Arguments struct{ Card string } }
			}
			json.Unmarshal(f, &m)
			switch m.Method {
			case "tools/list":
				r.upstream.conn.WriteFrame([]byte(`{"jsonrpc":"2.0","id":` + string(m.ID) + `,"result":{"tools":[]}}`))
			case "tools/call":
				mu.Lock()
				calls = append(calls, string(f))
				mu.Unlock()
				answer := `{"jsonrpc":"2.0","id":` + string(m.ID) + `,"result":{"content":[{"type":"text","text":"charged ` + m.Params.Arguments.Card + `"}]}}`
				if m.Params.Arguments.Card == "C" {
					gotC <- struct{}{}
					go func() {
						<-releaseC
						r.upstream.conn.WriteFrame([]byte(answer))
					}()
					continue
				}
				r.upstream.conn.WriteFrame([]byte(answer))
			}
		}
	}()
	call := func(id int, card string) {
		r.client.send(t, `{"jsonrpc":"2.0","id":`+string(rune('0'+id))+`,"method":"tools/call","params":{"name":"charge_card","arguments":{"card":"`+card+`"}}}`)
	}
	answered := func(n int) {
		for id, f := range r.client.byID(t, n) {
			if !strings.Contains(f, `"text":"charged `) {
				t.Errorf("shadow %v: call %s got %s; want its charge", shadow, id, f)
			}
		}
	}
	call(1, "A")
	answered(1)
	call(2, "A") // a retry
	answered(1)
	call(3, "B")
	answered(1)
	call(4, "B")
	answered(1)
	call(5, "C")
	<-gotC
	call(6, "C") // a retry while the first is under way
	deadline := time.Now().Add(5 * time.Second)
	for d.total() < 6 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	close(releaseC)
	answered(2)
	in.Wait(t.Context()) // deliveries are recorded just after the answers
	mu.Lock()
	defer mu.Unlock()
	return d, calls, store
}

// TestShadowDecidesAsNormalMode: the same retries with and without shadow
// mode. Without it the upstream runs each charge once; with it the
// upstream runs every call, as with no proxy, and the decisions counted as
// shadow ones are those the proxy makes without it.
func TestShadowDecidesAsNormalMode(t *testing.T) {
	normal, normalCalls, _ := retriesScript(t, false)
	shadow, shadowCalls, store := retriesScript(t, true)
	want := map[string]int{"new": 3, "replayed": 2, "attached": 1}
	if !equalCounts(normal.counted, want) || len(normalCalls) != 3 {
		t.Fatalf("normal mode: decisions %v, %d calls upstream; want %v and 3", normal.counted, len(normalCalls), want)
	}
	if !equalCounts(shadow.shown, normal.counted) {
		t.Errorf("shadow decisions %v; want those of normal mode, %v", shadow.shown, normal.counted)
	}
	if !equalCounts(shadow.counted, map[string]int{"passed_through": 6}) || len(shadowCalls) != 6 {
		t.Errorf("shadow mode: decisions %v, %d calls upstream; want every call passed through, 6", shadow.counted, len(shadowCalls))
	}
	for _, f := range shadowCalls {
		if strings.Contains(f, "mcp-idempotent") {
			t.Errorf("shadow mode sent %s upstream; want the client's call as it came", f)
		}
	}
	// The executions it would have run are on record, with the outcome
	// the calls got, and say they are shadow ones.
	recs := store.Records()
	if len(recs) != 3 {
		t.Fatalf("shadow mode recorded %d executions; want 3", len(recs))
	}
	for _, rec := range recs {
		if rec.State != record.Delivered || rec.Attempts != 1 || !strings.HasPrefix(rec.Owner, "shadow-") || !strings.Contains(string(rec.Result), "charged") {
			t.Errorf("shadow record %s: %s, %d attempts, owner %s, result %s; want delivered once, the charge, a shadow owner", rec.ID, rec.State, rec.Attempts, rec.Owner, rec.Result)
		}
	}
}

func equalCounts(a, b map[string]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}
