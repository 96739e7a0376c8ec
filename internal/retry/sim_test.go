package retry

import (
	"container/heap"
	"testing"
	"time"
)

// The simulation runs workers against a rate-limited fake account, as an
// event loop over virtual time: no goroutines, no clock, no sleeping, and
// the same numbers every run.
const (
	simWorkers  = 20
	simRate     = 10 // calls per second the account accepts, in windows of one second
	simBurst    = 10 // the burst of the proxy's allowance for the account
	simDuration = 20 * time.Second
	simLatency  = 20 * time.Millisecond // from a call reaching the account to its answer
	simDeadline = 5 * time.Second       // each call's deadline, from its first attempt
	simAttempts = 5
)

// simStrategy is how a worker's calls spend the account.
type simStrategy interface {
	// admit is asked before every attempt: go now, or wait this long and
	// ask again.
	admit(now time.Time) (ok bool, wait time.Duration)
	// failed is told of an attempt the account refused (429), and says
	// how long to wait before the next one, or false to give up.
	failed(attempt int, now, deadline time.Time) (time.Duration, bool)
	// succeeded is told of an attempt that succeeded.
	succeeded()
}

// fixedDelay is what a naive client does: every worker on its own, each
// retry 100ms after the failure, no budget.
type fixedDelay struct{}

func (fixedDelay) admit(time.Time) (bool, time.Duration) { return true, 0 }

func (fixedDelay) failed(attempt int, _, _ time.Time) (time.Duration, bool) {
	return 100 * time.Millisecond, attempt+1 < simAttempts
}

func (fixedDelay) succeeded() {}

// budgeted is this package's way: one Bucket and one RetryBudget for the
// account, shared by every worker, and full-jitter backoff.
type budgeted struct {
	backoff Backoff
	bucket  *Bucket
	budget  *RetryBudget
	denied  int // retries the budget refused
}

func (b *budgeted) admit(now time.Time) (bool, time.Duration) { return b.bucket.Take(now) }

func (b *budgeted) failed(attempt int, now, deadline time.Time) (time.Duration, bool) {
	b.budget.OnFailure()
	if !b.budget.AllowRetry() {
		b.denied++
		return 0, false
	}
	return b.backoff.Next(attempt, 0, now, deadline)
}

func (b *budgeted) succeeded() { b.budget.OnSuccess() }

// simAccount accepts simRate calls in each second of virtual time and
// answers 429 to the rest, as many vendors' fixed windows do.
type simAccount struct {
	window   map[int64]int
	arrivals []simArrival
}

type simArrival struct {
	at      time.Duration
	attempt int
}

func (a *simAccount) call(at time.Duration, attempt int) bool {
	w := int64(at / time.Second)
	ok := a.window[w] < simRate
	if ok {
		a.window[w]++
	}
	a.arrivals = append(a.arrivals, simArrival{at, attempt})
	return ok
}

// simEvent wakes a worker at a virtual time; seq orders events at the
// same time by when they were scheduled, so runs are deterministic.
type simEvent struct {
	at     time.Duration
	seq    int
	worker int
}

type simQueue []simEvent

func (q simQueue) Len() int { return len(q) }
func (q simQueue) Less(i, j int) bool {
	if q[i].at != q[j].at {
		return q[i].at < q[j].at
	}
	return q[i].seq < q[j].seq
}
func (q simQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *simQueue) Push(x any)   { *q = append(*q, x.(simEvent)) }
func (q *simQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}

type simWorker struct {
	waiting  bool          // for an answer, rather than to attempt
	attempt  int           // of the current call, from 0
	deadline time.Duration // of the current call
	answerOK bool          // the answer being waited for
}

type simResult struct {
	calls      int // attempts that reached the account before simDuration
	successes  int // calls that ended in success
	failures   int // calls that ended in failure (429 after the last attempt, budget, deadline)
	maxRetries int // the most retries that reached the account within one millisecond
}

