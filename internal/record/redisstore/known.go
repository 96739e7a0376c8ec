package redisstore

import (
	"fmt"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
)

// A Store remembers the records it last reserved or updated, with the
// length of their history field as stored. An update of a record it
// knows sends that length. If the stored history still has it, no
// transition came between, and no field changed but attached (counted
// by anyone) and lease_until (renewed): the script answers with those
// and what it wrote that the caller cannot compute, not with the whole
// record, and the caller applies the change to its copy with
// record.Record.Apply, as the script applied it. Returning the whole
// record cost the server about a quarter of an update's work, and the
// client its decoding.

// A known record is one as this Store last wrote or read it.
type known struct {
	rec  *record.Record // shared with callers: never modified
	hist int            // the length of its history field as stored
}

// remember keeps rec, whose history field is hist bytes long, for the
// next update; a record no update moves on any more is forgotten.
func (s *Store) remember(rec *record.Record, hist int) {
	if !record.WorthKnowing(rec) {
		s.known.Drop(rec.ID)
		return
	}
	s.known.Put(rec.ID, known{rec: rec, hist: hist})
}

// knownFor returns the record id as this Store knows it, and the length
// of its history as the update script takes it: "" if it does not know
// it, or if c's strings are not valid UTF-8, which the history would not
// give back as they are.
func (s *Store) knownFor(id string, c record.Change) (known, string) {
	k, ok := s.known.Get(id)
	if !ok || !utf8.ValidString(c.Note) || !utf8.ValidString(c.By) || !utf8.ValidString(c.Via) {
		return known{}, ""
	}
	return k, strconv.Itoa(k.hist)
}

// applied returns the record an update made of k at at, from the
// script's reply {"applied", history length, attached, lease_until,
// expires_at}, and remembers it.
func (s *Store) applied(k known, c record.Change, at time.Time, v []any) (*record.Record, error) {
	if len(v) != 5 {
		return nil, fmt.Errorf("unexpected reply %v", v)
	}
	hist, ok1 := v[1].(int64)
	attached, ok2 := v[2].(string)
	lease, ok3 := v[3].(string)
	exp, ok4 := v[4].(string)
	if !ok1 || !ok2 || !ok3 || !ok4 {
		return nil, fmt.Errorf("unexpected reply %v", v)
	}
	rec := k.rec.Clone()
	rec.Orphan = nil
	// The time as stored, to the nanosecond and clamped (encTime).
	stored, _ := decTime(encTime(at))
	rec.Apply(&c, stored)
	var err error
	if rec.Attached, err = strconv.Atoi(attached); err != nil {
		return nil, fmt.Errorf("record %s: attached: %w", rec.ID, err)
	}
	if rec.LeaseUntil, err = decTime(lease); err != nil {
		return nil, fmt.Errorf("record %s: lease_until: %w", rec.ID, err)
	}
	if rec.ExpiresAt, err = decTime(exp); err != nil {
		return nil, fmt.Errorf("record %s: expires_at: %w", rec.ID, err)
	}
	s.remember(rec, int(hist))
	return rec.Clone(), nil
}

// updatedReply decodes the whole record an update script returned, and
// remembers it if the update made it.
func (s *Store) updatedReply(v []any, tag string, made bool) (*record.Record, error) {
	if len(v) < 2 {
		return nil, fmt.Errorf("unexpected reply %v", v)
	}
	rec, hist, err := s.decodeFields(v[1], tag)
	if err != nil {
		return nil, err
	}
	if made {
		s.remember(rec, hist)
	}
	return rec, nil
}
