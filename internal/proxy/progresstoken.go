package proxy

import (
	"bytes"
	"context"
	"encoding/json"

	"github.com/mcp-idempotent/mcp-idempotent/internal/intercept"
	"github.com/mcp-idempotent/mcp-idempotent/internal/jsonrpc"
	"github.com/mcp-idempotent/mcp-idempotent/internal/mcp"
)

// A call's progress token goes upstream as one of the proxy's own: the
// key of the id the proxy sends the call under. A caller that cancels is
// detached, and the execution runs on upstream, so for the upstream the
// request is under way while for the client it has ended: MCP lets the
// client use its token again at once, and the upstream, which must see
// one token on one request under way, never sees that token twice. The
// upstream's progress on the proxy's token goes to the client on the
// client's own, and none of it once the caller has detached.

// maxTokens bounds the tokens a session keeps: those of its requests
// under way, and of its calls answered with a task, whose progress goes
// on past the answer (MCP: a task's token stays valid for its lifetime).
// Past it, the oldest is let go, and the upstream's progress on it
// dropped. A call answered otherwise lets its token go at once, so a
// session's later calls do not push a task's token out.
const maxTokens = 1024

// upToken is a progress token the proxy gave a request of its own.
type upToken struct {
	client json.RawMessage // the client's token, as it came
	// call is the caller, until the request is answered: whether it has
	// detached is read from it. nil once answered, or for none.
	call *clientCall
	// told is how many notifications/progress the proxy itself sent on
	// the client's token, kept once the request is answered, when the
	// caller's count is forgotten: a task's progress after its handle
	// is raised past them as before (progress.go).
	told int64
}

// detached reports whether the upstream's progress on t goes nowhere.
func (t upToken) detached() bool {
	return t.call != nil && t.call.detached.Load()
}

// Send implements intercept.Upstream: it is the session's Send, whose
// progress on the call goes to c, unless c has detached.
func (c *clientCall) Send(ctx context.Context, method string, params json.RawMessage, done intercept.Answered) {
	c.s.send(ctx, method, params, done, c)
}

// CopiesParams implements intercept.CopyingUpstream, as the session does.
func (c *clientCall) CopiesParams() bool { return true }

// ownToken returns params, a request's of the proxy's own that goes
// upstream under the id whose key is key, with the progress token of its
// _meta, if any, made key, and the token it replaced (nil for none). c is
// the caller the request is sent for, or nil. It reads and copies the
// params without the session's lock; keepTokenLocked then notes whose
// the token was.
func ownToken(key string, params json.RawMessage, c *clientCall) (out, client json.RawMessage) {
	if c != nil && progressToken(c.call.Meta) == nil {
		// The common case: the caller gave no token, and the proxy
		// adds none. Its _meta alone is read, not all the params.
		return params, nil
	}
	if !bytes.Contains(params, []byte(mcp.MetaProgressToken)) && !bytes.Contains(params, []byte(`\u`)) {
		return params, nil // without a walk; an escape may spell it otherwise
	}
	meta, _ := jsonrpc.MemberOnce(params, "_meta")
	token := progressToken(meta)
	if token == nil {
		return params, nil
	}
	return jsonrpc.Replace(params, token, []byte(key)), bytes.Clone(token)
}

// keepTokenLocked notes that the request under key carries the proxy's
// token in place of client, the token of c's caller (ownToken). s.mu must
// be held.
func (s *Session) keepTokenLocked(key string, client json.RawMessage, c *clientCall) {
	if s.tokens == nil {
		s.tokens = make(map[string]upToken)
	}
	for len(s.tokens) >= maxTokens {
		// tokenOrder holds every key in tokens, and keys let go
		// already, which are no longer there.
		delete(s.tokens, s.tokenOrder[0])
		s.tokenOrder = s.tokenOrder[1:]
	}
	if len(s.tokenOrder) >= 2*maxTokens {
		// Mostly keys let go: only those still held are kept, so the
		// order stays within twice the bound.
		kept := make([]string, 0, len(s.tokens)+1)
		for _, k := range s.tokenOrder {
			if _, ok := s.tokens[k]; ok {
				kept = append(kept, k)
			}
		}
		s.tokenOrder = kept
	}
	s.tokens[key] = upToken{client: client, call: c}
	s.tokenOrder = append(s.tokenOrder, key)
}

// tokenAnswered notes that the request under key, given a token of the
// proxy's, has ended, answered with a task handle (task) or not. A
// task's progress goes on past the answer, on the same token, so the
// token of a call answered with a task is kept; any other is let go, and
// the upstream's progress on it dropped (upstreamProgressLocked). A call
// that may be answered with a task but is answered otherwise lets its
// token go too, or a client declaring the tasks extension on every call
// would push its real tasks' tokens out.
func (s *Session) tokenAnswered(key string, task bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.tokens[key]
	if !ok {
		return
	}
	if !task || t.detached() || t.call != nil && !t.call.mayBeTask() {
		delete(s.tokens, key)
		return
	}
	if t.call != nil && t.call.progress > 0 {
		t.told = t.call.progress
	}
	t.call = nil
	s.tokens[key] = t
}

// taskHandle reports whether result, a tools/call's, is a task handle:
// a 2025-11-25 CreateTaskResult, or a 2026-07-28 result of type "task".
func taskHandle(result json.RawMessage) bool {
	if jsonrpc.Member(result, "task") != nil {
		return true
	}
	resultType, _ := jsonrpc.StringValue(jsonrpc.Member(result, "resultType"))
	return resultType == "task"
}

// mayBeTask reports whether c's call may be answered with a task: it
// asks for one, or declares the tasks extension.
func (c *clientCall) mayBeTask() bool {
	return c.call.Task() != nil || c.call.TasksExtension
}

// markDetached notes that c's caller cancelled it and was detached: the
// upstream's progress on it no longer reaches the client.
func (c *clientCall) markDetached() { c.detached.Store(true) }

// reservedToken reports whether meta, the _meta of a request of the
// client's, gives a progress token in the proxy's own space (its ids,
// which are its tokens upstream), however spelled. Passed on, such a
// request's progress would be taken for the proxy's call's.
func (s *Session) reservedToken(meta json.RawMessage) bool {
	if len(meta) == 0 || !bytes.Contains(meta, []byte(s.idPrefix[1:])) && !bytes.Contains(meta, []byte(`\u`)) {
		return false // the common case, without a walk; an escape may spell it otherwise
	}
	token := progressToken(meta)
	return token != nil && idHasPrefix(token, s.idPrefix)
}

// reservedTokenMessage is the error a request on a reserved token gets.
func (s *Session) reservedTokenMessage() string {
	return "mcp-idempotent: progress tokens starting with " + s.idPrefix[1:] + " are reserved for the proxy's own requests"
}
