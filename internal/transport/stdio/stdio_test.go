package stdio

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"testing/iotest"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/jsonrpc"
)

// tooLarge stands for a FrameTooLargeError in the expected results.
const tooLarge = "<too large>"

// readAll reads frames until an error other than FrameTooLargeError, and
// returns them with tooLarge in place of each such error.
func readAll(t *testing.T, c *Conn) ([]string, error) {
	t.Helper()
	var got []string
	for {
		frame, err := c.ReadFrame()
		var big *FrameTooLargeError
		switch {
		case err == nil:
			got = append(got, string(frame))
		case errors.As(err, &big):
			if big.Limit != c.max {
				t.Errorf("FrameTooLargeError.Limit = %d, want %d", big.Limit, c.max)
			}
			got = append(got, tooLarge)
		default:
			return got, err
		}
	}
}

func TestReadFrame(t *testing.T) {
	tests := []struct {
		name  string
		input string
		max   int
		want  []string
	}{
		{name: "LF", input: "{\"a\":1}\n{\"b\":2}\n", want: []string{`{"a":1}`, `{"b":2}`}},
		{name: "CRLF", input: "{\"a\":1}\r\n{\"b\":2}\r\n", want: []string{`{"a":1}`, `{"b":2}`}},
		{name: "mixed endings", input: "a\r\nb\nc\r\n", want: []string{"a", "b", "c"}},
		{name: "blank lines skipped", input: "\n\n  \n\r\n\t\na\n\n \r\n", want: []string{"a"}},
		{name: "final frame without newline", input: "a\nb", want: []string{"a", "b"}},
		{name: "final frame with CR only", input: "a\r", want: []string{"a"}},
		{name: "only blank lines", input: "\n \r\n\t", want: nil},
		{name: "empty input", input: "", want: nil},
		{name: "inner white space kept", input: " { \"a\" : 1 } \n", want: []string{` { "a" : 1 } `}},
		{name: "inner CR kept", input: "a\rb\n", want: []string{"a\rb"}},
		{name: "at the limit", input: "12345678\n", max: 8, want: []string{"12345678"}},
		{name: "at the limit with CRLF", input: "12345678\r\n", max: 8, want: []string{"12345678"}},
		{name: "at the limit at EOF", input: "12345678", max: 8, want: []string{"12345678"}},
		{name: "one over", input: "123456789\nnext\n", max: 8, want: []string{tooLarge, "next"}},
		{name: "one over with CRLF", input: "123456789\r\nnext\r\n", max: 8, want: []string{tooLarge, "next"}},
		{name: "one over at EOF", input: "ok\n123456789", max: 8, want: []string{"ok", tooLarge}},
		{name: "one over then one at", input: "123456789\n12345678\n", max: 8, want: []string{tooLarge, "12345678"}},
		{name: "several over", input: strings.Repeat("x", 100) + "\na\n" + strings.Repeat("y", 9) + "\n", max: 8, want: []string{tooLarge, "a", tooLarge}},
		{name: "CR counts when not the ending", input: "1234567\r8\n", max: 8, want: []string{tooLarge}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// One byte per Read as well: frames then end mid-buffer.
			for _, r := range []io.Reader{strings.NewReader(tt.input), iotest.OneByteReader(strings.NewReader(tt.input))} {
				c := NewConn(r, io.Discard, tt.max)
				got, err := readAll(t, c)
				if err != io.EOF {
					t.Errorf("final error = %v, want io.EOF", err)
				}
				if !equal(got, tt.want) {
					t.Errorf("frames = %q, want %q", got, tt.want)
				}
			}
		})
	}
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestReadFrameLarge covers frames longer than the 64KiB read buffer, and
// limits on each side of its edge.
func TestReadFrameLarge(t *testing.T) {
	const buf = 64 << 10
	for _, size := range []int{buf - 2, buf - 1, buf, buf + 1, 3*buf + 7, 1 << 20} {
		for _, ending := range []string{"\n", "\r\n", ""} {
			name := fmt.Sprintf("%d%q", size, ending)
			frame := strings.Repeat("x", size)
			other := `{"other":true}`
			// A frame without an ending can only be the last one.
			input, want, at := frame+ending+other, []string{frame, other}, 0
			if ending == "" {
				input, want, at = other+"\n"+frame, []string{other, frame}, 1
			}
			over := append([]string(nil), want...)
			over[at] = tooLarge
			for _, lim := range []struct {
				name string
				max  int
				want []string
			}{
				{"at the limit", size, want},
				{"one over", size - 1, over},
				{"under the default limit", 0, want},
			} {
				t.Run(name+" "+lim.name, func(t *testing.T) {
					c := NewConn(strings.NewReader(input), io.Discard, lim.max)
					got, err := readAll(t, c)
					if err != io.EOF || !equal(got, lim.want) {
						t.Errorf("got %d frames %.30q (err %v), want %.30q", len(got), got, err, lim.want)
					}
				})
			}
		}
	}
}

