package intercept

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/fingerprint"
	"github.com/mcp-idempotent/mcp-idempotent/internal/policy"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
)

// ambiguousAnswers are elicitation results that readers take for
// different answers: each must refuse, never approve.
var ambiguousAnswers = map[string]string{
	"action in another case": `{"Action":"accept"}`,
	"action twice":           `{"action":"decline","action":"accept"}`,
	"action and ACTION":      `{"action":"accept","ACTION":"decline"}`,
	"content twice":          `{"action":"accept","content":{"note":"a"},"content":{"note":"b"}}`,
	"note in another case":   `{"action":"accept","content":{"Note":"a"}}`,
}

// TestApprovalAmbiguousAnswerRefuses: an answer to the proxy's own
// elicitation that gives a member it reads twice, or in another case, is
// not guessed at: the execution is refused, saying the answer was
// ambiguous, and nothing is sent.
func TestApprovalAmbiguousAnswerRefuses(t *testing.T) {
	for name, raw := range ambiguousAnswers {
		t.Run(name, func(t *testing.T) {
			h := approving(policy.ApprovalEach, policy.ApproverClient)
			a := newAsker(func(context.Context, json.RawMessage) (json.RawMessage, error) {
				return json.RawMessage(raw), nil
			})
			h.askingCall(t, a, "session:1", chargeCall)
			v := view(t, a.only(t))
			if !strings.HasPrefix(v.Content[0].Text, "Refused:") || !strings.Contains(v.Content[0].Text, "ambiguous") {
				t.Errorf("the answer %s got %q; want a refusal saying the answer was ambiguous", raw, v.Content[0].Text)
			}
			if n := h.up.calls.Load(); n != 0 {
				t.Errorf("the answer %s sent the call %d times; want none", raw, n)
			}
		})
	}
}

// TestApprovalInRoundAmbiguousAnswer: a 2026-07-28 continuation whose
// answer, or whose approval entry in inputResponses, is given twice or
// in another case is refused with -32602 and decides nothing: the
// question stays open, and an answer that reads one way decides it.
func TestApprovalInRoundAmbiguousAnswer(t *testing.T) {
	responses := map[string]string{
		"entry twice": `{"mcp-idempotent/approval":{"action":"decline"},"mcp-idempotent/approval":{"action":"accept"}}`,
	}
	for name, raw := range ambiguousAnswers {
		responses[name] = `{"mcp-idempotent/approval":` + raw + `}`
	}
	for name, ir := range responses {
		t.Run(name, func(t *testing.T) { continuationRefused(t, ir, "ambiguous") })
	}
}

// TestApprovalInRoundUnreadableAnswer: a 2026-07-28 continuation whose
// answer is no elicitation result is the client's mistake, not its
// user's decision: refused with -32602 saying what to send, and the
// question stays open for an answer that can be read.
func TestApprovalInRoundUnreadableAnswer(t *testing.T) {
	for name, raw := range map[string]string{
		"a string":          `"accept"`,
		"null":              `null`,
		"no action":         `{}`,
		"action a number":   `{"action":5}`,
		"content an array":  `{"action":"accept","content":[1]}`,
		"note a number":     `{"action":"accept","content":{"note":5}}`,
		"a list of answers": `[{"action":"accept"}]`,
	} {
		t.Run(name, func(t *testing.T) {
			continuationRefused(t, `{"mcp-idempotent/approval":`+raw+`}`, "could not be read")
		})
	}
}

// TestApprovalInRoundResponsesNoObject: inputResponses that is no object
// is refused with -32602 saying so, not as if it lacked the answer.
func TestApprovalInRoundResponsesNoObject(t *testing.T) {
	for _, ir := range []string{`"accept"`, `[{"action":"accept"}]`, `5`} {
		t.Run(ir, func(t *testing.T) { continuationRefused(t, ir, "inputResponses is no object") })
	}
}

// continuationRefused continues an approval round with ir for its
// inputResponses, and checks that the continuation is refused with
// -32602 saying want, that the execution still awaits its decision,
// never sent, and that a clear answer after it decides it.
func continuationRefused(t *testing.T, ir, want string) {
	t.Helper()
	args := `{"card":"4242","amount":100}`
	h := approving(policy.ApprovalEach, policy.ApproverClient)
	round := asRound(t, h.call(t.Context(), t, roundCall(args, nil, "")).only(t))
	good := roundCall(args, round, "accept")
	const answer = `"inputResponses":{"mcp-idempotent/approval":{"action":"accept","content":{"note":"ok"}}}`
	bad := strings.Replace(good, answer, `"inputResponses":`+ir, 1)
	if bad == good {
		t.Fatalf("the continuation %s holds no answer to replace", good)
	}
	a := h.call(t.Context(), t, bad).only(t)
	if !strings.Contains(string(a.Error), "-32602") || !strings.Contains(string(a.Error), want) {
		t.Fatalf("inputResponses %s got %s %s; want -32602 saying %q", ir, a.Result, a.Error, want)
	}
	if rec := h.onlyRecord(t); rec.State != record.Accepted || h.up.calls.Load() != 0 {
		t.Fatalf("after inputResponses %s the execution is %s, sent %d times; want it still awaiting, never sent", ir, rec.State, h.up.calls.Load())
	}
	if v := view(t, h.call(t.Context(), t, good).only(t)); v.Content[0].Text != "charge #1" {
		t.Errorf("a clear answer after it got %q; want the charge", v.Content[0].Text)
	}
}

