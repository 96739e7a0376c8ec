package stdio

import (
	"errors"
	"io"
	"strings"
	"testing"
)

// TestChildCutFrame: a child that exits in the middle of a message leaves
// a line without its end, reported as cut, not read as a frame; a whole
// message without its newline is read. A Conn that does not report cut
// frames (the client's) reads both.
func TestChildCutFrame(t *testing.T) {
	for _, tc := range []struct {
		name, out string
		cut       bool
	}{
		{"cut", `{"jsonrpc":"2.0","id":1,"result":{"a":`, true},
		{"whole without newline", `{"jsonrpc":"2.0","id":1,"result":{}}`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, _ := startChild(t, "printf", "%s", tc.out)
			got, err := c.ReadFrame()
			var cut *CutFrameError
			switch {
			case tc.cut && (!errors.As(err, &cut) || !errors.Is(err, io.ErrUnexpectedEOF) || got != nil):
				t.Fatalf("ReadFrame = %q, %v; want a CutFrameError", got, err)
			case !tc.cut && (err != nil || string(got) != tc.out):
				t.Fatalf("ReadFrame = %q, %v; want the message", got, err)
			}
			if _, err := c.ReadFrame(); err != io.EOF {
				t.Errorf("ReadFrame after it = %v, want io.EOF", err)
			}
			client := NewConn(strings.NewReader(tc.out), io.Discard, 0)
			if got, err := client.ReadFrame(); err != nil || string(got) != tc.out {
				t.Errorf("a client's Conn: ReadFrame = %q, %v; want the line", got, err)
			}
		})
	}
}
