package intercept

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/fingerprint"
	"github.com/mcp-idempotent/mcp-idempotent/internal/journal"
	"github.com/mcp-idempotent/mcp-idempotent/internal/jsonrpc"
	"github.com/mcp-idempotent/mcp-idempotent/internal/policy"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
)

// callerLines returns the attach of each of j's lines that has one, as
// "execution how/got taken", the execution's own line kind first.
func callerLines(j *memJournal) []string {
	j.mu.Lock()
	defer j.mu.Unlock()
	var got []string
	for _, e := range j.entries {
		if a := e.Attach; a != nil {
			taken := "taken"
			if !a.Taken {
				taken = "not taken: " + a.Error
			}
			got = append(got, e.Execution+" "+e.Event+e.State+" "+a.How+"/"+a.Got+" "+taken)
		}
	}
	return got
}

// TestJournalRecordsAKeyRefused: a call whose client key was used for
// another action is refused, and its line names the execution whose key
// it reused.
func TestJournalRecordsAKeyRefused(t *testing.T) {
	j := &memJournal{}
	h := newHarness(charged).withJournal(j, nil)
	const keyed = `{"name":"charge_card","arguments":{"card":"4242","amount":100},"_meta":{"mcp-idempotent/key":"K1"}}`
	h.call(t.Context(), t, keyed).only(t)
	h.settle(t)
	rec := h.onlyRecord(t)
	a := h.call(t.Context(), t, strings.Replace(keyed, `"amount":100`, `"amount":999`, 1)).only(t)
	if a.Error == nil || !strings.Contains(string(a.Error), "already used for a different call") {
		t.Fatalf("the reused key got %s %s; want it refused", a.Result, a.Error)
	}
	got := callerLines(j)
	want := rec.ID + " " + journal.Attached + " " + journal.JoinedKey + "/" + journal.GotKeyRefused + " taken"
	if len(got) != 1 || got[0] != want {
		t.Errorf("callers' lines %q; want [%q]", got, want)
	}
}

// losingStore is a store that loses every execution waited for, as one
// whose record was purged or deleted meanwhile does.
type losingStore struct{ record.Store }

func (losingStore) Wait(context.Context, string) (*record.Record, error) {
	return nil, record.ErrNotFound
}

// TestJournalRecordsALostAttach: a caller waiting for an execution whose
// record the store lost waits on, for its owner to write it again; at the
// end of its window it is told the execution is still in progress, and
// its line says so.
func TestJournalRecordsALostAttach(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, release := newHeldHarness()
		h.pol.AttachWindow = 5 * time.Second
		j := &memJournal{}
		h.in = New(Options{Store: losingStore{h.store}, Hasher: fingerprint.NewRandom(), Journal: j})
		first := h.call(t.Context(), t, chargeCall) // the upstream holds it
		synctest.Wait()
		a := h.call(t.Context(), t, chargeCall).only(t)
		if v := view(t, a); !v.IsError || !strings.Contains(v.Content[0].Text, "Still in progress") {
			t.Fatalf("the waiting caller got %s %s; want still in progress", a.Result, a.Error)
		}
		close(release)
		first.only(t)
		h.settle(t)
		synctest.Wait() // the waiter's line is written after its answer
		rec := h.onlyRecord(t)
		got := callerLines(j)
		want := rec.ID + " " + journal.Attached + " " + journal.JoinedWaited + "/" + journal.GotInProgress + " taken"
		if len(got) != 1 || got[0] != want {
			t.Errorf("callers' lines %q; want [%q]", got, want)
		}
	})
}

