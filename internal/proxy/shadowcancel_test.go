package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"maps"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/fingerprint"
	"github.com/mcp-idempotent/mcp-idempotent/internal/intercept"
	"github.com/mcp-idempotent/mcp-idempotent/internal/journal"
	"github.com/mcp-idempotent/mcp-idempotent/internal/jsonrpc"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record/memstore"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record/sqlitestore"
)

// TestShadowCancelled: a call the client cancels goes on in normal mode,
// and its outcome is recorded for a retry; in shadow mode the
// cancellation goes upstream, and the record waits for the upstream's
// answer to the cancelled call. A result completes it; until an answer
// comes, a retry attaches; an error, or no answer before the upstream
// exits, leaves it unknown, since the upstream answered the cancellation
// and the outcome normal mode would have waited for was not observed.
// With a store in memory and with SQLite, whose reservations wait on I/O.
func TestShadowCancelled(t *testing.T) {
	for _, tt := range []struct {
		name string
		card string
		// retryFirst sends the call again before the upstream answers
		// the cancelled one, and once more after.
		retryFirst bool
		want       map[string]int // the shadow decisions
		state      record.State   // the cancelled call's record, at the end
		note       string         // in its last transition's note
	}{
		{"answered", "C", false, map[string]int{"new": 2, "replayed": 1}, record.Delivered, ""},
		{"answered after a retry", "C", true, map[string]int{"new": 2, "attached": 1, "replayed": 1}, record.Delivered, ""},
		{"refused", "E", true, map[string]int{"new": 2, "attached": 1, "unknown": 1}, record.Unknown,
			"the client cancelled the call, and the upstream answered it with error -32800"},
		{"never answered", "N", true, map[string]int{"new": 2, "attached": 1}, record.Unknown,
			"the client cancelled the call, and the upstream exited before answering"},
	} {
		for _, st := range []struct {
			name string
			open func(*testing.T) record.Store
		}{
			{"memory", func(*testing.T) record.Store { return memstore.New(memstore.Options{}) }},
			{"sqlite", openSQLite},
		} {
			t.Run(tt.name+"/"+st.name, func(t *testing.T) {
				store := st.open(t)
				d, _, lines := runShadowScriptOn(t, store, true, func(s *shadowRig) {
					s.charge(2, tt.card, "")
					<-s.gotC
					s.decided(1) // reserved: a call cancelled first would not have run
					s.cancel(2)
					s.charge(3, "A", "") // taken after the cancellation
					s.answers(1)
					if got := s.settled(); got != record.Completed {
						t.Fatalf("an execution settled %s before the upstream answered the cancelled call; want A's, completed", got)
					}
					if tt.retryFirst {
						s.charge(4, tt.card, "") // the upstream holds it too
						<-s.gotC
						s.decided(3)
					}
					close(s.releaseC)
					if tt.retryFirst {
						s.answers(1) // the retry's
					}
					if tt.card == "N" {
						return // the upstream exits with the session
					}
					s.settled()  // the cancelled call's
					s.answers(1) // its answer, passed on for the client to ignore
					s.charge(5, tt.card, "")
					s.answers(1)
				})
				if !maps.Equal(d.shown, tt.want) {
					t.Errorf("shadow decisions %v; want %v", d.shown, tt.want)
				}
				rec := firstJournaled(t, store, lines) // call 2's
				last := rec.History[len(rec.History)-1]
				if rec.State != tt.state || !strings.Contains(last.Note, tt.note) {
					t.Errorf("the cancelled call's record is %s (%q); want %s (%q)", rec.State, last.Note, tt.state, tt.note)
				}
			})
		}
	}
}

