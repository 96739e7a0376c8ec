package intercept

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/mcp-idempotent/mcp-idempotent/internal/jsonrpc"
	"github.com/mcp-idempotent/mcp-idempotent/internal/policy"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
)

// ErrSessionEnded is the error a call's context ends with when the session
// the call came in ends before the call is answered. Unlike a caller's
// cancellation, it does not stop the answer: the client may still read.
// A call not yet reserved is told it did not run (NotRunAtSessionEnd), one
// waiting for an execution under way (in another process) that it is
// still in progress, and any other gets its answer when it comes.
var ErrSessionEnded = errors.New("the session ended")

// NotRunAtSessionEnd is the answer to a call to tool whose session ended
// before it was reserved: nothing ran.
func NotRunAtSessionEnd(tool string) *jsonrpc.Error {
	return jsonrpc.Errorf(jsonrpc.CodeInternalError, "mcp-idempotent: the session ended before %s was executed; it did not run", tool)
}

// How an answer is marked.
type marking uint8

const (
	// live: the first dispatch's answer, as the upstream gave it.
	live marking = iota
	// replayed: the stored answer of an execution the caller attached to.
	replayed
	// resumed: the answer of a re-dispatch or a status check of an
	// execution whose outcome was unknown: fresh, but of an execution that
	// began earlier, which _meta names.
	resumed
)

// answer writes a settled record's answer to one caller, marked as m says.
func (in *Interceptor) answer(ctx context.Context, req *Request, rec *record.Record, m marking) {
	if m == replayed {
		// The record as the caller gets it: an attached caller found
		// it under way.
		in.traceRecord(req, rec)
	}
	// Only a durable store can hold a record that something else wrote,
	// and only a replay reads one: the memory store's records, and a
	// live or resumed answer, come from this process, checked as they
	// came.
	if m == replayed && in.storeWaits {
		if what := damaged(rec); what != "" {
			in.log.Error("cannot answer from the record the store holds; not running it again",
				"execution", rec.ID, "tool", rec.Tool, "state", rec.State, "damage", what)
			req.got = gotNoOutcome
			in.replyError(req, jsonrpc.Errorf(jsonrpc.CodeInternalError,
				"mcp-idempotent: execution %s of %s cannot be answered from the record store: %s; it was not run again", rec.ID, rec.Tool, what))
			return
		}
	}
	switch rec.State {
	case record.Completed, record.Delivered:
		req.got = gotAnswer
		in.replyResult(ctx, req, rec, m)
	case record.Failed:
		req.got = gotError
		switch {
		case rec.Error != nil:
			in.reply(ctx, req, Answer{Error: rec.Error}, nil)
		case rec.Result != nil:
			// A result that is not a completion, such as input_required:
			// the caller needs it, and the next call runs anew. It is a
			// question to the caller's user, not an error.
			if inputRequired(rec.Result) {
				req.got = gotInputRequired
			}
			in.reply(ctx, req, Answer{Result: rec.Result}, nil)
		default:
			again := "calling again runs it"
			if req.Policy.NeedsApproval() && !in.shadow {
				// A new execution, asked about as any: the model must not
				// take the retry for one that skips the approval.
				again += " once approved"
			}
			in.replyError(req, jsonrpc.Errorf(jsonrpc.CodeInternalError,
				"mcp-idempotent: execution %s of %s failed before it was sent (%s); nothing ran, and %s",
				rec.ID, rec.Tool, lastNote(rec), again))
		}
	case record.Refused:
		req.got = gotRefused
		in.reply(ctx, req, Answer{Result: refusedResult(rec, m == replayed)}, nil)
	case record.Unknown:
		if m == live && rec.Result != nil {
			// The upstream's own word that it does not know (another
			// mcp-idempotent): for the caller it came for, as it came.
			in.reply(ctx, req, Answer{Result: rec.Result}, nil)
			return
		}
		in.logUnknownAnswered(ctx, req, rec)
		req.got = gotUnknown
		in.reply(ctx, req, Answer{Result: unknownResult(rec)}, nil)
	default:
		in.log.Error("answer asked for an unsettled execution", "execution", rec.ID, "state", rec.State)
		req.got = gotNoOutcome
		in.replyError(req, jsonrpc.Errorf(jsonrpc.CodeInternalError, "mcp-idempotent: execution %s is %s", rec.ID, rec.State))
	}
}

