//go:build linux && race

package stdio

import (
	"runtime"
	"unsafe"
)

// ioSync orders a raw write before the raw read that gets its bytes, as
// syscall.Write and syscall.Read tell the race detector for os.File
// with a variable of their own: a raw write read through an os.File in
// the same process (only a test does that) is not ordered.
var ioSync int64

func raceRead(p []byte) {
	if len(p) > 0 {
		runtime.RaceWriteRange(unsafe.Pointer(&p[0]), len(p))
	}
	runtime.RaceAcquire(unsafe.Pointer(&ioSync))
}

func raceWriting() { runtime.RaceReleaseMerge(unsafe.Pointer(&ioSync)) }

func raceWritten(p []byte) {
	if len(p) > 0 {
		runtime.RaceReadRange(unsafe.Pointer(&p[0]), len(p))
	}
}
