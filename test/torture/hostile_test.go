//go:build unix

package torture

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A hostileCase is one line sent to the proxy and what must come back.
type hostileCase struct {
	name string
	line []byte
	// wantID is the id the answer must carry, as raw JSON; "" accepts the
	// request's id or null, for an error the proxy may give before it has
	// read the id.
	wantID string
	// wantErr: a JSON-RPC error object; else a result.
	wantErr bool
	// ran is the intent the upstream must have run, "" for none.
	ran string
	// batch: the answer is an array of one error per request.
	batch bool
	// maybe: no answer is also right (a line that is not a message).
	maybe bool
}

// pay is a tools/call of pay for intent with id, as a line.
func payLine(id, intent string) []byte {
	return fmt.Appendf(nil, `{"jsonrpc":"2.0","id":%s,"method":"tools/call","params":{"name":"pay","arguments":{"intent":%q}}}`, id, intent)
}

func pingLine(id string) []byte {
	return fmt.Appendf(nil, `{"jsonrpc":"2.0","id":%s,"method":"ping"}`, id)
}

// hostileLimit is the --max-message-size the hostile tests run with, so
// that an oversized message is cheap to send.
const hostileLimit = 1 << 20

func hostileCases() []hostileCase {
	deep := func(n int) string { return strings.Repeat("[", n) + strings.Repeat("]", n) }
	call := func(id, params string) []byte {
		return fmt.Appendf(nil, `{"jsonrpc":"2.0","id":%s,"method":"tools/call","params":%s}`, id, params)
	}
	big := strings.Repeat("b", hostileLimit-1000)
	return []hostileCase{
		// Not JSON-RPC at all.
		{name: "not JSON", line: []byte("hello"), wantID: "null", wantErr: true},
		{name: "truncated", line: []byte(`{"jsonrpc":"2.0","id":1,"method":"ping"`), wantID: "null", wantErr: true},
		{name: "a JSON string", line: []byte(`"hello"`), wantID: "null", wantErr: true},
		{name: "binary", line: []byte{0xff, 0xfe, 0x00, 0x01}, wantID: "null", wantErr: true},
		{name: "NUL after the object", line: append(pingLine("1"), 0), wantID: "null", wantErr: true},
		{name: "white space only", line: []byte("   \t "), maybe: true, wantID: "null", wantErr: true},
		{name: "jsonrpc 1.0", line: []byte(`{"jsonrpc":"1.0","id":2,"method":"ping"}`), wantErr: true},
		{name: "empty batch", line: []byte(`[]`), wantID: "null", wantErr: true},
		{name: "tools/call in a batch", line: []byte("[" + string(pingLine("3")) + "," + string(payLine("4", "h-batch")) + "]"), batch: true},

		// Size and depth.
		{name: "oversized", line: payLine("5", strings.Repeat("x", hostileLimit)), wantErr: true},
		{name: "large, under the limit", line: payLine("6", big), wantID: "6", ran: big},
		{name: "deeply nested", line: []byte(deep(100_000)), wantID: "null", wantErr: true},
		{name: "deeply nested arguments", line: call("7", `{"name":"pay","arguments":{"intent":"h-deep","x":`+deep(20_000)+`}}`), wantErr: true},
		{name: "nested _meta", line: call("8", `{"name":"pay","arguments":{"intent":"h-meta"},"_meta":{"x":`+deep(500)+`}}`), wantID: "8", ran: "h-meta"},
		{name: "long number", line: call("9", `{"name":"pay","arguments":{"intent":"h-num","n":`+strings.Repeat("7", 100_000)+`}}`), wantID: "9", wantErr: true},
		{name: "duplicate argument", line: call("10", `{"name":"pay","arguments":{"intent":"h-dup1","intent":"h-dup2"}}`), wantID: "10", wantErr: true},

		// Text that is not Unicode.
		{name: "invalid UTF-8 in an argument", line: call("11", "{\"name\":\"pay\",\"arguments\":{\"intent\":\"h-\xff\xfe\"}}"), wantID: "11", wantErr: true},
		{name: "invalid UTF-8 in a member name", line: call("12", "{\"name\":\"pay\",\"arguments\":{\"intent\":\"h-k\",\"k\xff\":1}}"), wantID: "12", wantErr: true},
		{name: "lone high surrogate", line: call("13", `{"name":"pay","arguments":{"intent":"h-\ud800"}}`), wantID: "13", wantErr: true},
		{name: "lone low surrogate", line: call("14", `{"name":"pay","arguments":{"intent":"h-\udc00x"}}`), wantID: "14", wantErr: true},
		{name: "surrogates reversed", line: call("15", `{"name":"pay","arguments":{"intent":"h-\udc00\ud800"}}`), wantID: "15", wantErr: true},
		{name: "lone surrogate in the tool name", line: call("16", `{"name":"pay\ud800","arguments":{"intent":"h-name"}}`), wantID: "16", wantErr: true},
		{name: "invalid UTF-8 in the tool name", line: call("17", "{\"name\":\"pay\xff\",\"arguments\":{\"intent\":\"h-name\"}}"), wantID: "17", wantErr: true},

		// tools/call shapes.
		{name: "params a string", line: call("18", `"pay"`), wantID: "18", wantErr: true},
		{name: "no params", line: []byte(`{"jsonrpc":"2.0","id":19,"method":"tools/call"}`), wantID: "19", wantErr: true},
		{name: "arguments an array", line: call("20", `{"name":"pay","arguments":["h-arr"]}`), wantID: "20", wantErr: true},
		{name: "unknown tool", line: call("21", `{"name":"nope","arguments":{}}`), wantID: "21", wantErr: true},

		// Every id type, on a call the proxy answers itself (tools/call)
		// and on one it passes through (ping).
		{name: "id number", line: payLine("22", "h-id-number"), wantID: "22", ran: "h-id-number"},
		{name: "id string", line: payLine(`"s-23"`, "h-id-string"), wantID: `"s-23"`, ran: "h-id-string"},
		{name: "id empty string", line: payLine(`""`, "h-id-empty"), wantID: `""`, ran: "h-id-empty"},
		{name: "id negative", line: payLine("-24", "h-id-negative"), wantID: "-24", ran: "h-id-negative"},
		{name: "id huge", line: payLine("123456789012345678901234567890", "h-id-huge"), wantID: "123456789012345678901234567890", ran: "h-id-huge"},
		{name: "id exponent", line: payLine("1E2", "h-id-exponent"), wantID: "1E2", ran: "h-id-exponent"},
		{name: "id escaped lone surrogate", line: payLine(`"\ud800"`, "h-id-surrogate"), wantID: `"\ud800"`, ran: "h-id-surrogate"},
		{name: "id null", line: payLine("null", "h-id-null"), wantID: "null", wantErr: true},
		{name: "id fraction", line: payLine("2.5", "h-id-fraction"), wantID: "null", wantErr: true},
		{name: "id past a double", line: payLine("1e400", "h-id-inf"), wantID: "null", wantErr: true},
		{name: "id object", line: payLine(`{"a":1}`, "h-id-object"), wantID: "null", wantErr: true},
		{name: "id array", line: payLine("[25]", "h-id-array"), wantID: "null", wantErr: true},
		{name: "id true", line: payLine("true", "h-id-true"), wantID: "null", wantErr: true},
		{name: "id invalid UTF-8", line: payLine("\"\xff\"", "h-id-utf8"), wantID: "null", wantErr: true},
		{name: "ping id number", line: pingLine("26"), wantID: "26"},
		{name: "ping id string", line: pingLine(`"s-27"`), wantID: `"s-27"`},
		{name: "ping id negative", line: pingLine("-28"), wantID: "-28"},
		{name: "ping id zero", line: pingLine("0"), wantID: "0"},
		{name: "ping id null", line: pingLine("null"), wantID: "null", wantErr: true},
		{name: "ping id fraction", line: pingLine("1.5"), wantID: "null", wantErr: true},
		{name: "ping id object", line: pingLine("{}"), wantID: "null", wantErr: true},
		{name: "ping id array", line: pingLine("[]"), wantID: "null", wantErr: true},
		// Passed upstream under its own id, an id a server reads
		// otherwise would be answered under another: refused.
		{name: "ping id past 2^53", line: pingLine("9223372036854775808"), wantID: "9223372036854775808", wantErr: true},
		{name: "ping id lone surrogate", line: pingLine(`"\ud800"`), wantID: `"\ud800"`, wantErr: true},
	}
}

