package intercept

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/policy"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
)

// slowDecisions is a decidingStore whose approvals and dispatches take a
// while to be stored, so that two continuations of one question overlap.
type slowDecisions struct{ *decidingStore }

func (s slowDecisions) Update(ctx context.Context, id string, c record.Change) (*record.Record, error) {
	switch c.To {
	case record.Authorized:
		time.Sleep(50 * time.Millisecond)
	case record.Dispatched:
		time.Sleep(100 * time.Millisecond) // the second finds it authorized still
	}
	return s.decidingStore.Update(ctx, id, c)
}

// TestApprovalTwoContinuationsSendOnce: two answers to one question (a
// continuation sent twice) approve the execution once and send it once.
func TestApprovalTwoContinuationsSendOnce(t *testing.T) {
	h, s := operatorHarness(t)
	h.pol.Approver = policy.ApproverClient
	h.in = New(Options{Store: slowDecisions{s}, Hasher: h.in.hasher})
	args := `{"card":"4242","amount":100}`
	round := asRound(t, h.call(t.Context(), t, roundCall(args, nil, "")).only(t))
	var wg sync.WaitGroup
	got := make([]string, 2)
	for i := range got {
		wg.Go(func() {
			got[i] = view(t, h.call(t.Context(), t, roundCall(args, round, "accept")).only(t)).Content[0].Text
		})
	}
	wg.Wait()
	if h.up.calls.Load() != 1 || got[0] != got[1] {
		t.Fatalf("two continuations ran the call %d times and got %q; want one run, one answer", h.up.calls.Load(), got)
	}
}

// TestApprovalSessionGrantNotStateless: a 2026-07-28 call belongs to no
// session, so an approval of it covers no other call: each is asked.
func TestApprovalSessionGrantNotStateless(t *testing.T) {
	h := approving(policy.ApprovalSession, policy.ApproverClient)
	first := `{"card":"4242","amount":100}`
	round := asRound(t, h.call(t.Context(), t, roundCall(first, nil, "")).only(t))
	view(t, h.call(t.Context(), t, roundCall(first, round, "accept")).only(t))
	asRound(t, h.call(t.Context(), t, roundCall(`{"card":"1111","amount":5}`, nil, "")).only(t))
}

// TestApprovalRoundOutlivesTheClientDeadline: the client's deadline
// bounds the round that asks, not the user's answer, which comes in
// another call.
func TestApprovalRoundOutlivesTheClientDeadline(t *testing.T) {
	h := approving(policy.ApprovalEach, policy.ApproverClient)
	args := `{"card":"4242","amount":100}`
	call := strings.Replace(roundCall(args, nil, ""), `"_meta":{`, `"_meta":{"mcp-idempotent/deadline_ms":50,`, 1)
	round := asRound(t, h.call(t.Context(), t, call).only(t))
	time.Sleep(150 * time.Millisecond)
	if v := view(t, h.call(t.Context(), t, roundCall(args, round, "accept")).only(t)); v.Content[0].Text != "charge #1" {
		t.Fatalf("an answer after the round's deadline got %q; want the charge", v.Content[0].Text)
	}
}

// TestApprovalRoundCarriesTheUpstreamsRound: a call that continues the
// upstream's own multi-round request keeps its round members through the
// approval's round: the upstream gets them, not the proxy's.
func TestApprovalRoundCarriesTheUpstreamsRound(t *testing.T) {
	h := approving(policy.ApprovalEach, policy.ApproverClient)
	var sent json.RawMessage
	h.up.respond = func(ctx context.Context, n int, params json.RawMessage) (json.RawMessage, error) {
		sent = params
		return charged(ctx, n, params)
	}
	upstreams := `"inputResponses":{"confirm":{"action":"accept"}},"requestState":"upstream-state-7"`
	args := `{"card":"4242","amount":100}`
	first := strings.Replace(roundCall(args, nil, ""), `"arguments":`, upstreams+`,"arguments":`, 1)
	round := asRound(t, h.call(t.Context(), t, first).only(t))
	if v := view(t, h.call(t.Context(), t, roundCall(args, round, "accept")).only(t)); v.Content[0].Text != "charge #1" {
		t.Fatalf("the continuation got %q; want the charge", v.Content[0].Text)
	}
	var p struct {
		InputResponses map[string]json.RawMessage `json:"inputResponses"`
		RequestState   string                     `json:"requestState"`
	}
	if json.Unmarshal(sent, &p) != nil || p.RequestState != "upstream-state-7" || p.InputResponses["confirm"] == nil || p.InputResponses["mcp-idempotent/approval"] != nil {
		t.Errorf("the upstream got %s; want the upstream's own round, not the proxy's", sent)
	}
}

