//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package journal

import "os"

// lock does nothing where the standard library has no flock: there, one
// journal per proxy process is the operator's to keep (see the package
// documentation).
func lock(*os.File) error { return nil }

// removed reports false: where there is no flock, the link count is not
// looked at either.
func removed(*os.File) bool { return false }
