package streamhttp

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// readUntilID reads SSE lines from r until an "id: " line ending in
// suffix, and returns that id.
func readUntilID(t *testing.T, r *bufio.Reader, suffix string) string {
	t.Helper()
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("reading the stream: %v", err)
		}
		if id, ok := strings.CutPrefix(strings.TrimSpace(line), "id: "); ok && strings.HasSuffix(id, suffix) {
			return id
		}
	}
}

// An answer a superseded writer is still writing, and the client then
// reads there, must not be told lost because the newer writer of its
// stream gave up after the buffer evicted it.
func TestTakenOverAnswerReadIsNotLost(t *testing.T) {
	_, p, hs := newTestServer(t, ServerOptions{EventBuffer: 4})
	sid := openSession(t, hs.URL)
	// gen1: the POST, read up to the start of its answer event, then not read.
	req, _ := http.NewRequestWithContext(t.Context(), "POST", hs.URL, strings.NewReader(`{"jsonrpc":"2.0","id":"big","method":"big"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set(headerProtocolVersion, version)
	req.Header.Set(headerSessionID, sid)
	r1, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b1 := bufio.NewReader(r1.Body)
	prime := readUntilID(t, b1, "-0")
	readUntilID(t, b1, "-1") // gen1 took the answer and is writing it

	// gen2: the client resumes the stream from the priming event.
	ctx2, cut2 := context.WithCancel(t.Context())
	r2 := do(t, ctx2, "GET", hs.URL, "", map[string]string{headerSessionID: sid, headerProtocolVersion: version, headerLastEventID: prime, "Content-Type": ""})
	if r2.StatusCode != 200 {
		b, _ := io.ReadAll(r2.Body)
		t.Fatalf("resume: %s %s", r2.Status, b)
	}
	readUntilID(t, bufio.NewReader(r2.Body), "-1") // gen2 took it too

	// The buffer evicts the answer's event.
	for i := range 4 {
		resp := do(t, t.Context(), "POST", hs.URL, fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"ping"}`, i+10), session(sid))
		io.ReadAll(resp.Body)
		resp.Body.Close()
	}
	cut2() // gen2 gives up
	r2.Body.Close()

	n, _ := io.Copy(io.Discard, b1) // the client reads the whole answer on gen1
	r1.Body.Close()
	for {
		select {
		case id := <-p.written:
			if id == `"big"` {
				return
			}
		case id := <-p.lost:
			t.Fatalf("the client read %d bytes of the answer on its first stream, yet %s was told lost", n, id)
		case <-time.After(10 * time.Second):
			t.Fatal("big was never reported")
		}
	}
}
