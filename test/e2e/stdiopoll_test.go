//go:build linux

package e2e

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// initializeFrame is a client's first request.
const initializeFrame = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"stdiopoll","version":"1"}}}` + "\n"

// TestClientPipesPolled: started on blocking pipes, as Python's
// subprocess starts a server, the proxy reads and writes each through an
// open file of its own, non-blocking (docs/concepts.md, Pass-through),
// and leaves the client's files as they came.
func TestClientPipesPolled(t *testing.T) {
	if direct {
		t.Skip("about the proxy's own files")
	}
	inR, inW := blockingPipe(t)
	outR, outW := blockingPipe(t)
	cmd := proxied(t, chargeServer()...)
	cmd.Stdin, cmd.Stdout = inR, outW
	stderr := new(syncBuffer)
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	inR.Close()
	outW.Close()
	defer func() {
		inW.Close()
		if err := cmd.Wait(); err != nil {
			t.Errorf("the proxy exited with %v; stderr:\n%s", err, stderr)
		}
	}()
	answer := initialize(t, inW, outR)
	if !strings.Contains(answer, `"result"`) {
		t.Fatalf("initialize answered %s", answer)
	}

	pid := cmd.Process.Pid
	for fd, name := range map[int]string{0: "stdin", 1: "stdout"} {
		link, flags := fdInfo(t, pid, fd)
		if flags&syscall.O_NONBLOCK != 0 {
			t.Errorf("the client's %s (%s) was made non-blocking", name, link)
		}
		var polled []int
		for _, other := range openFiles(t, pid) {
			if other == fd {
				continue
			}
			if l, f := fdInfo(t, pid, other); l == link && f&syscall.O_NONBLOCK != 0 {
				polled = append(polled, other)
			}
		}
		if len(polled) != 1 {
			t.Errorf("%s (%s): %d non-blocking files of the same pipe (%v); want 1", name, link, len(polled), polled)
		}
	}
}

// TestClientSocketsPolled: started on sockets, as Node starts a server,
// the proxy makes each non-blocking while it runs, and gives it its
// flags back when it exits.
func TestClientSocketsPolled(t *testing.T) {
	if direct {
		t.Skip("about the proxy's own files")
	}
	in, inTheirs := blockingSocketPair(t)
	out, outTheirs := blockingSocketPair(t)
	cmd := proxied(t, chargeServer()...)
	cmd.Stdin, cmd.Stdout = inTheirs, outTheirs
	stderr := new(syncBuffer)
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	answer := initialize(t, in, out)
	if !strings.Contains(answer, `"result"`) {
		t.Fatalf("initialize answered %s", answer)
	}
	// The test's copies share the proxy's open files, and their flags.
	if !nonblocking(t, inTheirs) || !nonblocking(t, outTheirs) {
		t.Error("a socket the proxy reads or writes is blocking")
	}
	in.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("the proxy exited with %v; stderr:\n%s", err, stderr)
	}
	if nonblocking(t, inTheirs) || nonblocking(t, outTheirs) {
		t.Error("the proxy left a socket non-blocking")
	}
}

// initialize writes the initialize request to w and returns the line
// read from r.
func initialize(t *testing.T, w, r *os.File) string {
	t.Helper()
	if _, err := w.WriteString(initializeFrame); err != nil {
		t.Fatal(err)
	}
	r.SetReadDeadline(time.Now().Add(30 * time.Second)) // ignored where not polled
	line, err := bufio.NewReader(r).ReadString('\n')
	if err != nil {
		t.Fatalf("reading the answer to initialize: %v", err)
	}
	return line
}

// blockingPipe returns a pipe whose ends are blocking (os.Pipe's are not).
func blockingPipe(t *testing.T) (r, w *os.File) {
	t.Helper()
	var p [2]int
	if err := syscall.Pipe2(p[:], syscall.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	r, w = os.NewFile(uintptr(p[0]), "r"), os.NewFile(uintptr(p[1]), "w")
	t.Cleanup(func() { r.Close(); w.Close() })
	return r, w
}

// blockingSocketPair returns a blocking socket pair.
func blockingSocketPair(t *testing.T) (mine, theirs *os.File) {
	t.Helper()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	mine, theirs = os.NewFile(uintptr(fds[0]), "mine"), os.NewFile(uintptr(fds[1]), "theirs")
	t.Cleanup(func() { mine.Close(); theirs.Close() })
	return mine, theirs
}

func nonblocking(t *testing.T, f *os.File) bool {
	t.Helper()
	rc, err := f.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var flags uintptr
	var errno syscall.Errno
	rc.Control(func(fd uintptr) {
		flags, _, errno = syscall.Syscall(syscall.SYS_FCNTL, fd, syscall.F_GETFL, 0)
	})
	if errno != 0 {
		t.Fatal(errno)
	}
	return flags&syscall.O_NONBLOCK != 0
}

// openFiles returns the descriptors process pid has open.
func openFiles(t *testing.T, pid int) []int {
	t.Helper()
	entries, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	var fds []int
	for _, e := range entries {
		if fd, err := strconv.Atoi(e.Name()); err == nil {
			fds = append(fds, fd)
		}
	}
	return fds
}

// fdInfo returns what descriptor fd of process pid refers to
// ("pipe:[123]") and its open file's flags.
func fdInfo(t *testing.T, pid, fd int) (link string, flags int) {
	t.Helper()
	dir := fmt.Sprintf("/proc/%d", pid)
	link, err := os.Readlink(filepath.Join(dir, "fd", strconv.Itoa(fd)))
	if err != nil {
		return "", 0 // closed meanwhile
	}
	info, err := os.ReadFile(filepath.Join(dir, "fdinfo", strconv.Itoa(fd)))
	if err != nil {
		return "", 0
	}
	for _, line := range strings.Split(string(info), "\n") {
		if v, ok := strings.CutPrefix(line, "flags:"); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 8, 64)
			if err != nil {
				t.Fatalf("fdinfo %d: flags %q: %v", fd, v, err)
			}
			return link, int(n)
		}
	}
	t.Fatalf("fdinfo %d has no flags:\n%s", fd, info)
	return "", 0
}
