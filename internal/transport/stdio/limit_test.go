package stdio

import (
	"errors"
	"io"
	"strings"
	"testing"
	"time"
)

// TestReadFrameTooLargeBeforeEnd checks that a frame over the limit is
// reported once the limit is passed, not when its newline comes: a peer
// that stalls in the middle of a huge answer must not hold up the answer
// owed for it. The rest of the line is dropped, and the frame after it read.
func TestReadFrameTooLargeBeforeEnd(t *testing.T) {
	const limit = 100 << 10
	pr, pw := io.Pipe()
	defer pw.Close()
	c := NewConn(pr, io.Discard, limit)
	go pw.Write([]byte(`{"id":7,"result":"` + strings.Repeat("x", 3*limit)))
	done := make(chan error, 1)
	go func() { _, err := c.ReadFrame(); done <- err }()
	select {
	case err := <-done:
		var big *FrameTooLargeError
		if !errors.As(err, &big) || !strings.HasPrefix(string(big.Head), `{"id":7,`) {
			t.Fatalf("ReadFrame: %v, want a FrameTooLargeError with the frame's head", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("ReadFrame waited for the end of a line already over the limit")
	}
	if c.FrameWaiting() {
		t.Error("FrameWaiting reports the rest of the dropped line as a frame")
	}
	go pw.Write([]byte(strings.Repeat("y", limit) + "\"}\n{\"next\":1}\n"))
	frame, err := c.ReadFrame()
	if err != nil || string(frame) != `{"next":1}` {
		t.Errorf("after the dropped line: %q, %v; want the next frame", frame, err)
	}
}
