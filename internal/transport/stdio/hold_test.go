package stdio

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
)

// takingWriter records each write, and takes only the first limit bytes
// of all (then fails), or everything when limit < 0.
type takingWriter struct {
	writes []string
	limit  int
}

var errTaken = errors.New("no more room")

func (w *takingWriter) Write(p []byte) (int, error) {
	if w.limit < 0 {
		w.writes = append(w.writes, string(p))
		return len(p), nil
	}
	n := min(len(p), w.limit)
	w.limit -= n
	w.writes = append(w.writes, string(p[:n]))
	if n < len(p) {
		return n, errTaken
	}
	return n, nil
}

// TestFlushWritesHeldFramesInOne: the frames written while a Conn holds
// its writes go in one write, in order, at Flush; the writers who asked
// are told then, not before, and after it writes are made at once again.
func TestFlushWritesHeldFramesInOne(t *testing.T) {
	w := &takingWriter{limit: -1}
	c := NewConn(strings.NewReader(""), w, 0)
	var told []string
	tell := func(name string) func(error) {
		return func(err error) {
			told = append(told, name+map[bool]string{true: " written", false: " lost"}[err == nil])
		}
	}
	c.Hold()
	for _, err := range []error{
		c.WriteFrame([]byte(`{"a":1}`)),
		c.WriteAnswer([]byte(`{"b":2}`), tell("b")),
		c.WriteResponseThen([]byte(`3`), []byte(`{}`), tell("3")),
		c.WriteRequestThen(`4`, "ping", nil, func(string, error) { t.Error("a request written whole was told it failed") }),
		c.WriteRequest(`5`, "ping", nil),
		c.WriteResponse([]byte(`6`), []byte(`{}`)),
	} {
		if err != nil {
			t.Fatalf("a held write returned %v", err)
		}
	}
	if len(w.writes) != 0 || len(told) != 0 {
		t.Fatalf("before Flush: writes %q, told %q; want none", w.writes, told)
	}
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
	want := `{"a":1}` + "\n" + `{"b":2}` + "\n" +
		`{"jsonrpc":"2.0","id":3,"result":{}}` + "\n" +
		`{"jsonrpc":"2.0","id":4,"method":"ping"}` + "\n" +
		`{"jsonrpc":"2.0","id":5,"method":"ping"}` + "\n" +
		`{"jsonrpc":"2.0","id":6,"result":{}}` + "\n"
	if len(w.writes) != 1 || w.writes[0] != want {
		t.Fatalf("Flush wrote %q; want one write of %q", w.writes, want)
	}
	if strings.Join(told, ", ") != "b written, 3 written" {
		t.Fatalf("told %q; want b and 3 written", told)
	}
	told = nil
	if err := c.WriteAnswer([]byte(`{"c":3}`), tell("c")); err != nil {
		t.Fatal(err)
	}
	if len(w.writes) != 2 || strings.Join(told, ", ") != "c written" {
		t.Fatalf("after Flush, a write made %d writes in all and told %q; want it at once, told", len(w.writes), told)
	}
}

// TestFlushThatFailsPartWay: of the frames held, those the failing write
// took whole count as written, and the rest do not: answers are told the
// write's error, and requests (WriteRequestThen, WriteFrameThen) that
// they failed, with their ids.
func TestFlushThatFailsPartWay(t *testing.T) {
	first := `{"jsonrpc":"2.0","id":1,"result":{}}` + "\n"
	w := &takingWriter{limit: len(first) + 3} // the first frame and a bit
	c := NewConn(strings.NewReader(""), w, 0)
	var told []string
	c.Hold()
	tell := func(id string) func(error) {
		return func(err error) {
			switch {
			case err == nil:
				told = append(told, id+" written")
			case errors.Is(err, errTaken):
				told = append(told, id+" not written: the write's error")
			default:
				told = append(told, id+" not written: "+err.Error())
			}
		}
	}
	c.WriteResponseThen([]byte(`1`), []byte(`{}`), tell("1"))
	c.WriteResponseThen([]byte(`2`), []byte(`{}`), tell("2"))
	c.WriteRequestThen(`"r3"`, "ping", nil, func(id string, err error) {
		if !errors.Is(err, errTaken) {
			t.Errorf("failed told %v; want the write's error", err)
		}
		told = append(told, id+" failed")
	})
	c.WriteFrameThen([]byte(`{"jsonrpc":"2.0","id":4,"method":"ping"}`), "4", func(id string, err error) {
		if !errors.Is(err, errTaken) {
			t.Errorf("failed told %v; want the write's error", err)
		}
		told = append(told, id+" failed")
	})
	if err := c.Flush(); !errors.Is(err, errTaken) {
		t.Fatalf("Flush returned %v; want the write's error", err)
	}
	if got := strings.Join(told, ", "); got != `1 written, 2 not written: the write's error, "r3" failed, 4 failed` {
		t.Fatalf("told %s; want the first written, the rest not", got)
	}
}

