package proxy

import (
	"encoding/json"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/fingerprint"
	"github.com/mcp-idempotent/mcp-idempotent/internal/intercept"
	"github.com/mcp-idempotent/mcp-idempotent/internal/journal"
	"github.com/mcp-idempotent/mcp-idempotent/internal/mcp"
	"github.com/mcp-idempotent/mcp-idempotent/internal/policy"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record/memstore"
)

// decisions counts an interceptor's decisions, and in shadow mode what
// they would have been.
type decisions struct {
	mu             sync.Mutex
	counted, shown map[string]int // Decision's, ShadowDecision's
	// settled gets the state of each execution settled, as recorded.
	settled chan record.State
}

func (d *decisions) Decision(_ intercept.Tool, _ policy.Class, decision string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.counted[decision]++
}

func (d *decisions) ShadowDecision(_ intercept.Tool, _ policy.Class, decision string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.shown[decision]++
}

func (*decisions) Attempt(intercept.Tool, int, string, time.Duration) {}
func (*decisions) Upstream(intercept.Tool, time.Duration)             {}

func (d *decisions) Transition(_ intercept.Tool, state record.State) {
	switch state {
	case record.Completed, record.Failed, record.Unknown:
		d.settled <- state
	}
}

// total is the decisions counted so far, shadow ones where there are.
func (d *decisions) total() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := 0
	for _, c := range d.shown {
		n += c
	}
	if n == 0 {
		for _, c := range d.counted {
			n += c
		}
	}
	return n
}

// A shadowRig runs a client's script against a proxy whose upstream
// answers every tools/call with its charge, holds card C's until
// released, exits in the first call of card D, to be started again, and
// answers card T's with a 429, which the tool's retry rule marks
// transient and leaves to the client after one attempt. It holds cards
// E and N as C, but once the client has cancelled one, answers it with
// an error (E) or not at all (N), as servers that honour a cancellation
// do.
type shadowRig struct {
	t        *testing.T
	r        *restartRig
	d        *decisions
	shadow   bool // the proxy is in shadow mode
	mu       sync.Mutex
	calls    []string            // the tools/call frames the upstream got
	got      []string            // the client's answers to its tools/calls
	dropped  map[string]struct{} // the ids of the calls the upstream was told were cancelled
	gotC     chan struct{}       // the upstream got a call it holds
	releaseC chan struct{}
}

// runShadowScript runs script, with or without shadow mode, and returns
// the decisions, the tools/call frames the upstream got, the journal's
// lines and the store.
func runShadowScript(t *testing.T, shadow bool, script func(*shadowRig)) (*decisions, *shadowRig, []journal.Entry, *memstore.Store) {
	store := memstore.New(memstore.Options{})
	d, s, j := runShadowScriptOn(t, store, shadow, script)
	return d, s, j, store
}

// runShadowScriptOn is runShadowScript with the proxy's records in store.
func runShadowScriptOn(t *testing.T, store record.Store, shadow bool, script func(*shadowRig)) (*decisions, *shadowRig, []journal.Entry) {
	return runShadowScriptAs(t, store, shadow, `{}`, script)
}

