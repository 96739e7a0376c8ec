package workers

import (
	"runtime/metrics"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// TestRunsEach: every function handed to Go runs once, however many come
// at once.
func TestRunsEach(t *testing.T) {
	p := New(time.Second)
	const n = 1000
	var mu sync.Mutex
	ran := make(map[int]int)
	var wg sync.WaitGroup
	wg.Add(n)
	for i := range n {
		p.Go(func() {
			defer wg.Done()
			mu.Lock()
			ran[i]++
			mu.Unlock()
		})
	}
	wg.Wait()
	for i := range n {
		if ran[i] != 1 {
			t.Fatalf("function %d ran %d times; want once", i, ran[i])
		}
	}
}

// TestGoNeverWaits: with every worker busy, Go starts another rather than
// wait for one; and so does a nil Pool, for each function.
func TestGoNeverWaits(t *testing.T) {
	for _, pooled := range []bool{true, false} {
		synctest.Test(t, func(t *testing.T) {
			var p *Pool
			if pooled {
				p = New(time.Second)
			}
			release := make(chan struct{})
			const n = 10
			started := make(chan int, n)
			for i := range n {
				p.Go(func() {
					started <- i
					<-release
				})
			}
			synctest.Wait()
			if len(started) != n {
				t.Errorf("%d of %d blocked functions started; want all", len(started), n)
			}
			close(release)
			time.Sleep(2 * time.Second) // the workers end, idle
		})
	}
}

// TestReusesWorkers: a function handed to Go while a worker waits runs on
// that worker, whose stack has grown already: functions one after the
// other start no goroutine after the first.
func TestReusesWorkers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := New(time.Minute)
		done := make(chan struct{})
		run := func() {
			p.Go(func() { done <- struct{}{} })
			<-done
			synctest.Wait() // the worker waits for the next
		}
		run()
		const n = 200
		before := goroutinesCreated()
		for range n {
			run()
		}
		if made := goroutinesCreated() - before; made > 2 {
			t.Errorf("%d functions one after the other started %d goroutines; want none", n, made)
		}
		time.Sleep(2 * time.Minute) // the worker ends, idle
	})
}

// TestIdleWorkersEnd: a worker ends once it has waited idle, and a later
// function gets a worker of its own.
func TestIdleWorkersEnd(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := New(time.Second)
		ran := make(chan struct{})
		p.Go(func() { ran <- struct{}{} })
		<-ran
		time.Sleep(time.Second + time.Millisecond)
		synctest.Wait()
		if n := p.waiting(); n != 0 {
			t.Fatalf("%d workers still wait after their idle time; want none", n)
		}
		p.Go(func() { ran <- struct{}{} })
		<-ran
		time.Sleep(2 * time.Second) // the second worker ends too
	})
}

// TestGoAsIdleTimeRunsOut: a function handed to Go just as the workers'
// idle time runs out runs all the same, on a worker that stays or a new
// one, and the workers still end.
func TestGoAsIdleTimeRunsOut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := New(time.Second)
		var wg sync.WaitGroup
		run := func(n int) {
			for range n {
				wg.Add(1)
				p.Go(wg.Done)
			}
		}
		for range 300 {
			run(4)
			wg.Wait()
			synctest.Wait()
			time.Sleep(time.Second)
			run(4) // as the timers fire
			wg.Wait()
		}
		time.Sleep(2 * time.Second)
		synctest.Wait()
		if n := p.waiting(); n != 0 {
			t.Errorf("%d workers still wait after their idle time; want none", n)
		}
	})
}

// TestBurstEnds: the workers a burst left over end, though calls keep
// coming one at a time more often than the idle time: the worker that
// waited least takes each.
func TestBurstEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := New(time.Second)
		release := make(chan struct{})
		for range 20 {
			p.Go(func() { <-release })
		}
		close(release)
		synctest.Wait()
		if n := p.waiting(); n != 20 {
			t.Fatalf("%d workers wait after the burst; want 20", n)
		}
		for range 30 {
			p.Go(func() {})
			time.Sleep(100 * time.Millisecond)
		}
		synctest.Wait()
		if n := p.waiting(); n != 1 {
			t.Errorf("%d workers wait after calls one at a time for 3 s; want 1", n)
		}
		time.Sleep(2 * time.Second)
	})
}

// waiting returns how many workers wait for a function.
func (p *Pool) waiting() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.free)
}

func goroutinesCreated() uint64 {
	m := []metrics.Sample{{Name: "/sched/goroutines-created:goroutines"}}
	metrics.Read(m)
	return m[0].Value.Uint64()
}