// simulate runs simWorkers workers, each making one call after another
// for simDuration, every call with retries as s says.
func simulate(s simStrategy) simResult {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	acct := &simAccount{window: make(map[int64]int)}
	workers := make([]simWorker, simWorkers)
	var (
		q   simQueue
		seq int
		res simResult
	)
	wake := func(w int, at time.Duration) {
		seq++
		heap.Push(&q, simEvent{at, seq, w})
	}
	begin := func(w int, now time.Duration) {
		workers[w] = simWorker{deadline: now + simDeadline}
		wake(w, now)
	}
	for w := range workers {
		begin(w, 0)
	}
	for q.Len() > 0 {
		e := heap.Pop(&q).(simEvent)
		if e.at >= simDuration {
			break
		}
		now, w := e.at, &workers[e.worker]
		if !w.waiting {
			ok, wait := s.admit(start.Add(now))
			if !ok {
				if now+wait >= w.deadline {
					// No room before the deadline: the call fails
					// without reaching the account.
					res.failures++
					begin(e.worker, now)
				} else {
					wake(e.worker, now+wait)
				}
				continue
			}
			w.answerOK = acct.call(now, w.attempt)
			w.waiting = true
			wake(e.worker, now+simLatency)
			continue
		}
		w.waiting = false
		if w.answerOK {
			s.succeeded()
			res.successes++
			begin(e.worker, now)
			continue
		}
		wait, ok := s.failed(w.attempt, start.Add(now), start.Add(w.deadline))
		if !ok {
			res.failures++
			begin(e.worker, now)
			continue
		}
		w.attempt++
		wake(e.worker, now+wait)
	}

	retriesPerTick := make(map[time.Duration]int)
	for _, a := range acct.arrivals {
		if a.at >= simDuration {
			continue
		}
		res.calls++
		if a.attempt > 0 {
			tick := a.at.Truncate(time.Millisecond)
			retriesPerTick[tick]++
			res.maxRetries = max(res.maxRetries, retriesPerTick[tick])
		}
	}
	return res
}

// TestSimulation runs 20 workers for 20 virtual seconds against an account
// that takes 10 calls a second and answers 429 beyond, once with
// fixed-delay retries and no shared budget, once with full jitter, a shared
// Bucket and a shared RetryBudget. The budgeted workers keep the calls
// reaching the account within its allowance, and their retries come back
// apart; the naive ones flood the account, their retries in lockstep.
func TestSimulation(t *testing.T) {
	naive := simulate(fixedDelay{})
	b := &budgeted{
		backoff: Backoff{Base: 100 * time.Millisecond, Cap: 2 * time.Second, MaxAttempts: simAttempts, Rand: seeded(5)},
		bucket:  NewBucket(Allowance{Rate: simRate, Burst: simBurst}, time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)),
		budget:  NewRetryBudget(DefaultMaxTokens, DefaultTokenRatio),
	}
	shared := simulate(b)

	allowance := int(simRate * simDuration.Seconds())
	bound := allowance + simBurst + simWorkers
	t.Logf("account allowance over %v: %d calls; bound: %d", simDuration, allowance, bound)
	t.Logf("(a) fixed delay, no budget:      %d calls reached the account, %d calls succeeded, %d failed, up to %d retries in one millisecond",
		naive.calls, naive.successes, naive.failures, naive.maxRetries)
	t.Logf("(b) full jitter, Bucket, budget: %d calls reached the account, %d calls succeeded, %d failed, up to %d retries in one millisecond; the budget refused %d retries, level %.1f at the end",
		shared.calls, shared.successes, shared.failures, shared.maxRetries, b.denied, b.budget.Level())

	if shared.calls > bound {
		t.Errorf("(b): %d calls reached the account, want at most %d", shared.calls, bound)
	}
	if naive.calls <= 2*bound {
		t.Errorf("(a): %d calls reached the account; the naive strategy should flood it, well beyond %d", naive.calls, bound)
	}
	// The budget must bound the calls by spending them well, not by
	// making none: the account's capacity is nearly all used.
	if shared.successes < allowance*8/10 {
		t.Errorf("(b): %d calls succeeded, want at least 80%% of the %d the account allows", shared.successes, allowance)
	}
	if naive.maxRetries < simWorkers/4 {
		t.Errorf("(a): at most %d retries reached the account in one millisecond; fixed delays should synchronise them", naive.maxRetries)
	}
	if shared.maxRetries > 2 {
		t.Errorf("(b): %d retries reached the account in one millisecond; full jitter should spread them", shared.maxRetries)
	}
}