// openSQLite opens a SQLite store in a directory of t's, closed when t
// ends.
func openSQLite(t *testing.T) record.Store {
	t.Helper()
	store, err := sqlitestore.Open(t.Context(), filepath.Join(t.TempDir(), "records.db"), sqlitestore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	return store
}

// TestShadowCancelledIDUsedAgain: once the client sends another request
// under a cancelled call's id, an answer under it may be either's, so the
// cancelled call's outcome is not observed: unknown, and said why.
func TestShadowCancelledIDUsedAgain(t *testing.T) {
	store := memstore.New(memstore.Options{})
	var state record.State
	_, _, lines := runShadowScriptOn(t, store, true, func(s *shadowRig) {
		s.charge(2, "N", "")
		<-s.gotC
		s.cancel(2)
		s.call(2, "ping", `{}`)
		state = s.settled()
	})
	rec := firstJournaled(t, store, lines)
	last := rec.History[len(rec.History)-1]
	if want := "the client used its id again"; state != record.Unknown || !strings.Contains(last.Note, want) {
		t.Errorf("the cancelled call settled %s (%q); want unknown (%q)", state, last.Note, want)
	}
}

// firstJournaled returns the record of the first execution lines name.
func firstJournaled(t *testing.T, store record.Store, lines []journal.Entry) *record.Record {
	t.Helper()
	for _, e := range lines {
		if e.Execution == "" {
			continue
		}
		rec, err := store.Get(context.Background(), e.Execution)
		if err != nil {
			t.Fatal(err)
		}
		return rec
	}
	t.Fatal("no execution was journaled")
	return nil
}

// TestShadowCancelledBounded: an upstream that never answers the calls
// it is told were cancelled does not leave them all in flight until the
// session ends: past maxCancelledShadows, a cancelled call settles
// unknown at once.
func TestShadowCancelledBounded(t *testing.T) {
	d := &decisions{counted: map[string]int{}, shown: map[string]int{}, settled: make(chan record.State, 2*maxCancelledShadows)}
	store := memstore.New(memstore.Options{})
	in := intercept.New(intercept.Options{Store: store, Hasher: fingerprint.NewRandom(), Observer: d, Shadow: true})
	r := newRigOptions(t, 0, Options{Interceptor: in})
	call := func(n int) string {
		return `{"jsonrpc":"2.0","id":` + strconv.Itoa(n) + `,"method":"tools/call","params":{"name":"charge_card","arguments":{"n":` + strconv.Itoa(n) + `}}}`
	}
	r.startCall(t, call(0))
	// Each call is cancelled once the upstream has it: one cancelled
	// before, while it waits behind the listing of call 0's tool, is
	// never sent, nor kept. The upstream answers nothing.
	for n := range maxCancelledShadows + 1 {
		if n > 0 {
			r.client.send(t, call(n))
			r.upstream.next(t, "upstream")
		}
		r.client.send(t, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":`+strconv.Itoa(n)+`}}`)
		r.upstream.next(t, "upstream")
	}
	select {
	case state := <-d.settled:
		if state != record.Unknown {
			t.Fatalf("a cancelled call settled %s; want unknown", state)
		}
	case <-time.After(30 * time.Second): // a thousand calls, under -race
		t.Fatalf("no call settled; want the one cancelled past the %d kept", maxCancelledShadows)
	}
	recs, err := store.List(t.Context(), record.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	var settled []string
	for _, rec := range recs {
		if rec.State != record.Dispatched {
			settled = append(settled, string(rec.State)+": "+rec.History[len(rec.History)-1].Note)
		}
	}
	if len(settled) != 1 || !strings.Contains(settled[0], "cancelled calls already awaited an answer") {
		t.Errorf("of %d calls, settled %q; want the last alone, said why", len(recs), settled)
	}
}

// TestShadowCancelledUnanswered: a cancelled call whose answer is
// accounted for without a frame, by the upstream's transport (an HTTP
// response that ended without one, as a server that honours the
// cancellation sends) or by the size limit (an answer dropped), settles
// unknown then, as an answer in an error would: it does not stay in
// flight, with later calls attached to it, until the session ends.
func TestShadowCancelledUnanswered(t *testing.T) {
	for _, tt := range []struct {
		name  string
		end   func(r *rig, up *accountingConn)
		state record.State
		note  string
	}{
		{"no answer", func(_ *rig, up *accountingConn) {
			up.account("1", jsonrpc.NoAnswer{Status: 200, Reason: "upstream response ended without an answer"})
		}, record.Unknown, "the client cancelled the call, and no answer from the upstream"},
		{"too large", func(r *rig, _ *accountingConn) {
			r.upstream.send(t, `{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"`+strings.Repeat("x", 300)+`"}]}}`)
		}, record.Unknown, "the client cancelled the call, and the upstream's answer was dropped"},
		// Nothing reached the upstream: failed, as in normal mode, where
		// the same send fails the same way.
		{"not sent", func(_ *rig, up *accountingConn) {
			up.account("1", jsonrpc.NoAnswer{NotSent: true, Reason: "upstream unreachable: dial tcp: connection refused"})
		}, record.Failed, "connection refused"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			d := &decisions{counted: map[string]int{}, shown: map[string]int{}, settled: make(chan record.State, 4)}
			store := memstore.New(memstore.Options{})
			in := intercept.New(intercept.Options{Store: store, Hasher: fingerprint.NewRandom(), Observer: d, Shadow: true})
			var up *accountingConn
			r := newRigUpstream(t, context.Background(), 200, Options{Interceptor: in}, func(c Conn) Conn {
				up = newAccountingConn(c)
				return up
			})
			r.startCall(t, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"charge_card"}}`)
			r.client.send(t, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}`)
			r.upstream.next(t, "upstream") // the cancellation, passed on
			tt.end(r, up)
			select {
			case state := <-d.settled:
				if state != tt.state {
					t.Fatalf("the cancelled call settled %s; want %s", state, tt.state)
				}
			case <-time.After(5 * time.Second):
				t.Fatalf("the cancelled call did not settle; want %s once its answer was accounted for", tt.state)
			}
			recs, err := store.List(t.Context(), record.Filter{})
			if err != nil || len(recs) != 1 {
				t.Fatalf("List = %v, %v; want one record", recs, err)
			}
			note := recs[0].History[len(recs[0].History)-1].Note
			if !strings.Contains(note, tt.note) {
				t.Errorf("its note is %q; want %q", note, tt.note)
			}
		})
	}
}

