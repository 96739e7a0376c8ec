package proxy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/fingerprint"
	"github.com/mcp-idempotent/mcp-idempotent/internal/intercept"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record/memstore"
	"github.com/mcp-idempotent/mcp-idempotent/internal/transport/stdio"
)

func TestUpstreamDeathAnswersEveryone(t *testing.T) {
	r := newRig(t, 0)
	r.client.send(t, `{"jsonrpc":"2.0","id":1,"method":"resources/read","params":{"uri":"file:///a"}}`)
	r.upstream.next(t, "upstream")
	r.client.send(t, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"charge_card","arguments":{"amount":100}}}`)
	list := r.upstream.next(t, "upstream") // the proxy's own tools/list
	r.upstream.send(t, `{"jsonrpc":"2.0","id":"mcp-idempotent:1","result":{"tools":[{"name":"charge_card","inputSchema":{"type":"object"}}]}}`)
	if !strings.Contains(list, `"method":"tools/list"`) {
		t.Fatalf("upstream got %s; want the proxy's tools/list", list)
	}
	r.upstream.next(t, "upstream") // the tools/call: dispatched
	r.upstreamW.Close()            // the upstream dies with the call in flight

	answers := r.client.byID(t, 2)
	if a := answers["1"]; !strings.Contains(a, `"error"`) || !strings.Contains(a, "closed before answering resources/read") {
		t.Errorf("pass-through request got %s; want an error saying the upstream closed", a)
	}
	if a := answers["2"]; !strings.Contains(a, `Outcome unknown: execution exe_`) || !strings.Contains(a, `"isError":true`) {
		t.Errorf("dispatched tools/call got %s; want an outcome-unknown result", a)
	}
	if err := r.wait(t); !errors.Is(err, ErrUpstreamClosed) {
		t.Fatalf("Run = %v; want ErrUpstreamClosed", err)
	}
}

func TestRunReturnsWhenEitherSideCloses(t *testing.T) {
	r := newRig(t, 0)
	r.upstreamW.Close()
	if err := r.wait(t); !errors.Is(err, ErrUpstreamClosed) {
		t.Fatalf("upstream closed: Run = %v; want ErrUpstreamClosed", err)
	}

	r = newRig(t, 0)
	r.client.send(t, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"charge_card"}}`)
	r.upstream.next(t, "upstream") // tools/list
	r.upstream.send(t, `{"jsonrpc":"2.0","id":"mcp-idempotent:1","result":{"tools":[]}}`)
	call := r.upstream.next(t, "upstream")
	r.clientW.Close() // the client leaves with a call in flight
	var m struct{ ID json.RawMessage }
	json.Unmarshal([]byte(call), &m)
	r.upstream.send(t, `{"jsonrpc":"2.0","id":`+string(m.ID)+`,"result":{"content":[]}}`)
	if got := r.client.next(t, "client"); !strings.Contains(got, `"id":1`) {
		t.Fatalf("the call in flight when the client left was answered %s", got)
	}
	if err := r.wait(t); err != nil {
		t.Fatalf("client closed: Run = %v; want nil", err)
	}
}

// TestSessionEndDuringToolLookup: a call waiting for the proxy's own
// listing of its tool when the session ends (as on SIGTERM) is told that
// it did not run, and counted session_ended, under the label known then.
func TestSessionEndDuringToolLookup(t *testing.T) {
	l := &labels{}
	in := intercept.New(intercept.Options{Store: memstore.New(memstore.Options{}), Hasher: fingerprint.NewRandom(), Observer: l})
	cr, cw := io.Pipe()
	pr, pw := io.Pipe()
	ur, uw := io.Pipe()
	qr, qw := io.Pipe()
	s := New(stdio.NewConn(cr, pw, 0), stdio.NewConn(ur, qw, 0), Options{
		Interceptor: in, Actor: "alice", Scope: "session:test", UpstreamID: "stdio:test", ShutdownGrace: time.Second,
	})
	client := newPeer(stdio.NewConn(pr, cw, 0))
	upstream := newPeer(stdio.NewConn(qr, uw, 0))
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() {
		s.Run(ctx)
		pw.Close()
		qw.Close()
		close(stopped)
	}()
	t.Cleanup(func() {
		cw.Close()
		uw.Close()
		<-stopped
	})
	client.send(t, `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"charge_card","arguments":{}}}`)
	upstream.next(t, "upstream") // the proxy's tools/list, never answered
	cancel()
	if got := client.next(t, "client"); !strings.Contains(got, `"id":7,"error"`) || !strings.Contains(got, "session ended before charge_card was executed; it did not run") {
		t.Fatalf("the client got %s; want an error saying the call did not run", got)
	}
	want := []string{"charge_card false side_effect session_ended"}
	if c := l.all(); !slices.Equal(c, want) {
		t.Errorf("counted %q; want %q", c, want)
	}
}