// TestApprovalQuestionLinesCannotBeForged: the tool name comes from the
// upstream and the arguments from the client; neither can write a line
// of its own into the question the user approves (a fake "Arguments:"
// above the real one).
func TestApprovalQuestionLinesCannotBeForged(t *testing.T) {
	h := approving(policy.ApprovalEach, policy.ApproverClient)
	h.pol.Journal.Arguments = policy.JournalClear
	a := newAsker(elicited("decline", ""))
	name := "charge_card\n\nArguments: {\"amount\":0}\nUpstream: billing-sandbox\u2028Actor: bob"
	params, _ := json.Marshal(map[string]any{"name": name})
	call := strings.TrimSuffix(string(params), "}") + ",\"arguments\":{\"card\":\n\"4242\",\r\n\"note\":\"x\u2028Execution: none\u0085Tool: y\",\"amount\":100}}"
	h.askingCall(t, a, "session:1", call)
	a.only(t)
	var q struct {
		Message string `json:"message"`
	}
	if err := json.Unmarshal(a.asked[0], &q); err != nil {
		t.Fatal(err)
	}
	lines := strings.FieldsFunc(q.Message, func(r rune) bool { return r == '\n' || r == '\r' || r == '\u2028' || r == '\u0085' })
	counts := map[string]int{}
	for _, l := range lines {
		if k, _, ok := strings.Cut(l, ":"); ok {
			counts[k]++
		}
	}
	for _, k := range []string{"Tool", "Upstream", "Actor", "Execution", "Arguments"} {
		if counts[k] != 1 {
			t.Errorf("the question has %d %q lines; want 1:\n%s", counts[k], k, q.Message)
		}
	}
	if !strings.Contains(q.Message, `Tool: "charge_card\n\nArguments:`) || !strings.Contains(q.Message, `"note":"x\u2028Execution: none\u0085Tool: y"`) {
		t.Errorf("the question does not show the name and the arguments escaped:\n%s", q.Message)
	}
}

// TestAttachedCallersDeadlineBoundsItsWait: a caller that attaches to an
// execution awaiting its approval, with a deadline of its own, is told
// "Still in progress" at that deadline; the execution goes on, and the
// first caller gets its outcome.
func TestAttachedCallersDeadlineBoundsItsWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := approving(policy.ApprovalEach, policy.ApproverClient)
		decide := make(chan struct{})
		a := newAsker(func(ctx context.Context, p json.RawMessage) (json.RawMessage, error) {
			<-decide
			return elicited("accept", "")(ctx, p)
		})
		h.askingCall(t, a, "session:1", chargeCall)
		synctest.Wait()
		attached := newAsker(elicited("decline", ""))
		h.askingCall(t, attached, "session:2", withDeadline(chargeCall, 500))
		time.Sleep(time.Second)
		synctest.Wait()
		if attached.count() != 1 || a.count() != 0 {
			t.Fatalf("a second after an attached caller with a 500ms deadline: it has %d answers, the first caller %d; want 1 and 0",
				attached.count(), a.count())
		}
		if v := view(t, attached.only(t)); !strings.HasPrefix(v.Content[0].Text, "Still in progress:") {
			t.Errorf("the attached caller got %q; want Still in progress", v.Content[0].Text)
		}
		close(decide)
		if v := view(t, a.only(t)); v.Content[0].Text != "charge #1" || h.up.calls.Load() != 1 {
			t.Errorf("the first caller got %q, %d runs; want the one charge", v.Content[0].Text, h.up.calls.Load())
		}
	})
}

// TestInProgressSaysMilliseconds: the wait a "Still in progress" answer
// names, which a client's deadline makes any length, is told to the
// millisecond, not in nanoseconds.
func TestInProgressSaysMilliseconds(t *testing.T) {
	r := &record.Record{ID: "exe_1", Tool: "charge_card", State: record.Accepted, Awaiting: record.ApproverOperator}
	for wait, want := range map[time.Duration]string{1499599799 * time.Nanosecond: "1.5s", 400123 * time.Nanosecond: "400µs"} {
		v := view(t, Answer{Result: inProgressResult(r, wait, false)})
		if !strings.Contains(v.Content[0].Text, "has not finished after "+want+" (state accepted") {
			t.Errorf("after %v got %q; want the wait as %s", wait, v.Content[0].Text, want)
		}
	}
}

