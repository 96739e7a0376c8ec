package intercept

import (
	"context"
	"encoding/json"
	"errors"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/fingerprint"
	"github.com/mcp-idempotent/mcp-idempotent/internal/jsonrpc"
	"github.com/mcp-idempotent/mcp-idempotent/internal/policy"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record/memstore"
)

// asker is a caller whose client can be asked (an Asker): each question
// is kept, and answered by answer, which may block until the test
// decides; progress keeps what the caller was told while it waited.
type asker struct {
	*answers
	can    bool
	answer func(ctx context.Context, params json.RawMessage) (json.RawMessage, error)

	mu       sync.Mutex
	asked    []json.RawMessage
	progress []string
}

func (a *asker) CanAsk() bool { return a.can }

func (a *asker) Ask(ctx context.Context, params json.RawMessage, done func(json.RawMessage, error)) {
	a.mu.Lock()
	a.asked = append(a.asked, params)
	a.mu.Unlock()
	go func() { done(a.answer(ctx, params)) }()
}

func (a *asker) Progress(message string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.progress = append(a.progress, message)
}

func (a *asker) questions() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.asked)
}

// elicited answers every question with action and note.
func elicited(action, note string) func(context.Context, json.RawMessage) (json.RawMessage, error) {
	return func(context.Context, json.RawMessage) (json.RawMessage, error) {
		return json.Marshal(map[string]any{"action": action, "content": map[string]string{"note": note}})
	}
}

// approving returns a harness whose tool needs approval as mode and
// approver say.
func approving(mode policy.Approval, approver policy.Approver) *harness {
	h := newHarness(charged)
	h.pol.Approval, h.pol.Approver, h.pol.ApprovalTimeout = mode, approver, time.Minute
	return h
}

// askingCall makes one call whose caller's client is asked through a.
func (h *harness) askingCall(t *testing.T, a *asker, session, params string) {
	t.Helper()
	req, ans := h.request(t, params)
	a.answers = ans
	req.Reply, req.Origin.Session = a, session
	h.in.Handle(t.Context(), req)
}

func newAsker(answer func(context.Context, json.RawMessage) (json.RawMessage, error)) *asker {
	return &asker{can: true, answer: answer}
}

// decision returns the transition of rec into st.
func decision(t *testing.T, rec *record.Record, st record.State) record.Transition {
	t.Helper()
	for _, tr := range rec.History {
		if tr.State == st {
			return tr
		}
	}
	t.Fatalf("execution %s has no %s transition: %+v", rec.ID, st, rec.History)
	return record.Transition{}
}

// TestApprovalLongNoteCut: a client's note is kept with the record and
// shown to every caller for the record's retention; one over
// record.MaxNote characters is cut there, and says so, rather than kept
// whole or taken for no decision.
func TestApprovalLongNoteCut(t *testing.T) {
	h := approving(policy.ApprovalEach, policy.ApproverClient)
	a := newAsker(elicited("decline", strings.Repeat("n", 3_000_000)))
	h.askingCall(t, a, "session:1", chargeCall)
	if v := view(t, a.only(t)); !strings.Contains(v.Content[0].Text, "… (cut: 3000000 characters in all)") {
		t.Errorf("the declined call got a text of %d bytes; want the note cut, and saying so", len(v.Content[0].Text))
	}
	d := decision(t, h.onlyRecord(t), record.Refused)
	if want := strings.Repeat("n", record.MaxNote) + "… (cut: 3000000 characters in all)"; d.Note != want || d.Via != record.ApproverClient {
		t.Errorf("the refusal is recorded through %q with a note of %d bytes ending %q; want through client, cut to %d characters and saying so",
			d.Via, len(d.Note), d.Note[max(0, len(d.Note)-40):], record.MaxNote)
	}
}