// TestNoCallAfterTheUpstreamIsGone: once the upstream has exited for
// good, Run answers what waited on it and waits for the calls still under
// way (here one attached to another session's execution) before it
// returns; the client's pump reads on meanwhile. A tools/call that comes
// then is told it did not run, and starts nothing. Taken, it was counted
// in the calls Run waits for, during the wait: a WaitGroup's Add from zero
// racing its Wait, which the race detector reported under the torture
// suite's mutated input (the upstream in a crash loop).
func TestNoCallAfterTheUpstreamIsGone(t *testing.T) {
	store := memstore.New(memstore.Options{})
	l := &labels{}
	in := intercept.New(intercept.Options{Store: store, Hasher: fingerprint.NewRandom(), Observer: l})
	const call = `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"charge_card","arguments":{"amount":100}}}`
	other := newRigWith(t, 0, in)
	held := other.startCall(t, call) // under way, its answer held

	r := newRigWith(t, 0, in)
	r.client.send(t, call)         // the same call, in the same scope: it attaches
	r.upstream.next(t, "upstream") // the proxy's tools/list
	r.upstream.send(t, `{"jsonrpc":"2.0","id":"mcp-idempotent:1","result":{"tools":[]}}`)
	r.client.send(t, `{"jsonrpc":"2.0","id":2,"method":"ping"}`)
	r.upstream.next(t, "upstream") // the ping, never answered
	r.upstreamW.Close()            // the upstream exits; no restart is set
	if got := r.client.next(t, "client"); !strings.Contains(got, `"id":2,"error"`) {
		t.Fatalf("the ping got %s; want an error saying the upstream closed", got)
	}

	// Run waits for the attached call now; the client sends another.
	r.client.send(t, `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"charge_card","arguments":{"amount":5}}}`)
	if got := r.client.next(t, "client"); !strings.Contains(got, `"id":3,"error"`) || !strings.Contains(got, "session ended before charge_card was executed; it did not run") {
		t.Errorf("a call after the upstream went got %s; want an error saying it did not run", got)
	}
	if n := store.Len(); n != 1 {
		t.Errorf("the store holds %d records; want the held call's only", n)
	}
	// Counted, under the tool as listed then: none is.
	if c := l.all(); !slices.Contains(c, "charge_card false side_effect session_ended") {
		t.Errorf("counted %q; want the call told it did not run counted session_ended", c)
	}

	other.upstream.answerCharged(t, held)
	other.client.next(t, "other client")
	if got := r.client.next(t, "client"); !strings.Contains(got, `"id":1,"result"`) || !strings.Contains(got, "charged") {
		t.Errorf("the attached call got %s; want the execution's result", got)
	}
	if err := r.wait(t); !errors.Is(err, ErrUpstreamClosed) {
		t.Fatalf("Run = %v; want ErrUpstreamClosed", err)
	}
}

// TestCallsAsTheUpstreamGoes: the client sends tools/calls while the
// upstream exits for good, and on as Run waits for the calls under way and
// returns. This is the interleaving TestNoCallAfterTheUpstreamIsGone pins
// down, left to the scheduler, as the torture suite met it: under -race,
// a call counted (inflight.Add from zero) as Run waited (inflight.Wait)
// was reported as a data race, and could panic "WaitGroup is reused
// before previous Wait has returned".
func TestCallsAsTheUpstreamGoes(t *testing.T) {
	for range 40 {
		r := newRig(t, 0)
		sent := make(chan struct{})
		go func() {
			defer close(sent)
			for i := range 400 {
				call := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"charge_card","arguments":{"n":%d}}}`, i, i)
				if r.client.conn.WriteFrame([]byte(call)) != nil {
					return // the client's side is closed
				}
			}
		}()
		r.upstream.next(t, "upstream") // the proxy's tools/list, for the first call
		r.upstreamW.Close()
		// The client reads every answer, until Run has returned.
		for open := true; open; {
			select {
			case <-r.client.frames:
			case <-r.client.closed:
				open = false
			}
		}
		r.clientW.Close()
		<-sent
		if err := r.wait(t); !errors.Is(err, ErrUpstreamClosed) {
			t.Fatalf("Run = %v; want ErrUpstreamClosed", err)
		}
	}
}

// TestToldToStop: a session whose context ends (the proxy got SIGTERM or
// SIGINT) keeps no grace for calls under way: the call sent is answered
// as outcome unknown at once, not after the grace, and the session ends.
func TestToldToStop(t *testing.T) {
	ctx, stop := context.WithCancel(context.Background())
	in := intercept.New(intercept.Options{Store: memstore.New(memstore.Options{}), Hasher: fingerprint.NewRandom()})
	r := newRigRunning(t, ctx, 0, Options{Interceptor: in, ShutdownGrace: time.Minute})
	r.startCall(t, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"charge_card","arguments":{}}}`)
	stop()
	// Within next's few seconds, where the grace is a minute.
	if got := r.client.next(t, "client"); !strings.Contains(got, "Outcome unknown") {
		t.Fatalf("the call got %s; want outcome unknown", got)
	}
	r.wait(t)
}