// TestHostileInput sends each hostile line to one proxy: each gets a
// clear JSON-RPC error, or its proper answer, at once; none crashes or
// hangs the proxy, which answers a ping after every one; and only the
// calls meant to run reach the upstream.
func TestHostileInput(t *testing.T) {
	ctx := testContext(t, 5*time.Minute)
	ledger := filepath.Join(t.TempDir(), "ledger")
	w := startWire(t, ctx, ledger)
	var ran []string
	for _, c := range hostileCases() {
		want := 1
		if c.maybe {
			want = 0
		}
		replies := w.exchange(t, ctx, c.line, want)
		name := c.name
		switch {
		case len(replies) == 0 && c.maybe:
		case len(replies) != 1:
			var clipped []string
			for _, r := range replies {
				clipped = append(clipped, clip(r))
			}
			t.Errorf("%s: %d answers %q; want one", name, len(replies), clipped)
		case c.batch:
			var batch []wireReply
			if err := json.Unmarshal(replies[0], &batch); err != nil || len(batch) == 0 {
				t.Errorf("%s: answered %s; want an array of answers", name, clip(replies[0]))
			}
			for _, r := range batch {
				if r.Error == nil {
					t.Errorf("%s: answered %s; want an error for each request", name, clip(replies[0]))
				}
			}
		default:
			var r wireReply
			if err := json.Unmarshal(replies[0], &r); err != nil {
				t.Errorf("%s: answered %s: %v", name, clip(replies[0]), err)
				continue
			}
			if c.wantID != "" && string(r.ID) != c.wantID {
				t.Errorf("%s: answered with id %s; want %s", name, r.ID, c.wantID)
			}
			if c.wantErr != (r.Error != nil) || (r.Error != nil && (r.Error.Code > -32000 || r.Error.Code < -32768 || r.Error.Message == "")) {
				t.Errorf("%s: answered %s; want an error %v (a JSON-RPC code with a message)", name, clip(replies[0]), c.wantErr)
			}
		}
		if c.ran != "" {
			ran = append(ran, c.ran)
		}
	}
	lines := readLedger(t, ledger)
	for _, intent := range ran {
		if len(lines[intent]) != 1 {
			t.Errorf("intent %s ran %d times; want once", clip([]byte(intent)), len(lines[intent]))
		}
		delete(lines, intent)
	}
	for intent, l := range lines {
		t.Errorf("a call refused as hostile ran: intent %s, %d times", clip([]byte(intent)), len(l))
	}
	w.close(t, ctx)
}

