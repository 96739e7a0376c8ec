// Package memstore is the in-memory record.Store: one process, fastest, and
// forgotten when the process exits.
package memstore

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
)

// Options configures a Store. The zero value is ready to use.
type Options struct {
	// Now returns the current time; nil means time.Now.
	Now func() time.Time
}

// Store is a record.Store held in memory. Settled records are dropped once
// they expire, so memory is bounded by what the retention keeps.
//
// A record under way is held as a record.Record, copied on write: the
// store never changes a version it has handed out, so it hands out the
// one it holds, and each change makes the next. A record that leaves the
// live states is packed (pack.go), and a read of it decodes a copy.
//
// Entries are found by slot numbers, not pointers, and the indexes and
// the expiry heap hold slots and no pointers; packed records are kept in
// segments (segments.go), named by number too, and an entry names its
// flight by number: the collector has no pointer to follow, nor a word to
// look at, per retained record.
type Store struct {
	now func() time.Time

	mu    sync.Mutex // guards everything below
	byID  index      // every record not yet purged
	byKey index      // the record currently holding each key
	// live holds the records in flight or completed and not yet
	// delivered, the only ones not packed: the few the next change is
	// most likely for, looked up before byID, and those Renew looks
	// through.
	live    map[string]slot
	ents    entries     // the entries, by slot
	flights []*flight   // the live records' flights, by flightRef-1
	landed  []flightRef // flightRefs no entry names, to use again
	expires expiryHeap  // settled records by expiry
	segs    segments    // the packed records
	scratch []byte      // where pack writes before the copy kept
	commons commons     // what packed records share
	// views holds the packed records read last, decoded, by slot: the
	// replays of one record come in bursts, and each decoded copy costs
	// an allocation. A view, like a live version, is never changed.
	views [viewSlots]view
}

// A view is a packed record decoded: the record in slot.
type view struct {
	slot slot
	rec  *record.Record
}

// viewSlots is the number of views kept.
const viewSlots = 256

// A slot numbers an entry: ents.chunks[slot/chunkLen][slot%chunkLen].
type slot uint32

// chunkLen is the number of entries in a chunk: the entries grow a chunk
// at a time, so none is ever copied and a pointer to one stays good.
const chunkLen = 4096

// entry is one execution. A live one has its record in its flight, fl;
// any other is packed. An entry holds no pointer, so a chunk of them is
// memory the collector never scans.
type entry struct {
	fl flightRef
	// ref names the record encoded, while it is not live.
	ref packedRef
	// attached is a packed record's Attached count, kept outside it so
	// that a replay, which raises it, does not pack the record again. It
	// stops at the largest int32, where it makes the entry 8 bytes
	// smaller, and no real count reaches.
	attached int32
	index    int32 // position in the expiry heap, -1 when not in it
}

// A flightRef names a flight in Store.flights, plus one: 0 names none.
type flightRef uint32

// flight is what a live record needs besides its place: its versions,
// the channel its waiters share, and room for what its versions share.
type flight struct {
	rec *record.Record // never modified; replaced by each change
	// settled is closed when rec leaves the in-flight states; Wait selects
	// on it, so one close wakes every waiter at once. It is made by the
	// first Wait, not with the record: most executions are never waited
	// on.
	settled chan struct{}
	// history is where the record's versions keep their transitions:
	// room for the common life, in the flight's own allocation.
	history [commonLife]record.Transition
	// later holds the versions of the common life after the reservation's
	// (completed, then delivered), in the flight's own allocation too:
	// each written once, by the change that makes it. A version in a
	// state no change leaves (delivered, failed) always gets one, as it
	// is the one handed out as the record is packed.
	later [2]record.Record
	used  int // how many of later are written
}

var _ record.Store = (*Store)(nil)

// New returns an empty Store.
func New(opts Options) *Store {
	now := opts.Now
	if now == nil {
		now = time.Now
	}
	s := &Store{now: now, live: make(map[string]slot)}
	s.byID = newIndex(s.isID)
	s.byKey = newIndex(s.isKey)
	return s
}

// commonLife is the number of transitions of an execution that is
// accepted, dispatched, completed and delivered.
const commonLife = 4

// purgeBatch bounds the expired records dropped per call, so no single
// call pays for a large backlog.
const purgeBatch = 64

