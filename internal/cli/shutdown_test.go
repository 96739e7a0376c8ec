package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/fingerprint"
	"github.com/mcp-idempotent/mcp-idempotent/internal/intercept"
	"github.com/mcp-idempotent/mcp-idempotent/internal/mcp"
	"github.com/mcp-idempotent/mcp-idempotent/internal/policy"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record/memstore"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record/recordtest"
)

// storeGoesDown answers a call, taking the store down before it does.
type storeGoesDown struct{ s *recordtest.UpdatesDown }

func (u storeGoesDown) Send(_ context.Context, _ string, _ json.RawMessage, done intercept.Answered) {
	u.s.Down.Store(true)
	done.Answered(json.RawMessage(`{"content":[{"type":"text","text":"charged"}]}`), nil)
}

type discard struct{}

// charge hands in a charge_card call that upstream gets, if it is sent.
func charge(t *testing.T, in *intercept.Interceptor, upstream intercept.Upstream) {
	t.Helper()
	call, perr := mcp.ParseToolCall(json.RawMessage(`{"name":"charge_card","arguments":{}}`))
	if perr != nil {
		t.Fatal(perr)
	}
	pol := policy.FromAnnotations(nil)
	in.Handle(t.Context(), &intercept.Request{Call: call, Policy: &pol, Origin: &intercept.Origin{Actor: "alice", Scope: "session:1", UpstreamID: "stdio:bank"},
		Upstream: upstream, Reply: discard{}})
}

// exitsOnceUp checks that waitForOutcomes does not return until up is
// called (early says what returning before means), and returns once it
// is (late says what not returning means).
func exitsOnceUp(t *testing.T, in *intercept.Interceptor, up func(), early, late string) {
	t.Helper()
	exited := make(chan struct{})
	go func() {
		waitForOutcomes(t.Context(), in, slog.New(slog.NewTextHandler(io.Discard, nil)))
		close(exited)
	}()
	select {
	case <-exited:
		t.Fatal(early)
	case <-time.After(300 * time.Millisecond):
	}
	up()
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		t.Fatal(late)
	}
}

func (discard) Reply(intercept.Answer) error { return nil }

// TestExitWaitsForOutcomes: a proxy whose store refused a call's outcome
// while it was down does not exit, and lose it, while it still tries to
// record it: it waits for the store to take it.
func TestExitWaitsForOutcomes(t *testing.T) {
	mem := memstore.New(memstore.Options{})
	store := &recordtest.UpdatesDown{Store: mem}
	in := intercept.New(intercept.Options{Store: store, Hasher: fingerprint.NewRandom()})
	charge(t, in, storeGoesDown{store})

	exitsOnceUp(t, in, func() { store.Down.Store(false) }, "the proxy exited while an outcome was still to be recorded", "the proxy did not exit once the store took the outcome")
	if recs := mem.Records(); len(recs) != 1 || recs[0].State != record.Completed {
		t.Fatalf("records %+v; want the execution completed", recs)
	}
}

// lostReserve is a memory store that, while down is set, makes each
// reservation and loses its answer, and fails every read: a Redis that
// stalled, then ran what it had been sent once it came back.
type lostReserve struct {
	*memstore.Store
	down atomic.Bool
}

var errStalled = errors.New("i/o timeout")

// neverSent fails the test if a call reaches it.
type neverSent struct{ t *testing.T }

func (u neverSent) Send(_ context.Context, _ string, _ json.RawMessage, done intercept.Answered) {
	u.t.Error("a call without a reservation was sent")
	done.Answered(json.RawMessage(`{"content":[]}`), nil)
}

func (s *lostReserve) Reserve(ctx context.Context, r *record.Record, o record.ReserveOptions) (*record.Record, bool, error) {
	rec, won, err := s.Store.Reserve(ctx, r, o)
	if s.down.Load() {
		return nil, false, errStalled
	}
	return rec, won, err
}

func (s *lostReserve) Get(ctx context.Context, id string) (*record.Record, error) {
	if s.down.Load() {
		return nil, errStalled
	}
	return s.Store.Get(ctx, id)
}

// TestExitSettlesLostReservations: a call whose reservation the store
// took with its answer lost was told it did not run. A proxy whose client
// leaves then waits for the store to settle that execution failed: gone
// first, it would leave it in flight, to be found unknown once its lease
// lapsed, and the call blocked though nothing was sent.
func TestExitSettlesLostReservations(t *testing.T) {
	mem := memstore.New(memstore.Options{})
	store := &lostReserve{Store: mem}
	store.down.Store(true)
	in := intercept.New(intercept.Options{Store: store, Hasher: fingerprint.NewRandom()})
	charge(t, in, neverSent{t})

	exitsOnceUp(t, in, func() { store.down.Store(false) }, "the proxy exited while a reservation it did not send was still in flight", "the proxy did not exit once the store answered")
	if recs := mem.Records(); len(recs) != 1 || recs[0].State != record.Failed {
		t.Fatalf("records %+v; want the execution failed", recs)
	}
}

