package intercept

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/jsonrpc"
	"github.com/mcp-idempotent/mcp-idempotent/internal/mcp"
	"github.com/mcp-idempotent/mcp-idempotent/internal/policy"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
	"github.com/mcp-idempotent/mcp-idempotent/internal/retry"
)

// busyThen answers "429 rate limited" to the first busy calls, then
// charges.
func busyThen(busy int) func(context.Context, int, json.RawMessage) (json.RawMessage, error) {
	return func(ctx context.Context, n int, p json.RawMessage) (json.RawMessage, error) {
		if n <= busy {
			return json.RawMessage(`{"content":[{"type":"text","text":"429: rate limited, try later"}],"isError":true,"structuredContent":{"status":429,"retry_after_seconds":2}}`), nil
		}
		return charged(ctx, n, p)
	}
}

func retryRule(safe bool) *policy.RetryRule {
	return &policy.RetryRule{MaxAttempts: 4, Base: 100 * time.Millisecond, Cap: time.Second,
		Transient: []policy.ResultMatch{{Text: regexp.MustCompile(`(?i)\b429\b`), SafeToResend: safe}}}
}

// TestRetriesLeaveTheRedispatch: sends a retry rule makes of a transient
// answer are not on_unknown's one re-send: an execution retried once,
// then lost, is still re-sent once under on_unknown retry.
func TestRetriesLeaveTheRedispatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(func(ctx context.Context, n int, p json.RawMessage) (json.RawMessage, error) {
			switch n {
			case 1:
				return busyThen(1)(ctx, n, p)
			case 2:
				return nil, errors.New("the upstream exited before answering")
			}
			return charged(ctx, n, p)
		})
		h.pol.Retry = retryRule(true)
		h.pol.OnUnknown = policy.Retry
		if v := view(t, h.call(t.Context(), t, chargeCall).only(t)); !strings.HasPrefix(v.Content[0].Text, "Outcome unknown:") {
			t.Fatalf("the first call got %+v; want outcome unknown after its retry was lost", v)
		} else if text := v.Content[0].Text; !strings.Contains(text, "attempted 2 times") || strings.Contains(text, "not sent again") {
			// Told of one send, a caller would look for one effect.
			t.Fatalf("the first call was told %q; want it told of both attempts", text)
		}
		if v := view(t, h.call(t.Context(), t, chargeCall).only(t)); v.Content[0].Text != "charge #3" {
			t.Fatalf("the call after it got %+v; want on_unknown's re-send", v)
		}
	})
}

// TestRedispatchAttemptsAreNumberedAsTheRecordCounts: a retry of an
// on_unknown re-send is noted with its number among the execution's
// attempts, the one activity show and the journal print beside it, not
// its number within the call that re-sent it.
func TestRedispatchAttemptsAreNumberedAsTheRecordCounts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(func(ctx context.Context, n int, p json.RawMessage) (json.RawMessage, error) {
			switch n {
			case 1:
				return nil, errors.New("the upstream exited before answering")
			case 2:
				return busyThen(2)(ctx, n, p)
			}
			return charged(ctx, n, p)
		})
		h.pol.Retry = retryRule(true)
		h.pol.OnUnknown = policy.Retry
		h.call(t.Context(), t, chargeCall).only(t) // unknown after attempt 1
		if v := view(t, h.call(t.Context(), t, chargeCall).only(t)); v.Content[0].Text != "charge #3" {
			t.Fatalf("the re-send got %+v; want its retry's answer", v)
		}
		h.in.Wait(t.Context())
		rec := h.onlyRecord(t)
		var notes []string
		for _, tr := range rec.History {
			if tr.State == record.Dispatched {
				notes = append(notes, tr.Note)
			}
		}
		if rec.Attempts != 3 || len(notes) != 3 || !strings.HasPrefix(notes[2], "attempt 3: ") {
			t.Fatalf("%d attempts noted %q; want the third noted as attempt 3", rec.Attempts, notes)
		}
	})
}