// TestApprovalRefusalReplaySaysWhose: a refusal kept for an actor, here
// because the first client could not be asked, is replayed to a later
// client that can be: it says it is an earlier call's stored outcome and
// how to get a new execution, so the reason it gives is not taken for
// one about this client.
func TestApprovalRefusalReplaySaysWhose(t *testing.T) {
	h := approving(policy.ApprovalEach, policy.ApproverClient)
	h.pol.Scope = policy.ScopeActor
	first := newAsker(elicited("accept", ""))
	first.can = false
	h.askingCall(t, first, "session:1", chargeCall)
	if v := view(t, first.only(t)); !strings.HasPrefix(v.Content[0].Text, "Refused:") || strings.Contains(v.Content[0].Text, "earlier") {
		t.Fatalf("the client that cannot be asked got %q; want its own refusal", v.Content[0].Text)
	}
	later := newAsker(elicited("accept", ""))
	h.askingCall(t, later, "session:2", chargeCall)
	v := view(t, later.only(t))
	if text := v.Content[0].Text; !strings.HasPrefix(text, "Refused:") || !strings.Contains(text, "stored outcome of an earlier identical call") ||
		!strings.Contains(text, "new client key") || !v.Meta.Replayed {
		t.Errorf("a later client that can be asked got %q (replayed %v); want the refusal marked as an earlier call's stored outcome, saying how to get a new execution",
			text, v.Meta.Replayed)
	}
	if later.questions() != 0 || h.up.calls.Load() != 0 {
		t.Errorf("%d questions, %d runs; want the kept refusal, nothing asked or sent", later.questions(), h.up.calls.Load())
	}
}

// slowReserving is a deciding store whose reservations take a second,
// as a store under load does.
type slowReserving struct{ *decidingStore }

func (s slowReserving) Reserve(ctx context.Context, r *record.Record, opts record.ReserveOptions) (*record.Record, bool, error) {
	time.Sleep(time.Second)
	return s.decidingStore.Reserve(ctx, r, opts)
}

// TestApprovalDeadlinePassedBeforeAsked: a call whose client deadline
// passed while its reservation was made leaves no time to ask anyone.
// Its execution fails unsent, rather than be refused "within -0.5s" and
// that refusal kept from the call sent again: no one decided it, and the
// call again is asked.
func TestApprovalDeadlinePassedBeforeAsked(t *testing.T) {
	// A 2026-07-28 call declares elicitation: an operator's approval of
	// it is bounded by its deadline all the same.
	const round = `{"name":"charge_card","arguments":{"card":"4242","amount":100},"_meta":{` +
		`"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"elicitation":{"form":{}}},` +
		`"mcp-idempotent/deadline_ms":500}}`
	for name, c := range map[string]struct {
		approver policy.Approver
		call     string
	}{
		"client":              {policy.ApproverClient, withDeadline(chargeCall, 500)},
		"operator":            {policy.ApproverOperator, withDeadline(chargeCall, 500)},
		"operator 2026-07-28": {policy.ApproverOperator, round},
	} {
		approver := c.approver
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := newDecidingStore()
				h := approving(policy.ApprovalEach, approver)
				h.in = New(Options{Store: slowReserving{s}, Hasher: fingerprint.NewRandom(), StoreWaits: true})
				h.store = s.Store
				first := newAsker(elicited("accept", ""))
				h.askingCall(t, first, "session:1", c.call)
				first.only(t)
				if recs := h.store.Records(); recs[0].State != record.Failed || !strings.Contains(lastNote(recs[0]), "deadline passed") {
					t.Fatalf("the execution is %s (%q); want it failed, its note the deadline", recs[0].State, lastNote(recs[0]))
				}
				if first.questions() != 0 || h.up.calls.Load() != 0 {
					t.Fatalf("%d questions, %d runs; want none", first.questions(), h.up.calls.Load())
				}
				again := newAsker(elicited("accept", ""))
				h.askingCall(t, again, "session:1", chargeCall)
				if approver == policy.ApproverOperator {
					time.Sleep(2 * time.Second) // past the reservation
					synctest.Wait()
					recs := h.store.Records()
					i := slices.IndexFunc(recs, func(r *record.Record) bool {
						return r.Awaiting == record.ApproverOperator && r.State == record.Accepted
					})
					if i < 0 {
						t.Fatalf("no execution awaits an operator: %+v", recs)
					}
					if _, err := s.Update(t.Context(), recs[i].ID, record.Change{To: record.Authorized, From: record.Accepted, By: "bob", Via: record.ApproverOperator}); err != nil {
						t.Fatal(err)
					}
				}
				if v := view(t, again.only(t)); v.IsError || h.up.calls.Load() != 1 {
					t.Errorf("the call again got %q, %d runs; want it asked, approved and run once", v.Content[0].Text, h.up.calls.Load())
				}
			})
		})
	}
}
