package batch

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// store is a send function that records the batches it is given, and
// holds the first ones until released.
type store struct {
	holding chan struct{} // gets a value as each held batch waits
	release chan struct{} // closed to let the held batches go

	mu      sync.Mutex // protects the fields below
	held    int        // batches still to hold
	batches [][]int    // the jobs of each batch not held
}

// job is a caller's number, and the answer the store gives it.
type job struct {
	n      int
	answer int
}

func newStore(held int) *store {
	return &store{holding: make(chan struct{}, held), release: make(chan struct{}), held: held}
}

func (s *store) send(ctx context.Context, calls []*Call[*job]) {
	s.mu.Lock()
	if s.held > 0 {
		s.held--
		s.mu.Unlock()
		s.holding <- struct{}{}
		<-s.release
	} else {
		var ns []int
		for _, c := range calls {
			ns = append(ns, c.Job.n)
		}
		s.batches = append(s.batches, ns)
		s.mu.Unlock()
	}
	for _, c := range calls {
		c.Job.answer = -c.Job.n
	}
}

// busy makes every sender of q wait in st, and returns the callers'
// errors once st releases them.
func busy(t *testing.T, q *Queue[*job], st *store, senders int) <-chan error {
	t.Helper()
	errs := make(chan error, senders)
	for i := range senders {
		go func() { errs <- q.Do(context.Background(), &job{n: 1000 + i}) }()
	}
	for range senders {
		select {
		case <-st.holding:
		case <-time.After(10 * time.Second):
			t.Fatal("the held calls were never sent")
		}
	}
	return errs
}

// waiting waits until n calls wait in q.
func waiting(t *testing.T, q *Queue[*job], n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for q.Queued() < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d calls queued; want %d", q.Queued(), n)
		}
		runtime.Gosched()
	}
}

// TestCallAloneSentByItsCaller: a call that finds nothing waiting is
// sent at once, alone, under its caller's own context.
func TestCallAloneSentByItsCaller(t *testing.T) {
	type key struct{}
	var got context.Context
	q := Start(8, 2, func(ctx context.Context, calls []*Call[*job]) {
		got = ctx
		for _, c := range calls {
			c.Job.answer = len(calls)
		}
	})
	defer q.Close()
	ctx := context.WithValue(context.Background(), key{}, "caller")
	j := &job{n: 1}
	if err := q.Do(ctx, j); err != nil {
		t.Fatal(err)
	}
	if j.answer != 1 {
		t.Errorf("sent in a batch of %d; want alone", j.answer)
	}
	if got == nil || got.Value(key{}) != "caller" {
		t.Error("a call alone was not sent under its caller's context")
	}
}

// TestWaitingCallsGoTogether: calls that wait while every sender is busy
// go in batches of at most max, and each gets its own answer.
func TestWaitingCallsGoTogether(t *testing.T) {
	const senders, max, n = 2, 4, 10
	st := newStore(senders)
	q := Start(max, senders, st.send)
	defer q.Close()
	held := busy(t, q, st, senders)
	var wg sync.WaitGroup
	jobs := make([]*job, n)
	for i := range jobs {
		jobs[i] = &job{n: i}
		wg.Go(func() {
			if err := q.Do(context.Background(), jobs[i]); err != nil {
				t.Errorf("call %d: %v", i, err)
			}
		})
	}
	waiting(t, q, n)
	close(st.release)
	wg.Wait()
	for range senders {
		if err := <-held; err != nil {
			t.Errorf("a held call: %v", err)
		}
	}
	for _, j := range jobs {
		if j.answer != -j.n {
			t.Errorf("call %d answered %d; want %d", j.n, j.answer, -j.n)
		}
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	sent := 0
	for _, b := range st.batches {
		if len(b) > max {
			t.Errorf("a batch of %d calls; want at most %d", len(b), max)
		}
		sent += len(b)
	}
	if sent != n || len(st.batches) > (n+max-1)/max+senders {
		t.Errorf("%d calls in %d batches %v; want %d calls in about %d", sent, len(st.batches), st.batches, n, n/max)
	}
}

// TestQueuedCallLeaves: a caller whose context ends while its call
// waits returns at once, and its call is never sent; a queue that closes
// answers the callers still waiting with ErrClosed.
func TestQueuedCallLeaves(t *testing.T) {
	const senders = 1
	st := newStore(senders)
	q := Start(8, senders, st.send)
	held := busy(t, q, st, senders)

	ctx, cancel := context.WithCancel(context.Background())
	leaving := make(chan error, 1)
	go func() { leaving <- q.Do(ctx, &job{n: 1}) }()
	waiting(t, q, 1)
	cancel()
	select {
	case err := <-leaving:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("a caller that left: %v; want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a caller that left its queued call was not answered while the sender was busy")
	}

	staying := make(chan error, 1)
	go func() { staying <- q.Do(context.Background(), &job{n: 2}) }()
	waiting(t, q, 2) // the sender still holds the call that left
	closing := make(chan struct{})
	go func() { q.Close(); close(closing) }()
	if err := <-staying; !errors.Is(err, ErrClosed) {
		t.Errorf("a call queued when its queue closed: %v; want ErrClosed", err)
	}
	close(st.release)
	<-closing
	if err := <-held; err != nil {
		t.Errorf("the held call: %v", err)
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if len(st.batches) != 0 {
		t.Errorf("sent %v after the callers left", st.batches)
	}
}

func TestBatchContext(t *testing.T) {
	early, cancelEarly := context.WithTimeout(context.Background(), time.Minute)
	defer cancelEarly()
	late, cancelLate := context.WithTimeout(context.Background(), time.Hour)
	defer cancelLate()
	calls := func(ctxs ...context.Context) []*Call[*job] {
		var cs []*Call[*job]
		for _, ctx := range ctxs {
			cs = append(cs, &Call[*job]{Ctx: ctx})
		}
		return cs
	}

	ctx, cancel := batchContext(calls(early, late))
	if d, _ := ctx.Deadline(); !d.Equal(func() time.Time { d, _ := late.Deadline(); return d }()) {
		t.Errorf("deadline %v; want the latest of the callers'", d)
	}
	cancel()

	ctx, cancel = batchContext(calls(early, context.Background()))
	if _, ok := ctx.Deadline(); ok {
		t.Error("a batch with a caller without a deadline has one")
	}
	cancel()

	a, cancelA := context.WithCancel(context.Background())
	b, cancelB := context.WithCancel(context.Background())
	ctx, cancel = batchContext(calls(a, b))
	defer cancel()
	cancelA()
	if ctx.Err() != nil {
		t.Fatal("the batch ended when one of its two callers left")
	}
	cancelB()
	select {
	case <-ctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the batch went on after every caller left")
	}
}
