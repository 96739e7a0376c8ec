package stdio

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"
)

// A Child is an upstream MCP server running as a child process, spoken to
// over its stdin and stdout. Its stderr goes to the proxy's stderr, and
// its end is kept (ExitCause).
type Child struct {
	*Conn
	cmd    *exec.Cmd
	out    *os.File      // the read end of the child's stdout
	done   chan struct{} // closed when the process has exited
	err    error         // the exit error; written before done is closed
	stderr *stderrTail

	closeOnce sync.Once
	closedAt  time.Time // when its stdin was first closed; set in closeOnce
}

// Start starts argv[0] with the arguments argv[1:]. The child's stderr is
// written to stderr (nil: discarded).
func Start(argv []string, stderr io.Writer, maxFrame int) (*Child, error) {
	if len(argv) == 0 {
		return nil, errors.New("no upstream command given")
	}
	if stderr == nil {
		stderr = io.Discard
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.SysProcAttr = childAttr()
	// A pipe of our own, as for stdout, read by copyStderr: one that
	// exec made would make Wait wait for its end, which a process the
	// child started may hold open.
	errOut, errIn, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	cmd.Stderr = errIn
	// Our own pipe rather than cmd.StdinPipe, to write it with Raw.
	inR, inW, err := os.Pipe()
	if err != nil {
		errOut.Close()
		errIn.Close()
		return nil, err
	}
	cmd.Stdin = inR
	// Our own pipe rather than cmd.StdoutPipe: Wait closes the latter as soon
	// as the process exits, dropping a last answer still in the pipe. The read
	// end of an os.Pipe stays ours until it reports EOF.
	out, w, err := os.Pipe()
	if err != nil {
		errOut.Close()
		errIn.Close()
		inR.Close()
		inW.Close()
		return nil, err
	}
	cmd.Stdout = w
	err = cmd.Start()
	w.Close()
	errIn.Close()
	inR.Close()
	if err != nil {
		out.Close()
		errOut.Close()
		inW.Close()
		return nil, fmt.Errorf("starting upstream %q: %w", argv[0], err)
	}
	in := Raw(inW)
	c := &Child{Conn: NewConn(stdout{Raw(out), out}, in, maxFrame), cmd: cmd, out: out, done: make(chan struct{})}
	c.Conn.FollowLateIDs()
	c.Conn.ReportCutFrames()
	c.stderr = newStderrTail()
	go c.stderr.copyStderr(errOut, stderr)
	go func() {
		c.err = cmd.Wait()
		// A process the child started may hold its stdout open, and
		// would keep a read waiting for ever: past this deadline a read
		// takes what the child wrote, then reports the end (stdout.Read).
		_ = out.SetReadDeadline(time.Now())
		// As cmd.StdinPipe's would be: writes after the exit fail.
		in.Close()
		// What the child wrote to stderr before it exited is passed on
		// before Done says it exited, so that the proxy's own words
		// about the exit come after it; not waited for long, since a
		// process the child started may hold its stderr open.
		t := time.NewTimer(stderrDrain)
		select {
		case <-c.stderr.done:
		case <-t.C:
		}
		t.Stop()
		close(c.done)
	}()
	return c, nil
}

// stdout is the read end of a child's stdout, which reads as at its end
// once Stop has closed it, or once the child has exited and what it wrote
// is read.
type stdout struct {
	io.Reader
	f *os.File // the file Reader reads
}

func (r stdout) Read(p []byte) (int, error) {
	n, err := r.Reader.Read(p)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		// The child has exited: its writes are all in the pipe.
		n, err = readNow(r.f, p)
	}
	if errors.Is(err, os.ErrClosed) {
		err = io.EOF
	}
	return n, err
}

// Done is closed when the child has exited.
func (c *Child) Done() <-chan struct{} { return c.done }

// ExitError returns how the child exited; call it after Done is closed.
func (c *Child) ExitError() error { return c.err }

// Pid returns the child's process id.
func (c *Child) Pid() int { return c.cmd.Process.Pid }