func TestApprovalAcceptedRunsOnce(t *testing.T) {
	h := approving(policy.ApprovalEach, policy.ApproverClient)
	a := newAsker(elicited("accept", "looks right"))
	h.askingCall(t, a, "session:1", chargeCall)
	if v := view(t, a.only(t)); v.Content[0].Text != "charge #1" {
		t.Fatalf("the approved call got %q; want the charge", v.Content[0].Text)
	}
	rec := h.onlyRecord(t)
	if d := decision(t, rec, record.Authorized); d.By != "alice" || d.Via != record.ApproverClient || d.Note != "looks right" {
		t.Errorf("the approval is recorded as %+v; want by alice, through client, with the note", d)
	}
	var params struct {
		Message string `json:"message"`
	}
	if err := json.Unmarshal(a.asked[0], &params); err != nil || !strings.Contains(params.Message, rec.ID) || !strings.Contains(params.Message, "charge_card") {
		t.Errorf("the question %s does not name the execution and the tool", a.asked[0])
	}
	// Quoted: the card as JSON shows it. The hash is hex drawn under a
	// random secret, and holds the digits 4242 about once in 1,000 runs.
	if strings.Contains(params.Message, `"4242"`) {
		t.Errorf("the question shows arguments the journal policy hashes: %s", params.Message)
	}
	if len(a.progress) == 0 || !strings.Contains(a.progress[0], "awaiting approval") {
		t.Errorf("the caller was told %q while it waited; want awaiting approval", a.progress)
	}
	// A retry gets the answer, and is not asked again.
	again := newAsker(elicited("accept", ""))
	h.askingCall(t, again, "session:1", chargeCall)
	if v := view(t, again.only(t)); !v.Meta.Replayed || again.questions() != 0 || h.up.calls.Load() != 1 {
		t.Errorf("a retry: replayed %v, asked %d times, upstream ran %d times; want a replay, no question, one run",
			v.Meta.Replayed, again.questions(), h.up.calls.Load())
	}
}

func TestApprovalDeclinedIsRefusedAgain(t *testing.T) {
	h := approving(policy.ApprovalEach, policy.ApproverClient)
	a := newAsker(elicited("decline", "not this card"))
	h.askingCall(t, a, "session:1", chargeCall)
	v := view(t, a.only(t))
	if !v.IsError || !strings.HasPrefix(v.Content[0].Text, "Refused:") || !strings.Contains(v.Content[0].Text, "not this card") ||
		v.Meta.Execution.ID == "" || v.Meta.Outcome != "refused" {
		t.Fatalf("the declined call got %+v; want an error result that begins Refused:, with the reason and the execution", v)
	}
	if n := h.up.calls.Load(); n != 0 {
		t.Fatalf("the upstream ran %d times; a refused call is never sent", n)
	}
	again := newAsker(elicited("accept", ""))
	h.askingCall(t, again, "session:1", chargeCall)
	if v := view(t, again.only(t)); !strings.HasPrefix(v.Content[0].Text, "Refused:") || again.questions() != 0 {
		t.Errorf("a retry after the refusal got %q and was asked %d times; want the refusal, not a new question", v.Content[0].Text, again.questions())
	}
	if d := decision(t, h.onlyRecord(t), record.Refused); d.By != "alice" || d.Via != record.ApproverClient {
		t.Errorf("the refusal is recorded as %+v; want by alice through client", d)
	}
}

// TestApprovalRetryWhileAsked: a call that comes again while its first is
// being asked about attaches to it: one question, one run, and both
// callers get its answer.
func TestApprovalRetryWhileAsked(t *testing.T) {
	h := approving(policy.ApprovalEach, policy.ApproverClient)
	decide := make(chan struct{})
	a := newAsker(func(ctx context.Context, p json.RawMessage) (json.RawMessage, error) {
		<-decide
		return elicited("accept", "")(ctx, p)
	})
	h.askingCall(t, a, "session:1", chargeCall)
	retry := newAsker(elicited("decline", ""))
	h.askingCall(t, retry, "session:2", chargeCall)
	close(decide)
	first, second := view(t, a.only(t)), view(t, retry.only(t))
	if first.Content[0].Text != "charge #1" || second.Content[0].Text != "charge #1" {
		t.Errorf("the callers got %q and %q; want both the one charge", first.Content[0].Text, second.Content[0].Text)
	}
	if a.questions()+retry.questions() != 1 || h.up.calls.Load() != 1 {
		t.Errorf("%d questions, %d runs; want one of each", a.questions()+retry.questions(), h.up.calls.Load())
	}
}

// TestApprovalCannotAsk: a client that declared no elicitation, or a
// transport that cannot carry the question, gets a refusal that says how
// approval can be had, and nothing is sent.
func TestApprovalCannotAsk(t *testing.T) {
	h := approving(policy.ApprovalEach, policy.ApproverClient)
	a := newAsker(elicited("accept", ""))
	a.can = false
	h.askingCall(t, a, "session:1", chargeCall)
	v := view(t, a.only(t))
	if !strings.HasPrefix(v.Content[0].Text, "Refused:") || !strings.Contains(v.Content[0].Text, "elicitation") ||
		!strings.Contains(v.Content[0].Text, "approver: operator") || a.questions() != 0 || h.up.calls.Load() != 0 {
		t.Fatalf("got %q, %d questions, %d runs; want a refusal naming elicitation and the operator approver, nothing asked or sent",
			v.Content[0].Text, a.questions(), h.up.calls.Load())
	}
	// A caller that is no Asker at all is refused the same way.
	plain := h.call(t.Context(), t, `{"name":"charge_card","arguments":{"card":"1111"}}`)
	if v := view(t, plain.only(t)); !strings.HasPrefix(v.Content[0].Text, "Refused:") {
		t.Errorf("a caller that cannot be asked got %q; want a refusal", v.Content[0].Text)
	}
}

