package record

// The stores that keep nothing in process (SQLite, Redis, PostgreSQL)
// remember the records they last wrote, so that a change to one of them
// is written without reading the record back, guarded by its history.

// KnownRecords is how many records such a store keeps, in each of the
// two generations of its cache.
const KnownRecords = 1 << 10

// maxKnownBytes bounds the result and error of a record kept.
const maxKnownBytes = 16 << 10

// WorthKnowing reports whether such a store keeps r: one that a change
// may still move, with a small result and error.
func WorthKnowing(r *Record) bool {
	final := r.State.Settled() && r.State != Completed && r.State != Unknown
	return !final && len(r.Result)+len(r.Error) <= maxKnownBytes
}
