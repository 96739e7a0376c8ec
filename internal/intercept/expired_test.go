package intercept

import (
	"context"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/fingerprint"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
)

// purgeAtDelivery is a store outside the process whose purge drops a
// completed record, its retention run out, as its delivery is about to
// be written: a tiny retention, and an identical call whose reservation
// purges. The delivery's write waits until resume is closed.
type purgeAtDelivery struct {
	*amnesiac
	done   atomic.Bool
	purged chan struct{}
	resume chan struct{}
}

func (p *purgeAtDelivery) Update(ctx context.Context, id string, c record.Change) (*record.Record, error) {
	if c.To == record.Delivered && p.done.CompareAndSwap(false, true) {
		time.Sleep(time.Millisecond) // the retention runs out
		p.lose()
		close(p.purged)
		<-p.resume
	}
	return p.amnesiac.Update(ctx, id, c)
}

// TestCallAfterTheRecordExpiredAsItWasDelivered: a record the store
// purged once its retention ran out is not a record the store lost. An
// identical call made after the first caller's answer, while its
// delivery is written, runs a new execution, as after any expiry; it
// does not wait for the ended one to be written again, which never
// comes.
func TestCallAfterTheRecordExpiredAsItWasDelivered(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(charged)
		h.pol.Retention = time.Millisecond
		store := &purgeAtDelivery{amnesiac: newAmnesiac(), purged: make(chan struct{}), resume: make(chan struct{})}
		h.in = New(Options{Store: store, Hasher: fingerprint.NewRandom(), StoreWaits: true})
		first := h.call(t.Context(), t, chargeCall)
		<-store.purged
		if v := view(t, first.only(t)); v.Content[0].Text != "charge #1" {
			t.Fatalf("the first caller got %+v; want the charge", v)
		}
		again := h.call(t.Context(), t, chargeCall)
		synctest.Wait()
		close(store.resume)
		ans := again.only(t)
		if ans.Error != nil {
			t.Fatalf("the call after the expiry got %s; want a new charge", ans.Error)
		}
		if v := view(t, ans); v.Meta.Replayed || v.Content[0].Text != "charge #2" {
			t.Fatalf("the call after the expiry got %+v; want a new charge", v)
		}
		if err := h.in.Wait(t.Context()); err != nil {
			t.Fatal(err)
		}
	})
}

// TestDeliveryOfAnExpiredRecordIsNoError: a record whose retention ran
// out before its delivery was written is gone as it should be. That is
// no error for the log, as a store that lost its data would be.
func TestDeliveryOfAnExpiredRecordIsNoError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(charged)
		h.pol.Retention = time.Millisecond
		store := &purgeAtDelivery{amnesiac: newAmnesiac(), purged: make(chan struct{}), resume: make(chan struct{})}
		close(store.resume)
		var logs lockedBuffer
		h.in = New(Options{Store: store, Hasher: fingerprint.NewRandom(), StoreWaits: true,
			Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))})
		if v := view(t, h.call(t.Context(), t, chargeCall).only(t)); v.Content[0].Text != "charge #1" {
			t.Fatalf("the caller got %+v; want the charge", v)
		}
		if err := h.in.Wait(t.Context()); err != nil {
			t.Fatal(err)
		}
		if out := logs.String(); strings.Contains(out, "level=ERROR") || !strings.Contains(out, "retention ran out") {
			t.Fatalf("logged:\n%s\nwant the expiry said, and no error", out)
		}
	})
}

// purgeCounter is a memory store that drops expired records only when
// asked, as SQLite and PostgreSQL do, and counts the times it is.
type purgeCounter struct {
	record.Store
	purges atomic.Int32
}

func (p *purgeCounter) Purge(ctx context.Context, limit int) (int, error) {
	p.purges.Add(1)
	return 0, nil
}

// TestIdleStoreIsPurged: a store that purges only when asked is asked
// at each lease renewal, so a proxy that no call reaches keeps no result
// past its retention.
func TestIdleStoreIsPurged(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := &purgeCounter{Store: newAmnesiac().store()}
		in := New(Options{Store: store, Hasher: fingerprint.NewRandom(), Lease: 30 * time.Second})
		ctx, stop := context.WithCancel(t.Context())
		defer stop()
		go in.KeepLeases(ctx)
		time.Sleep(time.Minute + time.Second)
		synctest.Wait()
		if n := store.purges.Load(); n != 6 {
			t.Fatalf("the store was asked to purge %d times in a minute of a 30s lease; want 6", n)
		}
	})
}