func TestApprovalTimesOut(t *testing.T) {
	h := approving(policy.ApprovalEach, policy.ApproverClient)
	h.pol.ApprovalTimeout = 50 * time.Millisecond
	a := newAsker(func(ctx context.Context, _ json.RawMessage) (json.RawMessage, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	})
	h.askingCall(t, a, "session:1", chargeCall)
	v := view(t, a.only(t))
	if !strings.HasPrefix(v.Content[0].Text, "Refused:") || !strings.Contains(v.Content[0].Text, "within 50ms") {
		t.Fatalf("got %q; want a refusal for the timeout", v.Content[0].Text)
	}
	if d := decision(t, h.onlyRecord(t), record.Refused); d.Via != record.ViaTimeout {
		t.Errorf("the refusal is recorded through %q; want timeout", d.Via)
	}
}

// TestApprovalTimeoutOfAClientDeadlineIsRounded: a client's deadline,
// counted from the call's arrival, leaves the user a time that is no
// round number: the refusal gives it to the millisecond, not the
// nanosecond.
func TestApprovalTimeoutOfAClientDeadlineIsRounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := approving(policy.ApprovalEach, policy.ApproverClient)
		var ticks atomic.Int64
		h.in = New(Options{Store: h.store, Hasher: fingerprint.NewRandom(), Now: func() time.Time {
			// Each reading of the clock is a little later.
			return time.Now().Add(time.Duration(ticks.Add(1)) * 1234567)
		}})
		a := newAsker(func(ctx context.Context, _ json.RawMessage) (json.RawMessage, error) {
			<-ctx.Done()
			return nil, ctx.Err()
		})
		h.askingCall(t, a, "session:1", `{"name":"charge_card","arguments":{"card":"4242"},"_meta":{"mcp-idempotent/deadline_ms":1500}}`)
		text := view(t, a.only(t)).Content[0].Text
		if !strings.HasPrefix(text, "Refused:") || !regexp.MustCompile(`within 1\.49\ds `).MatchString(text) {
			t.Fatalf("got %q; want a refusal giving the time the user had to the millisecond", text)
		}
	})
}

// TestApprovalSessionEndsUndecided: no decision came before the session
// ended: nothing ran, and the record is failed, so that a call again is
// asked again.
func TestApprovalSessionEndsUndecided(t *testing.T) {
	h := approving(policy.ApprovalEach, policy.ApproverClient)
	a := newAsker(func(context.Context, json.RawMessage) (json.RawMessage, error) {
		return nil, errors.New("the session ended")
	})
	h.askingCall(t, a, "session:1", chargeCall)
	if e := jsonrpc.DecodeError(a.only(t).Error); e == nil || !strings.Contains(e.Message, "calling again runs it once approved") {
		t.Errorf("the caller got %v; want an error saying a call again is asked about", e)
	}
	if rec := h.onlyRecord(t); rec.State != record.Failed || h.up.calls.Load() != 0 {
		t.Fatalf("the execution is %s, the upstream ran %d times; want failed, never sent", rec.State, h.up.calls.Load())
	}
	b := newAsker(elicited("accept", ""))
	h.askingCall(t, b, "session:2", chargeCall)
	if v := view(t, b.only(t)); v.Content[0].Text != "charge #1" || b.questions() != 1 {
		t.Errorf("the call again got %q after %d questions; want it asked and run", v.Content[0].Text, b.questions())
	}
}

func TestApprovalClientErrorRefuses(t *testing.T) {
	h := approving(policy.ApprovalEach, policy.ApproverClient)
	a := newAsker(func(context.Context, json.RawMessage) (json.RawMessage, error) {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound, Message: "Method not found"}
	})
	h.askingCall(t, a, "session:1", chargeCall)
	if v := view(t, a.only(t)); !strings.Contains(v.Content[0].Text, "could not ask its user: Method not found") {
		t.Fatalf("got %q; want a refusal saying the client could not ask", v.Content[0].Text)
	}
}

