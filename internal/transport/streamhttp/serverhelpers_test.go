package streamhttp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf16"

	"github.com/mcp-idempotent/mcp-idempotent/internal/jsonrpc"
)

// A fakeProxy stands in for the proxy behind a Server: it answers every
// request with {"method":M,"id":ID} (the id it saw), after the request's
// gate opens for methods named "slow", and records what it read.
type fakeProxy struct {
	gate chan struct{} // closed to let "slow" requests answer

	mu     sync.Mutex
	frames []string // every frame read, in order
	opened int      // sessions opened
	// started and ended receive each session as its Open starts and
	// returns.
	started, ended chan *ServerSession
	// routed receives the id of each answer once it is handed to the
	// session, written once it is written to the client, and lost once
	// it never can be (the first 1024; a test that reads them makes
	// fewer).
	routed, written, lost chan string
	// onLost, if set before the first request, is called as an answer
	// is told lost, before lost has it.
	onLost func()
}

// note sends id on ch unless ch is full.
func note(ch chan string, id string) {
	select {
	case ch <- id:
	default:
	}
}

func newFakeProxy() *fakeProxy {
	return &fakeProxy{gate: make(chan struct{}), started: make(chan *ServerSession, 16), ended: make(chan *ServerSession, 16),
		routed: make(chan string, 1024), written: make(chan string, 1024), lost: make(chan string, 1024)}
}

func (p *fakeProxy) open(ctx context.Context, s *ServerSession) error {
	p.mu.Lock()
	p.opened++
	p.mu.Unlock()
	select {
	case p.started <- s:
	default:
	}
	defer func() { p.ended <- s }()
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		f, err := s.ReadFrame()
		if err != nil {
			return nil
		}
		p.mu.Lock()
		p.frames = append(p.frames, string(f))
		p.mu.Unlock()
		msgs, err := jsonrpc.DecodeBatch(f)
		if err != nil {
			m, err := jsonrpc.Decode(f)
			if err != nil {
				continue
			}
			msgs = []*jsonrpc.Message{m}
		}
		for _, m := range msgs {
			if !m.IsRequest() {
				continue
			}
			if m.Method == "end" {
				return nil // the upstream went away with the answer owed
			}
			p.answer(&wg, s, m)
		}
	}
}

