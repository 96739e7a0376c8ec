package intercept

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/fingerprint"
	"github.com/mcp-idempotent/mcp-idempotent/internal/journal"
	"github.com/mcp-idempotent/mcp-idempotent/internal/jsonrpc"
	"github.com/mcp-idempotent/mcp-idempotent/internal/policy"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
	"github.com/mcp-idempotent/mcp-idempotent/internal/retry"
)

// memJournal keeps entries in memory, or fails every Record with err.
type memJournal struct {
	mu      sync.Mutex // protects entries
	entries []journal.Entry
	err     error
}

func (j *memJournal) Record(e journal.Entry) error {
	if j.err != nil {
		return j.err
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	j.entries = append(j.entries, e)
	return nil
}

func (j *memJournal) states() []string {
	j.mu.Lock()
	defer j.mu.Unlock()
	var s []string
	for _, e := range j.entries {
		s = append(s, e.State)
	}
	return s
}

// withJournal rebuilds h's interceptor with a journal and a logger.
func (h *harness) withJournal(j Journal, log *slog.Logger) *harness {
	h.in = New(Options{Store: h.store, Hasher: fingerprint.NewRandom(), Journal: j, Logger: log})
	return h
}

// settle waits until every dispatch has settled and been answered, so its
// last transitions are in the journal.
func (h *harness) settle(t *testing.T) {
	t.Helper()
	if err := h.in.Wait(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// TestJournalRecordsTransitions: three identical calls are one execution
// in the journal: accepted, dispatched, completed, and delivered once for
// each caller that took the result, with the arguments hashed and the
// result redacted by default.
func TestJournalRecordsTransitions(t *testing.T) {
	j := &memJournal{}
	h := newHarness(charged).withJournal(j, nil)
	for range 3 {
		h.call(t.Context(), t, chargeCall).only(t)
		h.settle(t)
	}

	if got, want := j.states(), []string{"accepted", "dispatched", "completed", "delivered", "delivered", "delivered"}; !slices.Equal(got, want) {
		t.Fatalf("journal states %q; want %q", got, want)
	}
	rec := h.onlyRecord(t)
	for i, e := range j.entries {
		if e.Execution != rec.ID || e.Tool != "charge_card" || e.Actor != "alice" || e.Fingerprint != rec.Fingerprint ||
			e.Upstream != "stdio:bank" || e.Request != "test" || e.Time.IsZero() || e.Writer.Owner != h.in.owner {
			t.Errorf("entry %d (%s) does not name the execution, its action, its caller and the proxy: %+v", i, e.State, e)
		}
		if (e.Arguments != nil) != (e.State == "accepted") || (e.Result != nil) != (e.State == "completed") {
			t.Errorf("entry %d (%s): arguments %+v, result %+v; want the arguments with acceptance, the result with completion", i, e.State, e.Arguments, e.Result)
		}
	}
	if e := j.entries[0]; e.Attempt != 0 {
		// The memory store records the dispatch with the reservation:
		// the accepted entry still shows the record before it.
		t.Errorf("accepted entry: attempt %d, want 0", e.Attempt)
	}
	if e := j.entries[1]; e.Attempt != 1 {
		t.Errorf("dispatched entry: attempt %d, want 1", e.Attempt)
	}
	args := j.entries[0].Arguments
	if len(args.HMAC) != 64 || args.Clear != nil || args.Redacted {
		t.Errorf("arguments %+v; want only a hex HMAC (hash is the default)", args)
	}
	if strings.Contains(args.HMAC, rec.Fingerprint) {
		t.Error("the arguments' hash is the fingerprint; they must differ")
	}
	if res := j.entries[2].Result; !res.Redacted || res.Clear != nil || res.HMAC != "" {
		t.Errorf("result %+v; want redacted (the default)", res)
	}
}

// TestJournalNamesEachCallersRequest: every line names, apart, the
// session and the JSON-RPC id of the request that made it, so that the
// deliveries of callers in other sessions are told from the first
// caller's lines.
func TestJournalNamesEachCallersRequest(t *testing.T) {
	j := &memJournal{}
	h := newHarness(charged).withJournal(j, nil)
	callers := []struct{ session, id string }{{"session:a", "1"}, {"session:b", `"x"`}, {"session:c", "7"}}
	for _, c := range callers {
		req, a := h.request(t, chargeCall)
		req.Origin.Session, req.ID = c.session, json.RawMessage(c.id)
		h.in.Handle(t.Context(), req)
		a.only(t)
		h.settle(t)
	}
	// accepted, dispatched, completed and delivered for the first
	// caller; delivered (a replay) for each of the others.
	want := []int{0, 0, 0, 0, 1, 2}
	if len(j.entries) != len(want) {
		t.Fatalf("journal states %q; want %d lines", j.states(), len(want))
	}
	for i, e := range j.entries {
		c := callers[want[i]]
		if e.Session != c.session || string(e.RequestID) != c.id {
			t.Errorf("line %d (%s): session %q, request id %s; want %q, %s", i, e.State, e.Session, e.RequestID, c.session, c.id)
		}
	}
}

// refusing is a caller whose transport takes no answer.
type refusing struct{}

func (refusing) Reply(Answer) error { return errors.New("the client is gone") }

// TestJournalRecordsEachAttach: each caller that joined an execution it
// did not start has a line saying how it joined, what it got, and whether
// its transport took it; the caller that started it has none.
func TestJournalRecordsEachAttach(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, release := newHeldHarness()
		j := &memJournal{}
		h.withJournal(j, nil)
		h.callConcurrently(t, 3, release)
		h.settle(t)
		synctest.Wait()
		h.call(t.Context(), t, chargeCall).only(t) // a replay
		req, _ := h.request(t, chargeCall)
		req.Reply = refusing{}
		h.in.Handle(t.Context(), req)
		synctest.Wait()

		var got []string
		for _, e := range j.entries {
			switch a := e.Attach; {
			case a != nil:
				got = append(got, fmt.Sprintf("%v %s/%s/%s taken=%v %s", e.Execution == "", e.Event+e.State, a.How, a.Got, a.Taken, a.Error))
			case e.State == "delivered":
				got = append(got, "delivered, no attach")
			}
		}
		slices.Sort(got)
		want := []string{
			"delivered, no attach",
			"false attached/replay/answer taken=false the client is gone",
			"false delivered/replay/answer taken=true ",
			"false delivered/waited/answer taken=true ",
			"false delivered/waited/answer taken=true ",
		}
		if !slices.Equal(got, want) {
			t.Errorf("journal lines of the callers:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	})
}

// TestJournalRecordsAnAttachStillInProgress: a caller whose attach window
// passed has a line saying it was told the execution is still in
// progress.
func TestJournalRecordsAnAttachStillInProgress(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, release := newHeldHarness()
		j := &memJournal{}
		h.withJournal(j, nil)
		h.pol.AttachWindow = 5 * time.Second
		first := h.call(t.Context(), t, chargeCall) // the upstream holds it
		h.call(t.Context(), t, chargeCall).only(t)
		close(release)
		first.only(t)
		h.settle(t)
		// The waiter's line is written after its answer, on the
		// goroutine it waited in.
		synctest.Wait()
		var attached []journal.Attach
		for _, e := range j.entries {
			if e.Event == journal.Attached {
				attached = append(attached, *e.Attach)
			}
		}
		want := []journal.Attach{{How: journal.JoinedWaited, Got: journal.GotInProgress, Taken: true}}
		if !slices.Equal(attached, want) {
			t.Errorf("attached lines %+v; want %+v", attached, want)
		}
	})
}

// TestNotesKeepNoAnswer: what the upstream answered stays out of the
// notes the store and the journal keep, whatever the answer: an upstream
// error's message and a malformed answer's bytes are what the tool said,
// which the journal redacts by default.
func TestNotesKeepNoAnswer(t *testing.T) {
	for _, tc := range []struct {
		name   string
		answer func(context.Context, int, json.RawMessage) (json.RawMessage, error)
		state  record.State
	}{
		{"an upstream error", func(context.Context, int, json.RawMessage) (json.RawMessage, error) {
			return nil, &jsonrpc.Error{Code: -32000, Message: "card 4111111111111111 declined"}
		}, record.Failed},
		{"a malformed answer", func(context.Context, int, json.RawMessage) (json.RawMessage, error) {
			return nil, retry.Malformed("a result with both result and error", []byte(`{"card":"4111111111111111"}`))
		}, record.Unknown},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j := &memJournal{}
			h := newHarness(tc.answer).withJournal(j, nil)
			h.call(t.Context(), t, chargeCall).only(t)
			h.settle(t)
			rec := h.onlyRecord(t)
			if rec.State != tc.state {
				t.Fatalf("state %s; want %s", rec.State, tc.state)
			}
			for _, tr := range rec.History {
				if strings.Contains(tr.Note, "4111") {
					t.Errorf("the record's %s note is %q; want no part of the answer", tr.State, tr.Note)
				}
			}
			for _, e := range j.entries {
				if strings.Contains(e.Note, "4111") {
					t.Errorf("the journal's %s note is %q; want no part of the answer", e.State, e.Note)
				}
			}
		})
	}
}

// TestJournalDeliveredForEachCaller: callers that attached to one
// execution while it ran each have their delivery in the journal, however
// their answers race with the first caller's.
func TestJournalDeliveredForEachCaller(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, release := newHeldHarness()
		j := &memJournal{}
		h.withJournal(j, nil)
		const callers = 5
		h.callConcurrently(t, callers, release)
		h.settle(t)
		// A caller attached to the execution has its answer before its
		// delivery is journaled, on the goroutine it waited in.
		synctest.Wait()
		delivered := 0
		for _, s := range j.states() {
			if s == "delivered" {
				delivered++
			}
		}
		if delivered != callers {
			t.Fatalf("journal states %q: %d deliveries; want one for each of the %d callers", j.states(), delivered, callers)
		}
	})
}