// TestApprovalMalformedAnswerRefuses: a client's answer that is no
// JSON-RPC response refuses the execution, saying so of the client's
// answer: the client answered, so it is neither asked again nor told it
// failed before a decision.
func TestApprovalMalformedAnswerRefuses(t *testing.T) {
	h := approving(policy.ApprovalEach, policy.ApproverClient)
	a := newAsker(func(context.Context, json.RawMessage) (json.RawMessage, error) {
		return nil, &MalformedAnswerError{What: "a response to elicitation/create with both a result and an error"}
	})
	h.askingCall(t, a, "session:1", chargeCall)
	v := view(t, a.only(t))
	if !strings.HasPrefix(v.Content[0].Text, "Refused:") || !strings.Contains(v.Content[0].Text, "the client's answer to the approval request could not be read: it was a response to elicitation/create with both a result and an error") {
		t.Fatalf("got %q; want a refusal saying the client's answer could not be read", v.Content[0].Text)
	}
	if n := h.up.calls.Load(); n != 0 {
		t.Errorf("the call was sent %d times; want none", n)
	}
}

// TestApprovalSession: approval: session asks for the tool's first
// execution in a session, covers its later ones there, and ends with it.
func TestApprovalSession(t *testing.T) {
	h := approving(policy.ApprovalSession, policy.ApproverClient)
	first := newAsker(elicited("accept", ""))
	h.askingCall(t, first, "session:1", chargeCall)
	view(t, first.only(t))
	second := newAsker(elicited("decline", ""))
	h.askingCall(t, second, "session:1", `{"name":"charge_card","arguments":{"card":"1111","amount":5}}`)
	if v := view(t, second.only(t)); v.IsError || second.questions() != 0 {
		t.Fatalf("the second execution in the session got %q after %d questions; want it run unasked", v.Content[0].Text, second.questions())
	}
	recs := h.store.Records()
	var granted *record.Record
	for _, r := range recs {
		if r.ID != h.onlyFirst(t, recs).ID {
			granted = r
		}
	}
	if d := decision(t, granted, record.Authorized); d.Via != record.ViaSessionGrant || d.By != "alice" {
		t.Errorf("the covered execution's approval is %+v; want alice's, through session-grant", d)
	}
	other := newAsker(elicited("accept", ""))
	h.askingCall(t, other, "session:2", `{"name":"charge_card","arguments":{"card":"2222"}}`)
	if view(t, other.only(t)); other.questions() != 1 {
		t.Errorf("a call in another session was asked %d times; want once", other.questions())
	}
	h.in.EndSession("session:1")
	after := newAsker(elicited("accept", ""))
	h.askingCall(t, after, "session:1", `{"name":"charge_card","arguments":{"card":"3333"}}`)
	if view(t, after.only(t)); after.questions() != 1 {
		t.Errorf("a call after its session's end was asked %d times; want once", after.questions())
	}
}

// onlyFirst returns the oldest of recs.
func (h *harness) onlyFirst(t *testing.T, recs []*record.Record) *record.Record {
	t.Helper()
	first := recs[0]
	for _, r := range recs {
		if r.ID < first.ID {
			first = r
		}
	}
	return first
}

// TestApprovalOperatorNeedsASharedStore: an operator cannot reach a
// store in memory: the call is refused, saying so, and nothing is sent.
func TestApprovalOperatorNeedsASharedStore(t *testing.T) {
	h := approving(policy.ApprovalEach, policy.ApproverOperator)
	v := view(t, h.call(t.Context(), t, chargeCall).only(t))
	if !strings.HasPrefix(v.Content[0].Text, "Refused:") || !strings.Contains(v.Content[0].Text, "durable store") || h.up.calls.Load() != 0 {
		t.Fatalf("got %q and %d runs; want a refusal naming a durable store, nothing sent", v.Content[0].Text, h.up.calls.Load())
	}
}

// decidingStore is a store in memory that an operator can decide in: its
// WaitDecided wakes on Update, as a shared store's event does.
type decidingStore struct {
	*memstore.Store
	mu      sync.Mutex
	changed chan struct{}
}

func newDecidingStore() *decidingStore {
	return &decidingStore{Store: memstore.New(memstore.Options{}), changed: make(chan struct{})}
}

func (s *decidingStore) Update(ctx context.Context, id string, c record.Change) (*record.Record, error) {
	rec, err := s.Store.Update(ctx, id, c)
	s.mu.Lock()
	close(s.changed)
	s.changed = make(chan struct{})
	s.mu.Unlock()
	return rec, err
}

