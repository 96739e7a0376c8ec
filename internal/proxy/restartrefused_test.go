package proxy

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/fingerprint"
	"github.com/mcp-idempotent/mcp-idempotent/internal/intercept"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record/memstore"
)

// waitHandling waits until the client's pump is handling a message: the
// one the client sent last, which waits for the upstream.
func (r *restartRig) waitHandling(t *testing.T) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; {
		if !r.s.handling.TryLock() {
			return
		}
		r.s.handling.Unlock()
		if time.Now().After(deadline) {
			t.Fatal("the client's message was not handled")
		}
		time.Sleep(time.Millisecond)
	}
}

// refuseReplay answers the replayed handshake, under id, of up, started
// again, in another protocol version than the session's 2025-11-25: its
// start fails.
func refuseReplay(t *testing.T, up *upstreamEnd, id string) {
	t.Helper()
	up.send(t, `{"jsonrpc":"2.0","id":"`+id+`","result":{"protocolVersion":"2025-06-18","capabilities":{},"serverInfo":{"name":"s","version":"2"}}}`)
}

// TestRequestDuringARefusedRestart: a request the client sends while the
// upstream is being started again, whose replayed handshake is then
// refused, is answered before the session ends: an error saying it was
// not sent, and why the upstream could not be started again.
func TestRequestDuringARefusedRestart(t *testing.T) {
	r := newRestartRig(t, 5)
	up := r.upstream(t)
	r.initializeAt(t, up, "2025-11-25")
	up2 := r.exitAndRestart(t, up)
	r.client.send(t, `{"jsonrpc":"2.0","id":7,"method":"resources/list"}`)
	r.waitHandling(t)
	refuseReplay(t, up2, "mcp-idempotent:1")
	got := r.client.next(t, "client")
	if !strings.Contains(got, `"id":7,"error"`) || !strings.Contains(got, "resources/list was not sent") || !strings.Contains(got, `2025-06-18`) {
		t.Fatalf("the client got %s; want an error for request 7 saying it was not sent, and why the upstream could not be started again", got)
	}
}

// TestCallDuringARefusedRestart: a tools/call the client sends while the
// upstream is being started again, whose replayed handshake is then
// refused, is answered before the session ends: it failed before it was
// sent, so calling it again runs it.
func TestCallDuringARefusedRestart(t *testing.T) {
	store := memstore.New(memstore.Options{})
	r := newRestartRig(t, 5, func(o *Options) {
		o.Interceptor = intercept.New(intercept.Options{Store: store, Hasher: fingerprint.NewRandom()})
	})
	up := r.upstream(t)
	r.initializeAt(t, up, "2025-11-25")
	up2 := r.exitAndRestart(t, up)
	r.client.send(t, `{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"quote","arguments":{}}}`)
	// Its listing of the tools waits for the upstream.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		r.s.tools.mu.Lock()
		listing := r.s.tools.inFlight != nil
		r.s.tools.mu.Unlock()
		if listing {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the call's listing of the tools did not begin")
		}
	}
	refuseReplay(t, up2, "mcp-idempotent:1")
	got := r.client.next(t, "client")
	if !strings.Contains(got, `"id":8,"error"`) || !strings.Contains(got, "failed before it was sent") || !strings.Contains(got, "2025-06-18") {
		t.Fatalf("the client got %s; want the call to fail before it was sent, saying why the upstream could not be started again", got)
	}
	if recs := store.Records(); len(recs) != 1 || recs[0].State != record.Failed {
		t.Fatalf("records %v; want the call's, failed", recs)
	}
}

// explained is a Conn that says how it ended, as stdio.Child does.
type explained struct {
	Conn
	cause string
}

func (e explained) ExitCause(context.Context) string { return e.cause }

// TestRefusedRestartNamesTheExit: a request told that the upstream could
// not be started again is told how the upstream that exited ended, not
// how the one started in its place did once the proxy closed it.
func TestRefusedRestartNamesTheExit(t *testing.T) {
	causes := []string{"exited with status 139", "exited with status 0"}
	r := newRestartRig(t, 5, func(o *Options) {
		restart := o.Restart
		o.Restart = func(ctx context.Context) (Conn, error) {
			conn, err := restart(ctx)
			cause := causes[0]
			causes = causes[1:]
			return explained{conn, cause}, err
		}
	})
	up := r.upstream(t)
	r.initializeAt(t, up, "2025-11-25")
	up2 := r.exitAndRestart(t, up)
	up2.send(t, `{"jsonrpc":"2.0","id":"mcp-idempotent:1","result":{"protocolVersion":"2025-11-25","capabilities":{},"serverInfo":{"name":"s","version":"1"}}}`)
	up3 := r.exitAndRestart(t, up2) // status 139
	r.client.send(t, `{"jsonrpc":"2.0","id":7,"method":"resources/list"}`)
	r.waitHandling(t)
	refuseReplay(t, up3, "mcp-idempotent:2") // then stopped by the proxy: status 0
	got := r.client.next(t, "client")
	if !strings.Contains(got, "status 139") || strings.Contains(got, "status 0") || !strings.Contains(got, "2025-06-18") {
		t.Fatalf("the client got %s; want the exit that came first (status 139) and why the upstream in its place was refused", got)
	}
}