func TestReadFrameKeepsFrames(t *testing.T) {
	c := NewConn(strings.NewReader("first\nsecond\n"+strings.Repeat("z", 100<<10)+"\n"), io.Discard, 0)
	a, err := c.ReadFrame()
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := c.ReadFrame(); err != nil {
			t.Fatal(err)
		}
	}
	if string(a) != "first" {
		t.Errorf("first frame changed to %q by later reads", a)
	}
}

// errReader returns its data, then err.
type errReader struct {
	data []byte
	err  error
}

func (r *errReader) Read(p []byte) (int, error) {
	if len(r.data) == 0 {
		return 0, r.err
	}
	n := copy(p, r.data)
	r.data = r.data[n:]
	return n, nil
}

func TestReadFrameError(t *testing.T) {
	boom := errors.New("boom")
	c := NewConn(&errReader{data: []byte("a\npartial"), err: boom}, io.Discard, 0)
	got, err := readAll(t, c)
	if !errors.Is(err, boom) || !equal(got, []string{"a"}) {
		t.Errorf("got %q, %v; want [a], boom", got, err)
	}
}

func TestFrameTooLargeError(t *testing.T) {
	c := NewConn(strings.NewReader("123456789\n"), io.Discard, 8)
	_, err := c.ReadFrame()
	var limited interface{ FrameTooLarge() bool }
	if !errors.As(err, &limited) || !limited.FrameTooLarge() {
		t.Fatalf("error %v (%T) does not report FrameTooLarge", err, err)
	}
	if msg := err.Error(); !strings.Contains(msg, "8-byte") || !strings.Contains(msg, "--max-message-size") {
		t.Errorf("error %q names neither the limit nor the flag", msg)
	}
}

func TestNewConnDefaultLimit(t *testing.T) {
	for _, max := range []int{0, -1} {
		if c := NewConn(strings.NewReader(""), io.Discard, max); c.max != DefaultMaxFrame {
			t.Errorf("NewConn(max %d) limit = %d, want %d", max, c.max, DefaultMaxFrame)
		}
	}
}

// TestLargestLimit: a limit as large as an int reads frames, where int
// has 32 bits too (GOARCH=386): the room for a line's CR and LF does not
// overflow it.
func TestLargestLimit(t *testing.T) {
	c := NewConn(strings.NewReader("{\"jsonrpc\":\"2.0\",\"method\":\"ping\"}\r\n"), io.Discard, math.MaxInt)
	got, err := c.ReadFrame()
	if err != nil || string(got) != `{"jsonrpc":"2.0","method":"ping"}` {
		t.Fatalf("ReadFrame with the limit at math.MaxInt = %q, %v", got, err)
	}
}

func TestWriteFrame(t *testing.T) {
	var out bytes.Buffer
	c := NewConn(strings.NewReader(""), &out, 0)
	for _, f := range []string{`{"a":1}`, "{\n\"b\":\n2}\n", `{"c":"x\ny"}`, " \t{\"d\": 4} \t\r\n ", "{\r\n\"e\":\r5}\r\n", "{\"f\":\r6}"} {
		if err := c.WriteFrame([]byte(f)); err != nil {
			t.Fatal(err)
		}
	}
	// Raw newlines and carriage returns are JSON white space outside
	// strings, and invalid inside them (where they are written \n and \r):
	// dropping them keeps one line per frame, for a reader that ends lines
	// at either. White space around a frame goes too: the go-sdk's reader
	// takes any but a newline after a message for trailing data, and stops.
	want := "{\"a\":1}\n{\"b\":2}\n{\"c\":\"x\\ny\"}\n{\"d\": 4}\n{\"e\":5}\n{\"f\":6}\n"
	if got := out.String(); got != want {
		t.Errorf("wrote %q, want %q", got, want)
	}
	if err := c.Close(); err != nil {
		t.Errorf("Close without a closer: %v", err)
	}
}