func (s *decidingStore) WaitDecided(ctx context.Context, id string) (*record.Record, error) {
	for {
		s.mu.Lock()
		changed := s.changed
		s.mu.Unlock()
		rec, err := s.Get(ctx, id)
		if err != nil || rec.State != record.Accepted {
			return rec, err
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

func operatorHarness(t *testing.T) (*harness, *decidingStore) {
	t.Helper()
	s := newDecidingStore()
	h := approving(policy.ApprovalEach, policy.ApproverOperator)
	h.in = New(Options{Store: s, Hasher: fingerprint.NewRandom()})
	h.store = s.Store
	return h, s
}

// awaiting waits until the one execution awaits an operator, and
// returns it.
func (h *harness) awaiting(t *testing.T) *record.Record {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if recs := h.store.Records(); len(recs) == 1 && recs[0].Awaiting == record.ApproverOperator {
			return recs[0]
		}
	}
	t.Fatal("no execution awaits an operator")
	return nil
}

func TestApprovalByOperator(t *testing.T) {
	for _, c := range []struct {
		to   record.State
		want string
		runs int32
	}{
		{record.Authorized, "charge #1", 1},
		{record.Refused, "Refused:", 0},
	} {
		t.Run(string(c.to), func(t *testing.T) {
			h, s := operatorHarness(t)
			a := newAsker(elicited("decline", ""))
			h.askingCall(t, a, "session:1", chargeCall)
			rec := h.awaiting(t)
			if a.count() != 0 {
				t.Fatal("the caller was answered before the operator decided")
			}
			if _, err := s.Update(t.Context(), rec.ID, record.Change{To: c.to, From: record.Accepted, By: "bob", Via: record.ApproverOperator}); err != nil {
				t.Fatal(err)
			}
			if v := view(t, a.only(t)); !strings.HasPrefix(v.Content[0].Text, c.want) || h.up.calls.Load() != c.runs || a.questions() != 0 {
				t.Errorf("got %q, %d runs, %d client questions; want %q, %d runs, none", v.Content[0].Text, h.up.calls.Load(), a.questions(), c.want, c.runs)
			}
			if !strings.Contains(a.progress[0], "activity approve "+rec.ID) {
				t.Errorf("the caller was told %q while it waited; want how to approve it", a.progress)
			}
		})
	}
	t.Run("timeout", func(t *testing.T) {
		h, _ := operatorHarness(t)
		h.pol.ApprovalTimeout = 50 * time.Millisecond
		v := view(t, h.call(t.Context(), t, chargeCall).only(t))
		if !strings.HasPrefix(v.Content[0].Text, "Refused:") || !strings.Contains(v.Content[0].Text, "no decision from an operator") {
			t.Fatalf("got %q; want a refusal for the timeout", v.Content[0].Text)
		}
	})
}

// TestApprovedThenUnknownSaysSo: an execution approved, sent and never
// answered is told as such: who approved it, and that it was not sent
// again.
func TestApprovedThenUnknownSaysSo(t *testing.T) {
	h := approving(policy.ApprovalEach, policy.ApproverClient)
	h.up.respond = func(context.Context, int, json.RawMessage) (json.RawMessage, error) {
		return nil, errors.New("connection reset")
	}
	a := newAsker(elicited("accept", ""))
	h.askingCall(t, a, "session:1", chargeCall)
	a.only(t)
	again := newAsker(elicited("accept", ""))
	h.askingCall(t, again, "session:1", chargeCall)
	v := view(t, again.only(t))
	if !strings.HasPrefix(v.Content[0].Text, "Outcome unknown:") || !strings.Contains(v.Content[0].Text, "approved by alice through client") ||
		again.questions() != 0 || h.up.calls.Load() != 1 {
		t.Errorf("the retry got %q, asked %d times, %d runs; want outcome unknown naming the approval, unasked, one run",
			v.Content[0].Text, again.questions(), h.up.calls.Load())
	}
}

// roundCall is chargeCall as a 2026-07-28 client sends it, declaring
// elicitation among its per-request capabilities; cont, if set, makes it
// the continuation that answers round with action.
func roundCall(args string, round *roundResult, action string) string {
	meta := `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"elicitation":{"form":{}}}}`
	call := `{"name":"charge_card","arguments":` + args + `,` + meta
	if round != nil {
		state, _ := json.Marshal(round.RequestState)
		call += `,"inputResponses":{"mcp-idempotent/approval":{"action":"` + action + `","content":{"note":"ok"}}},"requestState":` + string(state)
	}
	return call + `}`
}

// roundResult is what an input_required result says.
type roundResult struct {
	ResultType    string `json:"resultType"`
	InputRequests map[string]struct {
		Method string `json:"method"`
		Params struct {
			Message string `json:"message"`
		} `json:"params"`
	} `json:"inputRequests"`
	RequestState string `json:"requestState"`
}

func asRound(t *testing.T, a Answer) *roundResult {
	t.Helper()
	var r roundResult
	if a.Error != nil || json.Unmarshal(a.Result, &r) != nil || r.ResultType != "input_required" || r.RequestState == "" {
		t.Fatalf("got %s %s; want an input_required result with a requestState", a.Result, a.Error)
	}
	return &r
}

// TestApprovalInRound: a 2026-07-28 client is asked within the call's
// answer (input_required); its continuation, with the user's answer and
// the proxy's requestState, runs the call once, and what goes upstream
// is the call without the proxy's round.
func TestApprovalInRound(t *testing.T) {
	h := approving(policy.ApprovalEach, policy.ApproverClient)
	var sent json.RawMessage
	h.up.respond = func(ctx context.Context, n int, params json.RawMessage) (json.RawMessage, error) {
		sent = params
		return charged(ctx, n, params)
	}
	args := `{"card":"4242","amount":100}`
	round := asRound(t, h.call(t.Context(), t, roundCall(args, nil, "")).only(t))
	if q := round.InputRequests["mcp-idempotent/approval"]; q.Method != "elicitation/create" || !strings.Contains(q.Params.Message, "charge_card") {
		t.Fatalf("the round asks %+v; want an elicitation naming the tool", round.InputRequests)
	}
	// Sent again while its question is out: it waits for that answer,
	// and the user is not asked twice.
	retry := h.call(t.Context(), t, roundCall(args, nil, ""))
	if v := view(t, h.call(t.Context(), t, roundCall(args, round, "accept")).only(t)); v.Content[0].Text != "charge #1" {
		t.Fatalf("the continuation got %q; want the charge", v.Content[0].Text)
	}
	if v := view(t, retry.only(t)); v.Content[0].Text != "charge #1" || len(h.store.Records()) != 1 {
		t.Errorf("the retry got %q with %d records; want the one charge", v.Content[0].Text, len(h.store.Records()))
	}
	if strings.Contains(string(sent), "requestState") || strings.Contains(string(sent), "inputResponses") {
		t.Errorf("the upstream got the proxy's round: %s", sent)
	}
	// The same continuation sent again replays; the other state answers nothing new.
	if v := view(t, h.call(t.Context(), t, roundCall(args, round, "accept")).only(t)); !v.Meta.Replayed || h.up.calls.Load() != 1 {
		t.Errorf("the continuation again: replayed %v, %d runs; want a replay of the one run", v.Meta.Replayed, h.up.calls.Load())
	}
	if d := decision(t, h.onlyRecord(t), record.Authorized); d.Via != record.ApproverClient || d.Note != "ok" {
		t.Errorf("the approval is recorded as %+v; want through client, with the note", d)
	}
}

// TestApprovalInRoundChecksTheState: a continuation whose requestState
// the proxy did not mint for this caller, or whose call differs from the
// one asked about, is refused, and nothing runs.
func TestApprovalInRoundChecksTheState(t *testing.T) {
	h := approving(policy.ApprovalEach, policy.ApproverClient)
	args := `{"card":"4242","amount":100}`
	round := asRound(t, h.call(t.Context(), t, roundCall(args, nil, "")).only(t))
	forged := *round
	forged.RequestState = round.RequestState[:len(round.RequestState)-1] + "0"
	if forged.RequestState == round.RequestState {
		forged.RequestState = round.RequestState[:len(round.RequestState)-1] + "1"
	}
	for name, c := range map[string]string{
		"forged state":    roundCall(args, &forged, "accept"),
		"other arguments": roundCall(`{"card":"9999","amount":100}`, round, "accept"),
	} {
		a := h.call(t.Context(), t, c).only(t)
		if !strings.Contains(string(a.Error), "-32602") {
			t.Errorf("%s: got %s %s; want -32602", name, a.Result, a.Error)
		}
	}
	other := h.request
	req, a := other(t, roundCall(args, round, "accept"))
	req.Origin.Actor = "mallory"
	h.in.Handle(t.Context(), req)
	if ans := a.only(t); !strings.Contains(string(ans.Error), "was not minted for this caller") {
		t.Errorf("another actor's continuation got %s %s; want it refused", ans.Result, ans.Error)
	}
	if h.up.calls.Load() != 0 {
		t.Errorf("the upstream ran %d times; nothing may run", h.up.calls.Load())
	}
}

// TestApprovalInRoundFromAnotherScope: a continuation, its state good,
// that comes from another session scope (another stdio process, or serve
// since restarted) is refused saying so and what to do, never that its
// arguments differ: they are the ones asked about. Sent again as it was
// first sent, the call is asked about anew.
func TestApprovalInRoundFromAnotherScope(t *testing.T) {
	h := approving(policy.ApprovalEach, policy.ApproverClient)
	args := `{"card":"4242","amount":100}`
	round := asRound(t, h.call(t.Context(), t, roundCall(args, nil, "")).only(t))
	req, a := h.request(t, roundCall(args, round, "accept"))
	req.Origin.Scope = "session:2"
	h.in.Handle(t.Context(), req)
	ans := a.only(t)
	if !strings.Contains(string(ans.Error), "-32602") || !strings.Contains(string(ans.Error), "asked about in another session scope") ||
		strings.Contains(string(ans.Error), "session:1") {
		t.Fatalf("a continuation from another scope got %s %s; want -32602 saying so, not naming the scope", ans.Result, ans.Error)
	}
	req, a = h.request(t, roundCall(args, nil, ""))
	req.Origin.Scope = "session:2"
	h.in.Handle(t.Context(), req)
	asRound(t, a.only(t))
	if h.up.calls.Load() != 0 {
		t.Errorf("the upstream ran %d times; nothing may run", h.up.calls.Load())
	}
}

// TestApprovalInRoundDeclined: a declined round refuses the execution.
func TestApprovalInRoundDeclined(t *testing.T) {
	h := approving(policy.ApprovalEach, policy.ApproverClient)
	args := `{"card":"4242","amount":100}`
	round := asRound(t, h.call(t.Context(), t, roundCall(args, nil, "")).only(t))
	v := view(t, h.call(t.Context(), t, roundCall(args, round, "decline")).only(t))
	if !strings.HasPrefix(v.Content[0].Text, "Refused:") || h.up.calls.Load() != 0 {
		t.Fatalf("the declined continuation got %q with %d runs; want the refusal, nothing run", v.Content[0].Text, h.up.calls.Load())
	}
	if v := view(t, h.call(t.Context(), t, roundCall(args, nil, "")).only(t)); !strings.HasPrefix(v.Content[0].Text, "Refused:") {
		t.Errorf("a call again after the refusal got %q; want the refusal, not a new round", v.Content[0].Text)
	}
}

// TestApprovalJournaled: a decision has its journal line, after the
// acceptance and before the dispatch, naming who decided and through
// what.
func TestApprovalJournaled(t *testing.T) {
	j := &memJournal{}
	h := approving(policy.ApprovalEach, policy.ApproverClient).withJournal(j, nil)
	a := newAsker(elicited("accept", "fine"))
	h.askingCall(t, a, "session:1", chargeCall)
	a.only(t)
	h.settle(t)
	if got, want := j.states(), []string{"accepted", "authorized", "dispatched", "completed", "delivered"}; !slices.Equal(got, want) {
		t.Fatalf("journal states %v; want %v", got, want)
	}
	e := j.entries[1]
	if e.By != "alice" || e.Via != record.ApproverClient || e.Note != "fine" || e.Session != "session:1" {
		t.Errorf("the decision's line is %+v; want by alice through client, with the note and the session", e)
	}
}

// TestApprovalInRoundAsksAgainWhenUnread: a question whose caller's
// transport never took it (an HTTP answer no one read) is asked again of
// a call sent again: its user never saw it.
func TestApprovalInRoundAsksAgainWhenUnread(t *testing.T) {
	h := approving(policy.ApprovalEach, policy.ApproverClient)
	args := `{"card":"4242","amount":100}`
	req, a := h.request(t, roundCall(args, nil, ""))
	later := &laterAnswers{answers: a, written: make(chan func(error), 1)}
	req.Reply = later
	h.in.Handle(t.Context(), req)
	round := asRound(t, a.only(t)) // written is never called: unread
	again := asRound(t, h.call(t.Context(), t, roundCall(args, nil, "")).only(t))
	if again.RequestState != round.RequestState || len(h.store.Records()) != 1 {
		t.Errorf("the call again got state %q (first %q), %d records; want the same question of the one execution",
			again.RequestState, round.RequestState, len(h.store.Records()))
	}
}

// TestApprovalWaitIsTheClientsDeadline: a client that gives its call ten
// minutes, for a tool that waits ten minutes for an approval and has no
// retry rule, gets the ten minutes: the retry rule's deadline (a minute
// by default) bounds the proxy's waits between attempts, not a person's.
func TestApprovalWaitIsTheClientsDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := approving(policy.ApprovalEach, policy.ApproverClient)
		h.pol.ApprovalTimeout = 10 * time.Minute
		a := newAsker(func(ctx context.Context, p json.RawMessage) (json.RawMessage, error) {
			select {
			case <-time.After(2 * time.Minute): // the user decides after 2m
				return elicited("accept", "ok")(ctx, p)
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		})
		h.askingCall(t, a, "session:1", withDeadline(chargeCall, 10*60*1000))
		time.Sleep(11 * time.Minute)
		synctest.Wait()
		if v := view(t, a.only(t)); v.IsError || h.up.calls.Load() != 1 {
			t.Fatalf("accepted after 2m (client deadline 10m, approval_timeout 10m): got %q, %d runs; want the charge, one run",
				v.Content[0].Text, h.up.calls.Load())
		}
	})
}

