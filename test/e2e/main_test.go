// Package e2e runs the built mcp-idempotent binary between real peers: the
// official go-sdk client in front, and behind it the chargeserver test peer
// (go-sdk) or @modelcontextprotocol/server-everything (node).
//
// Run:
//
//	(cd test/npm && npm ci)    # once, for everything_test.go
//	go test -race ./test/e2e/...
//
// Environment:
//
//	MCPI_E2E_DIRECT=1       run the proxy-path tests with no proxy in between,
//	                        expecting what a bare server does (no dedupe); this
//	                        checks the harness itself, and that the tests can fail.
//	MCPI_REQUIRE_SERVICES=1 fail, rather than skip, when node_modules is missing.
package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/goleak"

	"github.com/mcp-idempotent/mcp-idempotent/internal/skipnote"
)

// Set once by TestMain, read-only afterwards.
var (
	moduleRoot    string
	proxyBin      string
	proxyBuildErr error // non-nil when ./cmd/mcp-idempotent did not build
	chargeBin     string
	buildDir      string // where the binaries are built, removed at the end

	// direct is MCPI_E2E_DIRECT=1: "through the proxy" means straight to
	// the upstream, and tests expect no dedupe.
	direct = os.Getenv("MCPI_E2E_DIRECT") == "1"
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	var err error
	moduleRoot, err = findModuleRoot()
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	dir, err := os.MkdirTemp("", "mcpi-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	buildDir = dir

	chargeBin = filepath.Join(dir, "chargeserver")
	if err := goBuild(chargeBin, "./test/e2e/chargeserver"); err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	// A proxy that does not build fails the tests that need it, each with
	// the compiler's output, rather than hiding the whole package.
	proxyBin = filepath.Join(dir, "mcp-idempotent")
	proxyBuildErr = goBuild(proxyBin, "./cmd/mcp-idempotent")

	code := m.Run()
	skipnote.Report("test/e2e")
	if code == 0 {
		// Every session was closed by its test's cleanup; a goroutine left
		// behind is a leak in the client side of the harness.
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "e2e: leaked goroutines:", err)
			code = 1
		}
	}
	return code
}

// findModuleRoot walks up from the working directory to the go.mod.
func findModuleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("finding module root: no go.mod above the working directory")
		}
		dir = parent
	}
}

// raceEnabled is set when the tests run with -race (race_test.go).
var raceEnabled bool

// goBuild builds pkg (relative to the module root) into out; the proxy
// gets the race detector when the tests have it.
func goBuild(out, pkg string) error {
	args := []string{"build", "-o", out}
	if raceEnabled && pkg == "./cmd/mcp-idempotent" {
		args = append(args, "-race")
	}
	cmd := exec.Command("go", append(args, pkg)...)
	cmd.Dir = moduleRoot
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("building %s: %v\n%s", pkg, err, b)
	}
	return nil
}

