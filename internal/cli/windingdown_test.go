package cli

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// slowServer answers initialize and tools/list at once, and a tools/call
// 3 s later, as a tool that takes time does.
var slowServer = []string{"/bin/sh", "-c", `while IFS= read -r l; do
id=$(printf '%s' "$l" | sed 's/.*"id":\([^,}]*\).*/\1/')
case "$l" in
*'"tools/call"'*) (sleep 3; printf '{"jsonrpc":"2.0","id":%s,"result":{"content":[{"type":"text","text":"charged"}]}}\n' "$id") & ;;
*'"tools/list"'*) printf '{"jsonrpc":"2.0","id":%s,"result":{"tools":[]}}\n' "$id";;
*'"id":'*) printf '{"jsonrpc":"2.0","id":%s,"result":{"protocolVersion":"2025-11-25","capabilities":{"tools":{}},"serverInfo":{"name":"sh","version":"1"}}}\n' "$id";;
esac; done; wait`}

// TestServeKeepsLeasesWhileWindingDown: serve, told to stop, lets
// the calls under way finish (docs/http.md, Ending: "Each gets its
// answer"). While it waits for them it must keep their leases: if it
// stops renewing them at the signal, another proxy sharing the store
// takes the execution over as unknown, and the answer that then comes is
// fenced off: the caller gets "Outcome unknown" and the record says
// unknown, though the tool completed and the proxy was alive to record it.
func TestServeKeepsLeasesWhileWindingDown(t *testing.T) {
	store := "sqlite:" + filepath.Join(t.TempDir(), "records.db")
	common := []string{"--store", store, "--lease", "1s", "--scope", "actor", "--actor", "alice", "--log-level", "debug"}

	// Proxy A: serve.
	ctxA, stopA := context.WithCancel(t.Context())
	defer stopA()
	pr, pw := io.Pipe()
	var logA syncBuf
	doneA := make(chan error, 1)
	go func() {
		args := append(append([]string{"serve", "--listen", "127.0.0.1:0"}, common...), "--")
		doneA <- Run(ctxA, append(args, slowServer...), strings.NewReader(""), io.Discard, pw)
		pw.Close()
	}()
	sc := bufio.NewScanner(pr)
	url := ""
	for url == "" && sc.Scan() {
		logA.Write([]byte(sc.Text() + "\n"))
		if m := regexp.MustCompile(`url=(http://\S+)`).FindStringSubmatch(sc.Text()); m != nil {
			url = m[1]
		}
	}
	go func() {
		for sc.Scan() {
			logA.Write([]byte(sc.Text() + "\n"))
		}
	}()
	resp := post(t, "POST", url, initWithClientInfo, "")
	sid := resp.Header.Get("Mcp-Session-Id")
	post(t, "POST", url, `{"jsonrpc":"2.0","method":"notifications/initialized"}`, sid)
	answerA := make(chan string, 1)
	go func() {
		req, _ := http.NewRequest("POST", url, strings.NewReader(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"charge","arguments":{"amount":100}}}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Mcp-Session-Id", sid)
		req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			answerA <- "error: " + err.Error()
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		answerA <- string(b)
	}()
	time.Sleep(500 * time.Millisecond) // dispatched
	stopA()                            // SIGTERM: serve winds down, the call still under way

	// Proxy B, sharing the store, 2 s later: the same call of the same
	// actor. A is alive and still waiting for the answer, due at 3 s.
	time.Sleep(2 * time.Second)
	ctxB, stopB := context.WithTimeout(t.Context(), 20*time.Second)
	defer stopB()
	stdinR, stdinW := io.Pipe()
	stdoutR, stdoutW := io.Pipe()
	var logB syncBuf
	doneB := make(chan error, 1)
	go func() {
		doneB <- Run(ctxB, append(append(common, "--"), slowServer...), stdinR, stdoutW, &logB)
		stdoutW.Close()
	}()
	out := bufio.NewReader(stdoutR)
	io.WriteString(stdinW, initWithClientInfo+"\n")
	out.ReadString('\n')
	io.WriteString(stdinW, `{"jsonrpc":"2.0","method":"notifications/initialized"}`+"\n")
	io.WriteString(stdinW, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"charge","arguments":{"amount":100}}}`+"\n")
	answerB, _ := out.ReadString('\n')
	stdinW.Close()
	go io.Copy(io.Discard, out)
	<-doneB

	stopA()
	a := <-answerA
	<-doneA
	if strings.Contains(a, "Outcome unknown") || !strings.Contains(a, "charged") {
		t.Errorf("serve's caller, whose call completed while serve wound down, got:\n%s\nwant the result (charged)\nproxy B's caller got:\n%s\nserve's log:\n%s", a, answerB, logA.String())
	}
}