// slowClose is an upstream Conn whose Close, as an HTTP one's DELETE may,
// waits on the upstream (until release is closed) once its reading has
// ended (end, set once the rig exists).
type slowClose struct {
	Conn
	end     func()
	release chan struct{}
}

func (c *slowClose) Close() error {
	c.end()
	<-c.release
	return c.Conn.Close()
}

// TestToldToStopAnswersBeforeClosing: the calls under way when the session
// is told to stop are answered before a slow Close of the upstream ends,
// not after it, and Run returns once it has.
func TestToldToStopAnswersBeforeClosing(t *testing.T) {
	ctx, stop := context.WithCancel(context.Background())
	in := intercept.New(intercept.Options{Store: memstore.New(memstore.Options{}), Hasher: fingerprint.NewRandom()})
	up := &slowClose{release: make(chan struct{})}
	r := newRigUpstream(t, ctx, 0, Options{Interceptor: in, ShutdownGrace: time.Minute}, func(c Conn) Conn {
		up.Conn = c
		return up
	})
	up.end = func() { r.upstreamW.Close() }
	release := sync.OnceFunc(func() { close(up.release) })
	t.Cleanup(release) // before the rig's, which waits for Run
	r.startCall(t, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"charge_card","arguments":{}}}`)
	stop()
	got := r.client.next(t, "client")
	select {
	case <-r.stopped:
		t.Error("Run returned before the upstream was closed")
	default:
	}
	release()
	if !strings.Contains(got, "Outcome unknown") {
		t.Fatalf("the call got %s; want outcome unknown", got)
	}
	r.wait(t)
}

// TestAnsweredBatchIsForgotten: a batch's requests, once answered, are
// not answered again with an error when the upstream later exits.
func TestAnsweredBatchIsForgotten(t *testing.T) {
	r := newRig(t, 0)
	r.client.send(t, `[{"jsonrpc":"2.0","id":7,"method":"ping"}]`)
	r.upstream.next(t, "upstream")
	r.upstream.send(t, `[{"jsonrpc":"2.0","id":7,"result":{}}]`)
	if got := r.client.next(t, "client"); got != `[{"jsonrpc":"2.0","id":7,"result":{}}]` {
		t.Fatalf("the client got %s; want the batch answer", got)
	}
	r.upstreamW.Close()
	r.wait(t)
	<-r.client.closed // every frame the proxy wrote has been read
	r.client.nothingMore(t, "the batch was already answered when the upstream exited")
}

// TestShutdownWaitsForADetachedExecution: the client cancels a dispatched
// call and leaves. The upstream is not told the input ended until the
// call's answer is in (within the shutdown grace), so an upstream that
// exits at the end of its input does not leave the execution unknown.
func TestShutdownWaitsForADetachedExecution(t *testing.T) {
	r := newRig(t, 0)
	r.client.send(t, `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"charge_card","arguments":{}}}`)
	r.upstream.next(t, "upstream") // tools/list
	r.upstream.send(t, `{"jsonrpc":"2.0","id":"mcp-idempotent:1","result":{"tools":[]}}`)
	call := r.upstream.next(t, "upstream")
	r.client.send(t, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":7}}`)
	r.clientW.Close()
	// Nothing tells of a shutdown that waits; one that does not closes
	// the upstream's input at once, well within this.
	select {
	case <-r.upstream.closed:
		t.Fatal("the upstream's input was closed with a dispatched call unanswered")
	case <-time.After(300 * time.Millisecond):
	}
	var m struct{ ID json.RawMessage }
	json.Unmarshal([]byte(call), &m)
	r.upstream.send(t, `{"jsonrpc":"2.0","id":`+string(m.ID)+`,"result":{"content":[]}}`)
	if err := r.wait(t); err != nil {
		t.Fatalf("Run = %v; want nil", err)
	}
}