// runShadowScriptAs is runShadowScriptOn from a client that declares
// capabilities.
func runShadowScriptAs(t *testing.T, store record.Store, shadow bool, capabilities string, script func(*shadowRig)) (*decisions, *shadowRig, []journal.Entry) {
	d := &decisions{counted: map[string]int{}, shown: map[string]int{}, settled: make(chan record.State, 64)}
	j := &entries{}
	in := intercept.New(intercept.Options{Store: store, Hasher: fingerprint.NewRandom(), Observer: d, Journal: j, Shadow: shadow})
	s := &shadowRig{t: t, d: d, shadow: shadow, dropped: map[string]struct{}{}, gotC: make(chan struct{}, 8), releaseC: make(chan struct{})}
	rule := &policy.RetryRule{MaxAttempts: 1, Transient: []policy.ResultMatch{{Text: regexp.MustCompile(`\b429\b`), SafeToResend: true}}}
	s.r = newRestartRig(t, 5, func(o *Options) {
		o.Interceptor = in
		o.Resolve = func(tool string, ann *mcp.Annotations) policy.Policy {
			p := policy.FromAnnotations(ann)
			p.Retry = rule
			switch tool {
			case "set_card":
				p.OnUnknown = policy.Retry
			case "key_card":
				// --scope key with an approval: a call without a
				// key would run unrecorded, where none is kept.
				p.Scope, p.Approval = policy.ScopeKey, policy.ApprovalEach
			}
			return p
		}
	})
	stop := make(chan struct{})
	defer close(stop)
	go s.serve(stop)
	s.call(1, "initialize", `{"protocolVersion":"2025-06-18","capabilities":`+capabilities+`,"clientInfo":{"name":"c","version":"1"}}`)
	s.r.client.next(t, "client")
	script(s)
	// The session's end: every call is handled, and its lines written,
	// some just after their answers.
	s.r.clientW.Close()
	select {
	case <-s.r.stopped:
	case <-time.After(5 * time.Second):
		t.Fatal("the session did not end")
	}
	in.Wait(t.Context())
	s.mu.Lock()
	defer s.mu.Unlock()
	return d, s, j.all()
}

// serve is the upstream, across its restarts.
func (s *shadowRig) serve(stop chan struct{}) {
	died := false
	for {
		var up *upstreamEnd
		select {
		case up = <-s.r.starts:
		case <-stop:
			return
		}
		if !s.serveOne(up, &died, stop) {
			return
		}
	}
}

// serveOne answers up's requests until it exits (true) or the test ends.
func (s *shadowRig) serveOne(up *upstreamEnd, died *bool, stop chan struct{}) bool {
	for {
		var f []byte
		select {
		case f = <-up.frames:
		case <-up.closed: // the proxy closed it: exit
			up.w.Close()
			return true
		case <-stop:
			up.w.Close()
			return false
		}
		var m struct {
			ID     json.RawMessage
			Method string
			Params struct {
				Arguments struct{ Card string }
				RequestID json.RawMessage
			}
		}
		json.Unmarshal(f, &m)
		switch m.Method {
		case "notifications/cancelled":
			s.mu.Lock()
			s.dropped[string(m.Params.RequestID)] = struct{}{}
			s.mu.Unlock()
		case "initialize":
			up.conn.WriteFrame([]byte(`{"jsonrpc":"2.0","id":` + string(m.ID) + `,"result":{"protocolVersion":"2025-06-18","capabilities":{},"serverInfo":{"name":"s","version":"1"}}}`))
		case "tools/list":
			up.conn.WriteFrame([]byte(`{"jsonrpc":"2.0","id":` + string(m.ID) + `,"result":{"tools":[]}}`))
		case "tools/call":
			s.mu.Lock()
			s.calls = append(s.calls, string(f))
			s.mu.Unlock()
			answer := `{"jsonrpc":"2.0","id":` + string(m.ID) + `,"result":{"content":[{"type":"text","text":"charged ` + m.Params.Arguments.Card + `"}]}}`
			switch card := m.Params.Arguments.Card; {
			case card == "C" || card == "E" || card == "N":
				s.gotC <- struct{}{}
				go s.release(up, m.ID, card, answer)
				continue
			case m.Params.Arguments.Card == "T":
				answer = `{"jsonrpc":"2.0","id":` + string(m.ID) + `,"result":{"content":[{"type":"text","text":"429 busy"}],"isError":true}}`
			case m.Params.Arguments.Card == "D" && !*died:
				*died = true // it ran, and exits before answering
				up.w.Close()
				return true
			}
			up.conn.WriteFrame([]byte(answer))
		}
	}
}

// release answers call id to card, which the upstream holds, once the
// test releases it: with answer, or as the card says for a call the
// client cancelled.
func (s *shadowRig) release(up *upstreamEnd, id json.RawMessage, card, answer string) {
	<-s.releaseC
	s.mu.Lock()
	_, cancelled := s.dropped[string(id)]
	s.mu.Unlock()
	switch {
	case cancelled && card == "E":
		answer = `{"jsonrpc":"2.0","id":` + string(id) + `,"error":{"code":-32800,"message":"request cancelled"}}`
	case cancelled && card == "N":
		return
	}
	up.conn.WriteFrame([]byte(answer))
}

