package cli

import (
	"os"
	"path/filepath"
)

// sameFile reports whether paths a and b name one file: the same path,
// relative or absolute, or, both there, one file by two names (a link).
// The journal and its key given as one file would fail as a journal that
// is not JSON, or a key that is not a key, naming neither mistake.
func sameFile(a, b string) bool {
	absA, errA := filepath.Abs(a)
	absB, errB := filepath.Abs(b)
	if filepath.Clean(a) == filepath.Clean(b) || errA == nil && errB == nil && absA == absB {
		return true
	}
	sa, errA := os.Stat(a)
	sb, errB := os.Stat(b)
	return errA == nil && errB == nil && os.SameFile(sa, sb)
}

// sameJournalKey is the usage error for a --journal-key that is the
// --journal, or nil.
func sameJournalKey(journal, key string) error {
	if journal == "" || key == "" || !sameFile(journal, key) {
		return nil
	}
	return usagef("--journal-key %q and --journal %q are the same file: the key is a file of its own, the one audit keygen wrote", key, journal)
}