// at returns the entry in slot i.
func (s *Store) at(i slot) *entry { return s.ents.at(i) }

// flight returns e's flight, or nil when its record is packed.
func (s *Store) flight(e *entry) *flight {
	if e.fl == 0 {
		return nil
	}
	return s.flights[e.fl-1]
}

// fly gives e the flight fl.
func (s *Store) fly(e *entry, fl *flight) {
	if n := len(s.landed); n > 0 {
		e.fl = s.landed[n-1]
		s.landed = s.landed[:n-1]
		s.flights[e.fl-1] = fl
		return
	}
	s.flights = append(s.flights, fl)
	e.fl = flightRef(len(s.flights))
}

// land drops e's flight, if it has one: its waiters may hold it still.
func (s *Store) land(e *entry) {
	if e.fl == 0 {
		return
	}
	s.flights[e.fl-1] = nil
	s.landed = append(s.landed, e.fl)
	e.fl = 0
}

// lookup returns the slot and entry of the record id. s.mu must be held.
func (s *Store) lookup(id string) (slot, *entry, bool) {
	// Most changes are to a record under way: the small map first.
	i, ok := s.live[id]
	if !ok {
		i, ok = s.byID.get(id)
	}
	if !ok {
		return 0, nil, false
	}
	return i, s.at(i), true
}

// current returns the record of e, in slot i: the live version, or the
// packed one decoded. s.mu must be held.
func (s *Store) current(i slot, e *entry) *record.Record {
	if fl := s.flight(e); fl != nil {
		return fl.rec
	}
	v := &s.views[i%viewSlots]
	if v.rec == nil || v.slot != i {
		*v = view{slot: i, rec: unpack(s.segs.bytes(e.ref), int(e.attached), &s.commons)}
	}
	return v.rec
}

// forget drops the view of slot i, whose record changed. s.mu must be
// held.
func (s *Store) forget(i slot) {
	if v := &s.views[i%viewSlots]; v.slot == i {
		*v = view{}
	}
}

// state returns the state of e's record, decoding nothing.
func (s *Store) state(e *entry) record.State {
	if fl := s.flight(e); fl != nil {
		return fl.rec.State
	}
	return packedState(s.segs.bytes(e.ref))
}

// Reserve implements record.Store.
func (s *Store) Reserve(ctx context.Context, r *record.Record, opts record.ReserveOptions) (*record.Record, bool, error) {
	if err := ctx.Err(); err != nil {
		return nil, false, err
	}
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.purge(now, purgeBatch)

	var orphan *record.Record // settled here
	// Each string's place is found once, for the look-up and the add:
	// nothing changes the indexes in between.
	key := s.byKey.find(r.Key)
	if i, ok := s.byKey.slotAt(key); ok {
		e := s.at(i)
		if fl := s.flight(e); fl != nil && fl.rec.Orphaned(now) {
			c := record.OrphanChange(fl.rec)
			orphan = s.apply(i, e, &c, now)
		}
		if cur := s.current(i, e); !s.replaceable(cur, r, now, opts) {
			if cur.Fingerprint == r.Fingerprint {
				cur = s.attach(i, e, cur)
			}
			return cur.WithOrphan(orphan), false, nil
		}
	}
	id := s.byID.find(r.ID)
	if id.found {
		return nil, false, fmt.Errorf("reserving %s: execution id already used", r.ID)
	}
	rec := r // the store's now (record.Store)
	rec.State = record.Accepted
	rec.LeaseUntil = opts.LeaseFrom(r, now)
	rec.ExpiresAt = time.Time{}
	i, e := s.ents.alloc()
	// Room for the common life (accepted, dispatched, completed,
	// delivered) up front: one allocation instead of three as it grows.
	// Each version appends past the end of the one before, which never
	// sees it.
	fl := &flight{rec: rec}
	fl.history[0] = record.Transition{State: record.Accepted, At: now}
	rec.History = fl.history[:1]
	*e = entry{index: -1}
	s.fly(e, fl)
	s.byID.put(rec.ID, id, i)
	s.byKey.put(rec.Key, key, i)
	s.live[rec.ID] = i
	if opts.Dispatch {
		// No one has this version yet: it may change in place.
		rec.Apply(&record.Change{To: record.Dispatched}, now)
	}
	return rec.WithOrphan(orphan), true, nil
}