// testContext returns a context that ends 30s from now, well before go
// test's own timeout, so a stuck peer fails one test instead of hanging the
// package.
func testContext(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// chargeServer is the command line of the chargeserver peer.
func chargeServer(args ...string) []string {
	return append([]string{chargeBin}, args...)
}

// proxied returns the command that runs upstream behind the proxy, or, with
// MCPI_E2E_DIRECT=1, upstream alone.
func proxied(t *testing.T, upstream ...string) *exec.Cmd {
	t.Helper()
	if direct {
		return unproxied(upstream...)
	}
	if proxyBuildErr != nil {
		t.Fatalf("the proxy did not build (set MCPI_E2E_DIRECT=1 to test the harness alone):\n%v", proxyBuildErr)
	}
	cmd := exec.Command(proxyBin, append([]string{"--"}, upstream...)...)
	// A race-detector build sleeps a second at exit by default, and goes
	// on after a race; here it must exit at once, and a race must fail
	// the test through the proxy's exit status.
	cmd.Env = append(os.Environ(), "GORACE=atexit_sleep_ms=0 halt_on_error=1")
	return cmd
}

// unproxied returns the command that runs upstream with no proxy.
func unproxied(upstream ...string) *exec.Cmd {
	return exec.Command(upstream[0], upstream[1:]...)
}

// terminateDuration is how long closing a session waits for the process to
// exit after its stdin is closed, before signalling it.
const terminateDuration = 2 * time.Second

// peer is a client session over a child process (the proxy, or a server run
// directly), with the handles a test needs to check how that process ended.
type peer struct {
	*mcp.ClientSession
	cmd    *exec.Cmd
	stderr *syncBuffer
	frames *syncBuffer // the client's side of the JSON-RPC transcript
}

// connect starts cmd and connects the official go-sdk client to it over its
// stdin/stdout. The session is closed when the test ends; if the test
// failed, the process's stderr and the end of the transcript are logged.
func connect(t *testing.T, ctx context.Context, cmd *exec.Cmd) *peer {
	t.Helper()
	return connectWith(t, ctx, cmd, nil)
}

// connectWith is connect with a client made with opts: its handlers of the
// server's requests, such as elicitation.
func connectWith(t *testing.T, ctx context.Context, cmd *exec.Cmd, opts *mcp.ClientOptions) *peer {
	t.Helper()
	p := &peer{cmd: cmd, stderr: new(syncBuffer), frames: new(syncBuffer)}
	cmd.Stderr = p.stderr
	// The proxy's child may inherit its stderr and outlive it for a moment;
	// do not let that hold up Wait.
	cmd.WaitDelay = 2 * time.Second

	client := mcp.NewClient(&mcp.Implementation{Name: "mcpi-e2e", Version: "0.0.1"}, opts)
	transport := &mcp.LoggingTransport{
		Transport: &mcp.CommandTransport{Command: cmd, TerminateDuration: terminateDuration},
		Writer:    p.frames,
	}
	cs, err := client.Connect(ctx, transport, nil)
	if err != nil {
		if cmd.Process != nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
		t.Fatalf("connecting to %s: %v\nstderr:\n%s\nframes:\n%s", cmd, err, p.stderr, p.frames.tail(transcriptTail))
	}
	p.ClientSession = cs
	t.Cleanup(func() {
		_ = cs.Close()
		if t.Failed() {
			t.Logf("stderr of %s:\n%s", cmd, p.stderr.tail(transcriptTail))
			t.Logf("frames seen by the client (write: sent, read: received):\n%s", p.frames.tail(transcriptTail))
		}
	})
	return p
}

// syncBuffer is a bytes.Buffer safe for one writer (os/exec's copier, or the
// transcript logger) and the test reading it, which may wait for a line.
type syncBuffer struct {
	mu      sync.Mutex // protects b and written
	b       bytes.Buffer
	written chan struct{} // closed and replaced by every Write
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.written != nil {
		close(s.written)
		s.written = nil
	}
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// waitFor waits until s contains substr, or ctx ends.
func (s *syncBuffer) waitFor(ctx context.Context, substr string) error {
	return s.waitUntil(ctx, strconv.Quote(substr), func(b string) bool { return strings.Contains(b, substr) })
}

// waitUntil waits until ok(s's contents) holds, or ctx ends.
func (s *syncBuffer) waitUntil(ctx context.Context, what string, ok func(string) bool) error {
	for {
		s.mu.Lock()
		if ok(s.b.String()) {
			s.mu.Unlock()
			return nil
		}
		if s.written == nil {
			s.written = make(chan struct{})
		}
		written := s.written
		s.mu.Unlock()
		select {
		case <-written:
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w", what, ctx.Err())
		}
	}
}

// transcriptTail bounds what a failed test logs of a stream.
const transcriptTail = 16 << 10

// tail returns the last n bytes of s, from a line start where possible.
func (s *syncBuffer) tail(n int) string {
	str := s.String()
	if len(str) <= n {
		return str
	}
	str = str[len(str)-n:]
	if i := strings.IndexByte(str, '\n'); i >= 0 {
		str = str[i+1:]
	}
	return "[...]\n" + str
}