// cancel sends the client's notifications/cancelled of request id.
func (s *shadowRig) cancel(id int) {
	s.r.client.send(s.t, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":`+strconv.Itoa(id)+`,"reason":"gave up"}}`)
}

// settled waits until one more execution is settled, and returns its
// state.
func (s *shadowRig) settled() record.State {
	s.t.Helper()
	select {
	case state := <-s.d.settled:
		return state
	case <-time.After(5 * time.Second):
		s.t.Fatal("no execution was settled within 5s")
		return ""
	}
}

// call sends the client's request id.
func (s *shadowRig) call(id int, method, params string) {
	s.r.client.send(s.t, `{"jsonrpc":"2.0","id":`+strconv.Itoa(id)+`,"method":"`+method+`","params":`+params+`}`)
}

// charge calls charge_card on card, under the client's key if not empty.
func (s *shadowRig) charge(id int, card, key string) {
	meta := ""
	if key != "" {
		meta = `,"_meta":{"mcp-idempotent/key":"` + key + `"}`
	}
	s.call(id, "tools/call", `{"name":"charge_card","arguments":{"card":"`+card+`"}`+meta+`}`)
}

// answers takes the client's next n answers.
func (s *shadowRig) answers(n int) {
	for _, a := range s.r.client.byID(s.t, n) {
		s.got = append(s.got, a)
	}
}

// decided waits until n calls are decided.
func (s *shadowRig) decided(n int) {
	for deadline := time.Now().Add(5 * time.Second); s.d.total() < n && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
}

// entries is a journal in memory.
type entries struct {
	mu sync.Mutex
	e  []journal.Entry
}

func (j *entries) Record(e journal.Entry) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.e = append(j.e, e)
	return nil
}

func (j *entries) all() []journal.Entry {
	j.mu.Lock()
	defer j.mu.Unlock()
	return slices.Clone(j.e)
}

// journaled sums up a journal's execution lines: each state, and what
// each caller that joined an execution got.
func journaled(es []journal.Entry) map[string]int {
	m := map[string]int{}
	for _, e := range es {
		if e.Execution == "" {
			continue
		}
		k := e.State
		if e.Event != "" {
			k = e.Event
		}
		if e.Attach != nil {
			k += " " + e.Attach.How + "/" + e.Attach.Got
		}
		m[k]++
	}
	return m
}