// answer answers m on its own goroutine, as a proxy answers calls.
func (p *fakeProxy) answer(wg *sync.WaitGroup, s *ServerSession, m *jsonrpc.Message) {
	wg.Go(func() {
		switch m.Method {
		case "slow":
			select {
			case <-p.gate:
			case <-s.done:
				return
			}
		case "linger":
			// Still stopping after the session ended, until the test
			// opens the gate.
			<-s.done
			<-p.gate
		case "drain":
			// Answered a while after the session ends, as a proxy
			// answers the calls under way within its grace.
			<-s.done
			time.Sleep(100 * time.Millisecond)
		case "related":
			// A question of the proxy's about the request, then the
			// answer once the test opens the gate.
			s.WriteRelated([]byte(`{"jsonrpc":"2.0","id":"q1","method":"elicitation/create","params":{}}`), string(jsonrpc.IDKey(m.ID)))
			select {
			case <-p.gate:
			case <-s.done:
				return
			}
		case "asks":
			// Requests of the server's about the call, then the answer
			// once each was answered.
			key := string(jsonrpc.IDKey(m.ID))
			s.WriteRelated([]byte(`{"jsonrpc":"2.0","id":"s1","method":"ping"}`), key)
			s.WriteRelated([]byte(`{"jsonrpc":"2.0","id":"s2","method":"roots/list"}`), key)
			for p.seen(`"id":"s1"`) == 0 || p.seen(`"id":"s2"`) == 0 {
				select {
				case <-s.done:
					return
				case <-time.After(time.Millisecond):
				}
			}
		case "progress":
			s.WriteFrame([]byte(`{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":` + progressToken(m.Params) + `,"progress":1}}`))
			s.WriteFrame([]byte(`{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"hi"}}`))
		case "metafirst":
			s.WriteFrame([]byte(`{"jsonrpc":"2.0","method":"notifications/progress","params":{"_meta":{"io.modelcontextprotocol/related-task":{"taskId":"t1"}},"progressToken":` + progressToken(m.Params) + `,"progress":1}}`))
		case "twotokens":
			// Progress that gives its token twice: the request's, then
			// another, which most clients' parsers would read.
			s.WriteFrame([]byte(`{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":` + progressToken(m.Params) + `,"progress":1,"progressToken":"other"}}`))
		case "listen":
			// A subscription's first notification, which names it.
			s.WriteFrame([]byte(`{"jsonrpc":"2.0","method":"notifications/subscriptions/acknowledged","params":{"_meta":{"io.modelcontextprotocol/subscriptionId":` + string(m.ID) + `},"notifications":{}}}`))
			// Then, with "twice", one whose _meta is given twice, the
			// last naming no subscription of this client's.
			if jsonrpc.Member(m.Params, "twice") != nil {
				s.WriteFrame([]byte(`{"jsonrpc":"2.0","method":"notifications/tools/list_changed","params":{"_meta":{"io.modelcontextprotocol/subscriptionId":` + string(m.ID) + `},"_meta":{"io.modelcontextprotocol/subscriptionId":"h0"}}}`))
			}
		case "endlisten":
			// A stdio server ending its subscription: it cancels the
			// listen, and answers it no more.
			s.WriteFrame([]byte(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":` + string(m.ID) + `,"reason":"shutting down"}}`))
			return
		case "late":
			// Progress after the answer, as a task's goes on.
			s.WriteFrame(jsonrpc.NewResponse(m.ID, json.RawMessage(`{}`)))
			s.WriteFrame([]byte(`{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":` + progressToken(m.Params) + `,"progress":2}}`))
			note(p.routed, "late progress")
			return
		case "respell":
			// An upstream that decodes the token and writes it its own way.
			s.WriteFrame([]byte(`{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":` + respell(progressToken(m.Params)) + `,"progress":1}}`))
			if jsonrpc.Member(m.Params, "hold") != nil {
				select {
				case <-p.gate:
				case <-s.done:
					return
				}
			}
		}
		if m.Method == "initialize" && !p.beforeInitialized(s, m) {
			return
		}
		answer := map[string]any{"method": m.Method, "id": m.ID}
		if m.Method == "big" {
			answer["pad"] = strings.Repeat("x", 64<<20)
		}
		if m.Method == "initialize" {
			// The version the client asked for, as a server that speaks
			// it answers.
			answer["protocolVersion"] = json.RawMessage(jsonrpc.Member(m.Params, "protocolVersion"))
		}
		if m.Method == "listen" {
			// A subscription's end names it, as its notifications do.
			answer["_meta"] = map[string]any{"io.modelcontextprotocol/subscriptionId": m.ID}
		}
		result, _ := json.Marshal(answer)
		if m.Method == "asint" {
			// An upstream that decodes the id and writes it its own way.
			m.ID = json.RawMessage(strings.TrimSuffix(string(m.ID), ".0"))
		}
		id := string(m.ID)
		if m.Method == "slowrecord" {
			// Recording the delivery takes a while: the client must
			// have its answer meanwhile.
			s.WriteAnswer(jsonrpc.NewResponse(m.ID, result), func(error) {
				<-p.gate
				note(p.written, id)
			})
			note(p.routed, id)
			return
		}
		s.WriteAnswer(jsonrpc.NewResponse(m.ID, result), func(err error) {
			switch {
			case err == nil:
				note(p.written, id)
			case errors.Is(err, ErrNeverRead):
				if p.onLost != nil {
					p.onLost()
				}
				note(p.lost, id)
			default:
				note(p.lost, id+": "+err.Error())
			}
		})
		note(p.routed, id)
	})
}

// beforeInitialized sends what the initialize m's params ask for before
// its answer: "logs" notifications/message (data 0, 1...), then with
// "ask" a request of the server's, id "s1" (a ping, or the method "ask"
// names), answered once the gate opens; with "hold" it answers only once
// the gate opens. It answers
// with an error itself, and reports false, for an initialize without
// params (as the go-sdk's server refuses it) or with "fail".
func (p *fakeProxy) beforeInitialized(s *ServerSession, m *jsonrpc.Message) bool {
	logs, _ := strconv.Atoi(string(jsonrpc.Member(m.Params, "logs")))
	for i := range logs {
		s.WriteFrame(fmt.Appendf(nil, `{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":%d}}`, i))
	}
	if jsonrpc.Member(m.Params, "hold") != nil {
		select {
		case <-p.gate:
		case <-s.done:
			return false
		}
	}
	if ask := jsonrpc.Member(m.Params, "ask"); ask != nil {
		method, ok := jsonrpc.StringValue(ask)
		if !ok {
			method = "ping"
		}
		s.WriteFrame([]byte(`{"jsonrpc":"2.0","id":"s1","method":"` + method + `"}`))
		select {
		case <-p.gate:
		case <-s.done:
			return false
		}
	}
	if m.Params == nil || jsonrpc.Member(m.Params, "fail") != nil {
		s.WriteFrame(jsonrpc.NewErrorResponse(m.ID, &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest, Message: `missing required "params"`}))
		return false
	}
	return true
}

func (p *fakeProxy) seen(substr string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, f := range p.frames {
		if strings.Contains(f, substr) {
			n++
		}
	}
	return n
}

func newTestServer(t *testing.T, opts ServerOptions) (*Server, *fakeProxy, *httptest.Server) {
	t.Helper()
	p := newFakeProxy()
	opts.Open = p.open
	if opts.Actor == "" {
		opts.Actor = "alice"
	}
	srv := NewServer(opts)
	hs := httptest.NewServer(srv)
	t.Cleanup(func() {
		select {
		case <-p.gate:
		default:
			close(p.gate)
		}
		hs.CloseClientConnections()
		srv.Close()
		hs.Close()
	})
	return srv, p, hs
}

const (
	initBody = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`
	version  = "2025-11-25"
	// batchInitBody starts a session of the last protocol with batches.
	batchInitBody = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-03-26","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`
)

// do sends one request with the usual headers, overridden by hdr ("" deletes).
func do(t *testing.T, ctx context.Context, method, url, body string, hdr map[string]string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	for k, v := range hdr {
		if v == "" {
			req.Header.Del(k)
		} else {
			req.Header.Set(k, v)
		}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// start initialises a session and returns its id.
func start(t *testing.T, url string, hdr map[string]string) string {
	t.Helper()
	return startWith(t, url, initBody, hdr)
}

// startWith initialises a session with the initialize request init and
// returns its id.
func startWith(t *testing.T, url, init string, hdr map[string]string) string {
	t.Helper()
	resp := do(t, t.Context(), "POST", url, init, hdr)
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("initialize: %s %s", resp.Status, b)
	}
	sid := resp.Header.Get(headerSessionID)
	if sid == "" {
		t.Fatal("initialize: no Mcp-Session-Id")
	}
	if msgs := readEvents(t, resp.Body); len(msgs) != 1 || !strings.Contains(msgs[0].data, `"initialize"`) {
		t.Fatalf("initialize answered %v", msgs)
	}
	return sid
}

// openSession starts a session in either answer mode (SSE or JSON) and
// returns its id.
func openSession(t *testing.T, url string) string {
	t.Helper()
	return openSessionWith(t, url, initBody)
}

// openSessionWith is openSession with the initialize request init.
func openSessionWith(t *testing.T, url, init string) string {
	t.Helper()
	resp := do(t, t.Context(), "POST", url, init, nil)
	defer resp.Body.Close()
	io.Copy(io.Discard, resp.Body)
	sid := resp.Header.Get(headerSessionID)
	if resp.StatusCode != 200 || sid == "" {
		t.Fatalf("initialize: %s, session %q", resp.Status, sid)
	}
	return sid
}

type testEvent struct{ id, data string }

// readEvents reads SSE events with data until the stream ends.
func readEvents(t *testing.T, body io.Reader) []testEvent {
	t.Helper()
	r := newSSEReader(body, 1<<20)
	var out []testEvent
	for {
		ev, err := r.next()
		if err != nil {
			return out
		}
		if len(ev.Data) > 0 {
			out = append(out, testEvent{ev.ID, string(ev.Data)})
		}
	}
}

func session(sid string) map[string]string {
	return map[string]string{headerSessionID: sid, headerProtocolVersion: version}
}

// batchSession is session for a 2025-03-26 client: the last version whose
// POSTs may carry a batch.
func batchSession(sid string) map[string]string {
	return map[string]string{headerSessionID: sid, headerProtocolVersion: "2025-03-26"}
}

// waitFor polls cond: the fake proxy's reads happen on the server's
// goroutines, with no event to wait on from here.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("timed out")
		}
		time.Sleep(time.Millisecond)
	}
}

// respell returns the JSON token spelled another way, as the same value:
// a string with each character escaped, a number with a fraction as an
// integer and an integer with a fraction.
func respell(token string) string {
	var s string
	if json.Unmarshal([]byte(token), &s) == nil {
		var b strings.Builder
		for _, u := range utf16.Encode([]rune(s)) {
			fmt.Fprintf(&b, `\u%04x`, u)
		}
		return `"` + b.String() + `"`
	}
	if strings.ContainsAny(token, ".eE") {
		f, _ := strconv.ParseFloat(token, 64)
		return strconv.FormatFloat(f, 'f', -1, 64)
	}
	return token + ".0"
}
