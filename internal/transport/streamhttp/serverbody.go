package streamhttp

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/jsonrpc"
	"github.com/mcp-idempotent/mcp-idempotent/internal/mcp"
)

// codeHeaderMismatch is the JSON-RPC error code of a stateless request
// whose headers disagree with its body (the go-sdk's CodeHeaderMismatch).
const codeHeaderMismatch = -32020

// DefaultMaxBodyReads is ServerOptions.MaxBodyReads's default.
const DefaultMaxBodyReads = 128

// defaultBodyReadWait is how long a request waits for a place to read its
// body before it is refused: a burst of bodies that come at once is read in
// far less, so only bodies held back by their clients fill every place
// that long.
const defaultBodyReadWait = 250 * time.Millisecond

// placeToRead takes a place among the MaxBodyReads, waiting for one at
// most ServerOptions.bodyReadWait, and reports whether it did.
func (s *Server) placeToRead(r *http.Request) bool {
	select {
	case s.bodyReads <- struct{}{}:
		return true
	default:
	}
	s.bodyWaits.Add(1)
	defer s.bodyWaits.Add(-1)
	t := time.NewTimer(s.opts.bodyReadWait)
	defer t.Stop()
	select {
	case s.bodyReads <- struct{}{}:
		return true
	case <-t.C:
	case <-r.Context().Done():
	}
	return false
}

// readBody reads a POST's body, bounded in size and in time, and while
// fewer than MaxBodyReads others are being read. It answers the refusal
// itself when it cannot.
//
// The bound is on bodies, not bytes: a body coming slowly costs memory
// for its reader (a goroutine, buffers, and what has come) however few
// bytes it has sent, so no byte budget would bound the clients that
// trickle a few bytes each. MaxBodyReads times MaxMessage bounds the
// bytes too.
func (s *Server) readBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	if r.ContentLength > int64(s.opts.MaxMessage) {
		// Its length says it is over the limit: refused before any of it
		// is read, rather than after the limit's worth of it, or after
		// BodyTimeout for a client that waits for an answer first.
		refuseUnread(w, r, tooLargeBody(s.opts.MaxMessage), jsonrpc.CodeInvalidRequest)
		return nil, false
	}
	if !s.placeToRead(r) {
		e := refuse(http.StatusServiceUnavailable, "too many request bodies are being read at once (%d, --max-body-reads): this request was not read and did not run; send it again", s.opts.MaxBodyReads)
		e.header = http.Header{"Retry-After": {"1"}}
		refuseUnread(w, r, e, jsonrpc.CodeInternalError)
		return nil, false
	}
	defer func() { <-s.bodyReads }()
	rc := http.NewResponseController(w)
	rc.SetReadDeadline(time.Now().Add(s.opts.BodyTimeout))
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, int64(s.opts.MaxMessage)))
	if err == nil {
		rc.SetReadDeadline(time.Time{}) // the stream that answers may be long
	}
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			// The rest is not read either: net/http would read up to
			// 256 KiB more of it once answered, for as long as
			// BodyTimeout lets a client that sends it slowly, or never.
			refuseUnread(w, r, tooLargeBody(s.opts.MaxMessage), jsonrpc.CodeInvalidRequest)
			return nil, false
		}
		s.log.Debug("reading a request body failed", "err", err)
		// The rest of the body is not waited for: the connection ends.
		w.Header().Set("Connection", "close")
		e := refuse(http.StatusBadRequest, "reading the body: %v", err)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			// The raw "i/o timeout" of a socket says neither what was
			// slow nor what to do.
			e = refuse(http.StatusBadRequest, "the body did not all come within %v of its headers; send the whole body at once", roundDuration(s.opts.BodyTimeout))
		}
		writeRefusal(w, e, jsonrpc.CodeInvalidRequest)
		return nil, false
	}
	return body, true
}

func tooLargeBody(limit int) *httpError {
	return refuse(http.StatusRequestEntityTooLarge, "the message is larger than the limit of %d bytes (--max-message-size)", limit)
}

// roundDuration prints d without a zero tail: "1m" rather than "1m0s".
func roundDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	return s
}