// TestShadowDecidesAsNormalMode: the same scripts with and without shadow
// mode. Without it the upstream runs each action once; with it the
// upstream runs every call, as with no proxy, and the decisions counted as
// shadow ones, and journaled, are those the proxy makes without it.
func TestShadowDecidesAsNormalMode(t *testing.T) {
	for _, tt := range []struct {
		name   string
		script func(*shadowRig)
		calls  int            // the client's tools/calls
		sent   int            // those that reach the upstream in normal mode
		want   map[string]int // normal mode's decisions
	}{
		{"retries", func(s *shadowRig) {
			// Charges A and B, each sent again once answered, and C sent
			// again while the upstream holds the first.
			s.charge(2, "A", "")
			s.answers(1)
			s.charge(3, "A", "") // a retry
			s.answers(1)
			s.charge(4, "B", "")
			s.answers(1)
			s.charge(5, "B", "")
			s.answers(1)
			s.charge(6, "C", "")
			<-s.gotC
			s.charge(7, "C", "") // a retry while the first is under way
			s.decided(6)
			close(s.releaseC)
			s.answers(2)
		}, 6, 3, map[string]int{"new": 3, "replayed": 2, "attached": 1}},
		{"cancelled", func(s *shadowRig) {
			// The client gives up on a charge the upstream is running,
			// which runs to its end, and sends it again.
			s.charge(2, "C", "")
			<-s.gotC
			s.cancel(2)
			s.charge(3, "A", "") // taken after the cancellation
			s.answers(1)
			s.settled() // A's
			close(s.releaseC)
			s.settled() // C's
			if s.shadow {
				s.answers(1) // C's, passed on for the client to ignore
			}
			s.charge(4, "C", "") // its answer, replayed
			s.answers(1)
		}, 3, 2, map[string]int{"new": 2, "replayed": 1}},
		{"key reused", func(s *shadowRig) {
			s.charge(2, "A", "k1")
			s.answers(1)
			s.charge(3, "B", "k1") // the key, for another action: refused
			s.answers(1)
		}, 2, 1, map[string]int{"new": 1, "key_refused": 1}},
		{"outcome unknown", func(s *shadowRig) {
			s.charge(2, "D", "") // the upstream exits with it
			s.answers(1)
			s.charge(3, "D", "") // blocked: it may have run
			s.answers(1)
		}, 2, 1, map[string]int{"new": 1, "unknown": 1}},
		{"outcome unknown, sent again", func(s *shadowRig) {
			set := `{"name":"set_card","arguments":{"card":"D"}}`
			s.call(2, "tools/call", set) // the upstream exits with it
			s.answers(1)
			s.call(3, "tools/call", set) // re-dispatched: on_unknown retry
			s.answers(1)
			s.call(4, "tools/call", set) // its answer, replayed
			s.answers(1)
		}, 3, 2, map[string]int{"new": 1, "redispatched": 1, "replayed": 1}},
		{"approval unkept", func(s *shadowRig) {
			s.call(2, "tools/call", `{"name":"key_card","arguments":{"card":"A"}}`)
			s.answers(1)
		}, 1, 0, map[string]int{"invalid": 1}},
		{"transient", func(s *shadowRig) {
			s.charge(2, "T", "") // still transient after the last attempt
			s.answers(1)
			s.charge(3, "T", "") // it did nothing: run again, not replayed
			s.answers(1)
		}, 2, 2, map[string]int{"new": 2}},
		{"arguments unreadable", func(s *shadowRig) {
			// A member given twice: no fingerprint. Refused, but in
			// shadow mode it goes upstream, and is counted all the same.
			s.call(2, "tools/call", `{"name":"charge_card","arguments":{"card":"A","card":"B"}}`)
			s.answers(1)
		}, 1, 0, map[string]int{"invalid": 1}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			normal, n, normalJournal, _ := runShadowScript(t, false, tt.script)
			shadow, s, shadowJournal, store := runShadowScript(t, true, tt.script)
			normalCalls, shadowCalls := n.calls, s.calls
			if !maps.Equal(normal.counted, tt.want) || len(normalCalls) != tt.sent {
				t.Fatalf("normal mode: decisions %v, %d calls upstream; want %v and %d", normal.counted, len(normalCalls), tt.want, tt.sent)
			}
			if !maps.Equal(shadow.shown, normal.counted) {
				t.Errorf("shadow decisions %v; want those of normal mode, %v", shadow.shown, normal.counted)
			}
			if !maps.Equal(shadow.counted, map[string]int{"passed_through": tt.calls}) || len(shadowCalls) != tt.calls {
				t.Errorf("shadow mode: decisions %v, %d calls upstream; want every call passed through, %d", shadow.counted, len(shadowCalls), tt.calls)
			}
			for _, f := range shadowCalls {
				if strings.Contains(f, "mcp-idempotent/execution") {
					t.Errorf("shadow mode sent %s upstream; want the client's call as it came", f)
				}
			}
			for _, a := range s.got {
				if strings.Contains(a, "mcp-idempotent/replayed") || strings.Contains(a, "Outcome unknown") || strings.Contains(a, "already used") {
					t.Errorf("in shadow mode the client got %s; want the upstream's own answer", a)
				}
			}
			// The journal says what it would have done, line for line,
			// each line marked so.
			if got, want := journaled(shadowJournal), journaled(normalJournal); !maps.Equal(got, want) {
				t.Errorf("shadow mode journaled %v; want what normal mode journals, %v", got, want)
			}
			for _, e := range shadowJournal {
				if !e.Shadow {
					t.Errorf("shadow mode journaled %+v; want it marked shadow", e)
				}
			}
			for _, rec := range store.Records() {
				if !strings.HasPrefix(rec.Owner, "shadow-") {
					t.Errorf("shadow record %s: owner %s; want a shadow owner", rec.ID, rec.Owner)
				}
			}
		})
	}
}

