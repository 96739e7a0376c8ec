package record

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"
)

// TestReadingAfterAWrite: a record read before a write of the counts and
// shown after it is read again, so that it shows each attach once.
func TestReadingAfterAWrite(t *testing.T) {
	stored := 0 // the count as a store holds it
	var a AttachCounts
	a.Start(time.Hour, func(ctx context.Context, ids []string, ns []int32) error {
		stored += int(ns[0])
		a.Written(ids, ns)
		return nil
	}, nil)
	defer a.Close(context.Background())
	ctx := context.Background()
	read := func() *Record { return &Record{ID: "exe_1", Attached: stored} }
	storedCount := func(context.Context, string) (int, error) { return stored, nil }

	for want := 1; want <= 3; want++ {
		r, err := a.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := r.Add(ctx, read(), storedCount); err != nil || got.Attached != want {
			t.Fatalf("attach %d: shows %v, %v; want %d", want, got.Attached, err, want)
		}
	}
	r, err := a.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	before := read() // read before the write: stored 0, pending 3
	if err := a.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	rereads := 0
	got, err := r.Show(ctx, before, func(ctx context.Context, id string) (int, error) {
		rereads++
		return storedCount(ctx, id)
	})
	if err != nil || got.Attached != 3 || rereads != 1 {
		t.Errorf("a record read before the write shows %d (%v), read again %d times; want 3, once", got.Attached, err, rereads)
	}
	if r, err = a.Begin(ctx); err != nil {
		t.Fatal(err)
	}
	if got, err := r.Show(ctx, read(), nil); err != nil || got.Attached != 3 {
		t.Errorf("a record read after the write shows %d (%v); want 3", got.Attached, err)
	}
}

// TestBeginWaitsOutAWrite: a read does not begin while the counts are
// being written, which it could meet on either side of their commit.
func TestBeginWaitsOutAWrite(t *testing.T) {
	release := make(chan struct{})
	var a AttachCounts
	a.Start(time.Hour, func(ctx context.Context, ids []string, ns []int32) error {
		<-release
		a.Written(ids, ns)
		return nil
	}, nil)
	ctx := context.Background()
	r, err := a.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Add(ctx, &Record{ID: "exe_1"}, nil); err != nil {
		t.Fatal(err)
	}
	flushed := make(chan error, 1)
	go func() { flushed <- a.Flush(ctx) }()
	for {
		a.mu.Lock()
		writing := a.writes%2 == 1
		a.mu.Unlock()
		if writing {
			break
		}
		time.Sleep(time.Millisecond)
	}
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if _, err := a.Begin(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Begin during a write: %v; want it to wait until its context ends", err)
	}
	close(release)
	if err := <-flushed; err != nil {
		t.Fatal(err)
	}
	if _, err := a.Begin(ctx); err != nil {
		t.Errorf("Begin after the write: %v", err)
	}
	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestSlowFailingWritesLetReadsIn: a write of the counts that fails
// slowly (a store that times out each time) is followed by a whole
// period without one, so that reads, which wait out each write, get in
// between. Written back to back, every read waited for ever.
func TestSlowFailingWritesLetReadsIn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var a AttachCounts
		a.Start(time.Second, func(ctx context.Context, ids []string, ns []int32) error {
			time.Sleep(2 * time.Second) // the store's timeout
			return errors.New("timed out")
		}, nil)
		ctx := context.Background()
		defer a.Close(ctx) // its last write fails too
		r, err := a.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := r.Add(ctx, &Record{ID: "exe_1"}, func(context.Context, string) (int, error) { return 0, nil }); err != nil {
			t.Fatal(err)
		}
		time.Sleep(1500 * time.Millisecond) // into the first write
		for i := range 5 {
			wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			_, err := a.Begin(wctx)
			cancel()
			if err != nil {
				t.Fatalf("read %d, while writes fail slowly: %v", i, err)
			}
			time.Sleep(700 * time.Millisecond)
		}
	})
}

// TestTryMatchNeverWaits: a caller that must not wait is told no, and
// nothing is counted, while a write of the counts is under way or once
// one began after its Reading; otherwise it counts as Match does.
func TestTryMatchNeverWaits(t *testing.T) {
	var a AttachCounts
	r, ok := a.TryBegin()
	if !ok {
		t.Fatal("TryBegin with no write under way: not ok")
	}
	rec := &Record{ID: "exe_1", Fingerprint: "fp"}
	if !r.TryMatch(rec, "fp") || rec.Attached != 1 {
		t.Fatalf("TryMatch of the action: ok false or Attached %d; want it counted, 1", rec.Attached)
	}
	other := &Record{ID: "exe_1", Fingerprint: "fp"}
	if !r.TryMatch(other, "another") || other.Attached != 1 {
		t.Fatalf("TryMatch of another action: Attached %d; want 1, shown and not counted", other.Attached)
	}

	stale, _ := a.TryBegin()
	ids, _ := a.begin() // a write of the counts begins
	if len(ids) != 1 {
		t.Fatalf("begin took %v; want the one count", ids)
	}
	if _, ok := a.TryBegin(); ok {
		t.Error("TryBegin while a write is under way: ok")
	}
	if stale.TryMatch(&Record{ID: "exe_1", Fingerprint: "fp"}, "fp") {
		t.Error("TryMatch after a write began: ok")
	}
	a.end()
	if _, ok := a.TryBegin(); !ok {
		t.Error("TryBegin after the write ended: not ok")
	}
	if got := a.pending["exe_1"]; got != 1 {
		t.Errorf("pending count %d; want 1: the refused TryMatch counted nothing", got)
	}
}
