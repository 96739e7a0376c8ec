package stdio

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"
)

// gatedWriter is the proxy's stderr held by a client that does not read
// it but keeps it open: a write waits until open is closed.
type gatedWriter struct {
	open chan struct{}
	mu   sync.Mutex
	b    strings.Builder
}

func (w *gatedWriter) Write(p []byte) (int, error) {
	<-w.open
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *gatedWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// TestChildStderrNotTaken: a child that writes more to stderr than pipes
// hold, while the proxy's own stderr takes no write, still answers: the
// proxy keeps reading its stderr and drops what it cannot pass on, and
// says how much once its stderr takes writes again. A child that waited
// on its stderr stopped answering every call for as long as the client
// did not read the proxy's.
func TestChildStderrNotTaken(t *testing.T) {
	w := &gatedWriter{open: make(chan struct{})}
	// 1 MiB on stderr, then an answer on stdout, then the end of both.
	c, err := Start([]string{"sh", "-c", `head -c 1048576 /dev/zero | tr '\0' x >&2; echo '{"jsonrpc":"2.0","id":1,"result":{}}'`}, w, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = c.Stop(ctx, 0, nil)
	})
	released := false
	release := func() {
		if !released {
			released = true
			close(w.open)
		}
	}
	t.Cleanup(release)
	got := make(chan string, 1)
	go func() {
		frame, err := c.ReadFrame()
		if err != nil {
			got <- "error: " + err.Error()
			return
		}
		got <- string(frame)
	}()
	select {
	case frame := <-got:
		if frame != `{"jsonrpc":"2.0","id":1,"result":{}}` {
			t.Fatalf("ReadFrame = %s, want the child's answer", frame)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the child never answered: it waits on a stderr the proxy does not read")
	}
	release()
	<-c.stderr.done
	out := w.String()
	if !strings.HasPrefix(out, "xxx") || !strings.Contains(out, "bytes of the upstream's stderr were dropped") {
		t.Errorf("the proxy's stderr got %d bytes ending %q; want the child's first bytes, then a line saying how much was dropped", len(out), out[max(0, len(out)-200):])
	}
}