// TestNotSentAttemptIsNotedOnce: an attempt sent again because the one
// before it never left is noted "not sent: " and the transport's error,
// once.
func TestNotSentAttemptIsNotedOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(func(ctx context.Context, n int, p json.RawMessage) (json.RawMessage, error) {
			if n == 1 {
				return nil, retry.NotSent(errors.New("connection refused"))
			}
			return charged(ctx, n, p)
		})
		h.pol.Retry = retryRule(true)
		h.call(t.Context(), t, chargeCall).only(t)
		h.in.Wait(t.Context())
		rec := h.onlyRecord(t)
		var notes []string
		for _, tr := range rec.History {
			if tr.State == record.Dispatched {
				notes = append(notes, tr.Note)
			}
		}
		if len(notes) != 2 || notes[1] != "attempt 2: not sent: connection refused" {
			t.Fatalf("attempts noted %q; want the second noted \"attempt 2: not sent: connection refused\"", notes)
		}
	})
}

func TestTransientResultsAreSentAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(busyThen(2))
		h.pol.Retry = retryRule(true)
		v := view(t, h.call(t.Context(), t, chargeCall).only(t))
		if v.IsError || v.Content[0].Text != "charge #3" {
			t.Fatalf("the caller got %+v; want the third attempt's success, and nothing of the 429s", v)
		}
		h.in.Wait(t.Context())
		rec := h.onlyRecord(t)
		if rec.Attempts != 3 || rec.State != record.Delivered || h.up.calls.Load() != 3 {
			t.Fatalf("record: %d attempts, %s; upstream saw %d calls; want 3, delivered, 3", rec.Attempts, rec.State, h.up.calls.Load())
		}
		if v := view(t, h.call(t.Context(), t, chargeCall).only(t)); !v.Meta.Replayed || v.Content[0].Text != "charge #3" {
			t.Fatalf("a later identical call got %+v; want the success replayed", v)
		}
	})
}

func TestTransientSideEffectIsNotResentUnlessDeclaredSafe(t *testing.T) {
	h := newHarness(busyThen(1))
	h.pol.Retry = retryRule(false) // a 429 that may not mean "did nothing"
	v := view(t, h.call(t.Context(), t, chargeCall).only(t))
	if !v.IsError || !strings.Contains(v.Content[0].Text, "429") || h.up.calls.Load() != 1 {
		t.Fatalf("got %+v after %d calls; a side effect is not sent again unless the policy says the result is safe", v, h.up.calls.Load())
	}
}

func TestTransientIdempotentToolIsResent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(busyThen(1))
		h.pol = policy.FromAnnotations(&mcp.Annotations{IdempotentHint: ptr(true)})
		h.pol.Retry = retryRule(false)
		if v := view(t, h.call(t.Context(), t, chargeCall).only(t)); v.Content[0].Text != "charge #2" {
			t.Fatalf("got %+v; an idempotent tool may be sent again", v)
		}
	})
}

func TestStillTransientAfterTheLastAttemptFails(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(busyThen(100))
		h.pol.Retry = retryRule(true)
		v := view(t, h.call(t.Context(), t, chargeCall).only(t))
		if !strings.Contains(v.Content[0].Text, "429") || h.up.calls.Load() != 4 {
			t.Fatalf("got %+v after %d calls; want the last 429 after 4 attempts", v, h.up.calls.Load())
		}
		h.in.Wait(t.Context())
		if rec := h.onlyRecord(t); rec.State != record.Failed {
			t.Fatalf("record %s; a call still transient at the end is failed, not replayed", rec.State)
		}
		h.call(t.Context(), t, chargeCall).only(t)
		if n := h.up.calls.Load(); n != 8 {
			t.Fatalf("upstream saw %d calls; the next identical call runs again (4 more attempts)", n)
		}
	})
}

// TestSuccessIsNeverTransient: a success whose text matches a transient
// entry ("charged 429", under the cookbook's payment rule) did its work:
// it is sent once, completes, and an identical call gets it replayed.
func TestSuccessIsNeverTransient(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(func(context.Context, int, json.RawMessage) (json.RawMessage, error) {
			return json.RawMessage(`{"content":[{"type":"text","text":"charged 429 to card 4242"}]}`), nil
		})
		h.pol.Retry = retryRule(true)
		if v := view(t, h.call(t.Context(), t, chargeCall).only(t)); v.IsError || v.Content[0].Text != "charged 429 to card 4242" {
			t.Fatalf("the caller got %+v; want the success as it came", v)
		}
		h.in.Wait(t.Context())
		if rec := h.onlyRecord(t); rec.State != record.Delivered || rec.Attempts != 1 || h.up.calls.Load() != 1 {
			t.Fatalf("record %s after %d attempts, upstream saw %d calls; want delivered, 1, 1", rec.State, rec.Attempts, h.up.calls.Load())
		}
		if v := view(t, h.call(t.Context(), t, chargeCall).only(t)); !v.Meta.Replayed || h.up.calls.Load() != 1 {
			t.Fatalf("an identical call got %+v and the upstream saw %d calls; want the success replayed", v, h.up.calls.Load())
		}
	})
}

