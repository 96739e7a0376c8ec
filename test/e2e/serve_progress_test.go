package e2e

import (
	"bufio"
	"encoding/json"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// respellBin is the respellserver peer, built once for the package.
var respellBin struct {
	once sync.Once
	path string
	err  error
}

func respellServer(t *testing.T) string {
	t.Helper()
	b := &respellBin
	b.once.Do(func() {
		b.path = filepath.Join(buildDir, "respellserver")
		b.err = goBuild(b.path, "./test/e2e/respellserver")
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.path
}

// progressIn returns the tokens, as written, of the notifications/progress
// in body, an SSE stream, whose progress is n.
func progressIn(body string, n float64) []string {
	var tokens []string
	for line := range strings.SplitSeq(body, "\n") {
		var m struct {
			Method string
			Params struct {
				ProgressToken json.RawMessage
				Progress      float64
			}
		}
		data, ok := strings.CutPrefix(line, "data: ")
		if ok && json.Unmarshal([]byte(data), &m) == nil && m.Method == "notifications/progress" && m.Params.Progress == n {
			tokens = append(tokens, string(m.Params.ProgressToken))
		}
	}
	return tokens
}

// TestServeProgressRespelledToken: an upstream that writes a request's
// progress token another way, as the same value (1.0 as 1, "a<b" as
// "\u0061\u003c\u0062"), still has its progress reach the request's own
// stream, under the token as the client wrote it: for tools/call and for
// a request passed through, in a session whose GET stream is open and on
// the stateless lane. Progress after the answer goes on the GET stream,
// if it comes after the answer.
func TestServeProgressRespelledToken(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	s := startServe(t, "--", respellServer(t))
	hc := httpClient(t)
	rs := openRawSession(t, ctx, hc, s.url)
	get := rs.stream(ctx, http.MethodGet, "", nil)
	defer get.Body.Close()
	events := bufio.NewReader(get.Body)
	if _, err := readEvent(events); err != nil { // its priming event: the GET stream is open
		t.Fatalf("the GET stream: %v", err)
	}
	const v = `"io.modelcontextprotocol/protocolVersion":"2026-07-28"`
	n := 0
	late := 0 // the progress after an answer that came before it, as the proxy records a call's answer
	for _, token := range []string{`1.0`, `"a<b"`} {
		for _, method := range []string{"tools/call", "prompts/get"} {
			n++
			params := func(meta string) string {
				return `{"name":"work","arguments":{"n":` + strconv.Itoa(n) + `},"_meta":{` + meta + `"progressToken":` + token + `}}`
			}
			rep := rs.post(ctx, `{"jsonrpc":"2.0","id":`+strconv.Itoa(n)+`,"method":"`+method+`","params":`+params("")+`}`)
			late += len(progressIn(rep.body, 2))
			if got := progressIn(rep.body, 1); len(got) != 1 || got[0] != token {
				t.Errorf("%s on token %s in a session: its stream carried progress on %q, want on %s:\n%s", method, token, got, token, rep.body)
			}
			rep = rawRequest(t, ctx, hc, http.MethodPost, s.url, postHeaders(map[string]string{"Mcp-Protocol-Version": "2026-07-28", "Mcp-Method": method, "Mcp-Name": "work"}),
				`{"jsonrpc":"2.0","id":`+strconv.Itoa(n)+`,"method":"`+method+`","params":`+params(v+",")+`}`)
			if got := progressIn(rep.body, 1); len(got) != 1 || got[0] != token {
				t.Errorf("%s on token %s without a session: its stream carried progress on %q, want on %s:\n%s", method, token, got, token, rep.body)
			}
		}
	}
	var after []string
	for late+len(after) < n {
		ev, err := readEvent(events)
		if err != nil {
			t.Fatalf("the GET stream, after the progress on %q: %v", after, err)
		}
		if got := progressIn("data: "+ev.data, 2); len(got) == 1 {
			after = append(after, got[0])
		} else if ev.data != "" {
			t.Errorf("the GET stream carried %s; want only the progress after the answers", ev.data)
		}
	}
}