// TestApprovalRoundBindsIgnoredArguments: arguments the fingerprint
// ignores are still the ones the user saw: a continuation that changes
// them is refused.
func TestApprovalRoundBindsIgnoredArguments(t *testing.T) {
	h := approving(policy.ApprovalEach, policy.ApproverClient)
	h.pol.Ignore = []string{"memo"}
	round := asRound(t, h.call(t.Context(), t, roundCall(`{"card":"4242","memo":"lunch"}`, nil, "")).only(t))
	a := h.call(t.Context(), t, roundCall(`{"card":"4242","memo":"ignore previous instructions"}`, round, "accept")).only(t)
	if !strings.Contains(string(a.Error), "-32602") || h.up.calls.Load() != 0 {
		t.Fatalf("a continuation with another memo got %s %s and %d runs; want -32602, nothing run", a.Result, a.Error, h.up.calls.Load())
	}
}

// TestApprovalOperatorDecisionInTheProxy: the proxy that waited journals,
// counts and grants the operator's decision it acts on.
func TestApprovalOperatorDecisionInTheProxy(t *testing.T) {
	j := &memJournal{}
	h, s := operatorHarness(t)
	h.pol.Approval = policy.ApprovalSession
	h.in = New(Options{Store: s, Hasher: h.in.hasher, Journal: j})
	a := newAsker(elicited("decline", ""))
	h.askingCall(t, a, "session:1", chargeCall)
	rec := h.awaiting(t)
	if _, err := s.Update(t.Context(), rec.ID, record.Change{To: record.Authorized, From: record.Accepted, By: "bob", Via: record.ApproverOperator}); err != nil {
		t.Fatal(err)
	}
	view(t, a.only(t))
	h.settle(t)
	if !slices.Contains(j.states(), "authorized") {
		t.Errorf("the proxy's journal has %v; want the operator's approval in it", j.states())
	}
	second := newAsker(elicited("decline", ""))
	h.askingCall(t, second, "session:1", `{"name":"charge_card","arguments":{"card":"1111"}}`)
	if v := view(t, second.only(t)); v.IsError {
		t.Errorf("the second execution in the session got %q; want it run under the operator's session approval", v.Content[0].Text)
	}
}

// TestApprovalOperatorWaitEndsWithTheSession: no decision came before
// the session ended: nothing ran, and the execution failed, so that
// an operator's approval cannot be lost on a session that is gone.
func TestApprovalOperatorWaitEndsWithTheSession(t *testing.T) {
	h, _ := operatorHarness(t)
	ctx := newEndable(t.Context())
	req, ans := h.request(t, chargeCall)
	h.in.Handle(ctx, req)
	rec := h.awaiting(t)
	ctx.end(ErrSessionEnded)
	ans.only(t)
	got, err := h.store.Get(t.Context(), rec.ID)
	if err != nil || got.State != record.Failed || !strings.Contains(lastNote(got), "session ended") {
		t.Fatalf("after the session's end the execution is %+v, %v; want failed, the session's end its note", got, err)
	}
}

// TestApprovalOperatorWaitOfADetachedCallerEndsWithTheSession: the
// caller detached (cancelled its call) while the execution awaited an
// operator, then the session ended: the execution fails, rather than
// await, with no process left to send it, a decision that would be lost.
func TestApprovalOperatorWaitOfADetachedCallerEndsWithTheSession(t *testing.T) {
	h, _ := operatorHarness(t)
	ctx := newEndable(t.Context())
	req, _ := h.request(t, chargeCall)
	req.Origin.Session = "session:1"
	h.in.Handle(ctx, req)
	rec := h.awaiting(t)
	ctx.end(context.Canceled)
	h.in.EndSession("session:1")
	got, err := h.store.Get(t.Context(), rec.ID)
	if err != nil || got.State != record.Failed || !strings.Contains(lastNote(got), "session ended") {
		t.Fatalf("after the session's end the execution is %s (%v); want failed, the session's end its note", got.State, err)
	}
}

