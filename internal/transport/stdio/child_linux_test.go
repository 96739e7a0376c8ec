package stdio

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// TestChildDiesWithTheProxy: a proxy killed outright (SIGKILL, which it
// cannot handle) leaves no upstream running. The test binary runs itself
// as the proxy, which starts a child and prints its pid; the test kills
// that proxy and waits for the child to go.
func TestChildDiesWithTheProxy(t *testing.T) {
	if os.Getenv("STDIO_TEST_PARENT") == "1" {
		c, err := Start([]string{"sleep", "60"}, os.Stderr, 0)
		if err != nil {
			t.Fatal(err)
		}
		os.Stdout.WriteString(strconv.Itoa(c.Pid()) + "\n")
		time.Sleep(time.Minute)
		return
	}
	parent := exec.Command(os.Args[0], "-test.run", "^TestChildDiesWithTheProxy$")
	parent.Env = append(os.Environ(), "STDIO_TEST_PARENT=1")
	out, err := parent.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := parent.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		parent.Process.Kill()
		t.Fatalf("reading the child's pid: %v", err)
	}
	pid, err := strconv.Atoi(line[:len(line)-1])
	if err != nil {
		t.Fatalf("child pid %q: %v", line, err)
	}
	parent.Process.Kill()
	parent.Wait()
	for deadline := time.Now().Add(10 * time.Second); ; {
		// The child is reparented, and reaped once it exits by whatever
		// runs as init, which may be slow to, or never do it.
		if err := syscall.Kill(pid, 0); err == syscall.ESRCH || zombie(pid) {
			return
		}
		if time.Now().After(deadline) {
			syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("the upstream (pid %d) still runs after its proxy was killed", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// zombie reports whether process pid has exited and waits to be reaped.
func zombie(pid int) bool {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// pid (comm) state ...: comm may hold spaces and parentheses.
	i := bytes.LastIndexByte(stat, ')')
	return i >= 0 && i+2 < len(stat) && stat[i+2] == 'Z'
}

// TestChildExitWithStdoutHeld: a child that exits while a process it
// started still holds its stdout is read to its end: what it wrote, then
// io.EOF. The proxy learns of an upstream's exit so, and a read that
// waited for the process it started left its calls in flight unanswered
// and its restart undone.
func TestChildExitWithStdoutHeld(t *testing.T) {
	c, _ := startChild(t, "sh", "-c", `sleep 3600 & echo $!; echo '{"jsonrpc":"2.0","id":1,"result":{}}'; kill -9 $$`)
	line, err := c.ReadFrame()
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(string(line))
	if err != nil {
		t.Fatalf("the pid of the process the child started: %q: %v", line, err)
	}
	t.Cleanup(func() { syscall.Kill(pid, syscall.SIGKILL) })
	if got, err := c.ReadFrame(); err != nil || string(got) != `{"jsonrpc":"2.0","id":1,"result":{}}` {
		t.Errorf("ReadFrame = %q, %v; want the child's last answer", got, err)
	}
	if _, err := c.ReadFrame(); err != io.EOF {
		t.Errorf("ReadFrame after the child's exit = %v, want io.EOF", err)
	}
	if err := syscall.Kill(pid, 0); err != nil {
		t.Errorf("the process the child started has gone (%v): the test holds nothing", err)
	}
}

// TestChildStopReachesWhatItStarted: an upstream run through a wrapper
// (sh -c, a launcher) that does not exit on its stdin's end is stopped
// with what it started: the server the wrapper ran is not left running,
// orphaned, once the wrapper is signalled. The grandchild holds a FIFO
// open for writing, so its end is the FIFO's end of file.
func TestChildStopReachesWhatItStarted(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "held")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	c, _ := startChild(t, "sh", "-c", `sleep 3600 > "$0" & echo $!; wait`, fifo)
	line, err := c.ReadFrame()
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(string(line))
	if err != nil {
		t.Fatalf("the pid of the process the child started: %q: %v", line, err)
	}
	t.Cleanup(func() { syscall.Kill(pid, syscall.SIGKILL) })
	// Opened once the grandchild opened its end: the read below ends
	// when it exits.
	held, err := os.OpenFile(fifo, os.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Stop(ctx, 0, nil); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	// A bound on a wait for an end that comes at once, not a measure.
	if err := held.SetReadDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if n, err := held.Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("the process the upstream started (pid %d) still runs after Stop: read %d, %v; want io.EOF", pid, n, err)
	}
}