// slowJournal is a memJournal that takes a second to write a completed
// line, as a journal on a busy disk may.
type slowJournal struct{ memJournal }

func (j *slowJournal) Record(e journal.Entry) error {
	if e.State == "completed" {
		time.Sleep(time.Second)
	}
	return j.memJournal.Record(e)
}

// TestJournalKeepsTheStoresOrder: callers attached to an execution are
// woken when the store takes its completion, before the journal has it;
// their deliveries are still journaled after the completion.
func TestJournalKeepsTheStoresOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, release := newHeldHarness()
		j := &slowJournal{}
		h.withJournal(j, nil)
		h.callConcurrently(t, 3, release)
		h.settle(t)
		synctest.Wait()
		want := []string{"accepted", "dispatched", "completed", "delivered", "delivered", "delivered"}
		if got := j.states(); !slices.Equal(got, want) {
			t.Fatalf("journal states %q; want %q", got, want)
		}
	})
}

// TestJournalValues: each mode shows a value as it says; a hash is blind
// to spelling, keyed, and differs between arguments and results.
func TestJournalValues(t *testing.T) {
	in := New(Options{Store: nil, Hasher: fingerprint.NewRandom()})
	other := New(Options{Store: nil, Hasher: fingerprint.NewRandom()})
	a := json.RawMessage(`{"card":"4242","amount":100}`)
	b := json.RawMessage(`{ "amount": 1e2, "card": "4242" }`)
	tests := []struct {
		name string
		mode policy.JournalMode
		what string
		want journal.Value
	}{
		{"clear", policy.JournalClear, "arguments", journal.Value{Clear: a}},
		{"redact", policy.JournalRedact, "result", journal.Value{Redacted: true}},
		{"unset arguments are hashed", "", "arguments", journal.Value{HMAC: in.journalValue(policy.JournalHash, "arguments", a).HMAC}},
		{"an unset result is redacted", "", "result", journal.Value{Redacted: true}},
	}
	for _, tt := range tests {
		got := in.journalValue(tt.mode, tt.what, a)
		if !bytes.Equal(got.Clear, tt.want.Clear) || got.HMAC != tt.want.HMAC || got.Redacted != tt.want.Redacted {
			t.Errorf("%s: %+v, want %+v", tt.name, got, tt.want)
		}
	}
	ha := in.journalValue(policy.JournalHash, "arguments", a).HMAC
	switch {
	case ha != in.journalValue(policy.JournalHash, "arguments", b).HMAC:
		t.Error("two spellings of the same arguments hash differently")
	case ha == in.journalValue(policy.JournalHash, "result", a).HMAC:
		t.Error("the same bytes hash alike as arguments and as a result")
	case ha == other.journalValue(policy.JournalHash, "arguments", a).HMAC:
		t.Error("the hash is not keyed: two secrets give one hash")
	}
	if v := in.journalValue(policy.JournalHash, "arguments", json.RawMessage(`{"n":1e999999}`)); !v.Redacted {
		t.Errorf("a value that cannot be canonicalised: %+v; want it redacted", v)
	}
}

