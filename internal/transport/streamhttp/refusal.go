package streamhttp

import (
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/mcp-idempotent/mcp-idempotent/internal/jsonrpc"
)

// An httpError is a refusal: a status, and a message for the body.
type httpError struct {
	status int
	msg    string
	header http.Header
	id     json.RawMessage // the refused request's id, if the body is read
}

func (e *httpError) Error() string { return e.msg }

func refuse(status int, format string, args ...any) *httpError {
	return &httpError{status: status, msg: fmt.Sprintf(format, args...)}
}

// writeRefusal answers with status and a JSON-RPC error body, which every
// MCP client can show; code is the JSON-RPC code (-32600 unless told).
func writeRefusal(w http.ResponseWriter, e *httpError, code int) {
	for k, vs := range e.header {
		w.Header()[k] = vs
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(e.status)
	w.Write(jsonrpc.NewErrorResponse(e.id, &jsonrpc.Error{Code: code, Message: e.msg}))
}