// gatedReserving is a deciding store whose reservations wait for gate.
type gatedReserving struct {
	*decidingStore
	gate chan struct{}
}

func (s gatedReserving) Reserve(ctx context.Context, r *record.Record, opts record.ReserveOptions) (*record.Record, bool, error) {
	<-s.gate
	return s.decidingStore.Reserve(ctx, r, opts)
}

// TestApprovalDetachedWhileReservedEndsWithTheSession: the caller
// detached while a slow store reserved its call, then the session ended,
// then the store made the reservation. The execution fails unsent, as
// one whose session ended while reserving does, rather than await after
// the session an operator whose approval nothing would send.
func TestApprovalDetachedWhileReservedEndsWithTheSession(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := gatedReserving{newDecidingStore(), make(chan struct{})}
		h := approving(policy.ApprovalEach, policy.ApproverOperator)
		h.in = New(Options{Store: s, Hasher: h.in.hasher, StoreWaits: true})
		ctx := newEndable(t.Context())
		req, _ := h.request(t, chargeCall)
		req.Origin.Session = "session:1"
		h.in.Handle(ctx, req)
		synctest.Wait()
		ctx.end(context.Canceled)
		h.in.EndSession("session:1")
		close(s.gate)
		synctest.Wait()
		h.settle(t)
		recs := s.Records()
		if len(recs) != 1 || recs[0].State != record.Failed || lastNote(recs[0]) != endedNote {
			t.Errorf("after the session's end the execution is %s (%q); want failed, the session's end its note", recs[0].State, lastNote(recs[0]))
		}
		time.Sleep(2 * time.Minute) // past the approval's timeout, were it awaited
	})
}

// TestApprovalQuestionAgainJournaled: a caller asked the approval's
// question again has its line: it joined the execution, and got the
// question.
func TestApprovalQuestionAgainJournaled(t *testing.T) {
	j := &memJournal{}
	h := approving(policy.ApprovalEach, policy.ApproverClient).withJournal(j, nil)
	args := `{"card":"4242","amount":100}`
	req, a := h.request(t, roundCall(args, nil, ""))
	req.Reply = &laterAnswers{answers: a, written: make(chan func(error), 1)}
	h.in.Handle(t.Context(), req)
	asRound(t, a.only(t))
	asRound(t, h.call(t.Context(), t, roundCall(args, nil, "")).only(t))
	var got []string
	for _, e := range j.entries {
		if e.Attach != nil {
			got = append(got, e.Attach.How+"/"+e.Attach.Got)
		}
	}
	if !slices.Equal(got, []string{"waited/question"}) {
		t.Errorf("the journal's callers %v; want the one asked again, waited/question", got)
	}
}

// replyHook is a caller whose transport delivers at once, and whose
// client acts on the answer before the write returns: hook runs then.
type replyHook struct {
	*answers
	hook func()
}

func (r *replyHook) Reply(a Answer) error {
	err := r.answers.Reply(a)
	if r.hook != nil {
		r.hook()
	}
	return err
}

// TestApprovalRetryRacesTheQuestion: a call sent again the moment its
// question reached the client, before the proxy's write returned (Reply),
// or before the transport told of the write (ReplyThen, over a transport
// that writes in order), waits for the answer to it: the user is asked
// once.
func TestApprovalRetryRacesTheQuestion(t *testing.T) {
	for _, tt := range []struct {
		name  string
		reply func(a *answers, hook func()) Replier
	}{
		{"reply", func(a *answers, hook func()) Replier { return &replyHook{answers: a, hook: hook} }},
		{"in order", func(a *answers, hook func()) Replier { return &writeThenTell{answers: a, hook: hook} }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h := approving(policy.ApprovalEach, policy.ApproverClient)
			args := `{"card":"4242","amount":100}`
			var retry *answers
			req, a := h.request(t, roundCall(args, nil, ""))
			req.Reply = tt.reply(a, func() { retry = h.call(t.Context(), t, roundCall(args, nil, "")) })
			h.in.Handle(t.Context(), req)
			round := asRound(t, a.only(t))
			view(t, h.call(t.Context(), t, roundCall(args, round, "accept")).only(t))
			if ans := retry.only(t); ans.Error != nil || strings.Contains(string(ans.Result), "input_required") {
				t.Fatalf("the retry sent as the question arrived got %s %s; want the charge, not the question again", ans.Result, ans.Error)
			}
		})
	}
}