// TestShutdownWaitsForAPassThroughRequest: a request passed through gets
// the grace too, and its answer reaches the client, which may still read
// after closing its side.
func TestShutdownWaitsForAPassThroughRequest(t *testing.T) {
	r := newRig(t, 0)
	r.client.send(t, `{"jsonrpc":"2.0","id":1,"method":"resources/read","params":{"uri":"file:///a"}}`)
	r.upstream.next(t, "upstream")
	r.clientW.Close()
	select {
	case <-r.upstream.closed:
		t.Fatal("the upstream's input was closed with a request unanswered")
	case <-time.After(300 * time.Millisecond):
	}
	r.upstream.send(t, `{"jsonrpc":"2.0","id":1,"result":{"contents":[]}}`)
	if got := r.client.next(t, "client"); !strings.Contains(got, `"id":1,"result"`) {
		t.Fatalf("client got %s; want the answer", got)
	}
	r.wait(t)
}

// TestShutdownDoesNotWaitForAStandingRequest: a standing request, such
// as the 2026-07-28 subscriptions/listen that a client keeps open for the
// whole session, ends with the client's input: the upstream's input is
// closed at once, not after the grace.
func TestShutdownDoesNotWaitForAStandingRequest(t *testing.T) {
	r := newRigOptions(t, 0, Options{ShutdownGrace: time.Hour})
	r.client.send(t, `{"jsonrpc":"2.0","id":1,"method":"subscriptions/listen","params":{}}`)
	r.upstream.next(t, "upstream")
	r.clientW.Close()
	select {
	case <-r.upstream.closed:
	case <-time.After(10 * time.Second):
		t.Fatal("the upstream's input stayed open: shutdown waited for the standing request")
	}
	if got := r.client.next(t, "client"); !strings.Contains(got, `"id":1,"error"`) {
		t.Errorf("the standing request got %s; want an error saying the session ended", got)
	}
	r.wait(t)
}