// TestWriteFrameConcurrent writes from many goroutines through a real pipe,
// with frames larger than the pipe's buffer, and checks that every line read
// back is one whole frame.
func TestWriteFrameConcurrent(t *testing.T) {
	const writers, perWriter = 50, 20
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	w := NewConn(nil, pw, 0)
	r := NewConn(pr, io.Discard, 0)

	want := make(map[string]int)
	frame := func(g, i int) string {
		// Sizes from a few bytes to past the 64KiB pipe and read buffers.
		n := (g*perWriter + i) * 211 % (8 << 10)
		if i == 0 {
			n = 100<<10 + g
		}
		pad := strings.Repeat(string(rune('a'+g%26)), n)
		return fmt.Sprintf(`{"g":%d,"i":%d,"pad":"%s"}`, g, i, pad)
	}
	for g := range writers {
		for i := range perWriter {
			want[frame(g, i)]++
		}
	}

	type result struct {
		frames []string
		err    error
	}
	done := make(chan result)
	go func() {
		var res result
		for {
			f, err := r.ReadFrame()
			if err != nil {
				if err != io.EOF {
					res.err = err
				}
				done <- res
				return
			}
			res.frames = append(res.frames, string(f))
		}
	}()

	var wg sync.WaitGroup
	for g := range writers {
		wg.Go(func() {
			for i := range perWriter {
				if err := w.WriteFrame([]byte(frame(g, i))); err != nil {
					t.Errorf("WriteFrame: %v", err)
				}
			}
		})
	}
	wg.Wait()
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	res := <-done
	if res.err != nil {
		t.Fatal(res.err)
	}
	if len(res.frames) != writers*perWriter {
		t.Errorf("read %d frames, want %d", len(res.frames), writers*perWriter)
	}
	for _, f := range res.frames {
		if want[f] == 0 {
			t.Fatalf("read a line that is not one whole frame: %.80q", f)
		}
		want[f]--
	}
}

// startedWriter reports on started when a Write begins.
type startedWriter struct {
	io.WriteCloser
	started chan struct{}
}

func (w *startedWriter) Write(p []byte) (int, error) {
	close(w.started)
	return w.WriteCloser.Write(p)
}

// TestCloseDuringBlockedWrite checks that Close does not wait for a write
// stuck on a peer that stopped reading; Child.Stop relies on it.
func TestCloseDuringBlockedWrite(t *testing.T) {
	_, pw := io.Pipe() // nobody reads: every Write blocks
	w := &startedWriter{WriteCloser: pw, started: make(chan struct{})}
	c := NewConn(nil, w, 0)
	writeErr := make(chan error)
	go func() { writeErr <- c.WriteFrame([]byte(`{"stuck":true}`)) }()
	<-w.started
	if err := c.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := <-writeErr; err == nil {
		t.Error("the blocked WriteFrame succeeded after Close")
	}
}

