package stdio

import (
	"bytes"
	"io"
	"runtime"
	"testing"
)

// TestWriteUnderWay: a write the peer does not take is seen under way,
// under the same number, until it is taken.
func TestWriteUnderWay(t *testing.T) {
	pr, pw := io.Pipe()
	c := NewConn(bytes.NewReader(nil), pw, 0)
	if n := c.WriteUnderWay(); n != 0 {
		t.Fatalf("WriteUnderWay before any write = %d, want 0", n)
	}
	written := make(chan error)
	go func() { written <- c.WriteFrame([]byte(`{"id":1}`)) }()
	for c.WriteUnderWay() == 0 {
		runtime.Gosched() // the write has not begun yet
	}
	if n := c.WriteUnderWay(); n != 1 {
		t.Fatalf("WriteUnderWay during the first write = %d, want 1", n)
	}
	buf := make([]byte, 64)
	if _, err := pr.Read(buf); err != nil {
		t.Fatal(err)
	}
	if err := <-written; err != nil {
		t.Fatal(err)
	}
	if n := c.WriteUnderWay(); n != 0 {
		t.Fatalf("WriteUnderWay after the write = %d, want 0", n)
	}
}
