package pgstore

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
)

// TestWaitersDoNotPollWhileListening: while the listening connection is
// up, a waiter waits for the notification and reads nothing meanwhile:
// thousands of waiters polling would take the pool from the work they
// wait for.
//
// The listener is up before the wait begins, and the waiter's own first
// two connections, to mark the record watched and to read it, are taken
// before the count starts: on a loaded machine they fell inside the
// 1.5 s watched here.
func TestWaitersDoNotPollWhileListening(t *testing.T) {
	s := newStore(t, nil)
	ctx := context.Background()
	r := newRecord("k", time.Now())
	r.Owner, r.LeaseUntil = "proxy-1", time.Now().Add(time.Hour)
	if _, _, err := s.Reserve(ctx, r, record.ReserveOptions{}); err != nil {
		t.Fatal(err)
	}
	s.listen()
	for !s.heard.Load() {
		time.Sleep(time.Millisecond)
	}
	first := s.acquired.Load()
	done := waitFor(s, r.ID)
	waiting(t, s, r.ID, 1)
	for s.acquired.Load() < first+2 {
		time.Sleep(time.Millisecond)
	}
	before := s.acquired.Load()
	time.Sleep(1500 * time.Millisecond)
	if n := s.acquired.Load() - before; n != 0 {
		t.Errorf("a waiter read the record %d times in 1.5s while the listener was up; want none", n)
	}
	if _, err := s.Update(ctx, r.ID, record.Change{To: record.Failed}); err != nil {
		t.Fatal(err)
	}
	if got := <-done; got == nil || got.State != record.Failed {
		t.Fatalf("Wait = %+v; want the record failed", got)
	}
}

// Waiters in another process (another Store here) are woken by the
// notification, whatever settles the record, not by the poll.
func TestWaitIsNotified(t *testing.T) {
	u, schema := serverURL(t), newSchema(t)
	writer, waiter := open(t, u, schema, nil), open(t, u, schema, nil)
	waiter.minPoll, waiter.maxPoll = time.Hour, time.Hour
	ctx := context.Background()

	settles := map[string]func(id string) error{
		"Update": func(id string) error {
			_, err := writer.Update(ctx, id, record.Change{To: record.Completed, Result: json.RawMessage(`{}`)})
			return err
		},
		"an operator's UPDATE": func(id string) error {
			_, err := writer.pool.Exec(ctx, writer.sql(`UPDATE {schema}.records SET state = 'unknown' WHERE id = $1`), id)
			return err
		},
		"a broken listening connection": func(id string) error {
			// Settled while nobody listens: the listener reconnects and
			// its waiters look again.
			if _, err := writer.pool.Exec(ctx, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query = $1", "LISTEN "+waiter.quoted); err != nil {
				return err
			}
			_, err := writer.Update(ctx, id, record.Change{To: record.Completed, Result: json.RawMessage(`{}`)})
			return err
		},
	}
	for name, settle := range settles {
		t.Run(name, func(t *testing.T) {
			r, _, err := writer.Reserve(ctx, newRecord(name, time.Now()), record.ReserveOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := writer.Update(ctx, r.ID, record.Change{To: record.Dispatched}); err != nil {
				t.Fatal(err)
			}
			const n = 5
			done := make([]<-chan *record.Record, n)
			for i := range done {
				done[i] = waitFor(waiter, r.ID)
			}
			waiting(t, waiter, r.ID, n)
			if err := settle(r.ID); err != nil {
				t.Fatal(err)
			}
			for _, d := range done {
				if got := <-d; got == nil || got.State.InFlight() {
					t.Fatalf("a waiter got %+v; want the settled record", got)
				}
			}
		})
	}
}

// Wait with its poll alone (no listener can help across a lapsed lease)
// returns when the lease lapses and settles the orphan.
func TestWaitEndsWithTheLease(t *testing.T) {
	s := newStore(t, nil)
	ctx := context.Background()
	r := newRecord("k", time.Now())
	r.Owner, r.LeaseUntil = "proxy-1", time.Now().Add(200*time.Millisecond)
	if _, _, err := s.Reserve(ctx, r, record.ReserveOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Update(ctx, r.ID, record.Change{To: record.Dispatched}); err != nil {
		t.Fatal(err)
	}
	s.minPoll, s.maxPoll = time.Hour, time.Hour
	got := <-waitFor(s, r.ID)
	if got == nil || got.State != record.Unknown || len(got.History) != 3 || !strings.Contains(got.History[2].Note, "proxy-1") {
		t.Fatalf("Wait over a lapsing lease = %+v; want it settled unknown", got)
	}
}