// TestJournalClearPolicy: a tool whose policy says clear shows its
// arguments and result as they came.
func TestJournalClearPolicy(t *testing.T) {
	j := &memJournal{}
	h := newHarness(charged).withJournal(j, nil)
	h.pol.Journal = policy.JournalRule{Arguments: policy.JournalClear, Result: policy.JournalClear}
	h.call(t.Context(), t, chargeCall).only(t)
	h.settle(t)
	if got := j.entries[0].Arguments; got == nil || string(got.Clear) != `{"card":"4242","amount":100}` {
		t.Errorf("arguments %+v; want them in clear", got)
	}
	if got := j.entries[2].Result; got == nil || !strings.Contains(string(got.Clear), "charge #1") {
		t.Errorf("result %+v; want it in clear", got)
	}
}

// TestJournalFailureKeepsTheCall: a journal that cannot be written is
// logged at error level, and the call is answered as if it were not there.
func TestJournalFailureKeepsTheCall(t *testing.T) {
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelError}))
	h := newHarness(charged).withJournal(&memJournal{err: errors.New("disk full")}, log)
	v := view(t, h.call(t.Context(), t, chargeCall).only(t))
	h.settle(t)
	if v.Content[0].Text != "charge #1" {
		t.Errorf("the call got %q; want charge #1", v.Content[0].Text)
	}
	if n := strings.Count(logs.String(), "level=ERROR msg=\"writing the activity journal"); n != 4 {
		t.Errorf("%d journal errors logged; want 4 (one per transition):\n%s", n, logs.String())
	}
	if !strings.Contains(logs.String(), "disk full") {
		t.Errorf("the log does not say why:\n%s", logs.String())
	}
}

