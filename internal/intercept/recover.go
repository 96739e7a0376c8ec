package intercept

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/policy"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
)

// unknown answers a call that matched an execution whose outcome is
// unknown, as the tool's on_unknown says.
func (in *Interceptor) unknown(ctx context.Context, rec *record.Record, req *Request) {
	if in.shadow && onUnknown(rec, req.Policy) != "redispatched" {
		// In shadow mode nothing of the proxy's own goes upstream: a
		// status check it would have made is counted, and the record
		// stays unknown. A re-dispatch is the call itself, which went
		// upstream as it came: its answer is the re-sent attempt's, so
		// the record settles as the proxy's would, and is not
		// re-dispatched again by every later call.
		in.decided(req, rec.Tool, onUnknown(rec, req.Policy))
		req.joined, req.joinedHow, req.got = rec.ID, joinedReplay, gotUnknown
		in.reply(ctx, req, Answer{Result: unknownResult(rec)}, nil)
		return
	}
	switch onUnknown(rec, req.Policy) {
	case "redispatched":
		in.log.Info("outcome unknown; re-dispatching under the same execution id", "execution", rec.ID, "request", req.Correlation)
		in.decided(req, rec.Tool, "redispatched")
		req.joined, req.joinedHow = rec.ID, joinedRedispatch
		in.execute(rec, req, "re-dispatch: on_unknown retry")
	case "recovered":
		// Asked whatever the attempts: a status that says done settles
		// even an execution already sent again (recover re-sends at most
		// once).
		in.decided(req, rec.Tool, "recovered")
		req.joined, req.joinedHow = rec.ID, joinedRecover
		in.work.Start()
		go func() {
			defer in.work.Done()
			in.recover(ctx, rec, req)
		}()
	default:
		in.logUnknownAnswered(ctx, req, rec)
		in.decided(req, rec.Tool, "unknown")
		req.joined, req.joinedHow, req.got = rec.ID, joinedReplay, gotUnknown
		in.reply(ctx, req, Answer{Result: unknownResult(rec)}, nil)
	}
}

// onUnknown is the decision the policy pol makes for a call that finds
// rec unknown: redispatched, recovered, or unknown (the caller is told).
func onUnknown(rec *record.Record, pol *policy.Policy) string {
	switch {
	case pol.OnUnknown == policy.Retry && !redispatched(rec):
		return "redispatched"
	case pol.OnUnknown == policy.Recover && pol.Recover != nil:
		return "recovered"
	}
	return "unknown"
}

// redispatched reports whether rec was sent again after an unknown
// outcome already: on_unknown re-sends an execution once. Its retry
// rule's re-sends of transient answers are not that, and do not count.
func redispatched(rec *record.Record) bool {
	for i := 1; i < len(rec.History); i++ {
		if rec.History[i].State == record.Dispatched && rec.History[i-1].State == record.Unknown {
			return true
		}
	}
	return false
}