// attach counts one more caller of cur, the record of e in slot i, and
// returns the version that counts it. s.mu must be held.
func (s *Store) attach(i slot, e *entry, cur *record.Record) *record.Record {
	attached := *cur
	attached.Attached++
	if fl := s.flight(e); fl != nil {
		fl.rec = &attached
	} else {
		if e.attached < math.MaxInt32 {
			e.attached++
		}
		s.views[i%viewSlots] = view{slot: i, rec: &attached}
	}
	return &attached
}

func (s *Store) replaceable(r, next *record.Record, now time.Time, opts record.ReserveOptions) bool {
	if r.State.Settled() && !now.Before(r.ExpiresAt) {
		return true
	}
	return r.Fingerprint == next.Fingerprint && (r.State == record.Failed || slices.Contains(opts.Replace, r.State))
}

// Update implements record.Store.
func (s *Store) Update(ctx context.Context, id string, c record.Change) (*record.Record, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	i, e, ok := s.lookup(id)
	if !ok {
		return nil, fmt.Errorf("updating %s: %w", id, record.ErrNotFound)
	}
	st := s.state(e)
	if st == record.Delivered && c.To == record.Delivered && c.From == "" {
		return s.current(i, e), nil
	}
	// The state is tested once, and the fences on the record only if
	// it passed: a packed one is decoded for them only then.
	if !c.AllowedFrom(st) || (c.Holder != "" || c.Attempts != 0) && !c.Fenced(s.current(i, e)) {
		return nil, fmt.Errorf("updating %s from %s to %s: %w", id, st, c.To, record.ErrConflict)
	}
	return s.apply(i, e, &c, now), nil
}

// apply moves the record of e, in slot i, by c, which CanTransition
// allows, and returns the new version. s.mu must be held.
func (s *Store) apply(i slot, e *entry, c *record.Change, now time.Time) *record.Record {
	var r *record.Record
	fl := s.flight(e)
	switch {
	case fl == nil:
		next := *s.current(i, e)
		r = &next
	case fl.used < len(fl.later) && (fl.used == 0 || c.To == record.Delivered || c.To == record.Failed):
		fl.later[fl.used] = *fl.rec
		r = &fl.later[fl.used]
		fl.used++
	default:
		next := *fl.rec
		r = &next
	}
	wasInFlight := r.State.InFlight()
	r.Apply(c, now)
	// A state test compares strings: each is asked once, of c.To,
	// which is r's state now.
	settled := c.To.Settled()
	if wasInFlight && settled && fl.settled != nil {
		// The waiters hold the flight: one woken after a short
		// retention ran out and the record was purged reads it there.
		fl.rec = r
		close(fl.settled)
		fl.settled = nil // waiters hold it; a later Wait finds the record settled
	}
	// Live holds the records in flight or completed.
	switch live := !settled || c.To == record.Completed; {
	case live && fl != nil:
		fl.rec = r
	case live:
		// Back under way (a re-dispatch of an unknown one): new waiters
		// need a channel that is still open, which the next Wait makes.
		s.unpackInto(i, e, r)
	default:
		s.pack(i, e, r)
	}
	switch {
	case settled:
		switch expires := expirySecond(r.ExpiresAt.UnixNano()); {
		case e.index < 0:
			s.expires.push(s, i, expires)
		case expires < s.expires.items[e.index].expires:
			s.expires.items[e.index].expires = expires
			s.expires.fix(s, int(e.index))
		}
	case !wasInFlight && e.index >= 0:
		s.expires.remove(s, int(e.index))
	}
	return r
}

// pack keeps r, the record of e in slot i, packed from now on. s.mu must
// be held.
func (s *Store) pack(i slot, e *entry, r *record.Record) {
	cid := s.commons.ref(common{actor: r.Actor, scope: r.Scope, upstream: r.Upstream, tool: r.Tool, owner: r.Owner})
	s.drop(e)
	s.scratch = pack(s.scratch[:0], r, cid)
	e.ref = s.segs.put(s.scratch, i)
	if cap(s.scratch) > maxScratch {
		s.scratch = nil // one large result does not stay held
	}
	e.attached = int32(min(r.Attached, math.MaxInt32))
	s.land(e)
	s.forget(i)
	delete(s.live, r.ID)
}

