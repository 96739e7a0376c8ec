package proxy

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"
)

// TestCallContext checks a call's context: it ends when the call ends or
// the session's context does, whichever is first, and contexts derived
// from it end with it.
func TestCallContext(t *testing.T) {
	isDone := func(ch <-chan struct{}) bool {
		select {
		case <-ch:
			return true
		default:
			return false
		}
	}
	t.Run("call ends", func(t *testing.T) {
		session, cancel := context.WithCancel(t.Context())
		defer cancel()
		c := &callContext{Context: session}
		derived, stop := context.WithTimeout(c, time.Hour)
		defer stop()
		if c.Err() != nil || isDone(c.Done()) {
			t.Fatal("a new call's context has ended")
		}
		c.end()
		if !errors.Is(c.Err(), context.Canceled) || !isDone(c.Done()) {
			t.Fatalf("after end: Err = %v, Done closed = %v", c.Err(), isDone(c.Done()))
		}
		select {
		case <-derived.Done():
		case <-time.After(5 * time.Second):
			t.Fatal("a context derived from the call's did not end with it")
		}
		if session.Err() != nil {
			t.Fatal("ending a call ended the session's context")
		}
		c.end() // twice is fine
	})
	t.Run("derived contexts start no goroutine", func(t *testing.T) {
		session, cancel := context.WithCancel(t.Context())
		defer cancel()
		c := &callContext{Context: session}
		before := runtime.NumGoroutine()
		var derived []context.Context
		for range 50 {
			d, stop := context.WithTimeout(c, time.Hour)
			defer stop()
			derived = append(derived, d)
		}
		if n := runtime.NumGoroutine() - before; n > 5 {
			t.Errorf("50 contexts derived from a call's started %d goroutines; want none", n)
		}
		c.end()
		for _, d := range derived {
			select {
			case <-d.Done():
			case <-time.After(5 * time.Second):
				t.Fatal("a context derived from the call's did not end with it")
			}
			if !errors.Is(d.Err(), context.Canceled) {
				t.Fatalf("derived Err = %v; want Canceled", d.Err())
			}
		}
	})
	t.Run("AfterFunc", func(t *testing.T) {
		c := &callContext{Context: t.Context()}
		ran := make(chan string, 3)
		stopped := c.AfterFunc(func() { ran <- "stopped" })
		kept := c.AfterFunc(func() { ran <- "kept" })
		if !stopped() {
			t.Fatal("stop before the end = false; want true")
		}
		if stopped() {
			t.Fatal("a second stop = true; want false")
		}
		if n := len(c.waits.funcs); n != 1 {
			t.Fatalf("%d functions registered after a stop; want the one kept", n)
		}
		c.end()
		if got := <-ran; got != "kept" {
			t.Fatalf("ran %q; want the function that was kept", got)
		}
		if kept() {
			t.Fatal("stop of a function the end started = true; want false")
		}
		late := c.AfterFunc(func() { ran <- "late" })
		if got := <-ran; got != "late" {
			t.Fatalf("ran %q; want the function registered after the end", got)
		}
		if late() {
			t.Fatal("stop of a function already started = true; want false")
		}
	})
	t.Run("session ends", func(t *testing.T) {
		session, cancel := context.WithCancel(t.Context())
		c := &callContext{Context: session}
		done := c.Done()
		cancel()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatal("the call's context did not end with the session's")
		}
		if !errors.Is(c.Err(), context.Canceled) {
			t.Fatalf("Err = %v", c.Err())
		}
		c.end()
	})
	t.Run("the first error stays", func(t *testing.T) {
		session, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
		defer cancel()
		c := &callContext{Context: session}
		c.end()
		<-session.Done()
		if !errors.Is(c.Err(), context.Canceled) {
			t.Fatalf("ended, then the session's deadline passed: Err = %v, want the call's own Canceled", c.Err())
		}
		deadline, stop := context.WithDeadline(t.Context(), time.Now())
		defer stop()
		d := &callContext{Context: deadline}
		if !errors.Is(d.Err(), context.DeadlineExceeded) {
			t.Fatalf("the session's deadline passed: Err = %v", d.Err())
		}
		d.end()
		if !errors.Is(d.Err(), context.DeadlineExceeded) || !isDone(d.Done()) {
			t.Fatalf("then the call ended: Err = %v, Done closed = %v; want DeadlineExceeded still", d.Err(), isDone(d.Done()))
		}
	})
	t.Run("Done after end", func(t *testing.T) {
		c := &callContext{Context: t.Context()}
		c.end()
		if !isDone(c.Done()) {
			t.Fatal("Done asked for after the end is open")
		}
	})
}
