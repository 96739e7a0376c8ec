package journal

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestRecordAfterShortWrite: a write cut short, as a full disk cuts
// most (the page it ends in had room), is cut off the file again, so the
// journal takes lines once there is room and the chain holds. The file
// size limit stands in for the full disk: the system writes up to it,
// then refuses, as it does when blocks run out.
func TestRecordAfterShortWrite(t *testing.T) {
	path := filepath.Join(t.TempDir(), "j")
	w, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if err := w.Record(entry(0)); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	var old syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_FSIZE, &old); err != nil {
		t.Skip("no file size limit here:", err)
	}
	full := syscall.Rlimit{Cur: uint64(fi.Size()) + 10, Max: old.Max}
	if err := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &full); err != nil {
		t.Skip("cannot set the file size limit:", err)
	}
	err = w.Record(entry(1))
	if rerr := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &old); rerr != nil {
		t.Fatal(rerr)
	}
	if err == nil {
		t.Fatal("Record past the file size limit succeeded")
	}
	if !strings.Contains(err.Error(), "cut off again") {
		t.Errorf("Record cut short = %v; want it to say the part written was cut off again", err)
	}
	if got, err := os.Stat(path); err != nil || got.Size() != fi.Size() {
		t.Fatalf("after a write cut short, the file is %v bytes (%v); want %d, as before it", got.Size(), err, fi.Size())
	}
	if err := w.Record(entry(2)); err != nil {
		t.Fatalf("Record once there is room again = %v; want it written", err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if n, err := Verify(f); n != 2 || err != nil {
		t.Errorf("Verify = %d, %v; want 2 lines, no error", n, err)
	}
}

// TestCutWrittenLeavesACutFile: a file cut (copytruncate) between a
// write cut short and its mending is not truncated past its end, which
// would fill it with zeros.
func TestCutWrittenLeavesACutFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "j")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write([]byte("{\"a\":1}\n{\"b\"")); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(path, 0); err != nil {
		t.Fatal(err)
	}
	if err := cutWritten(f, 5); err == nil {
		t.Error("cutWritten on a file cut meanwhile succeeded; want an error")
	}
	if fi, err := os.Stat(path); err != nil || fi.Size() != 0 {
		t.Errorf("after cutWritten, the file cut to 0 bytes is %d bytes (%v); want 0", fi.Size(), err)
	}
}