// TestJournalRecordsCallersOfAnUnknown: a call that finds an execution's
// outcome unknown has a line saying how it joined (a replay of the
// unknown, a re-dispatch, a status check) and what it got, whatever
// on_unknown does with it.
func TestJournalRecordsCallersOfAnUnknown(t *testing.T) {
	const (
		done    = `{"content":[{"type":"text","text":"done"}],"structuredContent":{"status":"succeeded"}}`
		notDone = `{"content":[{"type":"text","text":"no"}],"structuredContent":{"status":"not_found"}}`
		running = `{"content":[{"type":"text","text":"?"}],"structuredContent":{"status":"running"}}`
	)
	for _, tc := range []struct {
		name      string
		on        policy.OnUnknown
		status    string // the status tool's result; "" fails it
		dies      int    // charge_card sends that die, from the first
		calls     int    // after the first; 0 means 1
		line, how string // of the last call's line
		got       string
	}{
		{"block", policy.Block, "", 1, 0, "attached", journal.JoinedReplay, journal.GotUnknown},
		{"retry", policy.Retry, "", 1, 0, "delivered", journal.JoinedRedispatch, journal.GotAnswer},
		{"retry, dies again", policy.Retry, "", 2, 0, "attached", journal.JoinedRedispatch, journal.GotUnknown},
		{"recover, done", policy.Recover, done, 1, 0, "delivered", journal.JoinedRecover, journal.GotAnswer},
		{"recover, no answer", policy.Recover, "", 1, 0, "attached", journal.JoinedRecover, journal.GotUnknown},
		{"recover, not done", policy.Recover, notDone, 1, 0, "delivered", journal.JoinedRecover, journal.GotAnswer},
		{"recover, still running", policy.Recover, running, 1, 0, "attached", journal.JoinedRecover, journal.GotUnknown},
		// The second call's re-dispatch dies too; the third is not
		// sent again.
		{"recover, not done, sent again before", policy.Recover, notDone, 2, 2, "attached", journal.JoinedRecover, journal.GotUnknown},
	} {
		t.Run(tc.name, func(t *testing.T) {
			charges := 0
			j := &memJournal{}
			h := newHarness(func(ctx context.Context, n int, p json.RawMessage) (json.RawMessage, error) {
				if strings.Contains(string(p), `"get_status"`) {
					if tc.status == "" {
						return nil, &jsonrpc.Error{Code: -32603, Message: "status unavailable"}
					}
					return json.RawMessage(tc.status), nil
				}
				if charges++; charges <= tc.dies {
					return nil, errors.New("the upstream exited before answering")
				}
				return charged(ctx, n, p)
			}).withJournal(j, nil)
			h.pol.OnUnknown = tc.on
			h.pol.Recover = &policy.RecoverRule{Tool: "get_status"}
			for range 1 + max(tc.calls, 1) {
				h.call(t.Context(), t, chargeCall).only(t) // the first: outcome unknown
				h.settle(t)
			}
			rec := h.onlyRecord(t)
			want := rec.ID + " " + tc.line + " " + tc.how + "/" + tc.got + " taken"
			if got := callerLines(j); len(got) != max(tc.calls, 1) || got[len(got)-1] != want {
				t.Errorf("callers' lines %q; want one for each call after the first, the last %q", got, want)
			}
		})
	}
}

// noRedispatchStore is a store that refuses to record a re-dispatch.
type noRedispatchStore struct{ record.Store }

func (s noRedispatchStore) Update(ctx context.Context, id string, c record.Change) (*record.Record, error) {
	if c.From == record.Unknown && c.To == record.Dispatched {
		return nil, errors.New("the store is down")
	}
	return s.Store.Update(ctx, id, c)
}

// TestJournalRecordsARedispatchNotSent: a re-dispatch that does not go
// (its account has no room before the deadline, or the store refuses
// its dispatch) leaves the outcome unknown, and its caller's line says
// so.
func TestJournalRecordsARedispatchNotSent(t *testing.T) {
	for _, tc := range []struct {
		name    string
		account bool
		store   func(record.Store) record.Store
	}{
		{"no room in the account", true, func(s record.Store) record.Store { return s }},
		{"the store refuses the dispatch", false, func(s record.Store) record.Store { return noRedispatchStore{s} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j := &memJournal{}
			h := newHarness(dies(charged))
			opts := Options{Store: tc.store(h.store), Hasher: fingerprint.NewRandom(), Journal: j}
			if tc.account {
				opts.Accounts = map[string]policy.Account{"bank": {Name: "bank", Rate: 0.001, Burst: 1}}
				h.pol.Retry = &policy.RetryRule{MaxAttempts: 1, Deadline: time.Second, Account: "bank"}
			}
			h.in = New(opts)
			h.pol.OnUnknown = policy.Retry
			h.call(t.Context(), t, chargeCall).only(t) // outcome unknown
			h.settle(t)
			v := view(t, h.call(t.Context(), t, chargeCall).only(t))
			h.settle(t)
			if !strings.Contains(v.Content[len(v.Content)-1].Text, "not sent again") {
				t.Fatalf("the second call got %+v; want outcome unknown, not sent again", v)
			}
			rec := h.onlyRecord(t)
			want := rec.ID + " attached " + journal.JoinedRedispatch + "/" + journal.GotUnknown + " taken"
			if got := callerLines(j); len(got) != 1 || got[0] != want {
				t.Errorf("callers' lines %q; want [%q]", got, want)
			}
		})
	}
}