// TestShutdownAnswersEveryone: when the client has gone, the grace has
// passed and the upstream neither answers nor closes, every request still
// waiting is answered before the session ends (the client may still be
// reading): the tools/call with an unknown outcome, the pass-through
// request with an error.
func TestShutdownAnswersEveryone(t *testing.T) {
	r := newRig(t, 0)
	r.client.send(t, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"charge_card"}}`)
	r.upstream.next(t, "upstream") // tools/list
	r.upstream.send(t, `{"jsonrpc":"2.0","id":"mcp-idempotent:1","result":{"tools":[]}}`)
	r.upstream.next(t, "upstream") // the call
	r.client.send(t, `{"jsonrpc":"2.0","id":2,"method":"resources/read","params":{"uri":"file:///a"}}`)
	r.upstream.next(t, "upstream")
	r.clientW.Close()
	answers := r.client.byID(t, 2)
	if got := answers["1"]; !strings.Contains(got, "Outcome unknown:") || !strings.Contains(got, "session ended") {
		t.Errorf("the tools/call got %q; want outcome unknown, the session having ended", got)
	}
	if got := answers["2"]; !strings.Contains(got, `"error"`) || !strings.Contains(got, "session ended before the upstream answered resources/read") {
		t.Errorf("the pass-through request got %q; want an error saying the session ended", got)
	}
	r.wait(t)
}

// TestShutdownTellsAnAttachedCallerItIsInProgress: a caller attached to an
// execution that another session runs, when its own session ends, is told
// the execution is still in progress, not left without an answer as if it
// had cancelled.
func TestShutdownTellsAnAttachedCallerItIsInProgress(t *testing.T) {
	in := intercept.New(intercept.Options{Store: memstore.New(memstore.Options{}), Hasher: fingerprint.NewRandom()})
	a, b := newRigWith(t, 0, in), newRigWith(t, 0, in)
	const call = `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"charge_card"}}`
	const list = `{"jsonrpc":"2.0","id":"mcp-idempotent:1","result":{"tools":[]}}`
	a.client.send(t, call)
	a.upstream.next(t, "upstream A") // tools/list
	a.upstream.send(t, list)
	running := a.upstream.next(t, "upstream A") // the call, held
	b.client.send(t, call)
	b.upstream.next(t, "upstream B") // tools/list
	b.upstream.send(t, list)
	b.clientW.Close() // B's client goes while the call runs in A
	if got := b.client.next(t, "client B"); !strings.Contains(got, `"id":1,`) || !strings.Contains(got, "Still in progress:") {
		t.Fatalf("B's caller got %s; want to be told the execution is still in progress", got)
	}
	a.upstream.answerCharged(t, running)
	if got := a.client.next(t, "client A"); !strings.Contains(got, "charged") {
		t.Fatalf("A's caller got %s; want the answer", got)
	}
}

// TestNoAnswerAfterGivingUp: once the session has given up on the upstream
// (the grace after the client's end of input passed) and answered every
// request still waiting, an answer the upstream sends at that moment is
// dropped: the client would otherwise get two answers to one request.
func TestNoAnswerAfterGivingUp(t *testing.T) {
	for _, late := range []string{
		`{"jsonrpc":"2.0","id":2,"result":{"contents":[]}}`,
		`[{"jsonrpc":"2.0","id":2,"result":{"contents":[]}}]`,
	} {
		client, upstream := &sink{}, &sink{}
		in := intercept.New(intercept.Options{Store: memstore.New(memstore.Options{}), Hasher: fingerprint.NewRandom()})
		s := New(client, upstream, Options{Interceptor: in})
		s.fromClient(t.Context(), []byte(`{"jsonrpc":"2.0","id":2,"method":"resources/read","params":{"uri":"file:///a"}}`))
		if upstream.take() == nil {
			t.Fatal("the request did not go upstream")
		}
		l := s.current()
		s.abandon(l, errSessionEnded, "the session ended before the upstream answered %s", false)
		if got := string(client.take()); !strings.Contains(got, `"id":2,"error"`) {
			t.Fatalf("the waiting request got %s; want an error", got)
		}
		s.fromUpstream(l, []byte(late))
		if got := client.take(); got != nil {
			t.Errorf("after the error, the late answer %s reached the client as %s", late, got)
		}
	}
}

// TestClientEndAnswersTheUpstreamsRequests: once the client's input has
// ended, no answer to a request of the upstream's can come. The proxy
// answers the one open, and any the upstream sends later, with an error,
// so that a tool call whose server asked the client (sampling,
// elicitation) can finish and its outcome be recorded, rather than wait
// for the end of the grace and be taken for an outcome unknown.
func TestClientEndAnswersTheUpstreamsRequests(t *testing.T) {
	in := intercept.New(intercept.Options{Store: memstore.New(memstore.Options{}), Hasher: fingerprint.NewRandom()})
	r := newRigOptions(t, 0, Options{Interceptor: in, ShutdownGrace: time.Minute})
	call := r.startCall(t, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"charge_card","arguments":{}}}`)
	const ask = `{"jsonrpc":"2.0","id":7,"method":"sampling/createMessage","params":{"messages":[],"maxTokens":5}}`
	r.upstream.send(t, ask)
	if got := r.client.next(t, "client"); got != ask {
		t.Fatalf("the client got %s; want the upstream's request as it came", got)
	}
	r.clientW.Close()
	for _, id := range []string{"7", `"later"`} {
		if id != "7" {
			r.upstream.send(t, `{"jsonrpc":"2.0","id":`+id+`,"method":"roots/list"}`)
		}
		got := r.upstream.next(t, "upstream")
		if !strings.HasPrefix(got, `{"jsonrpc":"2.0","id":`+id+`,"error":{"code":-32603,`) || !strings.Contains(got, "the client closed its input") {
			t.Fatalf("the upstream got %s; want an error under id %s saying the client closed its input", got, id)
		}
	}
	// In a batch too: the rest of it goes on.
	r.upstream.send(t, `[{"jsonrpc":"2.0","id":"b","method":"roots/list"},{"jsonrpc":"2.0","method":"notifications/message","params":{}}]`)
	if got := r.upstream.next(t, "upstream"); !strings.HasPrefix(got, `{"jsonrpc":"2.0","id":"b","error":{"code":-32603,`) {
		t.Fatalf("the upstream got %s; want an error under id \"b\"", got)
	}
	if got, want := r.client.next(t, "client"), `[{"jsonrpc":"2.0","method":"notifications/message","params":{}}]`; got != want {
		t.Fatalf("the client got %s; want the rest of the batch, %s", got, want)
	}
	r.upstream.answerCharged(t, call)
	if got := r.client.next(t, "client"); !strings.Contains(got, `"id":1,"result"`) || !strings.Contains(got, "charged") {
		t.Fatalf("the client got %s; want the call's answer", got)
	}
	if err := r.wait(t); err != nil {
		t.Fatalf("Run = %v; want nil", err)
	}
	r.client.nothingMore(t, "the upstream's later request is not the client's to see")
}

