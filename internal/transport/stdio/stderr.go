package stdio

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"unicode"
)

// TailSize bounds what a Child keeps of its stderr to say why it exited.
const TailSize = 512

// A stderrTail passes a child's stderr on to the proxy's and keeps its
// last TailSize bytes: a server that exits at start says why there, and
// the client, who may never see the proxy's stderr, needs those words.
type stderrTail struct {
	mu   sync.Mutex    // protects the fields below but read and done
	last []byte        // the last TailSize bytes read at most
	cut  bool          // whether bytes before last were dropped
	read chan struct{} // closed once the child's stderr has ended
	done chan struct{} // closed once, besides, what was kept of it is passed on

	// What waits to be written to the proxy's stderr (passOn), and how
	// many bytes after it did not fit and were dropped. more is told when
	// either grows, and when the child's stderr ends (ended).
	queue   []byte
	dropped int
	ended   bool
	more    sync.Cond
}

// stderrQueue bounds what waits to be written to the proxy's stderr: as
// much as a pipe holds.
const stderrQueue = 64 << 10

func newStderrTail() *stderrTail {
	t := &stderrTail{read: make(chan struct{}), done: make(chan struct{})}
	t.more.L = &t.mu
	return t
}

// copyStderr reads r (the read end of the child's stderr) to its end,
// keeping its tail, and then closes r; passOn writes what it reads to w.
// The child must never block on a stderr nobody reads: a client that
// holds the proxy's stderr open without reading it makes a write to w
// wait, and a child whose stderr pipe filled meanwhile would wait on
// its next line, and answer no call, for as long. So reading never
// waits for w: what does not fit in the queue is dropped, and said so.
func (t *stderrTail) copyStderr(r *os.File, w io.Writer) {
	go t.passOn(w)
	defer close(t.read)
	defer r.Close()
	buf := make([]byte, 4096)
	for {
		n, err := r.Read(buf)
		t.mu.Lock()
		if n > 0 {
			t.last = append(t.last, buf[:n]...)
			if len(t.last) > TailSize {
				t.cut = true
				t.last = append(t.last[:0], t.last[len(t.last)-TailSize:]...)
			}
			// Once a byte is dropped, so is all until the queue is
			// taken: the line saying so then comes where they were.
			if t.dropped == 0 && len(t.queue)+n <= stderrQueue {
				t.queue = append(t.queue, buf[:n]...)
			} else {
				t.dropped += n
			}
		}
		t.ended = err != nil
		t.mu.Unlock()
		t.more.Signal()
		if err != nil {
			return
		}
	}
}

// passOn writes what copyStderr queues to w, until the child's stderr has
// ended and all of it is written. A write that fails is not retried.
func (t *stderrTail) passOn(w io.Writer) {
	defer close(t.done)
	var out []byte
	for {
		t.mu.Lock()
		for len(t.queue) == 0 && t.dropped == 0 && !t.ended {
			t.more.Wait()
		}
		if len(t.queue) == 0 && t.dropped == 0 {
			t.mu.Unlock()
			return
		}
		out, t.queue = t.queue, out[:0]
		dropped := t.dropped
		t.dropped = 0
		t.mu.Unlock()
		_, _ = w.Write(out)
		if dropped > 0 {
			note := fmt.Sprintf("mcp-idempotent: %d bytes of the upstream's stderr were dropped: the proxy's stderr took no writes meanwhile\n", dropped)
			if len(out) > 0 && out[len(out)-1] != '\n' {
				note = "\n" + note
			}
			_, _ = io.WriteString(w, note)
		}
	}
}

// text returns the tail as one line of valid UTF-8: its lines joined by
// " | ", control characters dropped, and a first line cut by the bound
// dropped too unless it is the only one.
func (t *stderrTail) text() string {
	t.mu.Lock()
	b, cut := bytes.Clone(t.last), t.cut
	t.mu.Unlock()
	lines := strings.Split(strings.ToValidUTF8(string(b), ""), "\n")
	if cut && len(lines) > 1 {
		lines = lines[1:]
	}
	kept := lines[:0]
	for _, l := range lines {
		l = strings.TrimSpace(strings.Map(func(r rune) rune {
			if unicode.IsControl(r) && r != '\t' {
				return -1
			}
			return r
		}, l))
		if l != "" {
			kept = append(kept, l)
		}
	}
	s := strings.Join(kept, " | ")
	if cut && len(kept) == 1 && len(lines) == 1 {
		s = "..." + s
	}
	return s
}

// ExitCause says why the child's stdout ended: how the child exited and
// the end of its stderr, as in "exited with status 3; its stderr ended:
// boom". It waits for the child to exit and its stderr to end, until
// ctx is done; it returns "" if the child is still running then. It never
// shows the command line, which may hold a credential.
func (c *Child) ExitCause(ctx context.Context) string {
	select {
	case <-c.done:
	case <-ctx.Done():
		return ""
	}
	// What the child wrote before it exited is in the pipe; a process
	// it started may hold the pipe open, so the end is not waited for
	// past ctx.
	select {
	case <-c.stderr.read:
	case <-ctx.Done():
	}
	cause := exitWords(c.err)
	if tail := hideArgs(c.stderr.text(), c.cmd.Args[1:]); tail != "" {
		cause += "; its stderr ended: " + tail
	}
	return cause
}

// hideArgs returns tail with each of args that it holds, and the value of
// each --name=value among them, written as "[argument N]": a server that
// prints its command line when it fails would otherwise hand a
// credential given as an argument to whoever gets its exit cause (a
// client over HTTP too). Words shorter than minHiddenArg are left, as
// in "stdio": a credential is longer, and hiding every short word would
// garble the message.
func hideArgs(tail string, args []string) string {
	type word struct {
		s string
		n int
	}
	var words []word
	for i, a := range args {
		words = append(words, word{a, i + 1})
		if _, v, ok := strings.Cut(a, "="); ok {
			words = append(words, word{v, i + 1})
		}
	}
	// The longest first: an argument may hold another.
	slices.SortStableFunc(words, func(a, b word) int { return len(b.s) - len(a.s) })
	for _, w := range words {
		if len(w.s) >= minHiddenArg {
			tail = strings.ReplaceAll(tail, w.s, fmt.Sprintf("[argument %d]", w.n))
		}
	}
	return tail
}

// minHiddenArg is the length from which hideArgs hides an argument.
const minHiddenArg = 6

// exitWords says how a process that Wait returned err for ended.
func exitWords(err error) string {
	var ee *exec.ExitError
	switch {
	case err == nil:
		return "exited with status 0"
	case errors.As(err, &ee) && ee.ExitCode() >= 0:
		return fmt.Sprintf("exited with status %d", ee.ExitCode())
	case errors.As(err, &ee):
		// ExitCode is -1 when a signal ended it: "signal: killed".
		return "was ended by a signal (" + strings.TrimPrefix(ee.String(), "signal: ") + ")"
	default:
		return "exited: " + err.Error()
	}
}