// lostDecision is a store in memory that takes the first approval and
// loses its answer, as a connection that breaks after the commit does;
// then, with goDown set, it takes no change until down is cleared.
type lostDecision struct {
	*memstore.Store
	goDown     bool
	lost, down *atomic.Bool
}

func (s lostDecision) Update(ctx context.Context, id string, c record.Change) (*record.Record, error) {
	if s.down.Load() {
		return nil, errors.New("connection refused")
	}
	rec, err := s.Store.Update(ctx, id, c)
	if err == nil && c.To == record.Authorized && !s.lost.Swap(true) {
		s.down.Store(s.goDown)
		return nil, errors.New("connection reset by peer")
	}
	return rec, err
}

// TestLostDecisionAnswerIsSettled: the store took an approval but its
// answer was lost. Nothing was sent, so the execution is settled failed,
// at once or, if the store is down, once it answers again; it never
// stays authorized under this live process's name, every retry told
// "still in progress".
func TestLostDecisionAnswerIsSettled(t *testing.T) {
	for _, down := range []bool{false, true} {
		h := approving(policy.ApprovalEach, policy.ApproverClient)
		h.pol.AttachWindow = 200 * time.Millisecond
		s := lostDecision{Store: h.store, goDown: down, lost: new(atomic.Bool), down: new(atomic.Bool)}
		h.in = New(Options{Store: s, Hasher: fingerprint.NewRandom()})
		a := newAsker(elicited("accept", "ok"))
		h.askingCall(t, a, "session:1", chargeCall)
		if ans := a.only(t); ans.Error == nil {
			t.Fatalf("down %v: the first caller got %s; want the store's error", down, ans.Result)
		}
		h.settle(t)
		s.down.Store(false)
		h.in.settleAbandonedAll(t.Context()) // as at each lease renewal
		if rec := h.onlyRecord(t); rec.State != record.Failed {
			t.Fatalf("down %v: after the lost answer the execution is %s (owner %s); want it failed: nothing was sent", down, rec.State, rec.Owner)
		}
		retry := newAsker(elicited("accept", "ok"))
		h.askingCall(t, retry, "session:1", chargeCall)
		if v := view(t, retry.only(t)); v.IsError || h.up.calls.Load() != 1 {
			t.Errorf("down %v: a retry got %q, upstream ran %d times; want it asked and run once", down, v.Content[0].Text, h.up.calls.Load())
		}
	}
}