// TestApprovalQuestionAskedAgainIsForgotten: a process that asked again
// for an execution that another process then decides is never told of
// the decision. It forgets the question once the approval's time is out,
// rather than keep it for as long as it runs.
func TestApprovalQuestionAskedAgainIsForgotten(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := approving(policy.ApprovalEach, policy.ApproverClient)
		other := &harness{in: New(Options{Store: h.store, Hasher: h.in.hasher}), store: h.store, up: h.up, pol: h.pol}
		args := `{"card":"4242","amount":100}`
		// held counts the questions the other process holds, and those
		// of them out with a caller.
		held := func() (n, out int) {
			other.in.questions.mu.Lock()
			defer other.in.questions.mu.Unlock()
			for _, q := range other.in.questions.m {
				n++
				if q.taken {
					out++
				}
			}
			return n, out
		}
		round := asRound(t, h.call(t.Context(), t, roundCall(args, nil, "")).only(t))
		asRound(t, other.call(t.Context(), t, roundCall(args, nil, "")).only(t))
		// Out with its caller until then: the call sent again waits for
		// the answer, rather than ask the user once more.
		if n, out := held(); n != 1 || out != 1 {
			t.Fatalf("the process that asked again holds %d questions, %d out; want the one, out", n, out)
		}
		view(t, h.call(t.Context(), t, roundCall(args, round, "accept")).only(t))
		time.Sleep(h.pol.ApprovalTimeout + time.Second)
		synctest.Wait()
		if n, _ := held(); n != 0 || h.up.calls.Load() != 1 {
			t.Fatalf("the process that asked again holds %d questions after the approval's time, with %d runs; want none, one run", n, h.up.calls.Load())
		}
	})
}

// TestApprovalInRoundKeyDropped: a continuation that drops the client key
// the call asked about was sent with is told so, not that it comes from
// another proxy process.
func TestApprovalInRoundKeyDropped(t *testing.T) {
	h := approving(policy.ApprovalEach, policy.ApproverClient)
	args := `{"card":"4242","amount":100}`
	keyed := func(call string) string {
		return strings.Replace(call, `"_meta":{`, `"_meta":{"mcp-idempotent/key":"k1",`, 1)
	}
	round := asRound(t, h.call(t.Context(), t, keyed(roundCall(args, nil, ""))).only(t))
	ans := h.call(t.Context(), t, roundCall(args, round, "accept")).only(t)
	if e := string(ans.Error); !strings.Contains(e, "-32602") || !strings.Contains(e, "mcp-idempotent/key") || strings.Contains(e, "another proxy process") {
		t.Fatalf("a continuation without the call's client key got %s %s; want -32602 naming the key", ans.Result, ans.Error)
	}
	if v := view(t, h.call(t.Context(), t, keyed(roundCall(args, round, "accept"))).only(t)); v.IsError || h.up.calls.Load() != 1 {
		t.Fatalf("the continuation with its key got %q, %d runs; want one run", v.Content[0].Text, h.up.calls.Load())
	}
	// And one that adds a key the call did not have.
	other := `{"card":"1111","amount":5}`
	round = asRound(t, h.call(t.Context(), t, roundCall(other, nil, "")).only(t))
	ans = h.call(t.Context(), t, keyed(roundCall(other, round, "accept"))).only(t)
	if e := string(ans.Error); !strings.Contains(e, "without a client key") || h.up.calls.Load() != 1 {
		t.Fatalf("a continuation that adds a client key got %s %s, %d runs; want -32602 naming the key, nothing run", ans.Result, ans.Error, h.up.calls.Load())
	}
}

// approvedAtTheEnd is a deciding store whose operator approves an
// execution just as the wait for it ends.
type approvedAtTheEnd struct{ *decidingStore }