// TestIdempotentStillTransientFails: an idempotent tool whose transient
// entry does not say "nothing ran" still ends failed after the last
// attempt, not unknown: the upstream answered, and the tool may run
// again. The caller gets that last answer.
func TestIdempotentStillTransientFails(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(busyThen(100))
		h.pol = policy.FromAnnotations(&mcp.Annotations{IdempotentHint: ptr(true)})
		h.pol.Retry = retryRule(false)
		v := view(t, h.call(t.Context(), t, chargeCall).only(t))
		if !v.IsError || !strings.HasPrefix(v.Content[0].Text, "429") || h.up.calls.Load() != 4 {
			t.Fatalf("got %+v after %d calls; want the last 429 after 4 attempts", v, h.up.calls.Load())
		}
		h.in.Wait(t.Context())
		if rec := h.onlyRecord(t); rec.State != record.Failed {
			t.Fatalf("record %s; an idempotent call still transient at the end is failed", rec.State)
		}
	})
}

func TestRetryAfterIsAFloor(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(busyThen(1))
		h.pol.Retry = retryRule(true)
		h.pol.Retry.RetryAfterPath = "retry_after_seconds"
		start := time.Now()
		h.call(t.Context(), t, chargeCall).only(t)
		if waited := time.Since(start); waited < 2*time.Second {
			t.Fatalf("the second attempt went after %v; the result asked for at least 2s", waited)
		}
	})
}

func TestUnknownOutcomeIsNeverRetried(t *testing.T) {
	h := newHarness(func(context.Context, int, json.RawMessage) (json.RawMessage, error) {
		return nil, errors.New("the upstream exited before answering")
	})
	h.pol.Retry = retryRule(true)
	v := view(t, h.call(t.Context(), t, chargeCall).only(t))
	if !strings.HasPrefix(v.Content[0].Text, "Outcome unknown:") || h.up.calls.Load() != 1 {
		t.Fatalf("got %+v after %d calls; a side effect whose outcome is unknown is never sent again by the retry rule", v, h.up.calls.Load())
	}
}

func TestStructuredTransientMatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(busyThen(1))
		h.pol.Retry = &policy.RetryRule{MaxAttempts: 3, Base: time.Millisecond, Cap: time.Millisecond,
			Transient: []policy.ResultMatch{{Path: "status", In: []string{"503", "429"}, SafeToResend: true}}}
		if v := view(t, h.call(t.Context(), t, chargeCall).only(t)); v.Content[0].Text != "charge #2" {
			t.Fatalf("got %+v; structuredContent.status 429 is transient", v)
		}
	})
}

func TestAlreadyDoneOnAResendIsDone(t *testing.T) {
	gone := json.RawMessage(`{"content":[{"type":"text","text":"404: no such file"}],"isError":true}`)
	h := newHarness(dies(func(context.Context, int, json.RawMessage) (json.RawMessage, error) { return gone, nil }))
	h.pol.OnUnknown = policy.Retry
	h.pol.AlreadyDone = []policy.ResultMatch{{Text: regexp.MustCompile(`(?i)no such|not found`)}}
	h.call(t.Context(), t, `{"name":"delete_file","arguments":{"path":"/a"}}`).only(t) // sent; the upstream died
	a := h.call(t.Context(), t, `{"name":"delete_file","arguments":{"path":"/a"}}`).only(t)
	v := view(t, a)
	if v.IsError || !strings.HasPrefix(v.Content[0].Text, "Done: execution") || !strings.Contains(v.Content[0].Text, "no such file") || v.Meta.Outcome != "already_done" {
		t.Fatalf("the re-send that found the file gone got %+v; want a success saying it was already done", v)
	}
	h.in.Wait(t.Context())
	if rec := h.onlyRecord(t); rec.State != record.Delivered || rec.Attempts != 2 {
		t.Fatalf("record %s after %d attempts; want delivered after 2", rec.State, rec.Attempts)
	}
}