// damaged says what makes rec unfit to answer from, or "" if nothing
// does. Only a store that something else wrote to holds such a record:
// its answer is not the upstream's, and taking it for no record would run
// the call again.
func damaged(rec *record.Record) string {
	switch {
	case !slices.Contains(record.States, rec.State):
		return fmt.Sprintf("its state %q is not one this build knows", rec.State)
	case rec.Result != nil && !jsonrpc.Valid(rec.Result):
		return "its result is not JSON"
	case rec.Error != nil && (!jsonrpc.Valid(rec.Error) || jsonrpc.EachMember(rec.Error, func(_, _ []byte) bool { return true }) != nil):
		return "its error is not a JSON object"
	case (rec.State == record.Completed || rec.State == record.Delivered) && rec.Result == nil:
		return "it is " + string(rec.State) + " without a result"
	}
	return ""
}

// logUnknownAnswered logs that req's caller is told rec's outcome is
// unknown, unless the caller left first: reply writes it nothing then,
// and its line in the journal says so.
func (in *Interceptor) logUnknownAnswered(ctx context.Context, req *Request, rec *record.Record) {
	if err := ctx.Err(); err != nil && !errors.Is(err, ErrSessionEnded) {
		in.log.Debug("outcome unknown; its caller had left", "execution", rec.ID, "request", req.Correlation)
		return
	}
	in.log.Info("answered outcome unknown", "execution", rec.ID, "request", req.Correlation)
}

// replyResult writes rec's result to req's caller, marked as m says. A
// marked result is a copy, made for a CopyingReplier in a buffer used
// again rather than in one allocated for each replay.
func (in *Interceptor) replyResult(ctx context.Context, req *Request, rec *record.Record, m marking) {
	if m == live {
		in.reply(ctx, req, Answer{Result: rec.Result}, rec)
		return
	}
	var buf *[]byte
	var dst []byte // nil: withExecution allocates
	if cr, ok := req.Reply.(CopyingReplier); ok && cr.CopiesAnswer() {
		buf = answerBufs.Get().(*[]byte)
		dst = (*buf)[:0]
	}
	result := withExecution(dst, rec.Result, rec, m == replayed)
	in.reply(ctx, req, Answer{Result: result}, rec)
	if buf == nil {
		return
	}
	// Kept only if it is the copy: a result that is not an object comes
	// back as the store holds it, and must never be written into.
	if len(result) > 0 && (len(rec.Result) == 0 || &result[0] != &rec.Result[0]) && cap(result) <= maxKeptAnswer {
		*buf = result[:0]
	}
	answerBufs.Put(buf)
}

// answerBufs holds *[]byte buffers for replyResult.
var answerBufs = sync.Pool{New: func() any { return new([]byte) }}

// maxKeptAnswer bounds the buffers answerBufs keeps: one large result
// does not stay held.
const maxKeptAnswer = 16 << 10

// reply writes a to the caller unless it has cancelled, and marks rec
// delivered when the transport took a completed result.
func (in *Interceptor) reply(ctx context.Context, req *Request, a Answer, rec *record.Record) {
	if err := ctx.Err(); err != nil && !errors.Is(err, ErrSessionEnded) {
		// Cancelled first: the caller never sees this answer.
		in.journalizeAttach(req, ErrCallerLeft)
		return
	}
	if dr, ok := req.Reply.(DeliveryReplier); ok && rec != nil && dr.DeliversLater() {
		release := in.holdDelivery(req, dr, rec)
		if err := dr.ReplyThen(a, func(err error) { in.deliveredLater(req, rec, err); release() }); err != nil {
			release()
			in.replyFailed(req, err)
		}
		return
	}
	if err := req.Reply.Reply(a); err != nil {
		in.replyFailed(req, err)
		return
	}
	if rec != nil {
		in.delivered(req, rec) // its line says what the caller got
		return
	}
	in.journalizeAttach(req, nil)
}

// replyFailed notes that req's answer was not written, for err.
func (in *Interceptor) replyFailed(req *Request, err error) {
	if errors.Is(err, ErrCallerLeft) {
		in.log.Debug("the caller cancelled as its answer was written; not written", "request", req.Correlation)
	} else {
		in.log.Warn("writing the answer failed", "request", req.Correlation, "err", err)
	}
	in.journalizeAttach(req, err)
}

