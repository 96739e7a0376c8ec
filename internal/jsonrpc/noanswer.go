package jsonrpc

import (
	"encoding/json"
	"strconv"
)

// A NoAnswer is a transport's own account of a request it carried that got
// no JSON-RPC answer: the request never left, or it left and the
// connection, the stream or an HTTP status came back instead. A transport
// returns it from ReadFrame, beside the frames and never inside one, in
// place of the answer it stands for. Nothing an upstream writes decodes to
// a NoAnswer, so no upstream can make a request it ran look unsent (as
// net/http keeps what the connection saw in the errors it returns, never
// in the response's bytes).
type NoAnswer struct {
	// ID is the request's id, as it was written.
	ID json.RawMessage
	// NotSent says that no byte of the request left (a dial that failed):
	// nothing can have run. Otherwise the request may have been received.
	NotSent bool
	// Status is the HTTP status that came instead of an answer, or 0 when
	// none did; RetryAfter is the Retry-After header sent with it.
	Status     int
	RetryAfter string
	// Reason says what happened, for the caller and the log.
	Reason string
}

func (e *NoAnswer) Error() string { return e.Reason }

// Refused reports whether the HTTP status that came says the request was
// not answered on purpose (any status but a 2xx): the server or a gateway
// before it turned it away, throttled it, or failed with it.
func (e *NoAnswer) Refused() bool { return e.Status != 0 && e.Status/100 != 2 }

// Object returns the JSON-RPC error that stands for e in an answer: code
// -32603 with e's reason; when an HTTP status came, its data holds
// "http_status" and, if one came, "retry_after", which a retry rule of a
// proxy in front may read.
func (e *NoAnswer) Object() *Error {
	out := &Error{Code: CodeInternalError, Message: e.Reason}
	if e.Status != 0 {
		data := `{"http_status":` + strconv.Itoa(e.Status)
		if e.RetryAfter != "" {
			ra, _ := json.Marshal(e.RetryAfter)
			data += `,"retry_after":` + string(ra)
		}
		out.Data = json.RawMessage(data + "}")
	}
	return out
}