// TestJournalRecordsAReplayNeverRead: over a transport that learns only
// later whether the caller read its answer, a replay has its delivered
// line once it is read, and an attached line, not taken, once its
// transport says it never will be, with the reason it gives.
func TestJournalRecordsAReplayNeverRead(t *testing.T) {
	j := &memJournal{}
	h := newHarness(charged).withJournal(j, nil)
	h.call(t.Context(), t, chargeCall).only(t)
	h.settle(t)
	rec := h.onlyRecord(t)
	replay := func(err error) {
		req, _ := h.request(t, chargeCall)
		a := &laterAnswers{answers: newAnswers(), written: make(chan func(error), 1)}
		req.Reply = a
		h.in.Handle(t.Context(), req)
		a.only(t)
		(<-a.written)(err)
		h.settle(t)
	}
	replay(errBrokenPipe) // the transport's reason, whatever it is
	replay(nil)
	want := []string{
		rec.ID + " attached replay/answer not taken: " + errBrokenPipe.Error(),
		rec.ID + " delivered replay/answer taken",
	}
	if got := callerLines(j); !slices.Equal(got, want) {
		t.Errorf("callers' lines %q; want %q", got, want)
	}
}

// TestJournalRecordsACallerThatLeft: a caller that joined an execution
// and cancelled its call before its answer has a line, not taken: one
// that left while it waited, and one that left during a status check.
func TestJournalRecordsACallerThatLeft(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		hold, holdStatus := make(chan struct{}), make(chan struct{})
		charges := 0
		j := &memJournal{}
		h := newHarness(func(ctx context.Context, n int, p json.RawMessage) (json.RawMessage, error) {
			if strings.Contains(string(p), `"get_status"`) {
				<-holdStatus
				return nil, errors.New("the status tool is down")
			}
			<-hold
			if charges++; charges == 1 {
				return nil, errors.New("the upstream exited before answering")
			}
			return charged(ctx, n, p)
		}).withJournal(j, nil)
		h.pol.OnUnknown = policy.Recover
		h.pol.Recover = &policy.RecoverRule{Tool: "get_status"}
		first := h.call(t.Context(), t, chargeCall)
		synctest.Wait()
		ctx, cancel := context.WithCancel(t.Context())
		h.call(ctx, t, chargeCall) // waits for the first
		synctest.Wait()
		cancel()
		synctest.Wait()
		close(hold)
		first.only(t) // outcome unknown
		h.settle(t)
		ctx, cancel = context.WithCancel(t.Context())
		h.call(ctx, t, chargeCall) // a status check
		synctest.Wait()
		cancel()
		close(holdStatus)
		h.settle(t)
		synctest.Wait()
		id := h.onlyRecord(t).ID
		want := []string{
			id + " attached waited/in_progress not taken: " + ErrCallerLeft.Error(),
			id + " attached recover/unknown not taken: " + ErrCallerLeft.Error(),
		}
		if got := callerLines(j); !slices.Equal(got, want) {
			t.Errorf("callers' lines %q; want %q", got, want)
		}
	})
}

// TestJournalOrphan: an orphan that a store's purge settled, which no
// call met, is journaled by the process whose store settled it, naming
// itself as the writer and the owner that went away in the note.
func TestJournalOrphan(t *testing.T) {
	j := &memJournal{}
	h := newHarness(charged).withJournal(j, nil)
	at := time.Now()
	o := &record.Record{ID: "exe_gone", Tool: "charge_card", State: record.Unknown, Owner: "proxy-gone", Attempts: 1,
		History: []record.Transition{{State: record.Accepted, At: at}, {State: record.Dispatched, At: at},
			{State: record.Unknown, At: at, Note: "owner proxy-gone went away after recording its dispatch, before any answer: it may or may not have sent it"}}}
	h.in.JournalOrphan(o)
	if len(j.entries) != 1 {
		t.Fatalf("the journal has %d lines; want the orphan's", len(j.entries))
	}
	e := j.entries[0]
	if e.Execution != "exe_gone" || e.State != "unknown" || !strings.Contains(e.Note, "proxy-gone went away") ||
		e.Writer.Owner != h.in.owner || e.Session != "" {
		t.Errorf("the orphan's line is %+v; want it unknown, written by this process, the owner gone in the note", e)
	}
}

// noDeliveryStore is a store that cannot record a delivery, as one that
// is down for a moment is.
type noDeliveryStore struct{ record.Store }