// TestShadowUnreadableKeyOrDeadline: a call whose client key or
// deadline cannot be read is refused in normal mode, and counted
// invalid. Shadow mode neither keys nor times a call: it goes upstream
// as it came, unrecorded, counted passed through with the shadow
// decision invalid.
func TestShadowUnreadableKeyOrDeadline(t *testing.T) {
	for _, meta := range []string{`{"mcp-idempotent/key":5}`, `{"mcp-idempotent/deadline_ms":-1}`} {
		for _, shadow := range []bool{false, true} {
			d, s, lines, _ := runShadowScript(t, shadow, func(s *shadowRig) {
				s.call(2, "tools/call", `{"name":"charge_card","arguments":{"card":"A"},"_meta":`+meta+`}`)
				s.answers(1)
			})
			refused := strings.Contains(s.got[0], `"error"`)
			if refused == shadow || len(s.calls) != map[bool]int{false: 0, true: 1}[shadow] {
				t.Errorf("%s, shadow %v: %d calls upstream, the client got %s", meta, shadow, len(s.calls), s.got[0])
			}
			want, wantShown := map[string]int{"invalid": 1}, map[string]int{}
			if shadow {
				want, wantShown = map[string]int{"passed_through": 1}, map[string]int{"invalid": 1}
			}
			if !maps.Equal(d.counted, want) || !maps.Equal(d.shown, wantShown) {
				t.Errorf("%s, shadow %v: decisions %v, shadow decisions %v; want %v, %v", meta, shadow, d.counted, d.shown, want, wantShown)
			}
			if n := len(journaled(lines)); n != 0 {
				t.Errorf("%s, shadow %v: %d executions journaled; want none", meta, shadow, n)
			}
		}
	}
}

// TestShadowMalformedMember: a call whose arguments, task or _meta is not
// an object is refused in normal mode, counted invalid. In shadow mode
// it goes upstream as it came, unrecorded, counted passed through with
// the shadow decision invalid. Params given twice are refused in both,
// counted nowhere: they name no one tool to count under.
func TestShadowMalformedMember(t *testing.T) {
	for _, tt := range []struct{ params, refusedIn string }{
		{`{"name":"charge_card","arguments":[1]}`, "normal"},
		{`{"name":"charge_card","arguments":{"card":"A"},"task":5}`, "normal"},
		{`{"name":"charge_card","arguments":{"card":"A"},"_meta":"x"}`, "normal"},
		{`{"name":"charge_card","arguments":{"card":"A"},"arguments":[1]}`, "both"},
	} {
		for _, shadow := range []bool{false, true} {
			d, s, lines, _ := runShadowScript(t, shadow, func(s *shadowRig) {
				s.call(2, "tools/call", tt.params)
				s.answers(1)
			})
			refused := !shadow || tt.refusedIn == "both"
			if got := strings.Contains(s.got[0], `"error"`); got != refused || len(s.calls) != map[bool]int{true: 0, false: 1}[refused] {
				t.Errorf("%s, shadow %v: %d calls upstream, the client got %s", tt.params, shadow, len(s.calls), s.got[0])
			}
			if len(s.calls) == 1 && !strings.Contains(s.calls[0], tt.params) {
				t.Errorf("%s, shadow %v: the upstream got %s", tt.params, shadow, s.calls[0])
			}
			want, wantShown := map[string]int{}, map[string]int{}
			switch {
			case !refused:
				want, wantShown = map[string]int{"passed_through": 1}, map[string]int{"invalid": 1}
			case tt.refusedIn == "normal":
				want = map[string]int{"invalid": 1}
			}
			if !maps.Equal(d.counted, want) || !maps.Equal(d.shown, wantShown) {
				t.Errorf("%s, shadow %v: decisions %v, shadow decisions %v; want %v, %v", tt.params, shadow, d.counted, d.shown, want, wantShown)
			}
			if n := len(journaled(lines)); n != 0 {
				t.Errorf("%s, shadow %v: %d executions journaled; want none", tt.params, shadow, n)
			}
		}
	}
}