func TestDescribe(t *testing.T) {
	tests := []struct {
		argv []string
		want string
	}{
		{argv: []string{"node", "server.js"}, want: "stdio:node server.js"},
		{argv: []string{"npx", "-y", "@modelcontextprotocol/server-everything"}, want: "stdio:npx -y @modelcontextprotocol/server-everything"},
		{argv: []string{"python", "-m", "my server"}, want: `stdio:python -m "my server"`},
		{argv: []string{"cmd", ""}, want: `stdio:cmd ""`},
		{argv: []string{`say "hi"`}, want: `stdio:"say \"hi\""`},
		{argv: []string{`C:\server.exe`}, want: `stdio:"C:\\server.exe"`},
		{argv: []string{"it's"}, want: `stdio:"it's"`},
		{argv: []string{"a\tb", "c\nd"}, want: `stdio:"a\tb" "c\nd"`},
		{argv: []string{"café", "--opt=1"}, want: "stdio:café --opt=1"},
		{argv: []string{"/bin/cat"}, want: "stdio:/bin/cat"},
		{argv: nil, want: "stdio:"},
	}
	for _, tt := range tests {
		if got := Describe(tt.argv); got != tt.want {
			t.Errorf("Describe(%q) = %s, want %s", tt.argv, got, tt.want)
		}
	}
	// Different command lines are different upstreams.
	distinct := [][]string{
		{"a b"}, {"a", "b"}, {`"a`, `b"`}, {`"a b"`}, {"a", "", "b"}, {"a", " b"},
	}
	seen := make(map[string][]string)
	for _, argv := range distinct {
		d := Describe(argv)
		if prev, ok := seen[d]; ok {
			t.Errorf("Describe(%q) = Describe(%q) = %s", argv, prev, d)
		}
		seen[d] = argv
	}
}

func startChild(t *testing.T, argv ...string) (*Child, *syncBuffer) {
	t.Helper()
	stderr := new(syncBuffer)
	c, err := Start(argv, stderr, 0)
	if err != nil {
		t.Fatalf("Start(%q): %v", argv, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = c.Stop(ctx, 0, nil)
	})
	return c, stderr
}

// syncBuffer is a bytes.Buffer safe for concurrent use.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

func TestChildEcho(t *testing.T) {
	c, _ := startChild(t, "/bin/cat")
	if c.Pid() <= 0 {
		t.Errorf("Pid() = %d", c.Pid())
	}
	frames := []string{
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}`,
		`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"pad":"` + strings.Repeat("p", 200<<10) + `"}}`,
		`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
	}
	for _, f := range frames {
		// cat answers each line as it comes; write and read in turn so
		// neither pipe fills.
		errc := make(chan error, 1)
		go func() { errc <- c.WriteFrame([]byte(f)) }()
		got, err := c.ReadFrame()
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != f {
			t.Errorf("echoed %.60q, want %.60q", got, f)
		}
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	// cat exits when its stdin closes, long before the grace period.
	if err := c.Stop(ctx, time.Minute, nil); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	<-c.Done()
	if err := c.ExitError(); err != nil {
		t.Errorf("ExitError() = %v, want nil", err)
	}
	if _, err := c.ReadFrame(); err != io.EOF {
		t.Errorf("ReadFrame after exit = %v, want io.EOF", err)
	}
}

// TestChildStopClosesPipes: a stopped child holds no descriptor of the
// proxy's. serve ends a session's upstream with Stop; the read end of its
// stdout stayed open until the garbage collector ran (1,009 descriptors
// after 1,000 sessions).
func TestChildStopClosesPipes(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(-1)) // no finalizer closes them
	before := openFiles(t)
	for range 20 {
		c, err := Start([]string{"/bin/cat"}, io.Discard, 0)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Stop(t.Context(), time.Minute, nil); err != nil {
			t.Fatalf("Stop: %v", err)
		}
	}
	// Done waits only so long for the stderr copy to end (stderrDrain),
	// which closes its pipe: on a loaded machine that close may come
	// after Stop returns. A leaked descriptor never closes.
	deadline := time.Now().Add(10 * time.Second)
	after := openFiles(t)
	for after > before && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
		after = openFiles(t)
	}
	if after > before {
		t.Errorf("%d descriptors open after 20 children started and stopped, %d before", after, before)
	}
}

// openFiles counts this process's open descriptors.
func openFiles(t *testing.T) int {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("counting descriptors: %v", err)
	}
	return len(fds)
}

func TestChildExitStatus(t *testing.T) {
	c, _ := startChild(t, "sh", "-c", "exit 3")
	<-c.Done()
	var exit *exec.ExitError
	if err := c.ExitError(); !errors.As(err, &exit) || exit.ExitCode() != 3 {
		t.Fatalf("ExitError() = %v, want exit status 3", err)
	}
	if _, err := c.ReadFrame(); err != io.EOF {
		t.Errorf("ReadFrame = %v, want io.EOF", err)
	}
}