// TestMutatedInput sends random mutations of valid frames (bytes flipped,
// inserted, deleted, repeated): whatever each is, the proxy answers only
// JSON and keeps answering pings; it ends a session only when its
// upstream keeps exiting (on a message passed on to it), and never
// crashes.
func TestMutatedInput(t *testing.T) {
	ctx := testContext(t, 10*time.Minute)
	rng := seeded(t)
	ledger := filepath.Join(t.TempDir(), "ledger")
	w := startWire(t, ctx, ledger)
	sessions := 1
	bases := [][]byte{
		payLine("1", "m"),
		pingLine(`"p"`),
		[]byte(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"balance","arguments":{},"_meta":{"mcp-idempotent/key":"k"}}}`),
	}
	special := []byte(`{}[]",:\ 0123456789-.eE` + "\x00\x7f\x80\xbf\xc0\xed\xf4\xff")
	for i := range size.mutations {
		b := bytes.Clone(bases[rng.IntN(len(bases))])
		for range 1 + rng.IntN(4) {
			j := rng.IntN(len(b))
			switch rng.IntN(4) {
			case 0:
				b[j] ^= 1 << rng.IntN(8)
			case 1:
				b = append(b[:j], append([]byte{special[rng.IntN(len(special))]}, b[j:]...)...)
			case 2:
				b = append(b[:j], b[j+1:]...)
			case 3:
				k := j + rng.IntN(len(b)-j)
				b = append(b[:k], append(bytes.Clone(b[j:k]), b[k:]...)...)
			}
			if len(b) == 0 {
				b = []byte("{")
			}
		}
		// A newline would make two frames of one; keep one per mutation.
		b = bytes.ReplaceAll(b, []byte("\n"), []byte(" "))
		replies, ok := w.tryExchange(t, ctx, b, 0)
		for _, r := range replies {
			if !json.Valid(r) {
				t.Fatalf("mutation %d %q: answered with %q, not JSON", i, b, clip(r))
			}
		}
		if !ok {
			// The proxy passes on what is not a tools/call, and the
			// go-sdk upstream exits on some of it (a message it finds
			// invalid): after --max-restarts such exits the proxy ends the
			// session, as designed. Anything else is a crash.
			err := w.p.cmd.Wait()
			if !strings.Contains(w.p.stderr.String(), "the upstream keeps exiting") {
				t.Fatalf("mutation %d %q: the proxy ended (%v)\n%s", i, b, err, tail(w.p.stderr.String()))
			}
			sessions++
			w = startWire(t, ctx, ledger)
			continue
		}
		if t.Failed() {
			t.Fatalf("mutation %d: %q", i, b)
		}
	}
	t.Logf("%d mutations; the upstream's exits on what was passed to it ended %d sessions", size.mutations, sessions-1)
	w.close(t, ctx)
}