func TestAlreadyDoneOnTheFirstSendIsTheAnswer(t *testing.T) {
	gone := json.RawMessage(`{"content":[{"type":"text","text":"404: no such file"}],"isError":true}`)
	h := newHarness(func(context.Context, int, json.RawMessage) (json.RawMessage, error) { return gone, nil })
	h.pol.AlreadyDone = []policy.ResultMatch{{Text: regexp.MustCompile(`(?i)no such`)}}
	if v := view(t, h.call(t.Context(), t, chargeCall).only(t)); !v.IsError {
		t.Fatalf("the first send's not-found got %+v; only a re-send's counts as already done", v)
	}
}

// TestMalformedAnswerIsUnknown: an answer that is not a tool result came
// from a server that received the call and may have run it, so the
// outcome is unknown: the caller is told so, and calling again neither
// runs it again nor retries it.
func TestMalformedAnswerIsUnknown(t *testing.T) {
	for _, result := range []string{`[1,2]`, `"text"`, `null`} {
		h := newHarness(func(context.Context, int, json.RawMessage) (json.RawMessage, error) {
			return json.RawMessage(result), nil
		})
		h.pol.Retry = retryRule(true)
		for range 2 {
			v := view(t, h.call(t.Context(), t, chargeCall).only(t))
			if text := v.Content[0].Text; !v.IsError || !strings.HasPrefix(text, "Outcome unknown:") || !strings.Contains(text, "malformed answer") {
				t.Fatalf("a result %s got %+v; want outcome unknown, naming the malformed answer", result, v)
			}
		}
		if n := h.up.calls.Load(); n != 1 {
			t.Fatalf("upstream saw %d calls for a result %s; want 1: a malformed answer is not run again", n, result)
		}
	}
}

// TestNotSentAfterAnAttemptThatMayHaveRunIsUnknown: the first attempt of a
// side effect gets a 504 (it may have run: the gateway gave up waiting),
// the retry rule sends it again (safe under on_unknown retry, the
// execution id forwarded), and the re-send never leaves (connection
// refused). The execution may have run, so its outcome is unknown, never
// failed: a failed record is reserved again by the next identical call,
// which runs as a new execution under a new id the upstream cannot
// dedupe, charging twice.
func TestNotSentAfterAnAttemptThatMayHaveRunIsUnknown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(func(ctx context.Context, n int, p json.RawMessage) (json.RawMessage, error) {
			switch n {
			case 1:
				return nil, httpError(http.StatusGatewayTimeout, "")
			case 2:
				return nil, retry.NotSent(errors.New("connection refused"))
			}
			return charged(ctx, n, p)
		})
		h.pol.OnUnknown = policy.Retry // the upstream dedupes on the forwarded id
		h.pol.Retry = retryRule(false)
		h.pol.Retry.MaxAttempts = 2
		a := h.call(t.Context(), t, chargeCall).only(t)
		h.in.Wait(t.Context())
		rec := h.onlyRecord(t)
		if rec.State != record.Unknown {
			t.Errorf("after a 504 then a re-send not sent, record is %s (%q); want unknown: the first attempt may have run", rec.State, lastNote(rec))
		}
		if a.Error != nil || !strings.Contains(string(a.Result), "Outcome unknown") {
			t.Errorf("the caller got result=%s error=%s; want the outcome-unknown answer", a.Result, a.Error)
		}
		// The next identical call: with on_unknown retry it re-sends the
		// same execution id; it must never start a new execution.
		h.call(t.Context(), t, chargeCall).only(t)
		h.in.Wait(t.Context())
		recs := h.store.Records()
		if len(recs) != 1 {
			ids := []string{}
			for _, r := range recs {
				ids = append(ids, r.ID+":"+string(r.State))
			}
			t.Fatalf("the retry ran as a new execution: records %s; want the one execution, re-sent under its id", strings.Join(ids, ", "))
		}
	})
}

