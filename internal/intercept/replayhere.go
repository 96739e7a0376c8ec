package intercept

import (
	"context"
	"slices"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
)

// With a store that waits (Options.StoreWaits), Handle hands each call to
// a worker, so that a store that stalls holds up none of the session's
// other messages. A replay of a delivered record needs only a read, and
// where the store can make it without waiting (record.Replayer: SQLite's
// read, which takes no lock a writer holds), the goroutine that read the
// call answers it: through the proxy the hand-off cost a SQLite
// replay more than its read (docs/store-benchmarks.md, "A replay waited
// for a worker"). A completed record's replay records its delivery, a
// write, and goes to a worker.
//
// Only a call whose handling needs nothing but that read is answered
// here. An approval's continuation, a tool that asks for approval, shadow
// mode, large params, a tool whose calls replace a delivered execution
// (which waits for a delivery's record: reserving.go), a call this
// process holds an outcome for or whose client key it sent for another
// action (lost.go): each goes to a worker as before, and so does a call
// the read does not answer. A record the read does not answer has its
// attach counted by the worker's reservation, not by the read.
//
// An execution this process abandoned (abandoned.go) was never sent, so
// its record has no outcome: a replay never finds one.

// replayHere answers req, on the calling goroutine, if the store can
// replay it from a read that waits for no lock and no connection, and
// reports done. When it does not, pre, if not nil, is what it learned,
// for the worker to go on from (handleFrom); done is also true when it
// answered req because its action could not be read.
func (in *Interceptor) replayHere(ctx context.Context, req *Request) (pre *prelude, done bool) {
	if in.replayer == nil || !in.storeWaits || in.shadow || len(req.Call.Params) > inlineParams ||
		req.Call.RequestState() != nil || req.Policy.NeedsApproval() {
		return nil, false
	}
	p, ok := in.begin(ctx, req)
	if !ok {
		return nil, true
	}
	opts := reserveOptions(req.Policy)
	if ctx.Err() != nil || slices.Contains(opts.Replace, record.Delivered) ||
		in.own.keptForCall(p.a.key, p.a.fp) != nil ||
		req.Call.Key != "" && in.sent.otherAction(p.a.key, p.a.fp) != nil {
		return &p, false
	}
	rec, unheld, ok := in.replayer.Replay(req.bg(), &record.Record{Key: p.a.key, Fingerprint: p.a.fp}, opts)
	if !ok {
		p.unheld = unheld
		return &p, false
	}
	in.resolve(ctx, req, in.takenOver(req, rec), false, p.a.fp, p.a.args)
	return nil, true
}
