package pgstore

import (
	"encoding/json"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
)

// A Store remembers the records it last reserved or updated. An update of
// a record it knows applies only while the stored history has as many
// transitions as the copy (updateKnownSQL): then no transition came
// between, and no field changed but attached (counted by anyone) and
// lease_until (renewed). The statement returns those and expires_at, not
// the whole record, and the caller applies the change to its copy with
// record.Record.Apply, as the statement applied it. Returning the whole
// record, and decoding it, was about a tenth of what an execution cost
// the client and the server at 32 in flight. A record that moved on
// meanwhile is not changed, and Update reads it and tries again, as it
// does for a record it does not know.

// remember keeps rec, as stored, for the next update, and returns a copy
// for the caller. A record no update moves on any more is forgotten.
func (s *Store) remember(rec *record.Record) *record.Record {
	if !record.WorthKnowing(rec) {
		s.known.Drop(rec.ID)
	} else {
		kept := rec.Clone()
		kept.Orphan = nil
		s.known.Put(rec.ID, kept)
	}
	return rec.Clone()
}

// knownFor returns the record id as this Store knows it, if it does and
// c's strings would be stored as they are: valid UTF-8 without NUL
// (changeArgs).
func (s *Store) knownFor(id string, c record.Change) (*record.Record, bool) {
	for _, t := range []string{c.Note, c.By, c.Via} {
		if !utf8.ValidString(t) || strings.IndexByte(t, 0) >= 0 {
			return nil, false
		}
	}
	return s.known.Get(id)
}

// changeKnown is change for k, the record as this Store knows it: the
// record is nil too if it has moved on since.
func (s *Store) changeKnown(k *record.Record, c record.Change, from []record.State) (*stmt, **record.Record) {
	states := stateTexts(from)
	rec := new(*record.Record)
	st := &stmt{sql: s.q.updateKnown, order: k.ID}
	st.args = func(now time.Time) ([]any, error) {
		row, err := changeArgs(k.ID, c, now)
		st.known = &knownRow{changeRow: row, from: states, length: len(k.History)}
		return append(row.args(), states, len(k.History)), err
	}
	st.scan = func(row pgx.Row) error {
		var lease, expires pgtype.Timestamptz
		r := k.Clone()
		if err := row.Scan(&r.Attached, &lease, &expires); err != nil {
			return err
		}
		// An empty result or error is no value (rawJSON): the stored
		// one stays. The caller's buffers stay the caller's.
		applied := c
		applied.Result, applied.Error = ownJSON(c.Result), ownJSON(c.Error)
		r.Apply(&applied, st.now)
		r.LeaseUntil, r.ExpiresAt = timeOf(lease), timeOf(expires)
		*rec = r
		return nil
	}
	return st, rec
}

// timeOf returns t in UTC, the zero time for NULL.
func timeOf(t pgtype.Timestamptz) time.Time {
	if !t.Valid {
		return time.Time{}
	}
	return t.Time.UTC()
}

// ownJSON returns a copy of m, as rawJSON writes it: nil if empty.
func ownJSON(m json.RawMessage) json.RawMessage {
	if len(m) == 0 {
		return nil
	}
	return slices.Clone(m)
}