// TestShadowAnsweredInBatch: an upstream may answer a call in a batch of
// its own; the call's record takes that answer as it takes one alone,
// cancelled or not, rather than stay in flight.
func TestShadowAnsweredInBatch(t *testing.T) {
	for _, cancel := range []bool{false, true} {
		t.Run("cancelled="+strconv.FormatBool(cancel), func(t *testing.T) {
			d := &decisions{counted: map[string]int{}, shown: map[string]int{}, settled: make(chan record.State, 4)}
			in := intercept.New(intercept.Options{Store: memstore.New(memstore.Options{}), Hasher: fingerprint.NewRandom(), Observer: d, Shadow: true})
			r := newRigOptions(t, 0, Options{Interceptor: in})
			r.startCall(t, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"charge_card"}}`)
			if cancel {
				r.client.send(t, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}`)
				r.upstream.next(t, "upstream") // the cancellation, passed on
			}
			r.upstream.send(t, `[{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"charged"}]}}]`)
			r.client.next(t, "client") // the batch, passed on
			select {
			case state := <-d.settled:
				if state != record.Completed {
					t.Fatalf("the call settled %s; want completed", state)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("the call did not settle; want completed by the answer in the batch")
			}
		})
	}
}

// TestShadowCancelledAnsweredWhileIDWaits: the answer to a cancelled call
// that comes while a later call under its id waits to be sent (here for
// the tools' listing) is the cancelled call's, since nothing else went
// upstream under that id: it settles the call, rather than being dropped
// and the call settled unknown once the later one goes.
func TestShadowCancelledAnsweredWhileIDWaits(t *testing.T) {
	d := &decisions{counted: map[string]int{}, shown: map[string]int{}, settled: make(chan record.State, 4)}
	in := intercept.New(intercept.Options{Store: memstore.New(memstore.Options{}), Hasher: fingerprint.NewRandom(), Observer: d, Shadow: true})
	r := newRigOptions(t, 0, Options{Interceptor: in})
	r.startCall(t, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"charge_card"}}`)
	r.client.send(t, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}`)
	r.upstream.next(t, "upstream") // the cancellation, passed on
	r.upstream.send(t, `{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}`)
	r.client.next(t, "client") // passed on, once the listing is forgotten
	r.client.send(t, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"charge_card","arguments":{"n":2}}}`)
	list := r.upstream.next(t, "upstream") // the later call waits for it
	r.upstream.send(t, `{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"charged"}]}}`)
	var m struct{ ID json.RawMessage }
	json.Unmarshal([]byte(list), &m)
	r.upstream.send(t, `{"jsonrpc":"2.0","id":`+string(m.ID)+`,"result":{"tools":[]}}`)
	r.upstream.next(t, "upstream") // the later call
	select {
	case state := <-d.settled:
		if state != record.Completed {
			t.Fatalf("the cancelled call settled %s; want completed by its answer", state)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the cancelled call did not settle")
	}
}

// stallAfterCall passes the proxy's writes to the upstream on, and
// holds the goroutine that writes the first tools/call, once the
// upstream has it, until release: as a goroutine the scheduler runs late.
type stallAfterCall struct {
	io.WriteCloser
	once    sync.Once
	stalled chan struct{} // closed once the write is held
	release chan struct{}
}

func (w *stallAfterCall) Write(p []byte) (int, error) {
	n, err := w.WriteCloser.Write(p)
	if bytes.Contains(p, []byte(`"method":"tools/call"`)) {
		w.once.Do(func() {
			close(w.stalled)
			<-w.release
		})
	}
	return n, err
}

// TestPassedCallFreesItsIDWhenAnswered: a tools/call the proxy passes
// upstream (in shadow mode, or one that passes through) frees its id
// once the client has the upstream's answer, though the goroutine that
// sent it, after a listing, has not yet got to forget it: a client that
// sends another request under the id at once has it sent, not refused
// as "already in use".
func TestPassedCallFreesItsIDWhenAnswered(t *testing.T) {
	for _, tt := range []struct {
		name, tools string
		shadow      bool
	}{
		{"shadow", `[]`, true},
		{"pass-through", `[{"name":"charge_card","inputSchema":{"type":"object"},"annotations":{"readOnlyHint":true}}]`, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			in := intercept.New(intercept.Options{Store: memstore.New(memstore.Options{}), Hasher: fingerprint.NewRandom(), Shadow: tt.shadow})
			w := &stallAfterCall{stalled: make(chan struct{}), release: make(chan struct{})}
			r := newRigWriting(t, context.Background(), 0, Options{Interceptor: in}, func(c Conn) Conn { return c }, nil,
				func(pw io.WriteCloser) io.WriteCloser { w.WriteCloser = pw; return w })
			var once sync.Once
			release := func() { once.Do(func() { close(w.release) }) }
			t.Cleanup(release) // before the rig's, which waits for the session
			r.client.send(t, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"charge_card","arguments":{"n":1}}}`)
			r.upstream.next(t, "upstream") // tools/list
			r.upstream.send(t, `{"jsonrpc":"2.0","id":"mcp-idempotent:1","result":{"tools":`+tt.tools+`}}`)
			r.upstream.answerCharged(t, r.upstream.next(t, "upstream"))
			<-w.stalled
			r.client.next(t, "client") // the answer
			r.client.send(t, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"charge_card","arguments":{"n":2}}}`)
			release()
			select {
			case got := <-r.upstream.frames:
				if !strings.Contains(string(got), `"n":2`) {
					t.Errorf("the upstream got %s; want the later call", got)
				}
			case got := <-r.client.frames:
				t.Errorf("the client got %s; want its later call sent upstream", got)
			case <-time.After(5 * time.Second):
				t.Error("the later call was neither sent nor answered")
			}
		})
	}
}
