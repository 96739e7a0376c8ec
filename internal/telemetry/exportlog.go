package telemetry

import (
	"log/slog"
	"sync"
	"time"
)

// exportLogEvery is the least time between two lines about failed
// exports. The batcher reports each batch that fails: one per 512 spans,
// many a second under load while a collector is down or refuses, each a
// line that says what the one before said.
const exportLogEvery = time.Minute

// now is the clock of exportLog; a test sets it.
var now = time.Now

// An exportLog logs the SDK's errors (failed exports, mostly) at warn,
// at most one line per exportLogEvery; the next line counts the errors
// left out before it, and a stop (flush) counts those still left out.
type exportLog struct {
	log *slog.Logger

	mu      sync.Mutex // protects the fields below
	next    time.Time  // when the next error may be logged
	skipped int        // errors not logged since the last line
}

// Handle implements otel.ErrorHandler.
func (l *exportLog) Handle(err error) {
	l.mu.Lock()
	t := now()
	if t.Before(l.next) {
		l.skipped++
		l.mu.Unlock()
		return
	}
	skipped := l.skipped
	l.next, l.skipped = t.Add(exportLogEvery), 0
	l.mu.Unlock()
	if skipped > 0 {
		l.log.Warn("tracing", "err", err, "unlogged_errors", skipped)
		return
	}
	l.log.Warn("tracing", "err", err)
}

// flush logs how many errors were left out since the last line, if any.
func (l *exportLog) flush() {
	l.mu.Lock()
	skipped := l.skipped
	l.skipped = 0
	l.mu.Unlock()
	if skipped > 0 {
		l.log.Warn("tracing", "err", "errors left out of the log since its last line", "unlogged_errors", skipped)
	}
}