// TestWriteAnswerAtOnce: not held, an answer is written at once and its
// writer told before WriteAnswer returns; a write that fails returns its
// error and tells nothing, as WriteFrame's would.
func TestWriteAnswerAtOnce(t *testing.T) {
	w := &takingWriter{limit: -1}
	c := NewConn(strings.NewReader(""), w, 0)
	written := 0
	if err := c.WriteAnswer([]byte(`{"a":1}`), func(err error) {
		if err == nil {
			written++
		}
	}); err != nil || written != 1 || len(w.writes) != 1 {
		t.Fatalf("WriteAnswer: err %v, told %d, %d writes; want nil, 1, 1", err, written, len(w.writes))
	}
	c = NewConn(strings.NewReader(""), &takingWriter{limit: 0}, 0)
	err := c.WriteResponseThen([]byte(`1`), []byte(`{}`), func(error) { t.Error("a write that failed at once told its writer too") })
	if !errors.Is(err, errTaken) {
		t.Fatalf("WriteResponseThen returned %v; want the write's error", err)
	}
}

// TestFrameWaiting: a frame waits once its newline is in the buffer, not
// before; ReadFrame then returns it without reading.
func TestFrameWaiting(t *testing.T) {
	pr, pw := io.Pipe()
	c := NewConn(pr, io.Discard, 0)
	if c.FrameWaiting() {
		t.Fatal("an empty buffer has a frame waiting")
	}
	go pw.Write([]byte("{\"a\":1}\n{\"b\":"))
	if f, err := c.ReadFrame(); err != nil || !bytes.Equal(f, []byte(`{"a":1}`)) {
		t.Fatalf("ReadFrame = %q, %v", f, err)
	}
	if c.FrameWaiting() {
		t.Fatal("half a frame counts as a frame waiting")
	}
	go pw.Write([]byte("2}\n{\"c\":3}\n"))
	if f, err := c.ReadFrame(); err != nil || !bytes.Equal(f, []byte(`{"b":2}`)) {
		t.Fatalf("ReadFrame = %q, %v", f, err)
	}
	if !c.FrameWaiting() {
		t.Fatal("a whole frame in the buffer is not seen waiting")
	}
	pw.Close() // a ReadFrame that read now would get EOF
	if f, err := c.ReadFrame(); err != nil || !bytes.Equal(f, []byte(`{"c":3}`)) {
		t.Fatalf("ReadFrame = %q, %v; want the frame that waited", f, err)
	}
}

// TestFrameWaitingIgnoresBlankLines: a blank line is no frame (ReadFrame
// skips it), so a buffer holding only one must not count as a frame
// waiting: the next ReadFrame would block, with what the pump holds
// stranded until the peer writes again.
func TestFrameWaitingIgnoresBlankLines(t *testing.T) {
	for _, tail := range []string{"\n", "\r\n", "  \n", "\n\n"} {
		pr, pw := io.Pipe()
		c := NewConn(pr, io.Discard, 0)
		go pw.Write([]byte(`{"a":1}` + "\n" + tail))
		if _, err := c.ReadFrame(); err != nil {
			t.Fatal(err)
		}
		if c.FrameWaiting() {
			t.Errorf("after a frame and %q, FrameWaiting reports a frame, but ReadFrame would block", tail)
		}
		pw.Close()
	}
}