// holdDelivery holds back the calls that match rec, a completed
// execution whose answer dr is to write, until the returned func is
// called: once written is told, and its delivery recorded. A transport
// that writes in order tells written after the write, and its caller
// may read the answer and ask again in between; a replay: undelivered
// tool then runs again, not replays. Another transport may never tell
// written: only delivered holds them back.
func (in *Interceptor) holdDelivery(req *Request, dr DeliveryReplier, rec *record.Record) (release func()) {
	o, ok := dr.(OrderedReplier)
	if !holdsDelivery(req) || !ok || !o.WritesInOrder() || rec.State != record.Completed {
		return func() {}
	}
	return sync.OnceFunc(in.delivering.hold(rec.Key))
}

// holdsDelivery reports whether req's delivery holds back the calls that
// match its execution: only a tool that replays undelivered executions
// alone has calls that wait for it (reserve). Its policy is the one every
// call of the tool in this process reads.
func holdsDelivery(req *Request) bool {
	return req.Policy != nil && req.Policy.Replay == policy.ReplayUndelivered
}

// deliveredLater records what became of rec's answer to req's caller, which
// its transport took only later (err nil), or never, for err.
func (in *Interceptor) deliveredLater(req *Request, rec *record.Record, err error) {
	if err == nil {
		in.delivered(req, rec)
		return
	}
	in.log.Info("the client never got its answer", "execution", rec.ID, "request", req.Correlation, "err", err)
	in.journalizeAttach(req, err)
}

// ErrCallerLeft is why an answer to a caller that cancelled its call was
// not written. A Replier returns it when the caller cancelled after the
// interceptor last looked: the answer is then not delivered.
var ErrCallerLeft = errors.New("the caller cancelled its call first")

// delivered records that the caller of req got rec's answer. Not the
// caller's context: the answer is out, so delivery must be recorded even
// if the caller cancels this instant.
func (in *Interceptor) delivered(req *Request, rec *record.Record) {
	// A caller attached to an execution this process settles may be woken
	// before the settling transition is journaled: its delivery is
	// journaled after that line, not before.
	if in.journal != nil {
		in.settling.wait(rec.ID)
	}
	switch rec.State {
	case record.Completed:
		if holdsDelivery(req) {
			defer in.delivering.hold(rec.Key)()
		}
		// Conditional: of two callers handed the completed record at
		// once (its first caller and a replay), one records the delivery
		// and the other finds it done, so it is counted once; both have
		// their line in the journal.
		_, err := in.change(req.bg(), req, rec.ID, record.Change{To: record.Delivered, From: record.Completed})
		switch {
		case err == nil:
			// Recorded: the common case, with no error to unwrap.
		case errors.Is(err, record.ErrConflict):
			in.journalize(req, rec, &record.Change{To: record.Delivered})
		case errors.Is(err, record.ErrNotFound) && !rec.ExpiresAt.IsZero() && !in.now().Before(rec.ExpiresAt):
			// A short retention: the store purged it, as it should.
			in.log.Info("the execution's retention ran out before its delivery was recorded; the store dropped it",
				"execution", rec.ID, "retention", rec.Retention)
			in.journalize(req, rec, &record.Change{To: record.Delivered})
		default:
			in.log.Error("recording a transition", "execution", rec.ID, "state", record.Delivered, "err", err)
			// The caller took the answer all the same: its line says so.
			in.journalize(req, rec, &record.Change{To: record.Delivered})
		}
	case record.Delivered:
		// Delivered to another caller before: nothing for the store to
		// record, but the journal has a line for each caller that took
		// the result.
		in.journalize(req, rec, &record.Change{To: record.Delivered})
	}
}

// replyError writes the proxy's own error e to the caller; a caller that
// joined an execution has its line, as for any other answer.
func (in *Interceptor) replyError(req *Request, e *jsonrpc.Error) {
	b, _ := json.Marshal(e) // an *Error with no Data always marshals
	if err := req.Reply.Reply(Answer{Error: b}); err != nil {
		in.replyFailed(req, err)
		return
	}
	in.journalizeAttach(req, nil)
}
