package proxy

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/fingerprint"
	"github.com/mcp-idempotent/mcp-idempotent/internal/intercept"
	"github.com/mcp-idempotent/mcp-idempotent/internal/jsonrpc"
	"github.com/mcp-idempotent/mcp-idempotent/internal/mcp"
	"github.com/mcp-idempotent/mcp-idempotent/internal/policy"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record/memstore"
)

// accountingConn is an upstream Conn whose ReadFrame also returns the
// transport's own accounts of requests that got no answer, beside the
// frames, as the Streamable HTTP client's does.
type accountingConn struct {
	Conn
	in chan readResult
}

type readResult struct {
	frame []byte
	err   error
}

func newAccountingConn(c Conn) *accountingConn {
	a := &accountingConn{Conn: c, in: make(chan readResult, 16)}
	go func() {
		for {
			f, err := c.ReadFrame()
			a.in <- readResult{f, err}
			if err != nil {
				return
			}
		}
	}()
	return a
}

func (a *accountingConn) ReadFrame() ([]byte, error) {
	r := <-a.in
	return r.frame, r.err
}

// account gives the session the transport's account of request id.
func (a *accountingConn) account(id string, na jsonrpc.NoAnswer) {
	na.ID = json.RawMessage(id)
	a.in <- readResult{err: &na}
}

// TestNoAnswer: what the upstream's transport saw of a request it got no
// answer to reaches the caller as what it means: a call not sent failed
// and may run again; a call sent and unanswered, or answered by an HTTP
// status that may follow a run, has an unknown outcome; any other status
// fails the call with the error that stands for it. A request of the
// client's passed through gets that error under its own id.
func TestNoAnswer(t *testing.T) {
	for _, tt := range []struct {
		name string
		na   jsonrpc.NoAnswer
		want []string
	}{
		{"not sent", jsonrpc.NoAnswer{NotSent: true, Reason: "upstream unreachable: dial tcp: connection refused"},
			[]string{"failed before it was sent", "connection refused"}},
		{"sent, no answer", jsonrpc.NoAnswer{Status: 200, Reason: "upstream response ended without an answer"},
			[]string{"Outcome unknown:"}},
		{"HTTP 503", jsonrpc.NoAnswer{Status: 503, Reason: "upstream answered HTTP 503"},
			[]string{"Outcome unknown:", "HTTP 503"}},
		{"HTTP 400", jsonrpc.NoAnswer{Status: 400, Reason: "upstream answered HTTP 400"},
			[]string{`"error":{"code":-32603,"message":"upstream answered HTTP 400","data":{"http_status":400}}`}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var up *accountingConn
			r := newRigUpstream(t, context.Background(), 0, Options{Interceptor: newInterceptor(nil)}, func(c Conn) Conn {
				up = newAccountingConn(c)
				return up
			})
			r.startCall(t, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"charge_card"}}`)
			up.account(`"mcp-idempotent:2"`, tt.na)
			got := r.client.next(t, "client")
			for _, w := range tt.want {
				if !strings.Contains(got, `"id":1`) || !strings.Contains(got, w) {
					t.Errorf("the caller got %s; want %q under id 1", got, w)
				}
			}
			r.client.send(t, `{"jsonrpc":"2.0","id":5,"method":"ping"}`)
			r.upstream.next(t, "upstream")
			up.account("5", tt.na)
			want := string(jsonrpc.NewErrorResponse(json.RawMessage("5"), tt.na.Object()))
			if got := r.client.next(t, "client"); got != want {
				t.Errorf("the client's ping got %s; want %s", got, want)
			}
		})
	}
}

// TestUpstreamCannotForgeTransportFacts: an upstream that runs a side
// effect and answers with an error whose data claims that the request
// never left is answered as the upstream's failure, as it came, and is not
// sent again, whatever the tool's retry rule: only the proxy's own
// transport can say that nothing was sent.
func TestUpstreamCannotForgeTransportFacts(t *testing.T) {
	store := memstore.New(memstore.Options{})
	resolve := func(tool string, ann *mcp.Annotations) policy.Policy {
		p := policy.FromAnnotations(ann)
		p.Retry = &policy.RetryRule{MaxAttempts: 3, Base: time.Millisecond, Cap: time.Millisecond}
		return p
	}
	r := newRigOptions(t, 0, Options{Interceptor: newInterceptor(store), Resolve: resolve})
	call := r.startCall(t, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"charge_card","arguments":{"amount":5}}}`)
	var m struct{ ID json.RawMessage }
	json.Unmarshal([]byte(call), &m)
	forged := `{"code":-32603,"message":"upstream unavailable","data":{"mcp-idempotent/not_sent":true,"mcp-idempotent/unanswered":true}}`
	r.upstream.send(t, `{"jsonrpc":"2.0","id":`+string(m.ID)+`,"error":`+forged+`}`)
	if got := r.client.next(t, "client"); got != `{"jsonrpc":"2.0","id":1,"error":`+forged+`}` {
		t.Fatalf("the caller got %s; want the upstream's error as it came", got)
	}
	r.client.send(t, `{"jsonrpc":"2.0","id":2,"method":"ping"}`)
	if got := r.upstream.next(t, "upstream"); got != `{"jsonrpc":"2.0","id":2,"method":"ping"}` {
		t.Fatalf("the upstream got %s; want the ping, and the call not sent again", got)
	}
	recs, err := store.List(t.Context(), record.Filter{})
	if err != nil || len(recs) != 1 {
		t.Fatalf("List = %v, %v; want one record", recs, err)
	}
	rec := recs[0]
	if note := rec.History[len(rec.History)-1].Note; rec.State != record.Failed || rec.Attempts != 1 || note != "upstream error -32603" {
		t.Errorf("record: %s after %d attempts, note %q; want failed after 1, as the upstream's error", rec.State, rec.Attempts, note)
	}
}

// newInterceptor returns an interceptor over store (a new memory store if
// nil).
func newInterceptor(store record.Store) *intercept.Interceptor {
	if store == nil {
		store = memstore.New(memstore.Options{})
	}
	return intercept.New(intercept.Options{Store: store, Hasher: fingerprint.NewRandom()})
}

// TestBatchAnsweredAsABatch: the requests of a batch the upstream exits
// without answering are answered in one array, as the batch would have
// been, not in a message each; a request sent alone is answered alone.
func TestBatchAnsweredAsABatch(t *testing.T) {
	r := newRig(t, 0)
	var batch []string
	for i := range 100 {
		batch = append(batch, fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"ping"}`, i))
	}
	r.client.send(t, "["+strings.Join(batch, ",")+"]")
	r.upstream.next(t, "upstream")
	r.client.send(t, `{"jsonrpc":"2.0","id":"alone","method":"ping"}`)
	r.upstream.next(t, "upstream")
	r.upstreamW.Close()
	got := map[bool]string{}
	for range 2 {
		f := r.client.next(t, "client")
		got[strings.HasPrefix(f, "[")] = f
	}
	var answers []struct {
		ID    json.RawMessage
		Error *struct{ Message string }
	}
	if err := json.Unmarshal([]byte(got[true]), &answers); err != nil || len(answers) != 100 {
		t.Fatalf("the batch got %.200s (%v); want one array of 100 answers", got[true], err)
	}
	for _, a := range answers {
		if a.Error == nil || !strings.Contains(a.Error.Message, "closed before answering ping") {
			t.Fatalf("a batch answer %+v; want the upstream's exit", a)
		}
	}
	if !strings.Contains(got[false], `"id":"alone"`) {
		t.Fatalf("the request sent alone got %s; want its own answer", got[false])
	}
	r.wait(t)
}
