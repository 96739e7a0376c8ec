package streamhttp

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/jsonrpc"
)

// An httpError is a refusal: a status, and a message for the body.
type httpError struct {
	status int
	msg    string
	header http.Header
	id     json.RawMessage // the refused request's id, if the body is read
	code   int             // the JSON-RPC code, if the refusal has its own
	data   json.RawMessage // the JSON-RPC error's data, if any
}

func (e *httpError) Error() string { return e.msg }

func refuse(status int, format string, args ...any) *httpError {
	for i, a := range args {
		// Most are what the client sent (a session id, a header, a
		// request's id): a megabyte of it is not echoed back.
		switch v := a.(type) {
		case string:
			args[i] = echoed(v)
		case json.RawMessage:
			args[i] = echoed(string(v))
		}
	}
	return &httpError{status: status, msg: fmt.Sprintf(format, args...)}
}

// echoed returns s, cut at maxEchoed bytes with its length if longer.
func echoed(s string) string {
	if len(s) <= maxEchoed {
		return s
	}
	return fmt.Sprintf("%s… (%d bytes)", strings.ToValidUTF8(s[:maxEchoed], ""), len(s))
}

// maxEchoed bounds the bytes of a string a refusal quotes.
const maxEchoed = 200

// writeRefusal answers with status and a JSON-RPC error body, which every
// MCP client can show; code is the JSON-RPC code (-32600 unless told),
// unless the refusal has its own.
func writeRefusal(w http.ResponseWriter, e *httpError, code int) {
	if e.code != 0 {
		code = e.code
	}
	for k, vs := range e.header {
		w.Header()[k] = vs
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(e.status)
	w.Write(jsonrpc.NewErrorResponse(e.id, &jsonrpc.Error{Code: code, Message: e.msg, Data: e.data}))
}

// unreadGrace is how long the connection of a request refused unread
// waits for the rest of its body: enough for the client to read the
// answer before the connection closes, which could otherwise reset it.
const unreadGrace = time.Second

// leaveUnread readies the answer to a request whose body is not read,
// and will not be. net/http reads what is left of a body, up to 256 KiB,
// before it writes the answer (unless told the connection closes) and
// again once the handler returns, with no time limit: a client sending it
// slowly would hold the connection, answered or not, for as long as it
// likes. So the connection closes, after the answer, and the rest of the
// body is waited for only unreadGrace.
func leaveUnread(w http.ResponseWriter, r *http.Request) {
	if r.ContentLength != 0 { // -1: of unknown length
		w.Header().Set("Connection", "close")
		http.NewResponseController(w).SetReadDeadline(time.Now().Add(unreadGrace))
	}
}

// refuseUnread is writeRefusal for a request whose body is not read
// (leaveUnread).
func refuseUnread(w http.ResponseWriter, r *http.Request, e *httpError, code int) {
	leaveUnread(w, r)
	writeRefusal(w, e, code)
}

// Handler returns s serving the MCP endpoint at path, and every other path
// a 404, answered at once and unread (refuseUnread): http.ServeMux's own
// 404 reads up to 256 KiB of a body first, with no time limit, so a
// client sending it slowly held a connection for as long as it liked.
// The path is compared as it is, not made a ServeMux pattern: a path
// holding "{" made one that panicked, or a wildcard, and one ending in
// "/" served every path under it.
func (s *Server) Handler(path string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != path {
			refuseUnread(w, r, refuse(http.StatusNotFound, "%s is not the MCP endpoint, which is %s", r.URL.Path, path), jsonrpc.CodeInvalidRequest)
			return
		}
		s.ServeHTTP(w, r)
	})
}
