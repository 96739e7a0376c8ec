package proxy

import (
	"bytes"
	"context"
	"strconv"
	"testing"

	"github.com/mcp-idempotent/mcp-idempotent/internal/fingerprint"
	"github.com/mcp-idempotent/mcp-idempotent/internal/intercept"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record/memstore"
)

// TestTaskProgressOutlivesLaterCalls: a task's progress token stays
// valid for the task's lifetime (MCP tasks), past the answer that gave
// its handle. The session's later calls with progress tokens, answered,
// let theirs go, so as many of them as the session keeps tokens for do
// not push the task's out: its progress still reaches the client.
func TestTaskProgressOutlivesLaterCalls(t *testing.T) {
	client, upstream := &sink{}, &sink{}
	s := listedSession(client, upstream)
	ctx := context.Background()
	call := func(id, args, extra, result string) []byte {
		t.Helper()
		s.fromClient(ctx, []byte(`{"jsonrpc":"2.0","id":`+id+`,"method":"tools/call","params":{"name":"charge_card","arguments":`+args+extra+`,"_meta":{"progressToken":"p`+id+`"}}}`))
		sent := bytes.Clone(sentID(upstream.take()))
		if sent == nil {
			t.Fatalf("call %s: nothing went upstream", id)
		}
		s.fromUpstream(s.up, []byte(`{"jsonrpc":"2.0","id":`+string(sent)+`,"result":`+result+`}`))
		if client.take() == nil {
			t.Fatalf("call %s: no answer", id)
		}
		return sent
	}
	task := call("0", `{}`, `,"task":{"ttl":60000}`, `{"task":{"taskId":"t1","status":"working","createdAt":"2026-01-01T00:00:00Z","ttl":60000}}`)
	for i := 1; i <= maxTokens; i++ {
		n := strconv.Itoa(i)
		call(n, `{"n":`+n+`}`, "", `{"content":[]}`)
	}
	s.fromUpstream(s.up, []byte(progressOn(string(task), "1")))
	if got := client.take(); !bytes.Equal(got, []byte(progressOn(`"p0"`, "1"))) {
		t.Fatalf("the client got %s; want the task's progress on its call's token", got)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.tokens) != 1 || len(s.tokenOrder) > 2*maxTokens {
		t.Errorf("the session holds %d tokens, %d in order; want the task's alone, the order within %d", len(s.tokens), len(s.tokenOrder), 2*maxTokens)
	}
}

// TestOnlyATaskHandleKeepsItsToken: a call that may be answered with a
// task (2026-07-28: it declares the tasks extension, as a client may on
// every call) but is answered otherwise, with a result or an error, has
// no progress past its answer, so it lets its token go: as many of them
// as the session keeps tokens for do not push a real task's token out.
func TestOnlyATaskHandleKeepsItsToken(t *testing.T) {
	for _, answer := range []string{`"result":{"content":[]}`, `"result":{"resultType":"complete","content":[]}`, `"error":{"code":-32000,"message":"no"}`} {
		t.Run(answer, func(t *testing.T) {
			client, upstream := &sink{}, &sink{}
			s := listedSession(client, upstream)
			ctx := context.Background()
			const caps = `"io.modelcontextprotocol/clientCapabilities":{"extensions":{"io.modelcontextprotocol/tasks":{}}}`
			call := func(id, args, answer string) []byte {
				t.Helper()
				s.fromClient(ctx, []byte(`{"jsonrpc":"2.0","id":`+id+`,"method":"tools/call","params":{"name":"charge_card","arguments":`+args+`,"_meta":{"progressToken":"p`+id+`",`+caps+`}}}`))
				sent := bytes.Clone(sentID(upstream.take()))
				if sent == nil {
					t.Fatalf("call %s: nothing went upstream", id)
				}
				s.fromUpstream(s.up, []byte(`{"jsonrpc":"2.0","id":`+string(sent)+`,`+answer+`}`))
				if client.take() == nil {
					t.Fatalf("call %s: no answer", id)
				}
				return sent
			}
			task := call("0", `{}`, `"result":{"resultType":"task","taskId":"t1","status":"working"}`)
			for i := 1; i <= maxTokens; i++ {
				n := strconv.Itoa(i)
				call(n, `{"n":`+n+`}`, answer)
			}
			s.fromUpstream(s.up, []byte(progressOn(string(task), "1")))
			if got := client.take(); !bytes.Equal(got, []byte(progressOn(`"p0"`, "1"))) {
				t.Fatalf("the client got %s; want the task's progress on its call's token", got)
			}
		})
	}
}

// listedSession returns a session between client and upstream, on the
// memory store, that has listed one tool, charge_card; what the listing
// wrote to either side is taken.
func listedSession(client, upstream *sink) *Session {
	in := intercept.New(intercept.Options{Store: memstore.New(memstore.Options{}), Hasher: fingerprint.NewRandom()})
	s := New(client, upstream, Options{Interceptor: in, Actor: "a", Scope: "s", UpstreamID: "u"})
	s.fromClient(context.Background(), []byte(`{"jsonrpc":"2.0","id":"l","method":"tools/list","params":{}}`))
	s.fromUpstream(s.up, []byte(`{"jsonrpc":"2.0","id":"l","result":{"tools":[{"name":"charge_card","inputSchema":{"type":"object"}}]}}`))
	client.take()
	upstream.take()
	return s
}