// isBatch reports whether body, valid JSON, is an array: a batch, even of
// one message.
func isBatch(body []byte) bool {
	body = bytes.TrimLeft(body, " \t\r\n")
	return len(body) > 0 && body[0] == '['
}

// decodeBody reads a POST body as JSON-RPC.
func decodeBody(body []byte) ([]*jsonrpc.Message, *httpError, int) {
	m, err := jsonrpc.Decode(body)
	if err != nil {
		// A member given twice is valid JSON, but not one message: readers
		// disagree on which of the two counts.
		if errors.Is(err, jsonrpc.ErrNotObject) || errors.Is(err, jsonrpc.ErrAmbiguous) {
			return nil, refuse(http.StatusBadRequest, "%v", err), jsonrpc.CodeInvalidRequest
		}
		if jsonrpc.TooDeep(err) {
			return nil, refuse(http.StatusBadRequest, "the body nests deeper than %d levels, past what JSON decoders read", jsonrpc.MaxDepth), jsonrpc.CodeParseError
		}
		return nil, refuse(http.StatusBadRequest, "the body is not JSON: %v", err), jsonrpc.CodeParseError
	}
	msgs := []*jsonrpc.Message{m}
	if m.Batch {
		if msgs, err = jsonrpc.DecodeBatch(body); err != nil {
			return nil, refuse(http.StatusBadRequest, "%v", err), jsonrpc.CodeInvalidRequest
		}
		if len(msgs) == 0 {
			return nil, refuse(http.StatusBadRequest, "an empty batch"), jsonrpc.CodeInvalidRequest
		}
	}
	requests := make(map[string]bool, len(msgs))
	for _, m := range msgs {
		if m.Method == "" && m.ID == nil {
			return nil, refuse(http.StatusBadRequest, "a JSON-RPC message needs a method (a request or notification) or an id (a response)"), jsonrpc.CodeInvalidRequest
		}
		if m.Method == "" && m.Result == nil && m.Error == nil {
			// Perhaps a request whose method is misspelled: passed on, it
			// would be taken for an answer, and its client would wait.
			e := refuse(http.StatusBadRequest, "not a JSON-RPC message: it has an id, but neither a method, a result nor an error")
			if len(msgs) == 1 && jsonrpc.ValidID(m.ID) {
				e.id = m.ID
			}
			return nil, e, jsonrpc.CodeInvalidRequest
		}
		if m.Method != "" {
			if why := jsonrpc.CheckRequest(m); why != "" {
				e := refuse(http.StatusBadRequest, "%s", why)
				if len(msgs) == 1 && jsonrpc.ValidID(m.ID) {
					e.id = m.ID
				}
				return nil, e, jsonrpc.CodeInvalidRequest
			}
		}
		if m.IsRequest() {
			// Two answers under one id could not be told apart.
			key := string(jsonrpc.IDKey(m.ID))
			if requests[key] {
				return nil, refuse(http.StatusBadRequest, "the batch holds two requests with id %s", m.ID), jsonrpc.CodeInvalidRequest
			}
			requests[key] = true
		}
	}
	return msgs, nil, 0
}

// countRequests returns how many of msgs are requests, each owed an answer.
func countRequests(msgs []*jsonrpc.Message) int {
	n := 0
	for _, m := range msgs {
		if m.IsRequest() {
			n++
		}
	}
	return n
}

// isStateless reports whether a request without a session id is a
// 2026-07-28 one: the header says so, or the message is server/discover,
// or its _meta names that protocol version. A message whose _meta could be
// read otherwise is refused (ambiguousVersion).
func isStateless(r *http.Request, msgs []*jsonrpc.Message) (bool, *httpError) {
	if v := r.Header.Get(headerProtocolVersion); v != "" {
		return v >= statelessSince, nil // the body is checked against it (checkStatelessHeaders)
	}
	for _, m := range msgs {
		_, ok, err := statelessVersion(m)
		if err != nil {
			return false, ambiguousVersion(m, err, len(msgs) == 1)
		}
		if ok {
			return true, nil
		}
	}
	return false, nil
}

