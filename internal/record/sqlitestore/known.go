package sqlitestore

import (
	"context"
	"slices"
	"time"
	"unicode/utf8"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
)

// A Store remembers the records it last reserved or updated, with their
// history, attached count and lease as stored. An update of a record it
// knows writes the change without reading the record first, if the
// stored record still has that history, count and lease: then no
// transition came between, and no field changed. Reading and decoding
// the record was a quarter of the writer's time at 32 executions in
// flight. A record that moved on meanwhile, or was attached to or
// renewed, is read, in the same transaction, as one it does not know.
//
// The statement returns nothing: it could not change the record unless
// the record was as known, and what it wrote is known too. A RETURNING
// clause made SQLite build a table for its rows on every update, which
// with the scan of the row cost the writer more than the count and the
// lease, which change seldom, cost to compare.

// A known record is one as this Store last wrote it.
type known struct {
	rec     *record.Record // never modified
	history string         // its history column
}

// writeKnownText writes a change to a record whose history, attached
// count and, unless the change sets it, lease are the ones given. The
// result and the error are written only as the change gives them: the
// store's copy is never written back. Its parameters are anonymous, the
// one that says whether the change sets the lease given twice:
// modernc.org/sqlite reads a numbered one's name back from SQLite, and
// parses it, at every call.
const writeKnownText = `UPDATE records SET state = ?, history = ?, attempts = ?, result = coalesce(?, result), error = coalesce(?, error),
	expires_at = ?, owner = ?, awaiting = ?, lease_until = CASE WHEN ? THEN ? ELSE lease_until END
	WHERE id = ? AND history = ? AND attached = ? AND (? OR lease_until IS ?)`

// remember keeps r, whose history column is history, for the next
// update, once c made it and it is committed. A record no update moves
// on any more is forgotten, and so is one whose history is not known
// (""), or that c's strings made differ from what is stored.
func (s *Store) remember(r *record.Record, history string, c record.Change) {
	if !record.WorthKnowing(r) || history == "" || !storedAsIs(c) {
		s.known.Drop(r.ID)
		return
	}
	kept := r.Clone()
	kept.Orphan = nil
	s.known.Put(r.ID, known{rec: kept, history: history})
}

// updateKnown is Update's write of c to k, in tx at now, without reading
// the record. It returns a nil record, and writes nothing, if the record
// moved on since k, or is gone, or c does not apply to k.
func (s *Store) updateKnown(ctx context.Context, tx *wtx, now time.Time, k known, c record.Change) (*record.Record, string, error) {
	if !c.AllowedFor(k.rec) || len(k.rec.History) == 0 {
		return nil, "", nil // read: a conflict, or a record that moved on
	}
	r := k.rec.Clone()
	apply(r, c, now)
	// What json.Marshal makes of the whole history: one more element.
	b := append(make([]byte, 0, len(k.history)+128), k.history[:len(k.history)-1]...)
	b, err := record.AppendTransitionJSON(append(b, ','), r.History[len(r.History)-1])
	if err != nil {
		return nil, "", err
	}
	history := string(append(b, ']'))
	ownBuffers(r, c)
	setsLease := c.To.Settled() || c.Owner != ""
	res, err := tx.stmt(ctx, s.st.writeKnown).ExecContext(ctx,
		r.State, history, r.Attempts, jsonText(c.Result), jsonText(c.Error),
		nanos(r.ExpiresAt), r.Owner, r.Awaiting, setsLease, nanos(r.LeaseUntil),
		r.ID, k.history, k.rec.Attached, setsLease, nanos(k.rec.LeaseUntil))
	if err != nil {
		return nil, "", err // SQLite's, whose statement it undid (runBeside)
	}
	switch n, err := res.RowsAffected(); {
	case err != nil:
		// modernc.org/sqlite's never fails; one that did would come
		// after the change.
		return nil, "", errChanged{err}
	case n == 0:
		return nil, "", nil
	}
	// As a read gives it.
	if !r.LeaseUntil.IsZero() {
		r.LeaseUntil = time.Unix(0, r.LeaseUntil.UnixNano()).UTC()
	}
	return r, history, nil
}

// storedAsIs reports whether c's strings are stored as they are: JSON
// keeps valid UTF-8 only, and json.Marshal replaces the rest.
func storedAsIs(c record.Change) bool {
	return utf8.ValidString(c.Note) && utf8.ValidString(c.By) && utf8.ValidString(c.Via)
}

// ownBuffers gives r, which c changed, copies of c's result and error:
// the caller's buffers stay the caller's, and r is remembered.
func ownBuffers(r *record.Record, c record.Change) {
	if c.Result != nil {
		r.Result = slices.Clone(c.Result)
	}
	if c.Error != nil {
		r.Error = slices.Clone(c.Error)
	}
}