// TestJournalFileVerifies: the interceptor's entries, written to a real
// journal, make a chain that verifies.
func TestJournalFileVerifies(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal.jsonl")
	w, err := journal.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(charged).withJournal(w, nil)
	for _, p := range []string{chargeCall, chargeCall, `{"name":"charge_card","arguments":{"card":"5555","amount":7}}`} {
		h.call(t.Context(), t, p).only(t)
		h.settle(t)
	}
	w.Close()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if n, err := journal.Verify(f); n != 9 || err != nil {
		t.Errorf("Verify = %d, %v; want 9 lines (two executions of four transitions, and the replay's delivery), nil", n, err)
	}
}

// TestUpstreamArgumentsNotShown: a command's arguments, which may hold a
// credential, are in the fingerprint but not in the record, the journal
// or an answer: those show the upstream's name and a keyed hash of its
// identity, which still tells two commands apart.
func TestUpstreamArgumentsNotShown(t *testing.T) {
	const secret = "sk_live_51Hx"
	j := &memJournal{}
	h := newHarness(func(context.Context, int, json.RawMessage) (json.RawMessage, error) {
		return nil, errors.New("the upstream exited before answering")
	}).withJournal(j, nil)
	ids := []string{"stdio:server --api-key " + secret + " (in /srv)", "stdio:server --api-key other (in /srv)"}
	for _, id := range ids {
		req, a := h.request(t, chargeCall)
		req.Origin.UpstreamID, req.Origin.UpstreamName = id, "stdio:server (in /srv)"
		h.in.Handle(t.Context(), req)
		if v := view(t, a.only(t)); !strings.HasPrefix(v.Content[0].Text, "Outcome unknown:") || strings.Contains(v.Content[0].Text, secret) {
			t.Errorf("the caller got %q; want outcome unknown, naming no argument", v.Content[0].Text)
		}
		h.settle(t)
	}
	recs := h.store.Records()
	if len(recs) != 2 || recs[0].Upstream == recs[1].Upstream {
		t.Fatalf("records %d, upstreams %q; want two executions, told apart", len(recs), []string{recs[0].Upstream, recs[len(recs)-1].Upstream})
	}
	for _, rec := range recs {
		if strings.Contains(rec.Upstream, secret) || !strings.HasPrefix(rec.Upstream, "stdio:server (in /srv) ref:") {
			t.Errorf("record upstream %q; want the name and a keyed reference", rec.Upstream)
		}
	}
	for _, e := range j.entries {
		if strings.Contains(e.Upstream, secret) {
			t.Errorf("journal entry %s shows upstream %q", e.State, e.Upstream)
		}
	}
}