// TestChildLastAnswer checks that an answer written just before the child
// exits is still read after it has exited.
func TestChildLastAnswer(t *testing.T) {
	c, stderr := startChild(t, "sh", "-c", `echo '{"jsonrpc":"2.0","id":1,"result":{}}'; echo oops >&2; exit 0`)
	<-c.Done()
	got, err := c.ReadFrame()
	if err != nil || string(got) != `{"jsonrpc":"2.0","id":1,"result":{}}` {
		t.Errorf("ReadFrame after exit = %q, %v", got, err)
	}
	if !strings.Contains(stderr.String(), "oops") {
		t.Errorf("stderr = %q, want the child's stderr", stderr.String())
	}
}

func TestChildSIGTERM(t *testing.T) {
	// sleep ignores its stdin, so closing it does not end the child.
	c, _ := startChild(t, "sh", "-c", "exec sleep 60")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Stop(ctx, 50*time.Millisecond, nil); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if sig := signalOf(c.ExitError()); sig != syscall.SIGTERM {
		t.Errorf("child ended by %v (%v), want SIGTERM", sig, c.ExitError())
	}
}

func TestChildSIGKILL(t *testing.T) {
	// Ignored signals stay ignored across exec, so sleep ignores SIGTERM.
	// The child says when the trap is set, so SIGTERM cannot come first.
	c, _ := startChild(t, "sh", "-c", `trap "" TERM; echo ready; exec sleep 60`)
	if f, err := c.ReadFrame(); err != nil || string(f) != "ready" {
		t.Fatalf("ReadFrame = %q, %v; want ready", f, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Stop(ctx, 50*time.Millisecond, nil); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if sig := signalOf(c.ExitError()); sig != syscall.SIGKILL {
		t.Errorf("child ended by %v (%v), want SIGKILL", sig, c.ExitError())
	}
}

// TestChildStopAfterClose: Stop's wait for the child to exit on its own
// counts from when its stdin was closed. A session closes it, relays what
// the child writes for a while, then stops it: the child has had its
// grace by then, and gets SIGTERM at once, not a second grace.
func TestChildStopAfterClose(t *testing.T) {
	c, _ := startChild(t, "sh", "-c", "echo ready; exec sleep 60") // ignores its stdin closing
	if f, err := c.ReadFrame(); err != nil || string(f) != "ready" {
		t.Fatalf("ReadFrame = %q, %v; want ready", f, err)
	}
	// The grace is long, and has passed since the close: a second grace
	// would be a wait far longer than SIGTERM takes, however busy the
	// machine.
	const grace = 20 * time.Second
	c.Close()
	c.closedAt = c.closedAt.Add(-grace)
	ctx, cancel := context.WithTimeout(context.Background(), 2*grace)
	defer cancel()
	start := time.Now()
	if err := c.Stop(ctx, grace, nil); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if took := time.Since(start); took > grace/2 {
		t.Errorf("Stop took %v after the grace had passed since stdin was closed; want SIGTERM at once", took)
	}
	if sig := signalOf(c.ExitError()); sig != syscall.SIGTERM {
		t.Errorf("child ended by %v (%v), want SIGTERM", sig, c.ExitError())
	}
}

// TestChildStopHurried: a Stop told to hurry in the middle of its wait
// for the child to exit on its own goes on to SIGTERM then, not after
// the grace: the proxy's own SIGTERM is acted on when it comes.
func TestChildStopHurried(t *testing.T) {
	c, _ := startChild(t, "sh", "-c", "echo ready; exec sleep 60") // ignores its stdin closing
	if f, err := c.ReadFrame(); err != nil || string(f) != "ready" {
		t.Fatalf("ReadFrame = %q, %v; want ready", f, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	hurry := make(chan struct{})
	stopped := make(chan error, 1)
	go func() { stopped <- c.Stop(ctx, time.Hour, hurry) }()
	close(hurry)
	if err := <-stopped; err != nil {
		t.Fatalf("Stop = %v; want the child stopped by SIGTERM before ctx ran out", err)
	}
	if sig := signalOf(c.ExitError()); sig != syscall.SIGTERM {
		t.Errorf("child ended by %v (%v), want SIGTERM", sig, c.ExitError())
	}
}

func TestChildStopContext(t *testing.T) {
	c, _ := startChild(t, "sh", "-c", "exec sleep 60")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := c.Stop(ctx, time.Minute, nil); !errors.Is(err, context.Canceled) {
		t.Errorf("Stop = %v, want context.Canceled", err)
	}
	select {
	case <-c.Done():
	default:
		t.Error("Stop returned before the child exited")
	}
}

// TestChildStopBlockedWrite stops a child that never reads its stdin while
// a frame larger than the pipe buffer is being written to it.
func TestChildStopBlockedWrite(t *testing.T) {
	c, _ := startChild(t, "sh", "-c", "exec sleep 60")
	writeErr := make(chan error, 1)
	go func() { writeErr <- c.WriteFrame(bytes.Repeat([]byte("x"), 4<<20)) }()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Stop(ctx, 50*time.Millisecond, nil); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if err := <-writeErr; err == nil {
		t.Error("WriteFrame to a child that never read succeeded")
	}
}

func signalOf(err error) os.Signal {
	var exit *exec.ExitError
	if !errors.As(err, &exit) {
		return nil
	}
	ws, ok := exit.Sys().(syscall.WaitStatus)
	if !ok || !ws.Signaled() {
		return nil
	}
	return ws.Signal()
}

func TestStartErrors(t *testing.T) {
	if _, err := Start(nil, io.Discard, 0); err == nil {
		t.Error("Start(nil) succeeded")
	}
	_, err := Start([]string{"/nonexistent/mcp-server"}, io.Discard, 0)
	if err == nil || !strings.Contains(err.Error(), "/nonexistent/mcp-server") {
		t.Errorf("Start of a missing command = %v, want an error naming it", err)
	}
}

// reference splits data into frames the way ReadFrame is documented to.
func reference(data []byte, max int) []string {
	var out []string
	for len(data) > 0 {
		line := data
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			line, data = data[:i], data[i+1:]
		} else {
			data = nil
		}
		line = bytes.TrimSuffix(line, []byte("\r"))
		if len(line) > max {
			out = append(out, tooLarge)
			continue
		}
		line = bytes.TrimRight(line, "\r")
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		out = append(out, string(line))
	}
	return out
}

func FuzzReadFrame(f *testing.F) {
	f.Add([]byte("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\n"), uint32(0), uint16(0), uint32(0))
	f.Add([]byte("a\r\nb\n\n  \r\nc"), uint32(1), uint16(0), uint32(0))
	f.Add([]byte("12345678\n123456789\nok\n"), uint32(8), uint16(0), uint32(0))
	f.Add([]byte("12345678\r\n1234567\r\r\n"), uint32(8), uint16(0), uint32(0))
	f.Add([]byte("x\ny\n"), uint32(64<<10), uint16(1), uint32(64<<10))
	f.Add([]byte("x\ny\n"), uint32(64<<10), uint16(1), uint32(64<<10-1))
	f.Add([]byte("\r\r\r"), uint32(1), uint16(0), uint32(0))
	f.Fuzz(func(t *testing.T, data []byte, max uint32, padAt uint16, padLen uint32) {
		// padLen inserts a long run of bytes, so that lines cross the
		// read buffer's edge without the fuzzer having to grow the input.
		if padLen %= 200 << 10; padLen > 0 {
			at := 0
			if len(data) > 0 {
				at = int(padAt) % len(data)
			}
			data = append(append(append([]byte(nil), data[:at]...), bytes.Repeat([]byte("p"), int(padLen))...), data[at:]...)
		}
		limit := int(max%(300<<10)) + 1
		c := NewConn(bytes.NewReader(data), io.Discard, limit)
		var got []string
		for {
			frame, err := c.ReadFrame()
			var big *FrameTooLargeError
			if errors.As(err, &big) {
				got = append(got, tooLarge)
				continue
			}
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("ReadFrame: %v", err)
			}
			if bytes.IndexByte(frame, '\n') >= 0 {
				t.Fatalf("frame %.80q holds a newline", frame)
			}
			if len(frame) > limit {
				t.Fatalf("frame of %d bytes is over the %d-byte limit", len(frame), limit)
			}
			if len(bytes.TrimSpace(frame)) == 0 {
				t.Fatalf("blank frame %q", frame)
			}
			got = append(got, string(frame))
		}
		if want := reference(data, limit); !equal(got, want) {
			t.Fatalf("ReadFrame gave %d frames, the reference %d:\n got %.200q\nwant %.200q", len(got), len(want), got, want)
		}
	})
}

// countingWriter records each Write as it was passed, copied.
type countingWriter struct{ writes []string }

func (w *countingWriter) Write(p []byte) (int, error) {
	w.writes = append(w.writes, string(p))
	return len(p), nil
}

// TestWriteFrameOneWrite checks that each frame goes out in exactly one
// Write, its newline included, whatever the sizes of the frames before it
// (the write buffer is reused, and dropped after a large frame).
func TestWriteFrameOneWrite(t *testing.T) {
	var w countingWriter
	c := NewConn(nil, &w, 0)
	frames := []string{`{"a":1}`, `{"big":"` + strings.Repeat("x", maxKeptBuffer+10) + `"}`, `{"b":2}`, `{"c":"` + strings.Repeat("y", 1000) + `"}`, `{}`}
	for _, f := range frames {
		if err := c.WriteFrame([]byte(f)); err != nil {
			t.Fatal(err)
		}
	}
	if len(w.writes) != len(frames) {
		t.Fatalf("%d writes for %d frames", len(w.writes), len(frames))
	}
	for i, f := range frames {
		if w.writes[i] != f+"\n" {
			t.Errorf("write %d is %.40q..., want %.40q...", i, w.writes[i], f+"\n")
		}
	}
	d := NewConn(nil, io.Discard, 0)
	if allocs := testing.AllocsPerRun(100, func() { d.WriteFrame([]byte(`{"jsonrpc":"2.0","id":1,"result":{}}`)) }); allocs != 0 {
		t.Errorf("WriteFrame allocates %v times per frame, want 0", allocs)
	}
}

// TestWriteResponseAndRequest checks that the frames a Conn builds itself
// are those jsonrpc makes, newline and all, each in one write and without
// an allocation once the buffer has grown; and that a newline in the
// parts cannot split the frame.
func TestWriteResponseAndRequest(t *testing.T) {
	var w countingWriter
	c := NewConn(nil, &w, 0)
	id, result, params := json.RawMessage(`7`), json.RawMessage(`{"content":[]}`), json.RawMessage(`{"name":"t"}`)
	if err := c.WriteResponse(id, result); err != nil {
		t.Fatal(err)
	}
	if err := c.WriteRequest(`"mcp-idempotent:1"`, "tools/call", params); err != nil {
		t.Fatal(err)
	}
	if err := c.WriteResponse(id, json.RawMessage("{\n\"a\":1}")); err != nil {
		t.Fatal(err)
	}
	if err := c.WriteRequest("", "notifications/initialized", nil); err != nil {
		t.Fatal(err)
	}
	want := []string{
		string(jsonrpc.NewResponse(id, result)) + "\n",
		string(jsonrpc.NewRequest(json.RawMessage(`"mcp-idempotent:1"`), "tools/call", params)) + "\n",
		`{"jsonrpc":"2.0","id":7,"result":{"a":1}}` + "\n",
		string(jsonrpc.NewRequest(nil, "notifications/initialized", nil)) + "\n",
	}
	if !slices.Equal(w.writes, want) {
		t.Fatalf("writes %q, want %q", w.writes, want)
	}
	d := NewConn(nil, io.Discard, 0)
	if allocs := testing.AllocsPerRun(100, func() {
		d.WriteResponse(id, result)
		d.WriteRequest(`"mcp-idempotent:2"`, "tools/call", params)
	}); allocs != 0 {
		t.Errorf("WriteResponse and WriteRequest allocate %v times, want 0", allocs)
	}
}
