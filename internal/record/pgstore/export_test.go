package pgstore

import "context"

// FlushAttaches writes the attaches counted and not yet written
// (recordtest.Flusher).
func (s *Store) FlushAttaches(ctx context.Context) error { return s.attaches.Flush(ctx) }
