package proxy

import (
	"encoding/json"
	"maps"
	"testing"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/fingerprint"
	"github.com/mcp-idempotent/mcp-idempotent/internal/intercept"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record/memstore"
)

// TestShadowUnreadableAnswer: an answer from the upstream that is not
// JSON reaches the client as it came in shadow mode, and settles the
// call's record unknown, as normal mode does: a retry counts unknown,
// not attached to an execution still waiting.
func TestShadowUnreadableAnswer(t *testing.T) {
	d := &decisions{counted: map[string]int{}, shown: map[string]int{}, settled: make(chan record.State, 64)}
	in := intercept.New(intercept.Options{Store: memstore.New(memstore.Options{}), Hasher: fingerprint.NewRandom(), Observer: d, Shadow: true})
	r := newRigOptions(t, 0, Options{Interceptor: in})
	call := func(id string) string {
		return `{"jsonrpc":"2.0","id":` + id + `,"method":"tools/call","params":{"name":"charge","arguments":{"card":"4242"}}}`
	}
	r.client.send(t, call("2"))
	list := r.upstream.next(t, "upstream")
	var m struct{ ID json.RawMessage }
	json.Unmarshal([]byte(list), &m)
	r.upstream.send(t, `{"jsonrpc":"2.0","id":`+string(m.ID)+`,"result":{"tools":[]}}`)
	if got := r.upstream.next(t, "upstream"); got != call("2") {
		t.Fatalf("the upstream got %s; want the call", got)
	}
	broken := `{"jsonrpc":"2.0","id":2,"result":{"content":[}`
	r.upstream.send(t, broken)
	if got := r.client.next(t, "client"); got != broken {
		t.Errorf("the client got %s; want the upstream's answer as it came", got)
	}
	select {
	case state := <-d.settled:
		if state != record.Unknown {
			t.Errorf("the call settled %s; want unknown", state)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the call was not settled")
	}
	r.client.send(t, call("3"))
	if got := r.upstream.next(t, "upstream"); got != call("3") {
		t.Fatalf("the upstream got %s; want the retry", got)
	}
	r.upstream.answerCharged(t, call("3"))
	r.client.next(t, "client")
	d.mu.Lock()
	defer d.mu.Unlock()
	if want := map[string]int{"new": 1, "unknown": 1}; !maps.Equal(d.shown, want) {
		t.Errorf("shadow decisions %v; want %v", d.shown, want)
	}
}