// Close closes the child's stdin, which asks it to exit. The first close
// starts Stop's first wait.
func (c *Child) Close() error {
	c.closeOnce.Do(func() { c.closedAt = time.Now() })
	return c.Conn.Close()
}

// Stop ends the child the way MCP's stdio transport asks: close its stdin,
// wait, then SIGTERM, then SIGKILL, each after grace. The first wait counts
// from when its stdin was closed: a session that closed it, and relayed
// what the child wrote since, has waited that long already. Once hurry is
// closed (the proxy was told to stop), each step waits at most
// HurriedGrace: a signal that comes during the wait is acted on then, not
// after it. ctx
// bounds it all: when it is done, the child is killed. Once the child has
// exited, the read end of its stdout is closed too: what it wrote last is
// no one's once Stop is called, and a serve process that ends a thousand
// sessions must not hold their pipes until the garbage collector runs.
func (c *Child) Stop(ctx context.Context, grace time.Duration, hurry <-chan struct{}) error {
	c.Close()
	defer c.out.Close()
	hurried := false
	for _, sig := range []syscall.Signal{0, syscall.SIGTERM, syscall.SIGKILL} {
		if sig != 0 {
			c.signal(sig)
		}
		wait := grace
		if hurried {
			wait = min(grace, HurriedGrace)
		}
		if sig == 0 {
			wait -= time.Since(c.closedAt)
		}
		t := time.NewTimer(wait)
	step:
		for {
			select {
			case <-c.done:
				t.Stop()
				return nil
			case <-ctx.Done():
				t.Stop()
				c.signal(syscall.SIGKILL)
				<-c.done
				return ctx.Err()
			case <-hurry:
				hurry, hurried = nil, true
				if wait > HurriedGrace {
					t.Reset(HurriedGrace)
				}
			case <-t.C:
				break step
			}
		}
	}
	<-c.done
	return nil
}

// signal sends sig to the child and what it started (signalTree), while
// the child has not been seen to exit: past that, its process id may
// name another process.
func (c *Child) signal(sig syscall.Signal) {
	select {
	case <-c.done:
	default:
		signalTree(c.cmd.Process, sig)
	}
}

// stderrDrain bounds how long Done waits, once the child has exited, for
// its stderr to be passed on.
const stderrDrain = 100 * time.Millisecond

// HurriedGrace is the longest a step of Stop waits once it is hurried.
const HurriedGrace = 250 * time.Millisecond

// Identity is the identity of the upstream that argv starts when run in
// the working directory dir: Describe's words and the directory, since a
// word may be a path relative to it ("node index.js"), and the same
// command run in another project is another server. The environment is
// not part of it.
func Identity(dir string, argv []string) string {
	return Describe(argv) + " (in " + utf8Text(dir) + ")"
}

// utf8Text is s, quoted if it is not UTF-8. An identity enters the
// fingerprint as JSON text, which holds UTF-8 only: each byte that is
// not would become U+FFFD there, and two upstreams that differ only in
// such bytes would share executions.
func utf8Text(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	return strconv.Quote(s)
}

// Name is what may be shown of the upstream that argv starts in dir: its
// program and the directory, without the arguments, which may hold a
// credential (--api-key ...). Identity holds them.
func Name(dir string, argv []string) string {
	return Describe(argv[:min(len(argv), 1)]) + " (in " + utf8Text(dir) + ")"
}

// Describe normalises argv into the command's words joined by single
// spaces, each quoted only where it must be: where it holds white space,
// a quote or a backslash, or is not UTF-8 (see utf8Text).
func Describe(argv []string) string {
	words := make([]string, len(argv))
	for i, a := range argv {
		if a == "" || strings.ContainsAny(a, " \t\n\"'\\") || !utf8.ValidString(a) {
			words[i] = fmt.Sprintf("%q", a)
		} else {
			words[i] = a
		}
	}
	return "stdio:" + strings.Join(words, " ")
}