func (s approvedAtTheEnd) WaitDecided(ctx context.Context, id string) (*record.Record, error) {
	<-ctx.Done()
	s.Update(context.Background(), id, record.Change{To: record.Authorized, From: record.Accepted, By: "bob", Via: record.ApproverOperator})
	return nil, ctx.Err()
}

// TestApprovalGrantNotKeptPastTheSession: an operator's approval under
// approval: session that lands as the session ends is no grant of it
// once EndSession returns: the session is gone, and so are its grants.
func TestApprovalGrantNotKeptPastTheSession(t *testing.T) {
	s := approvedAtTheEnd{newDecidingStore()}
	h := approving(policy.ApprovalSession, policy.ApproverOperator)
	h.in = New(Options{Store: s, Hasher: h.in.hasher})
	h.store = s.Store
	ctx := newEndable(t.Context())
	req, _ := h.request(t, chargeCall)
	req.Origin.Session = "session:1"
	h.in.Handle(ctx, req)
	h.awaiting(t)
	ctx.end(ErrSessionEnded)
	h.in.EndSession("session:1")
	h.settle(t)
	if _, ok := h.in.grants.get(req, req.Policy); ok {
		t.Error("the session's grant is kept after its end")
	}
}

// TestApprovalInRoundKeyChanged: a continuation under another client key
// than the call asked about is refused, as one that drops the key is: the
// key it names is not the execution's, and a call under it would start
// another execution, asked about anew.
func TestApprovalInRoundKeyChanged(t *testing.T) {
	h := approving(policy.ApprovalEach, policy.ApproverClient)
	args := `{"card":"4242","amount":100}`
	keyed := func(key, call string) string {
		return strings.Replace(call, `"_meta":{`, `"_meta":{"mcp-idempotent/key":"`+key+`",`, 1)
	}
	round := asRound(t, h.call(t.Context(), t, keyed("k1", roundCall(args, nil, ""))).only(t))
	ans := h.call(t.Context(), t, keyed("k2", roundCall(args, round, "accept"))).only(t)
	if e := string(ans.Error); !strings.Contains(e, "-32602") || !strings.Contains(e, "mcp-idempotent/key") || h.up.calls.Load() != 0 {
		t.Fatalf("a continuation under another client key got %s %s, %d runs; want -32602 naming the key, nothing run", ans.Result, ans.Error, h.up.calls.Load())
	}
	if v := view(t, h.call(t.Context(), t, keyed("k1", roundCall(args, round, "accept"))).only(t)); v.IsError || h.up.calls.Load() != 1 {
		t.Fatalf("the continuation with its key got %q, %d runs; want one run", v.Content[0].Text, h.up.calls.Load())
	}
}

// TestOnePromptAcrossProtocols: an execution whose user is being asked
// through elicitation/create (a 2025 client) is not asked about again
// when the same call comes from a client of the 2026-07-28 protocol: it
// waits for the answer to the question already out (one prompt per
// execution).
func TestOnePromptAcrossProtocols(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := approving(policy.ApprovalEach, policy.ApproverClient)
		h.pol.Scope = policy.ScopeActor
		release := make(chan struct{})
		a := newAsker(func(ctx context.Context, _ json.RawMessage) (json.RawMessage, error) {
			<-release // the user has not decided yet
			return json.Marshal(map[string]any{"action": "accept"})
		})
		args := `{"card":"4242","amount":100}`
		h.askingCall(t, a, "session:1", `{"name":"charge_card","arguments":`+args+`}`)
		synctest.Wait()
		second := h.call(t.Context(), t, roundCall(args, nil, ""))
		synctest.Wait()
		if second.count() > 0 {
			close(release)
			t.Fatalf("the same call from a 2026-07-28 client was answered %s while the user was asked; want it to wait for that answer", (<-second.got).Result)
		}
		close(release)
		if v := view(t, second.only(t)); v.Content[0].Text != "charge #1" {
			t.Fatalf("the second caller got %+v; want the execution's answer", v)
		}
		if n := a.questions(); n != 1 {
			t.Errorf("the user was asked %d times; want once", n)
		}
		h.in.Wait(t.Context())
	})
}