// TestRedispatchNotSentStaysUnknown: an execution whose outcome is
// unknown is re-dispatched under on_unknown retry, and the re-dispatch
// never leaves (the upstream refuses the connection). The first send may
// still have run: the record must stay unknown, never become failed,
// which the next identical call would reserve again as a new execution.
func TestRedispatchNotSentStaysUnknown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(func(ctx context.Context, n int, p json.RawMessage) (json.RawMessage, error) {
			switch n {
			case 1:
				return nil, errors.New("the upstream exited before answering")
			case 2:
				return nil, retry.NotSent(errors.New("connection refused"))
			}
			return charged(ctx, n, p)
		})
		h.pol.OnUnknown = policy.Retry
		h.call(t.Context(), t, chargeCall).only(t) // unknown
		h.in.Wait(t.Context())
		a := h.call(t.Context(), t, chargeCall).only(t) // re-dispatch, not sent
		h.in.Wait(t.Context())
		rec := h.onlyRecord(t)
		if rec.State != record.Unknown {
			t.Errorf("after a re-dispatch not sent, record is %s (%q); want unknown: the first send may have run", rec.State, lastNote(rec))
		}
		if a.Error != nil || !strings.Contains(string(a.Result), "Outcome unknown") {
			t.Errorf("the re-dispatching caller got result=%s error=%s; want the outcome-unknown answer", a.Result, a.Error)
		}
		h.call(t.Context(), t, chargeCall).only(t)
		h.in.Wait(t.Context())
		if recs := h.store.Records(); len(recs) != 1 {
			t.Fatalf("a later identical call ran as a new execution (%d records, upstream saw %d calls)", len(recs), h.up.calls.Load())
		}
	})
}

// TestFailedOnlyIfNoAttemptMayHaveRun: an execution whose last attempt
// is refused ends failed only if no attempt before it may have run; a
// 429 proves nothing ran, a 503 does not.
func TestFailedOnlyIfNoAttemptMayHaveRun(t *testing.T) {
	refused := &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "no such card"}
	for _, tt := range []struct {
		name  string
		first error
		want  record.State
	}{
		{"after a 429", httpError(http.StatusTooManyRequests, ""), record.Failed},
		{"after a request not sent", retry.NotSent(errors.New("connection refused")), record.Failed},
		{"after a 503", httpError(http.StatusServiceUnavailable, ""), record.Unknown},
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h := newHarness(func(ctx context.Context, n int, p json.RawMessage) (json.RawMessage, error) {
					if n == 1 {
						return nil, tt.first
					}
					return nil, refused
				})
				h.pol = policy.FromAnnotations(&mcp.Annotations{IdempotentHint: ptr(true)}) // a 503 is sent again
				h.pol.Retry = retryRule(false)
				h.call(t.Context(), t, chargeCall).only(t)
				h.in.Wait(t.Context())
				if rec := h.onlyRecord(t); rec.State != tt.want || h.up.calls.Load() != 2 {
					t.Fatalf("record %s (%q) after %d calls; want %s after 2", rec.State, lastNote(rec), h.up.calls.Load(), tt.want)
				}
			})
		})
	}
}

// TestAlreadyDoneAfterNothingRan: the first attempt provably did
// nothing (never sent, or a 429), so the second attempt is the first
// send that could take effect. Its "not found" is the tool's real answer
// (the file never existed), not proof that an earlier send did the work:
// it must be passed on as it is (docs/policy.md, "Already done": "On a
// first send, the same result is passed on as it is"), never turned into
// "Done: execution ... had already taken effect".
func TestAlreadyDoneAfterNothingRan(t *testing.T) {
	gone := json.RawMessage(`{"content":[{"type":"text","text":"404: no such file"}],"isError":true}`)
	for _, tt := range []struct {
		name  string
		first error
	}{
		{"not sent", retry.NotSent(errors.New("connection refused"))},
		{"HTTP 429", httpError(http.StatusTooManyRequests, "")},
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h := newHarness(func(_ context.Context, n int, _ json.RawMessage) (json.RawMessage, error) {
					if n == 1 {
						return nil, tt.first
					}
					return gone, nil
				})
				h.pol.OnUnknown = policy.Retry
				h.pol.Retry = &policy.RetryRule{MaxAttempts: 3, Base: time.Millisecond, Cap: time.Millisecond}
				h.pol.AlreadyDone = []policy.ResultMatch{{Text: regexp.MustCompile(`(?i)no such|not found`)}}
				v := view(t, h.call(t.Context(), t, `{"name":"delete_file","arguments":{"path":"/never-existed"}}`).only(t))
				h.in.Wait(t.Context())
				rec := h.onlyRecord(t)
				if !v.IsError || strings.HasPrefix(v.Content[0].Text, "Done:") || v.Meta.Outcome == "already_done" {
					t.Errorf("after a first attempt that did nothing (%s), the only send that could run answered not-found; the caller got %+v (record %s, %q); want the not-found result as it came", tt.name, v, rec.State, lastNote(rec))
				}
			})
		})
	}
}