func (s noDeliveryStore) Update(ctx context.Context, id string, c record.Change) (*record.Record, error) {
	if c.To == record.Delivered {
		return nil, errors.New("the store is down")
	}
	return s.Store.Update(ctx, id, c)
}

// TestJournalRecordsAReplayWhoseDeliveryTheStoreRefused: a caller
// that joined an execution and took its replayed answer has its line in
// the journal, even when the store could not record the delivery: the
// journal has a line for each attach, with what the caller got.
func TestJournalRecordsAReplayWhoseDeliveryTheStoreRefused(t *testing.T) {
	j := &memJournal{}
	h := newHarness(charged)
	h.in = New(Options{Store: noDeliveryStore{h.store}, Hasher: fingerprint.NewRandom(), Journal: j})
	h.call(t.Context(), t, chargeCall).only(t)
	h.settle(t)
	a := h.call(t.Context(), t, chargeCall).only(t) // a replay: the caller takes the answer
	h.settle(t)
	if a.Result == nil {
		t.Fatalf("the replay got %s; want the stored result", a.Error)
	}
	rec := h.onlyRecord(t)
	if got := callerLines(j); len(got) != 1 {
		t.Errorf("callers' lines %q; want one line for the replay of %s, which took the answer", got, rec.ID)
	}
}

// cancelOnMatchStore cancels, once set, the context of the call whose
// reservation matches an execution already there, right after the store
// answered it: the caller cancels as the proxy decides what it joined.
type cancelOnMatchStore struct {
	record.Store
	cancel *context.CancelFunc
}

func (s cancelOnMatchStore) Reserve(ctx context.Context, r *record.Record, o record.ReserveOptions) (*record.Record, bool, error) {
	rec, won, err := s.Store.Reserve(ctx, r, o)
	if !won && *s.cancel != nil {
		(*s.cancel)()
	}
	return rec, won, err
}

// TestJournalRecordsAQuestionCallerThatLeft: a call that joins an
// execution whose client approval is being asked in a round, and whose
// caller cancels before the question is written to it, has its line, not
// taken, as a caller that left while it waited has.
func TestJournalRecordsAQuestionCallerThatLeft(t *testing.T) {
	j := &memJournal{}
	h := approving(policy.ApprovalEach, policy.ApproverClient)
	var cancel context.CancelFunc
	h.in = New(Options{Store: cancelOnMatchStore{h.store, &cancel}, Hasher: fingerprint.NewRandom(), Journal: j})
	args := `{"card":"4242","amount":100}`
	req, a := h.request(t, roundCall(args, nil, ""))
	req.Reply = &laterAnswers{answers: a, written: make(chan func(error), 1)} // not yet taken
	h.in.Handle(t.Context(), req)
	asRound(t, a.only(t))

	ctx, c := context.WithCancel(t.Context())
	cancel = c
	req2, _ := h.request(t, roundCall(args, nil, ""))
	h.in.Handle(ctx, req2) // joins the execution, and its caller cancels
	h.settle(t)
	rec := h.onlyRecord(t)
	want := rec.ID + " attached waited/question not taken: " + ErrCallerLeft.Error()
	if got := callerLines(j); len(got) != 1 || got[0] != want {
		t.Errorf("callers' lines %q; want [%q]", got, want)
	}
}

// TestJournalRecordsAnAttachToAQuestion: a caller that waited for a
// round (2026-07-28 multi-round request) that ended in input_required
// got the tool's question, not an error, and its line says so.
func TestJournalRecordsAnAttachToAQuestion(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		h := newHarness(func(context.Context, int, json.RawMessage) (json.RawMessage, error) {
			<-release
			return json.RawMessage(`{"resultType":"input_required","inputRequests":{"confirm":{"method":"elicitation/create"}},"requestState":"s1"}`), nil
		})
		j := &memJournal{}
		h.withJournal(j, nil)
		first := h.call(t.Context(), t, chargeCall) // the upstream holds it
		synctest.Wait()
		second := h.call(t.Context(), t, chargeCall)
		synctest.Wait()
		close(release)
		for _, a := range []*answers{first, second} {
			if got := a.only(t); !strings.Contains(string(got.Result), "input_required") {
				t.Fatalf("a caller got %s %s; want the round's input_required", got.Result, got.Error)
			}
		}
		h.settle(t)
		rec := h.onlyRecord(t)
		want := rec.ID + " " + journal.Attached + " " + journal.JoinedWaited + "/" + journal.GotInputRequired + " taken"
		if got := callerLines(j); len(got) != 1 || got[0] != want {
			t.Errorf("callers' lines %q; want [%q]", got, want)
		}
	})
}
