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
	mu   sync.Mutex    // protects last and cut
	last []byte        // the last TailSize bytes read at most
	cut  bool          // whether bytes before last were dropped
	done chan struct{} // closed once the child's stderr has ended
}

// copyStderr reads r (the read end of the child's stderr) to its end,
// writing what it reads to w, and then closes r. A write to w that fails
// is not retried, and reading goes on: the child must never block on a
// stderr nobody reads.
func (t *stderrTail) copyStderr(r *os.File, w io.Writer) {
	defer close(t.done)
	defer r.Close()
	buf := make([]byte, 4096)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			_, _ = w.Write(buf[:n])
			t.mu.Lock()
			t.last = append(t.last, buf[:n]...)
			if len(t.last) > TailSize {
				t.cut = true
				t.last = append(t.last[:0], t.last[len(t.last)-TailSize:]...)
			}
			t.mu.Unlock()
		}
		if err != nil {
			return
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
	case <-c.stderr.done:
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