// TestJournalTakeover: a proxy that settles another's execution whose
// lease lapsed journals that transition, once, as its own: when a wait
// for it outlives the lease, and when a reservation meets it.
func TestJournalTakeover(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, release := newHeldHarness()
		hasher := fingerprint.NewRandom()
		dead := New(Options{Store: h.store, Hasher: hasher, Owner: "proxy-dead", Lease: 10 * time.Second})
		j := &memJournal{}
		taker := New(Options{Store: h.store, Hasher: hasher, Owner: "proxy-taker", Journal: j, Lease: 10 * time.Second})
		const other = `{"name":"charge_card","arguments":{"card":"4242","amount":200}}`

		// Sent by a proxy that stops renewing its lease: it died.
		h.in = dead
		h.call(t.Context(), t, chargeCall)
		synctest.Wait()
		h.in = taker
		waited := h.call(t.Context(), t, chargeCall) // attaches, and waits past the lease
		time.Sleep(11 * time.Second)
		waited.only(t)

		h.in = dead
		h.call(t.Context(), t, other)
		time.Sleep(11 * time.Second)
		h.in = taker
		h.call(t.Context(), t, other).only(t) // its reservation meets the orphan

		close(release)
		synctest.Wait()
		var took []journal.Entry
		for _, e := range j.entries {
			if strings.Contains(e.Note, "proxy-dead went away") {
				took = append(took, e)
			}
		}
		if len(took) != 2 || took[0].Execution == took[1].Execution {
			t.Fatalf("the taker journaled %d takeovers: %+v; want one of each execution", len(took), took)
		}
		for _, e := range took {
			if e.State != "unknown" || e.Writer.Owner != "proxy-taker" || e.Tool != "charge_card" || e.Request != "test" {
				t.Errorf("takeover line %+v; want the execution unknown, written by proxy-taker for the call that met it", e)
			}
		}
	})
}

// heldJournal holds each line recorded once hold is set until release is
// closed, telling held when the first waits.
type heldJournal struct {
	memJournal
	hold          atomic.Bool
	held, release chan struct{}
	once          sync.Once
}

func (j *heldJournal) Record(e journal.Entry) error {
	if j.hold.Load() {
		j.once.Do(func() { close(j.held) })
		<-j.release
	}
	return j.memJournal.Record(e)
}

// TestWaitWaitsForALineAfterTheAnswer: a caller answered on the goroutine
// that called Handle has its line written after its answer; Wait, which
// a session that has ended calls before the proxy exits, waits for it.
func TestWaitWaitsForALineAfterTheAnswer(t *testing.T) {
	j := &heldJournal{held: make(chan struct{}), release: make(chan struct{})}
	h := newHarness(charged).withJournal(j, nil)
	h.call(t.Context(), t, chargeCall).only(t)
	h.settle(t)
	j.hold.Store(true)
	go h.call(t.Context(), t, chargeCall) // a replay, answered at once
	<-j.held
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	if err := h.in.Wait(ctx); err == nil {
		t.Error("Wait returned while a replay's line was still being written")
	}
	close(j.release)
	h.settle(t)
}
