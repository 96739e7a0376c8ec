package cli

import (
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/intercept"
	"github.com/mcp-idempotent/mcp-idempotent/internal/journal"
	"github.com/mcp-idempotent/mcp-idempotent/internal/metrics"
	"github.com/mcp-idempotent/mcp-idempotent/internal/policy"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
	"github.com/mcp-idempotent/mcp-idempotent/internal/telemetry"
	"github.com/mcp-idempotent/mcp-idempotent/internal/workers"
)

// idleWorkers is how long a worker of the interceptor's waits for the
// next call before it ends: a model's calls come seconds apart. The one
// that waited least takes each call, so the workers a burst left over
// end; one waiting costs its stack, which the collector may shrink.
const idleWorkers = time.Minute

// interceptOptions returns the interceptor's options: store and journal
// wrapped for the metrics and traces asked for.
func (w *wiring) interceptOptions(store record.Store, durable bool, policyFile *policy.File, jw *journal.Writer, obs *metrics.Metrics) intercept.Options {
	iopts := intercept.Options{Store: store, Hasher: w.hasher, Logger: w.log, Lease: w.f.lease, Accounts: policyFile.Accounts(),
		StoreWaits: durable, Workers: workers.New(idleWorkers), Shadow: w.f.shadow}
	if shared, ok := store.(intercept.Allowances); ok {
		// Every proxy sharing the store takes from one allowance per
		// account.
		iopts.Allowances = shared
	}
	if r, ok := store.(record.Replayer); ok {
		iopts.Replayer = r
	}
	if jw != nil {
		iopts.Journal = jw
	}
	if obs != nil {
		// Only the interceptor's handle is timed: durable keeps the
		// store's Secret and Close.
		iopts.Store = obs.TimeStore(store)
		iopts.Observer = obs
		if iopts.Replayer != nil {
			iopts.Replayer = obs.TimeReplayer(iopts.Replayer)
		}
		if jw != nil {
			iopts.Journal = obs.CountJournal(jw)
		}
	}
	if w.tracer != nil {
		iopts.Store = telemetry.TraceStore(iopts.Store, w.tracer)
		iopts.Tracer = w.tracer
		if iopts.Replayer != nil {
			iopts.Replayer = telemetry.TraceReplayer(iopts.Replayer, w.tracer)
		}
	}
	return iopts
}