// TestEndWithServerRequestsTheUpstreamDoesNotRead: when the client's
// input ends with more of the upstream's requests unanswered than the
// upstream's input holds the errors of, and the upstream reads none of
// them (busy in a call), the session still ends: the errors do not hold
// up the shutdown that closes the upstream's input.
func TestEndWithServerRequestsTheUpstreamDoesNotRead(t *testing.T) {
	r := newRig(t, 0)
	for i := range 200 { // more than the test's reader of the upstream holds
		ask := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"roots/list"}`, i)
		r.upstream.send(t, ask)
		if got := r.client.next(t, "client"); got != ask {
			t.Fatalf("the client got %s; want %s", got, ask)
		}
	}
	r.clientW.Close()
	r.wait(t)
}

// TestClientEndRefusalsDoNotStall: once the client's input has ended, an
// upstream that sends requests without reading its input (a server that
// writes them all first) does not stall the session on their refusals:
// the answer to the call under way, written after them, still reaches
// the client, rather than an outcome unknown at the end of the grace.
func TestClientEndRefusalsDoNotStall(t *testing.T) {
	done := make(chan struct{})
	t.Cleanup(func() { close(done) }) // after the rig's own clean-up
	in := intercept.New(intercept.Options{Store: memstore.New(memstore.Options{}), Hasher: fingerprint.NewRandom()})
	r := newRigOptions(t, 0, Options{Interceptor: in, ShutdownGrace: time.Minute})
	call := r.startCall(t, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"charge_card","arguments":{}}}`)
	const ask = `{"jsonrpc":"2.0","id":"first","method":"roots/list"}`
	r.upstream.send(t, ask)
	r.client.next(t, "client")
	r.clientW.Close()
	// Its refusal shows the session has seen the client's input end.
	if got := r.upstream.next(t, "upstream"); !strings.Contains(got, `"id":"first","error"`) {
		t.Fatalf("the upstream got %s; want the refusal of its open request", got)
	}
	var m struct{ ID json.RawMessage }
	json.Unmarshal([]byte(call), &m)
	sent := make(chan error, 1)
	go func() {
		// Unread by the test, the refusals back up into this upstream.
		for i := range 4 * maxRefusing {
			if err := r.upstream.conn.WriteFrame(fmt.Appendf(nil, `{"jsonrpc":"2.0","id":%d,"method":"roots/list"}`, i)); err != nil {
				sent <- err
				return
			}
		}
		sent <- r.upstream.conn.WriteFrame([]byte(`{"jsonrpc":"2.0","id":` + string(m.ID) + `,"result":{"content":[{"type":"text","text":"charged"}]}}`))
	}()
	if got := r.client.next(t, "client"); !strings.Contains(got, `"id":1,"result"`) || !strings.Contains(got, "charged") {
		t.Fatalf("the client got %s; want the call's answer", got)
	}
	if err := <-sent; err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			select {
			case <-r.upstream.frames:
			case <-done:
				return
			}
		}
	}()
}

// TestShutdownSaysWhatItWaitedFor: a tasks/result passed through waits
// for its task, and holds the end for the grace as any request does; the
// warning at the grace's end names it, not calls the client never made.
func TestShutdownSaysWhatItWaitedFor(t *testing.T) {
	var log syncBuffer
	r := newRigOptions(t, 0, Options{Logger: slog.New(slog.NewTextHandler(&log, nil))})
	r.client.send(t, `{"jsonrpc":"2.0","id":1,"method":"tasks/result","params":{"taskId":"t1"}}`)
	r.upstream.next(t, "upstream")
	r.clientW.Close()
	waitLog(t, &log, `msg="requests still under way at shutdown" grace=1s calls=0 sent=0 requests=[tasks/result]`)
	if got := r.client.next(t, "client"); !strings.Contains(got, `"id":1,"error"`) {
		t.Errorf("the tasks/result got %s; want an error saying the session ended", got)
	}
	r.wait(t)
}