// recover asks the upstream's status tool whether an execution whose
// outcome is unknown took effect. Done: the execution completes with the
// status result. Not done: it is re-dispatched, if it has not been
// already. No clear answer: it stays unknown, and so does the caller's
// answer.
func (in *Interceptor) recover(ctx context.Context, rec *record.Record, req *Request) {
	rule := req.Policy.Recover
	status, err := in.status(rec, req)
	bg := req.bg()
	switch {
	case err != nil:
		in.log.Warn("status check gave no answer; the outcome stays unknown", "execution", rec.ID, "status_tool", rule.Tool, "err", err)
		req.got = gotUnknown
		in.reply(ctx, req, Answer{Result: unknownResult(rec)}, nil)
	case statusDone(status, rule):
		in.log.Info("status check says done; completing the execution with its answer", "execution", rec.ID, "status_tool", rule.Tool)
		done := record.Change{To: record.Completed, From: record.Unknown, Result: status, Note: "recovered: " + rule.Tool + " says the action is done"}
		settled, err := in.change(bg, req, rec.ID, done)
		if err != nil {
			// Another caller settled it first: answer from the record.
			in.attach(ctx, rec, req)
			return
		}
		in.answer(ctx, req, settled, resumed)
	case statusNotDone(status, rule) && !redispatched(rec):
		in.log.Info("status check says not done; re-dispatching under the same execution id", "execution", rec.ID, "status_tool", rule.Tool)
		in.execute(rec, req, "re-dispatch: "+rule.Tool+" says the action is not done")
	case statusNotDone(status, rule):
		in.log.Info("status check says not done, but the execution was sent again once already; the outcome stays unknown", "execution", rec.ID, "status_tool", rule.Tool)
		req.got = gotUnknown
		in.reply(ctx, req, Answer{Result: unknownResult(rec)}, nil)
	default:
		// Neither: the action may be under way (a job still running) or
		// the result does not say. Sending it again could do it twice.
		in.log.Info("status check says neither done nor not done; the outcome stays unknown", "execution", rec.ID, "status_tool", rule.Tool)
		req.got = gotUnknown
		in.reply(ctx, req, Answer{Result: unknownResult(rec)}, nil)
	}
}

// status calls the recover rule's status tool and waits for its result.
func (in *Interceptor) status(rec *record.Record, req *Request) (json.RawMessage, error) {
	rule := req.Policy.Recover
	args := bytes.ReplaceAll(rule.Arguments, []byte("{{execution_id}}"), []byte(rec.ID))
	if len(args) == 0 {
		args = []byte("{}")
	}
	name, _ := json.Marshal(rule.Tool)
	params := []byte(`{"name":` + string(name) + `,"arguments":` + string(args) + `}`)
	type outcome struct {
		result json.RawMessage
		err    error
	}
	ch := make(chan outcome, 1)
	req.Upstream.Send(req.bg(), "tools/call", params, AnsweredFunc(func(result json.RawMessage, err error) { ch <- outcome{result, err} }))
	// Bounded by the call's deadline and by the attach window, whichever
	// ends first: a status tool that never answers leaves the outcome
	// unknown, not the caller waiting longer than on the execution itself.
	wait := req.Policy.AttachWindow
	if d := in.deadlineOf(req); !d.IsZero() {
		wait = min(wait, d.Sub(in.now()))
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	var o outcome
	select {
	case o = <-ch:
	case <-timer.C:
		return nil, fmt.Errorf("%s did not answer within %v", rule.Tool, wait.Round(time.Millisecond))
	}
	if o.err != nil {
		return nil, o.err
	}
	var r struct {
		IsError bool `json:"isError"`
	}
	if json.Unmarshal(o.result, &r) != nil || r.IsError {
		return nil, fmt.Errorf("%s answered with an error result", rule.Tool)
	}
	return o.result, nil
}

// Default status-check reading: structuredContent.status in the first
// values means done, in the second that the action never happened.
var (
	defaultDonePath      = "status"
	defaultDoneValues    = []string{"done", "completed", "succeeded", "success"}
	defaultNotDoneValues = []string{"not_found", "not_started", "failed"}
)

// statusDone reports whether a status tool's result says the action is
// done.
func statusDone(result json.RawMessage, rule *policy.RecoverRule) bool {
	values := rule.DoneValues
	if len(values) == 0 {
		values = defaultDoneValues
	}
	return structuredIn(result, cmp.Or(rule.DonePath, defaultDonePath), values)
}

// statusNotDone reports whether a status tool's result says the action
// never happened.
func statusNotDone(result json.RawMessage, rule *policy.RecoverRule) bool {
	values := rule.NotDoneValues
	if len(values) == 0 {
		values = defaultNotDoneValues
	}
	return structuredIn(result, cmp.Or(rule.NotDonePath, rule.DonePath, defaultDonePath), values)
}
