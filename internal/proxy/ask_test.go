package proxy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/fingerprint"
	"github.com/mcp-idempotent/mcp-idempotent/internal/intercept"
	"github.com/mcp-idempotent/mcp-idempotent/internal/jsonrpc"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record/memstore"
)

func TestElicitsForm(t *testing.T) {
	for _, tc := range []struct {
		params string
		want   bool
	}{
		{`{"capabilities":{"elicitation":{}}}`, true}, // 2025-06-18; form only in 2025-11-25
		{`{"capabilities":{"elicitation":{"form":{}}}}`, true},
		{`{"capabilities":{"elicitation":{"form":{},"url":{}}}}`, true},
		{`{"capabilities":{"elicitation":{"url":{}}}}`, false},
		{`{"capabilities":{"elicitation":{"form":null}}}`, false},
		{`{"capabilities":{"elicitation":null}}`, false},
		{`{"capabilities":{"sampling":{}}}`, false},
		{`{"capabilities":{}}`, false},
		{`{}`, false},
		{`{"capabilities":{"elicitation":{"form":{},"form":{}}}}`, false},
		{`{"capabilities":{"elicitation":{"Form":{}}}}`, false},
		{`{"capabilities":{"elicitation":{}},"capabilities":{}}`, false},
		{`{"capabilities":{"Elicitation":{}}}`, false},
	} {
		if got := elicitsForm(json.RawMessage(tc.params)); got != tc.want {
			t.Errorf("elicitsForm(%s) = %v; want %v", tc.params, got, tc.want)
		}
	}
}

// statelessConn is a client Conn of a 2026-07-28 lane.
type statelessConn struct{ Conn }

func (statelessConn) Stateless() bool { return true }

// TestCanAskNeedsATransportThatCarriesIt: a stateless lane cannot carry
// a request of the proxy's, nor can a session that has ended, whatever
// the client declared.
func TestCanAskNeedsATransportThatCarriesIt(t *testing.T) {
	for _, tc := range []struct {
		name   string
		client Conn
		ended  bool
		want   bool
	}{
		{"session", statefulConn{}, false, true},
		{"stateless", statelessConn{}, false, false},
		{"ended", statefulConn{}, true, false},
	} {
		s := New(tc.client, statefulConn{}, Options{})
		s.elicitForm = true
		if tc.ended {
			s.endAsks()
		}
		if got := (&clientCall{s: s}).CanAsk(); got != tc.want {
			t.Errorf("%s: CanAsk = %v; want %v", tc.name, got, tc.want)
		}
	}
}

type statefulConn struct{ Conn }

// askRig starts a session whose client declared caps in its initialize
// (none is sent when caps is ""), and a tools/call under id 1 with
// params, which waits on the upstream. It returns the rig, the call's
// Replier as an Asker, and the call as the upstream got it.
func askRig(t *testing.T, opts Options, caps, params string) (*rig, intercept.Asker, string) {
	t.Helper()
	return askRigAt(t, opts, "2025-11-25", caps, params)
}

