package workcount

import (
	"sync"
	"testing"
)

func TestWaitWithNothingStarted(t *testing.T) {
	var c Count
	c.Wait() // returns at once
	c.Start()
	c.Done()
	c.Wait()
}

// TestWaitSeesEveryDone checks that a Wait returns only once every piece
// of work is done, and after what each did (the race detector checks the
// order), whether the last Done comes before the Wait begins, while it
// looks, or while it sleeps, and with several waiters.
func TestWaitSeesEveryDone(t *testing.T) {
	var c Count
	for round := range 2000 {
		const work = 4
		var did [work]bool
		for i := range work {
			c.Start()
			go func() {
				did[i] = true
				c.Done()
			}()
		}
		var waiters sync.WaitGroup
		for range round % 3 {
			waiters.Go(func() {
				c.Wait()
				for i := range work {
					if !did[i] {
						t.Errorf("round %d: a waiter returned before work %d was done", round, i)
					}
				}
			})
		}
		c.Wait()
		for i := range work {
			if !did[i] {
				t.Fatalf("round %d: Wait returned before work %d was done", round, i)
			}
		}
		waiters.Wait()
	}
}

// TestWaitSeesWorkStartedByWork checks that work started by work the
// count holds is waited for too, as a WaitGroup's is.
func TestWaitSeesWorkStartedByWork(t *testing.T) {
	var c Count
	done := false
	c.Start()
	go func() {
		c.Start()
		go func() {
			done = true
			c.Done()
		}()
		c.Done()
	}()
	c.Wait()
	if !done {
		t.Fatal("Wait returned before the work started by work was done")
	}
}

func TestDoneBelowZeroPanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("Done with nothing started did not panic")
		}
	}()
	var c Count
	c.Done()
}