// refusedStore refuses every connection.
type refusedStore struct{ *memstore.Store }

func (refusedStore) Reserve(context.Context, *record.Record, record.ReserveOptions) (*record.Record, bool, error) {
	return nil, false, fmt.Errorf("dial tcp 127.0.0.1:6379: %w", syscall.ECONNREFUSED)
}

func (refusedStore) Get(context.Context, string) (*record.Record, error) {
	return nil, fmt.Errorf("dial tcp 127.0.0.1:6379: %w", syscall.ECONNREFUSED)
}

// TestExitWaitsNotForRefusedConnections: a reservation whose connection
// was refused never reached the store, so a proxy whose client leaves
// has nothing to settle, and exits at once, not after a wait for a store
// that may stay down.
func TestExitWaitsNotForRefusedConnections(t *testing.T) {
	in := intercept.New(intercept.Options{Store: refusedStore{memstore.New(memstore.Options{})}, Hasher: fingerprint.NewRandom()})
	charge(t, in, neverSent{t})
	start := time.Now()
	waitForOutcomes(t.Context(), in, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if took := time.Since(start); took > time.Second {
		t.Fatalf("exiting took %v; want no wait for a reservation that never reached the store", took)
	}
}

// unsentStore fails every reservation before it reaches the server, as
// a store does whose connection could not be set up (a handshake that
// timed out), and every read.
type unsentStore struct{ *memstore.Store }

func (unsentStore) Reserve(context.Context, *record.Record, record.ReserveOptions) (*record.Record, bool, error) {
	return nil, false, fmt.Errorf("reserving: %w", record.NotSent(errStalled))
}

func (unsentStore) Get(context.Context, string) (*record.Record, error) {
	return nil, errStalled
}

// TestExitWaitsNotForUnsentReservations: a reservation the store says
// it never sent made nothing, so a proxy whose client leaves has nothing
// to settle, and does not wait for a store that may stay down.
func TestExitWaitsNotForUnsentReservations(t *testing.T) {
	in := intercept.New(intercept.Options{Store: unsentStore{memstore.New(memstore.Options{})}, Hasher: fingerprint.NewRandom()})
	charge(t, in, neverSent{t})
	done, cancel := context.WithCancel(t.Context())
	cancel()
	if err := in.SettleAbandoned(done); err != nil {
		t.Fatalf("SettleAbandoned = %v; want nothing to settle: the reservation never reached the store", err)
	}
}

// TestRestartFailureSaid: an upstream that exits and then cannot be
// started again (its command is gone) ends the proxy with an error that
// says so and why, not only that it exited: with --max-restarts 2 the
// operator otherwise sees no reason why it was not started again.
func TestRestartFailureSaid(t *testing.T) {
	script := filepath.Join(t.TempDir(), "server.sh")
	if err := os.WriteFile(script, []byte("#!/bin/sh\nrm -f \"$0\"\nexit 3\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	stdinR, stdinW := io.Pipe() // the client stays connected
	defer stdinW.Close()
	var stdout, stderr bytes.Buffer
	err := Run(ctx, []string{"--max-restarts", "2", "--", script}, stdinR, &stdout, &stderr)
	if err == nil || !strings.Contains(err.Error(), "no such file") {
		t.Errorf("Run = %v\nwant an error saying the upstream could not be started again, and why (no such file)\nstderr:\n%s", err, stderr.String())
	}
}

// TestRestartFailureNamesTheExit: when the upstream started again is
// refused (here it agrees on another protocol version), the error names
// how the upstream that exited ended, not how the one started again did
// once the proxy closed its stdin (exit status 0).
func TestRestartFailureNamesTheExit(t *testing.T) {
	script := filepath.Join(t.TempDir(), "server.sh")
	const answer = `read line; id=$(printf '%s' "$line" | sed 's/.*"id":\([^,}]*\).*/\1/'); ` +
		`echo "{\"jsonrpc\":\"2.0\",\"id\":$id,\"result\":{\"protocolVersion\":\"$1\",\"capabilities\":{},\"serverInfo\":{\"name\":\"s\",\"version\":\"1\"}}}"`
	body := "#!/bin/sh\nanswer() { " + answer + "; }\n" +
		"if [ -e \"$0.started\" ]; then answer 2024-11-05; cat >/dev/null; exit 0; fi\n" +
		": > \"$0.started\"\nanswer 2025-06-18\nexit 7\n"
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	stdinR, stdinW := io.Pipe() // the client stays connected
	defer stdinW.Close()
	go stdinW.Write([]byte(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"c","version":"1"}}}` + "\n"))
	var stdout, stderr bytes.Buffer
	err := Run(ctx, []string{"--max-restarts", "2", "--", script}, stdinR, &stdout, &stderr)
	if err == nil || !strings.Contains(err.Error(), "2024-11-05") || !strings.Contains(err.Error(), "exit status 7") {
		t.Errorf("Run = %v\nwant the restart's failure and the exit that came before it (exit status 7)\nstderr:\n%s", err, stderr.String())
	}
}