// ambiguousVersion is the refusal of m, whose _meta a server could read
// otherwise (err, from statelessVersion): invalid params, under m's id
// when m is alone in the body and has a valid one.
func ambiguousVersion(m *jsonrpc.Message, err error, alone bool) *httpError {
	e := refuse(http.StatusBadRequest, "%s: %v", m.Method, err)
	e.code = jsonrpc.CodeInvalidParams
	if alone && m.IsRequest() && jsonrpc.ValidID(m.ID) {
		e.id = m.ID
	}
	return e
}

// checkStatelessHeaders checks that a stateless request's headers say
// what its body says: MCP-Protocol-Version the _meta version, Mcp-Method
// the method, Mcp-Name the tool, prompt or resource. The spec has servers
// refuse a mismatch (2026-07-28, basic/transports/streamable-http,
// "Standard Request Headers"): intermediaries route on the headers, so a
// request whose headers lie could be routed as one thing and run as
// another. The upstream behind the proxy may not see the headers at all
// (a child process), so the proxy checks them.
func checkStatelessHeaders(r *http.Request, m *jsonrpc.Message) *httpError {
	mismatch := func(format string, args ...any) *httpError {
		e := refuse(http.StatusBadRequest, format, args...)
		e.id = m.ID
		return e
	}
	version, _, err := statelessVersion(m)
	if err != nil {
		return ambiguousVersion(m, err, true)
	}
	if version != "" && r.Header.Get(headerProtocolVersion) != "" && r.Header.Get(headerProtocolVersion) != version {
		return mismatch("header mismatch: MCP-Protocol-Version %q does not match the _meta version %q", r.Header.Get(headerProtocolVersion), version)
	}
	method := r.Header.Get(headerMcpMethod)
	if method == "" {
		return mismatch("missing required %s header", headerMcpMethod)
	}
	if method != m.Method {
		return mismatch("header mismatch: %s %q does not match the body's method %q", headerMcpMethod, method, m.Method)
	}
	if name, ok := requestName(m); ok {
		got, valid := decodeHeaderValue(r.Header.Get(headerMcpName))
		switch {
		case r.Header.Get(headerMcpName) == "":
			return mismatch("missing required %s header for method %q", headerMcpName, m.Method)
		case !valid || got != name:
			return mismatch("header mismatch: %s does not match the body's %q", headerMcpName, name)
		}
	}
	return nil
}

// checkStatelessVersion refuses a stateless request whose _meta names a
// protocol version the proxy may not agree on, as checkCaller refuses
// one whose MCP-Protocol-Version does: the header may be left out, and
// the body says the version all the same.
func checkStatelessVersion(m *jsonrpc.Message) *httpError {
	version, _, _ := statelessVersion(m) // an ambiguous one is refused first (checkStatelessHeaders)
	if version == "" || mcp.Negotiable(version) {
		return nil
	}
	e := unsupportedVersion("_meta protocol version", version)
	e.id = m.ID
	return e
}

// batchlessSince is the first protocol version whose Streamable HTTP POST
// carries one message: 2025-06-18 removed JSON-RPC batching (its
// changelog, PR #416). Servers of that version fail on a batch: the
// go-sdk's ends the session, with every call under way on it.
const batchlessSince = "2025-06-18"

// protocolVersion returns the protocol version a request of the session
// speaks: its MCP-Protocol-Version, else the one the session's initialize
// result gave, else "" (unknown: a 2025-03-26 client may send no header).
func (ss *ServerSession) protocolVersion(r *http.Request) string {
	if v := r.Header.Get(headerProtocolVersion); v != "" {
		return v
	}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return ss.version
}

// batchVersion is the version that decides whether r may carry a batch:
// the later of its header's and the session's. A header naming an earlier
// version than the session agreed on lets no batch through to an
// upstream of the later one, which fails on it.
func (ss *ServerSession) batchVersion(r *http.Request) string {
	ss.mu.Lock()
	agreed := ss.version
	ss.mu.Unlock()
	return max(r.Header.Get(headerProtocolVersion), agreed)
}