// askRigAt is askRig with the session's initialize of protocol version.
func askRigAt(t *testing.T, opts Options, version, caps, params string) (*rig, intercept.Asker, string) {
	t.Helper()
	if opts.Interceptor == nil {
		opts.Interceptor = intercept.New(intercept.Options{Store: memstore.New(memstore.Options{}), Hasher: fingerprint.NewRandom()})
	}
	r := newRigOptions(t, 0, opts)
	if caps != "" {
		r.client.send(t, `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"`+version+`","capabilities":`+caps+`,"clientInfo":{"name":"t","version":"1"}}}`)
		r.upstream.next(t, "upstream")
		r.upstream.send(t, `{"jsonrpc":"2.0","id":0,"result":{"protocolVersion":"`+version+`","capabilities":{},"serverInfo":{"name":"u","version":"1"}}}`)
		r.client.next(t, "client")
		r.client.send(t, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
		r.upstream.next(t, "upstream")
	}
	r.client.send(t, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":`+params+`}`)
	var list struct{ ID json.RawMessage }
	json.Unmarshal([]byte(r.upstream.next(t, "upstream")), &list)
	r.upstream.send(t, `{"jsonrpc":"2.0","id":`+string(list.ID)+`,"result":{"tools":[]}}`)
	call := r.upstream.next(t, "upstream")
	r.s.mu.Lock()
	c := r.s.calls["1"]
	r.s.mu.Unlock()
	if c == nil {
		t.Fatal("the call is not in the session's calls")
	}
	a, ok := c.req.Reply.(intercept.Asker)
	if !ok {
		t.Fatalf("the call's Replier, %T, is not an intercept.Asker", c.req.Reply)
	}
	return r, a, call
}

const chargeParams = `{"name":"charge_card","arguments":{"n":1}}`

// outcomes collects what an ask's done is called with, and how often.
type outcomes struct {
	ch    chan outcome
	calls atomic.Int32
}

type outcome struct {
	result json.RawMessage
	err    error
}

func newOutcomes() *outcomes { return &outcomes{ch: make(chan outcome, 4)} }

func (o *outcomes) done(result json.RawMessage, err error) {
	o.calls.Add(1)
	o.ch <- outcome{result, err}
}

func (o *outcomes) next(t *testing.T) outcome {
	t.Helper()
	select {
	case got := <-o.ch:
		return got
	case <-time.After(5 * time.Second):
		t.Fatal("done was not called within 5s")
	}
	return outcome{}
}

// passedUpstream checks that the next frame the upstream reads is a
// marker the client sends now: what the client sent before it did not
// pass on.
func passedUpstream(t *testing.T, r *rig, what string) {
	t.Helper()
	marker := `{"jsonrpc":"2.0","method":"notifications/roots/list_changed"}`
	r.client.send(t, marker)
	if got := r.upstream.next(t, "upstream"); got != marker {
		t.Fatalf("the upstream got %s; want nothing of %s", got, what)
	}
}

// passedToClient is passedUpstream the other way.
func passedToClient(t *testing.T, r *rig, what string) {
	t.Helper()
	marker := `{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"marker"}}`
	r.upstream.send(t, marker)
	if got := r.client.next(t, "client"); got != marker {
		t.Fatalf("the client got %s; want nothing of %s", got, what)
	}
}

func TestCanAsk(t *testing.T) {
	for _, tc := range []struct {
		caps string
		want bool
	}{
		{`{"elicitation":{}}`, true},
		{`{"elicitation":{"form":{}}}`, true},
		{`{"elicitation":{"url":{}}}`, false},
		{`{}`, false},
		{"", false}, // no initialize: a 2026-07-28 client
	} {
		r, a, call := askRig(t, Options{}, tc.caps, chargeParams)
		if got := a.CanAsk(); got != tc.want {
			t.Errorf("capabilities %s: CanAsk = %v; want %v", tc.caps, got, tc.want)
		}
		r.upstream.answerCharged(t, call)
		r.client.next(t, "client")
	}
}

// TestAsk: the question goes to the client under an id of the proxy's;
// the client's answer goes to done, and not upstream.
func TestAsk(t *testing.T) {
	r, a, call := askRig(t, Options{}, `{"elicitation":{}}`, chargeParams)
	o := newOutcomes()
	a.Ask(t.Context(), json.RawMessage(`{"mode":"form","message":"Charge?","requestedSchema":{"type":"object","properties":{}}}`), o.done)
	want := `{"jsonrpc":"2.0","id":"mcp-idempotent:ask:1","method":"elicitation/create","params":{"mode":"form","message":"Charge?","requestedSchema":{"type":"object","properties":{}}}}`
	if got := r.client.next(t, "client"); got != want {
		t.Fatalf("the client got %s; want %s", got, want)
	}
	r.client.send(t, `{"jsonrpc":"2.0","id":"mcp-idempotent:ask:1","result":{"action":"accept","content":{}}}`)
	if got := o.next(t); got.err != nil || string(got.result) != `{"action":"accept","content":{}}` {
		t.Fatalf("done got %s, %v; want the client's result", got.result, got.err)
	}
	passedUpstream(t, r, "the client's answer to the proxy")

	// An error answer, under an id spelled with an escape.
	a.Ask(t.Context(), json.RawMessage(`{"message":"Again?"}`), o.done)
	if got := r.client.next(t, "client"); !strings.Contains(got, `"id":"mcp-idempotent:ask:2"`) {
		t.Fatalf("the client got %s; want the second question", got)
	}
	r.client.send(t, `{"jsonrpc":"2.0","id":"mcp-idempotent\u003aask:2","error":{"code":-32601,"message":"no elicitation here"}}`)
	got := o.next(t)
	var e *jsonrpc.Error
	if !errors.As(got.err, &e) || e.Code != -32601 || got.result != nil {
		t.Fatalf("done got %s, %v; want the client's error", got.result, got.err)
	}
	passedUpstream(t, r, "the client's error answer to the proxy")
	if n := o.calls.Load(); n != 2 {
		t.Fatalf("done called %d times for two asks", n)
	}
	r.upstream.answerCharged(t, call)
	r.client.next(t, "client")
}

// TestAskMalformedAnswer: a client's answer that is no response, with
// both a result and an error or neither, is the client's: done gets an
// intercept.MalformedAnswerError, never one that blames the upstream.
func TestAskMalformedAnswer(t *testing.T) {
	r, a, call := askRig(t, Options{}, `{"elicitation":{}}`, chargeParams)
	o := newOutcomes()
	for i, tc := range []struct{ answer, what string }{
		{`"result":{"action":"accept"},"error":{"code":1,"message":"x"}`, "both a result and an error"},
		{`"other":1`, "neither result nor error"},
	} {
		a.Ask(t.Context(), json.RawMessage(`{}`), o.done)
		id := fmt.Sprintf(`"mcp-idempotent:ask:%d"`, i+1)
		if got := r.client.next(t, "client"); !strings.Contains(got, `"id":`+id) {
			t.Fatalf("the client got %s; want the question under %s", got, id)
		}
		r.client.send(t, `{"jsonrpc":"2.0","id":`+id+`,`+tc.answer+`}`)
		got := o.next(t)
		var m *intercept.MalformedAnswerError
		if !errors.As(got.err, &m) || !strings.Contains(m.What, tc.what) || strings.Contains(got.err.Error(), "upstream") {
			t.Fatalf("the answer %s: done got %s, %v; want an intercept.MalformedAnswerError saying %q", tc.answer, got.result, got.err, tc.what)
		}
		passedUpstream(t, r, "the client's answer to the proxy")
	}
	r.upstream.answerCharged(t, call)
	r.client.next(t, "client")
}

// TestAskIDsOfAnInstance: the ids of the questions carry the Instance.
func TestAskIDsOfAnInstance(t *testing.T) {
	r, a, call := askRig(t, Options{Instance: "b7"}, `{"elicitation":{}}`, chargeParams)
	o := newOutcomes()
	a.Ask(t.Context(), json.RawMessage(`{}`), o.done)
	if got := r.client.next(t, "client"); !strings.Contains(got, `"id":"mcp-idempotent:b7:ask:1"`) {
		t.Fatalf("the client got %s; want the question under the instance's id", got)
	}
	// Another proxy's question (in front of this one) is not ours.
	r.client.send(t, `{"jsonrpc":"2.0","id":"mcp-idempotent:ask:1","result":{}}`)
	if got := r.upstream.next(t, "upstream"); !strings.Contains(got, `"mcp-idempotent:ask:1"`) {
		t.Fatalf("the upstream got %s; want the answer to its own question", got)
	}
	r.client.send(t, `{"jsonrpc":"2.0","id":"mcp-idempotent:b7:ask:1","result":{"action":"decline"}}`)
	if got := o.next(t); string(got.result) != `{"action":"decline"}` {
		t.Fatalf("done got %s, %v", got.result, got.err)
	}
	r.upstream.answerCharged(t, call)
	r.client.next(t, "client")
}

// TestAskCancelled: when the asker's context ends, done gets its error
// once, the client is told, and a late answer is dropped, logged as the
// answer to a question withdrawn, not warned of as one to no question.
func TestAskCancelled(t *testing.T) {
	var log syncBuffer
	r, a, call := askRig(t, Options{Logger: slog.New(slog.NewTextHandler(&log, nil))}, `{"elicitation":{}}`, chargeParams)
	o := newOutcomes()
	ctx, cancel := context.WithCancel(t.Context())
	a.Ask(ctx, json.RawMessage(`{}`), o.done)
	r.client.next(t, "client")
	cancel()
	want := `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"mcp-idempotent:ask:1","reason":"the caller cancelled the request"}}`
	if got := r.client.next(t, "client"); got != want {
		t.Fatalf("the client got %s; want %s", got, want)
	}
	if got := o.next(t); !errors.Is(got.err, context.Canceled) {
		t.Fatalf("done got %s, %v; want context.Canceled", got.result, got.err)
	}
	r.client.send(t, `{"jsonrpc":"2.0","id":"mcp-idempotent:ask:1","result":{"action":"accept"}}`)
	passedUpstream(t, r, "a late answer to the proxy")
	if n := o.calls.Load(); n != 1 {
		t.Fatalf("done called %d times; want once", n)
	}
	if got := log.String(); strings.Contains(got, "level=WARN") || !strings.Contains(got, "a question the proxy withdrew") {
		t.Errorf("the log after a late answer:\n%s\nwant it told as the answer to a question withdrawn, with no warning", got)
	}
	// A second answer to it is one to no question.
	r.client.send(t, `{"jsonrpc":"2.0","id":"mcp-idempotent:ask:1","result":{"action":"accept"}}`)
	passedUpstream(t, r, "a second late answer to the proxy")
	if got := log.String(); !strings.Contains(got, "level=WARN msg=\"dropped an answer from the client to no question of the proxy's\"") {
		t.Errorf("the log after a second late answer:\n%s\nwant a warning", got)
	}
	r.upstream.answerCharged(t, call)
	r.client.next(t, "client")
}

// TestAskAtSessionEnd: a question waiting when the client goes fails at
// once, not after the shutdown grace, and no question is sent after.
func TestAskAtSessionEnd(t *testing.T) {
	r, a, call := askRig(t, Options{ShutdownGrace: time.Minute}, `{"elicitation":{}}`, chargeParams)
	o := newOutcomes()
	a.Ask(t.Context(), json.RawMessage(`{}`), o.done)
	r.client.next(t, "client")
	r.clientW.Close()
	if got := o.next(t); !errors.Is(got.err, intercept.ErrSessionEnded) {
		t.Fatalf("done got %s, %v; want intercept.ErrSessionEnded", got.result, got.err)
	}
	if a.CanAsk() {
		t.Error("CanAsk once the client has gone")
	}
	a.Ask(t.Context(), json.RawMessage(`{}`), o.done)
	if got := o.next(t); !errors.Is(got.err, intercept.ErrSessionEnded) {
		t.Fatalf("an ask after the end got %s, %v; want intercept.ErrSessionEnded", got.result, got.err)
	}
	r.upstream.answerCharged(t, call) // lets the shutdown end
	r.upstreamW.Close()
	r.wait(t)
}

// TestAskAnswersInABatch: answers to the proxy's questions are taken out
// of a batch from the client; the rest passes on: as a batch in a
// session of 2025-03-26, one message at a time in one of 2025-06-18 or
// later, which has no batches.
func TestAskAnswersInABatch(t *testing.T) {
	const progress = `{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"x","progress":1}}`
	for _, tc := range []struct{ version, want string }{
		{"2025-03-26", "[" + progress + "]"},
		{"2025-11-25", progress},
	} {
		t.Run(tc.version, func(t *testing.T) {
			r, a, call := askRigAt(t, Options{}, tc.version, `{"elicitation":{}}`, chargeParams)
			o := newOutcomes()
			a.Ask(t.Context(), json.RawMessage(`{}`), o.done)
			a.Ask(t.Context(), json.RawMessage(`{}`), o.done)
			r.client.next(t, "client")
			r.client.next(t, "client")
			r.client.send(t, `[{"jsonrpc":"2.0","id":"mcp-idempotent:ask:1","result":{"n":1}},`+progress+`]`)
			if got := o.next(t); string(got.result) != `{"n":1}` {
				t.Fatalf("done got %s, %v", got.result, got.err)
			}
			if got := r.upstream.next(t, "upstream"); got != tc.want {
				t.Fatalf("the upstream got %s; want %s", got, tc.want)
			}
			r.client.send(t, `[{"jsonrpc":"2.0","id":"mcp-idempotent:ask:2","result":{"n":2}}]`)
			if got := o.next(t); string(got.result) != `{"n":2}` {
				t.Fatalf("done got %s, %v", got.result, got.err)
			}
			passedUpstream(t, r, "a batch of answers to the proxy")
			r.upstream.answerCharged(t, call)
			r.client.next(t, "client")
		})
	}
}

// TestAskIDsStayInTheProxy: the client's answer under an ask id that
// waits on nothing is dropped, and the upstream may not ask under one.
func TestAskIDsStayInTheProxy(t *testing.T) {
	r, _, call := askRig(t, Options{}, `{"elicitation":{}}`, chargeParams)
	r.client.send(t, `{"jsonrpc":"2.0","id":"mcp-idempotent:ask:9","result":{}}`)
	passedUpstream(t, r, "an answer to no question of the proxy's")

	r.upstream.send(t, `{"jsonrpc":"2.0","id":"mcp-idempotent:ask:1","method":"elicitation/create","params":{}}`)
	if got := r.upstream.next(t, "upstream"); !strings.Contains(got, `"id":"mcp-idempotent:ask:1","error":{"code":-32600`) {
		t.Fatalf("the upstream got %s; want its request refused", got)
	}
	r.upstream.send(t, `[{"jsonrpc":"2.0","id":"mcp-idempotent:ask:2","method":"elicitation/create","params":{}}]`)
	if got := r.upstream.next(t, "upstream"); !strings.Contains(got, `"id":"mcp-idempotent:ask:2","error":{"code":-32600`) {
		t.Fatalf("the upstream got %s; want its request in a batch refused", got)
	}
	passedToClient(t, r, "the upstream's requests under the proxy's ids")
	r.upstream.answerCharged(t, call)
	r.client.next(t, "client")
}

func TestProgress(t *testing.T) {
	r, a, call := askRig(t, Options{}, `{"elicitation":{}}`, `{"name":"charge_card","arguments":{"n":1},"_meta":{"progressToken":7}}`)
	a.Progress("waiting for approval")
	a.Progress(`"approved"`)
	for i, want := range []string{
		`{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":7,"progress":0,"message":"waiting for approval"}}`,
		`{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":7,"progress":1,"message":"\"approved\""}}`,
	} {
		if got := r.client.next(t, "client"); got != want {
			t.Fatalf("progress %d: the client got %s; want %s", i, got, want)
		}
	}
	r.upstream.answerCharged(t, call)
	r.client.next(t, "client")

	r, a, call = askRig(t, Options{}, `{"elicitation":{}}`, chargeParams)
	a.Progress("waiting")
	passedToClient(t, r, "progress for a call that asked for none")
	r.upstream.answerCharged(t, call)
	r.client.next(t, "client")
}