// maxScratch bounds the scratch buffer the store keeps between packs.
const maxScratch = 64 << 10

// drop lets go of e's packed record, if it has one, and of its common.
// s.mu must be held.
func (s *Store) drop(e *entry) {
	if e.ref.n == 0 {
		return
	}
	s.commons.unref(packedCommon(s.segs.bytes(e.ref)))
	ref := e.ref
	e.ref = packedRef{} // before compact, which moves what entries name
	if k, ok := s.segs.release(ref); ok {
		s.compact(k)
	}
}

// unpackInto makes e, in slot i, live again with r. s.mu must be held.
func (s *Store) unpackInto(i slot, e *entry, r *record.Record) {
	s.fly(e, &flight{rec: r})
	s.drop(e)
	s.forget(i)
	s.live[r.ID] = i
}

// Renew implements record.Store.
func (s *Store) Renew(ctx context.Context, owner string, until time.Time) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.PurgeExpired()
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, i := range s.live {
		e := s.at(i)
		fl := s.flight(e)
		switch r := fl.rec; {
		case r.State.InFlight() && r.Owner == owner:
			renewed := *r
			renewed.LeaseUntil = until
			fl.rec = &renewed
		case r.State == record.Completed && now.Sub(r.At(record.Completed)) > staleCompletion:
			// Its caller left without the answer: no delivery is
			// coming soon, and live stays small.
			s.pack(i, e, r)
		}
	}
	return nil
}

// staleCompletion is how long a completed record stays in live waiting
// for its delivery; Update finds it in byID after that.
const staleCompletion = time.Minute

// Get implements record.Store.
func (s *Store) Get(ctx context.Context, id string) (*record.Record, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	i, ok := s.byID.get(id)
	if !ok {
		return nil, fmt.Errorf("getting %s: %w", id, record.ErrNotFound)
	}
	return s.current(i, s.at(i)), nil
}

// Wait implements record.Store.
func (s *Store) Wait(ctx context.Context, id string) (*record.Record, error) {
	var held *flight // the flight waited on, once
	for {
		now := s.now()
		s.mu.Lock()
		i, e, ok := s.lookup(id)
		if !ok {
			var r *record.Record
			if held != nil && held.rec.State.Settled() {
				r = held.rec // settled as this waited, then purged
			}
			s.mu.Unlock()
			if r != nil {
				return r, nil
			}
			return nil, fmt.Errorf("waiting for %s: %w", id, record.ErrNotFound)
		}
		var orphan *record.Record // settled here
		if fl := s.flight(e); fl != nil && fl.rec.Orphaned(now) {
			c := record.OrphanChange(fl.rec)
			orphan = s.apply(i, e, &c, now)
		}
		fl := s.flight(e)
		if fl == nil || fl.rec.State.Settled() {
			r := s.current(i, e)
			s.mu.Unlock()
			return r.WithOrphan(orphan), nil
		}
		if fl.settled == nil {
			fl.settled = make(chan struct{})
		}
		held = fl
		settled := fl.settled
		lease := fl.rec.LeaseUntil
		s.mu.Unlock()
		if err := waitFor(ctx, settled, lease, now); err != nil {
			return nil, err
		}
	}
}

// waitFor waits for settled to close, or for lease (if set) to pass, so
// that an orphan is noticed.
func waitFor(ctx context.Context, settled <-chan struct{}, lease, now time.Time) error {
	var lapse <-chan time.Time
	if !lease.IsZero() {
		t := time.NewTimer(lease.Sub(now) + time.Millisecond)
		defer t.Stop()
		lapse = t.C
	}
	select {
	case <-settled:
	case <-lapse:
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}

// Records returns every record the store holds, in no order. Read them,
// never change them: the live ones are shared.
func (s *Store) Records() []*record.Record {
	s.mu.Lock()
	defer s.mu.Unlock()
	recs := make([]*record.Record, 0, s.byID.n)
	for i := range s.byID.all() {
		recs = append(recs, s.current(i, s.at(i)))
	}
	return recs
}

// List implements record.Lister.
func (s *Store) List(ctx context.Context, f record.Filter) ([]*record.Record, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	floor := ""
	if !f.Since.IsZero() {
		floor = record.IDFloor(f.Since)
	}
	var recs []*record.Record
	for _, r := range s.Records() {
		if f.Matches(r) && r.ID >= floor {
			recs = append(recs, r)
		}
	}
	slices.SortFunc(recs, func(a, b *record.Record) int { return strings.Compare(b.ID, a.ID) })
	limit := f.Limit
	if limit <= 0 {
		limit = 100
	}
	if len(recs) > limit {
		recs = recs[:limit]
	}
	return recs, nil
}

// Len returns how many records the store holds.
func (s *Store) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.byID.n
}