// lateWake is a decidingStore whose WaitDecided sees no decision before
// its context ends: a shared store's poll that comes after the approval's
// deadline, the operator's decision made in between.
type lateWake struct{ *decidingStore }

func (s lateWake) WaitDecided(ctx context.Context, id string) (*record.Record, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

// TestOperatorDecisionAtTheTimeoutIsTold: an operator's approval that the
// proxy notices only as its timeout's refusal conflicts with it is acted
// on as one noticed in time: journaled in the proxy's journal, and kept
// as the session's grant (approval: session).
func TestOperatorDecisionAtTheTimeoutIsTold(t *testing.T) {
	j := &memJournal{}
	h, s := operatorHarness(t)
	h.pol.Approval = policy.ApprovalSession
	h.pol.ApprovalTimeout = 300 * time.Millisecond
	h.in = New(Options{Store: lateWake{s}, Hasher: h.in.hasher, Journal: j})
	a := newAsker(elicited("decline", ""))
	h.askingCall(t, a, "session:1", chargeCall)
	rec := h.awaiting(t)
	if _, err := s.Update(t.Context(), rec.ID, record.Change{To: record.Authorized, From: record.Accepted, By: "bob", Via: record.ApproverOperator}); err != nil {
		t.Fatal(err)
	}
	if v := view(t, a.only(t)); v.IsError || h.up.calls.Load() != 1 {
		t.Fatalf("approved by the operator: got %q, %d runs; want the charge", v.Content[0].Text, h.up.calls.Load())
	}
	h.settle(t)
	if st := j.states(); !slices.Contains(st, "authorized") {
		t.Errorf("the proxy's journal has %v; want the operator's approval it acted on", st)
	}
	second := newAsker(elicited("decline", ""))
	h.askingCall(t, second, "session:1", `{"name":"charge_card","arguments":{"card":"1111"}}`)
	if v := view(t, second.only(t)); v.IsError {
		t.Errorf("the second execution in the session got %q; want it run under the operator's session approval", v.Content[0].Text)
	}
}