// wireReply is a JSON-RPC answer as the tests read it.
type wireReply struct {
	ID     json.RawMessage `json:"id"`
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// A wire is a proxy driven line by line over its stdio, with no client
// library to tidy what is sent.
type wire struct {
	p     *proc
	in    io.WriteCloser
	lines chan []byte // the proxy's stdout, one line each; closed at EOF
	n     int         // pings sent
}

// startWire starts a proxy (memory store, a hostileLimit message limit)
// and makes the MCP handshake.
func startWire(t *testing.T, ctx context.Context, ledger string) *wire {
	t.Helper()
	p := proxyCommand(t, ledger, "--max-message-size", fmt.Sprint(hostileLimit))
	in, err := p.cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w := &wire{p: p, in: in, lines: make(chan []byte, 16)}
	go func() {
		defer close(w.lines)
		r := bufio.NewReader(out)
		for {
			line, err := r.ReadBytes('\n')
			if len(line) > 0 {
				w.lines <- bytes.TrimSuffix(line, []byte("\n"))
			}
			if err != nil {
				return
			}
		}
	}()
	init := `{"jsonrpc":"2.0","id":"init","method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"mcpi-torture","version":"0.0.1"}}}`
	if r := w.exchange(t, ctx, []byte(init), 1); len(r) != 1 || !bytes.Contains(r[0], []byte(`"result"`)) {
		t.Fatalf("initialize: %q", r)
	}
	w.send(t, []byte(`{"jsonrpc":"2.0","method":"notifications/initialized"}`))
	return w
}

func (w *wire) send(t *testing.T, line []byte) {
	t.Helper()
	if _, err := w.in.Write(append(line, '\n')); err != nil {
		t.Fatalf("writing to the proxy: %v\n%s", err, tail(w.p.stderr.String()))
	}
}

// exchange sends line, then a ping, and returns the lines the proxy
// wrote until it has answered the ping and written want other lines:
// line's answers (a tools/call may be answered after the ping). The
// ping's answer is the proof that the proxy still serves.
func (w *wire) exchange(t *testing.T, ctx context.Context, line []byte, want int) [][]byte {
	t.Helper()
	got, ok := w.tryExchange(t, ctx, line, want)
	if !ok {
		t.Fatalf("after %q the proxy closed its stdout\n%s", clip(line), tail(w.p.stderr.String()))
	}
	return got
}

// tryExchange is exchange, reporting with ok false that the proxy closed
// its stdout or its stdin (it ended the session) instead of failing the
// test.
func (w *wire) tryExchange(t *testing.T, ctx context.Context, line []byte, want int) (got [][]byte, ok bool) {
	t.Helper()
	w.n++
	alive := fmt.Sprintf(`"alive-%d"`, w.n)
	for _, l := range [][]byte{line, pingLine(alive)} {
		if _, err := w.in.Write(append(l, '\n')); err != nil {
			// It ended before it read them: its caller finds out why.
			return got, false
		}
	}
	for pinged := false; !pinged || len(got) < want; {
		select {
		case l, open := <-w.lines:
			if !open {
				return got, false
			}
			var r wireReply
			if json.Unmarshal(l, &r) == nil && string(r.ID) == alive {
				pinged = true
			} else {
				got = append(got, l)
			}
		case <-ctx.Done():
			t.Fatalf("after %q the proxy never answered (ping answered: %v; %d of %d answers)\n%s", clip(line), pinged, len(got), want, tail(w.p.stderr.String()))
		}
	}
	return got, true
}

// close closes the proxy's stdin, as a client that is done does, and
// checks that it exits 0.
func (w *wire) close(t *testing.T, ctx context.Context) {
	t.Helper()
	w.in.Close()
	for range w.lines {
	}
	exited := make(chan error, 1)
	go func() { exited <- w.p.cmd.Wait() }()
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("the proxy exited: %v\n%s", err, tail(w.p.stderr.String()))
		}
	case <-ctx.Done():
		t.Errorf("the proxy did not exit after its stdin closed\n%s", tail(w.p.stderr.String()))
	}
}

// clip shortens a long line for a message.
func clip(b []byte) string {
	if len(b) > 200 {
		return fmt.Sprintf("%s...[%d bytes]", b[:200], len(b))
	}
	return string(b)
}