// purge drops up to max expired records and reports whether it stopped
// at max, with more perhaps due. s.mu must be held.
func (s *Store) purge(now time.Time, max int) (more bool) {
	// By the wall clock alone, as the heap's keys: a time's monotonic
	// reading, which Before would use, can disagree with it after the
	// machine slept or its clock was set, and an entry due by one and
	// not by the other would be popped and pushed back for ever.
	wall := now.UnixNano()
	more, dropped := true, 0
	for range max {
		if len(s.expires.items) == 0 || wall < int64(s.expires.items[0].expires)*int64(time.Second) {
			more = false
			break
		}
		top := s.expires.items[0]
		s.expires.remove(s, 0)
		e := s.at(top.slot)
		if later := expirySecond(s.expiresAt(e)); later > top.expires {
			// Settled again since it was pushed (delivered after
			// completed): it expires later.
			s.expires.push(s, top.slot, later)
			continue
		}
		s.unindex(top.slot, e)
		s.drop(e)
		*e = entry{}
		s.forget(top.slot)
		s.ents.release(top.slot)
		dropped++
	}
	if dropped > 0 {
		// The room a burst of records grew the tables to goes with
		// them, and the chunks of entries they emptied.
		s.byID.shrink()
		s.byKey.shrink()
		s.expires.shrink()
		s.ents.giveBack(false)
	}
	return more
}

// expiresAt returns when e's record expires, in Unix nanoseconds.
func (s *Store) expiresAt(e *entry) int64 {
	if fl := s.flight(e); fl != nil {
		return fl.rec.ExpiresAt.UnixNano()
	}
	return packedExpires(s.segs.bytes(e.ref))
}

// isID reports whether id is the id of the record in slot i.
func (s *Store) isID(i slot, id string) bool {
	e := s.at(i)
	if fl := s.flight(e); fl != nil {
		return fl.rec.ID == id
	}
	return packedID(s.segs.bytes(e.ref)) == id
}

// isKey reports whether key is the key of the record in slot i.
func (s *Store) isKey(i slot, key string) bool {
	switch e, v := s.at(i), &s.views[i%viewSlots]; {
	case e.fl != 0:
		return s.flights[e.fl-1].rec.Key == key
	case v.rec != nil && v.slot == i:
		return v.rec.Key == key // spelled out already: a replay's
	default:
		return packedKeyIs(s.segs.bytes(e.ref), key)
	}
}

// unindex drops e, in slot i, from the indexes and live. s.mu must be
// held.
func (s *Store) unindex(i slot, e *entry) {
	if fl := s.flight(e); fl != nil {
		s.byID.remove(s.byID.tag(fl.rec.ID), i)
		s.byKey.remove(s.byKey.tag(fl.rec.Key), i)
		delete(s.live, fl.rec.ID) // completed, and never delivered
		s.land(e)
		return
	}
	p := s.segs.bytes(e.ref)
	s.byID.remove(s.byID.tag(packedID(p)), i)
	var buf [2 * hexKeyLen]byte
	s.byKey.remove(s.byKey.tagBytes(packedKey(buf[:0], p)), i)
}

// PurgeExpired drops every record whose retention has run out, a batch
// under the lock at a time, so that calls go on between batches. Renew
// calls it: a proxy renews its leases every few seconds, busy or idle, so
// a store that no call reaches is purged too, and gives back, a renewal
// later, the chunks of entries its last purges emptied.
func (s *Store) PurgeExpired() {
	s.mu.Lock()
	s.ents.idle()
	s.mu.Unlock()
	for more := true; more; {
		now := s.now()
		s.mu.Lock()
		more = s.purge(now, purgeIdleBatch)
		if !more {
			s.ents.renewed()
		}
		s.mu.Unlock()
	}
}

// purgeIdleBatch bounds the records PurgeExpired drops under the lock at
// once: about a millisecond's work.
const purgeIdleBatch = 4096