// TestOnUnknownRetryRedispatchesOnceUnderAnAccount: two calls find
// the same unknown execution; both decide to re-dispatch it and wait for
// the account's room. The first to get room re-sends it, and that send's
// outcome is unknown too. The second then claims the record (unknown
// again) and sends it a third time: on_unknown retry "re-sends it once"
// (docs/policy.md, on_unknown; DESIGN 6).
func TestOnUnknownRetryRedispatchesOnceUnderAnAccount(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(func(ctx context.Context, n int, p json.RawMessage) (json.RawMessage, error) {
			if n <= 2 {
				return nil, errors.New("the upstream exited before answering")
			}
			return charged(ctx, n, p)
		})
		h.pol.OnUnknown = policy.Retry
		h.pol.Retry = &policy.RetryRule{MaxAttempts: 1, Deadline: time.Minute}
		h.withAccount(policy.Account{Name: "bank", Rate: 1, Burst: 1})
		h.call(t.Context(), t, chargeCall).only(t) // sent at 0s; the upstream died: unknown
		a := h.call(t.Context(), t, chargeCall)    // both find it unknown, and wait for room
		b := h.call(t.Context(), t, chargeCall)
		a.only(t)
		b.only(t)
		h.in.Wait(t.Context())
		if n := h.up.calls.Load(); n != 2 {
			rec := h.onlyRecord(t)
			t.Fatalf("the upstream got %d sends of one execution (record %s, %d attempts); on_unknown retry re-sends an unknown execution once", n, rec.State, rec.Attempts)
		}
	})
}

// TestRecoverRedispatchesOnce: the same with on_unknown recover,
// whose status tool answers one caller later than the other: the first
// re-sends the execution (not done), that send is lost too, and the
// second caller's "not done" re-sends it again. docs/policy.md: "The
// re-send happens once ... If that send's outcome is unknown too, a
// later 'not done' sends nothing more."
func TestRecoverRedispatchesOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var charges, checks atomicInt
		h := newHarness(func(_ context.Context, _ int, p json.RawMessage) (json.RawMessage, error) {
			var params struct {
				Name string `json:"name"`
			}
			json.Unmarshal(p, &params)
			if params.Name == "get_status" {
				if checks.add() == 2 {
					time.Sleep(5 * time.Second) // the second caller's check is slow
				}
				return json.RawMessage(`{"content":[{"type":"text","text":"no such charge"}],"structuredContent":{"status":"not_found"}}`), nil
			}
			if charges.add() <= 2 {
				return nil, errors.New("the upstream exited before answering")
			}
			return json.RawMessage(`{"content":[{"type":"text","text":"charged"}]}`), nil
		})
		h.pol.OnUnknown = policy.Recover
		h.pol.Recover = &policy.RecoverRule{Tool: "get_status", Arguments: json.RawMessage(`{"execution_id":"{{execution_id}}"}`)}
		h.call(t.Context(), t, chargeCall).only(t) // unknown
		a := h.call(t.Context(), t, chargeCall)
		b := h.call(t.Context(), t, chargeCall)
		a.only(t)
		b.only(t)
		h.in.Wait(t.Context())
		if n := charges.load(); n != 2 {
			rec := h.onlyRecord(t)
			t.Fatalf("charge_card was sent %d times (record %s, %d attempts); recover re-sends an unknown execution once", n, rec.State, rec.Attempts)
		}
	})
}

type atomicInt struct{ v atomic.Int32 }

func (a *atomicInt) add() int32  { return a.v.Add(1) }
func (a *atomicInt) load() int32 { return a.v.Load() }
