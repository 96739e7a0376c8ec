package proxy

import (
	"context"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/mcp-idempotent/mcp-idempotent/internal/fingerprint"
	"github.com/mcp-idempotent/mcp-idempotent/internal/intercept"
	"github.com/mcp-idempotent/mcp-idempotent/internal/journal"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record/memstore"
	"github.com/mcp-idempotent/mcp-idempotent/internal/telemetry"
	"github.com/mcp-idempotent/mcp-idempotent/internal/transport/stdio"
	"github.com/mcp-idempotent/mcp-idempotent/internal/transport/streamhttp"
)

// TestLaneJournalsClientIDs: a 2026-07-28 stateless request goes
// upstream under an id of the lane's, but the journal and its span name
// it by the id its client sent, in both modes. A client whose own id is
// one the lane gave another client's request (h1) is not confused with
// it.
func TestLaneJournalsClientIDs(t *testing.T) {
	for _, shadow := range []bool{false, true} {
		j := &entries{}
		rec := tracetest.NewSpanRecorder()
		post := laneFront(t, j, shadow, sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)).Tracer("test"))
		for i, id := range []string{`7`, `"h1"`} {
			n := string(rune('0' + i))
			body := `{"jsonrpc":"2.0","id":` + id + `,"method":"tools/call","params":{"name":"charge","arguments":{"n":` + n + `},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}`
			parent := "00-4bf92f3577b34da6a3ce929d0e0e473" + n + "-00f067aa0ba902b7-01"
			if got := nextData(t, sseEvents(post(body, parent)), "the call"); !strings.HasPrefix(got, `{"jsonrpc":"2.0","id":`+id+`,"result":`) {
				t.Fatalf("shadow %v: call %s answered %s", shadow, id, got)
			}
		}
		spans := map[string]bool{} // each trace id and the request id a span of it names
		for deadline := time.Now().Add(5 * time.Second); len(spans) < 2 && time.Now().Before(deadline); time.Sleep(time.Millisecond) {
			for _, sp := range rec.Ended() {
				for _, a := range sp.Attributes() {
					if a.Key == telemetry.RequestID {
						spans[sp.SpanContext().TraceID().String()+" "+a.Value.AsString()] = true
					}
				}
			}
		}
		if want := map[string]bool{"4bf92f3577b34da6a3ce929d0e0e4730 7": true, "4bf92f3577b34da6a3ce929d0e0e4731 h1": true}; !maps.Equal(spans, want) {
			t.Errorf("shadow %v: the spans name the requests %v; want %v", shadow, spans, want)
		}
		// The answer may go before its lines are written.
		byExec := map[string][]journal.Entry{}
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
			clear(byExec)
			done := 0
			for _, e := range j.all() {
				if e.Execution != "" {
					byExec[e.Execution] = append(byExec[e.Execution], e)
					if e.State == "completed" {
						done++
					}
				}
			}
			if done == 2 {
				break
			}
		}
		ids := map[string]bool{}
		for exe, es := range byExec {
			for _, e := range es {
				if len(e.RequestID) > 0 && string(e.RequestID) != string(es[0].RequestID) || e.Request != es[0].Request {
					t.Errorf("shadow %v: %s names two requests: %+v", shadow, exe, es)
				}
			}
			ids[string(es[0].RequestID)+" "+es[0].Request] = true
		}
		if len(ids) != 2 || !ids[`7 7`] || !ids[`"h1" "h1"`] {
			t.Errorf("shadow %v: the journal names the requests %v; want 7 and \"h1\", as the clients sent them", shadow, ids)
		}
	}
}

// laneFront is a proxy session behind the Streamable HTTP front, whose
// upstream answers every call at once; it returns what POSTs a stateless
// request and gives the answer's body.
func laneFront(t *testing.T, j intercept.Journal, shadow bool, tracer trace.Tracer) func(body, traceparent string) io.Reader {
	t.Helper()
	release := make(chan struct{})
	close(release)
	in := intercept.New(intercept.Options{Store: memstore.New(memstore.Options{}), Hasher: fingerprint.NewRandom(), Journal: j, Shadow: shadow, Tracer: tracer})
	srv := streamhttp.NewServer(streamhttp.ServerOptions{
		Actor: "alice",
		Open: func(ctx context.Context, ss *streamhttp.ServerSession) error {
			ur, uw := io.Pipe()
			qr, qw := io.Pipe()
			go heldUpstream(stdio.NewConn(qr, uw, 0), release, make(chan struct{}, 16))
			s := New(ss, stdio.NewConn(ur, qw, 0), Options{Interceptor: in, Actor: "alice", Scope: "session:" + ss.ID(), UpstreamID: "stdio:test", ShutdownGrace: time.Second, Tracer: tracer})
			return s.Run(ctx)
		},
	})
	hs := httptest.NewServer(srv)
	t.Cleanup(func() {
		hs.CloseClientConnections()
		srv.Close()
		hs.Close()
	})
	return func(body, traceparent string) io.Reader {
		req, _ := http.NewRequestWithContext(t.Context(), "POST", hs.URL, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("MCP-Protocol-Version", "2026-07-28")
		req.Header.Set("Mcp-Method", "tools/call")
		req.Header.Set("Mcp-Name", "charge")
		req.Header.Set("traceparent", traceparent)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		return resp.Body
	}
}
