package streamhttp

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/mcp-idempotent/mcp-idempotent/internal/jsonrpc"
	"github.com/mcp-idempotent/mcp-idempotent/internal/mcp"
)

// sent describes what a POST carried, for answering its requests when the
// server does not.
type sent struct {
	ids    []json.RawMessage // ids of the requests in the frame
	isInit bool              // the frame holds the initialize request
	hasSID bool              // the POST carried a session id
	// stateless marks a POST of the 2026-07-28 era, which has no session
	// and cannot be resumed.
	stateless bool
	call      *statelessCall // the stateless request's entry in Client.calls, or nil
	// after, if not nil, is to be closed before the POST goes; taken, if
	// not nil, is closed once the server has taken it.
	after, taken chan struct{}
	// headers, for the initialize POST, is closed once its answer's
	// headers, which carry the session id, are read; a POST written
	// before then waits for it in sessionWait (nil for none).
	headers, sessionWait chan struct{}
}

// WriteFrame POSTs frame to the server and returns without waiting for the
// answer, which ReadFrame returns when it comes. It fails only for a frame
// that is not JSON-RPC, a request whose _meta the server could read
// otherwise than the transport (statelessVersion), once the server has
// forgotten the session (ErrSessionExpired: the frame was not sent), or
// after Close.
func (c *Client) WriteFrame(frame []byte) error {
	// Our own copy: the caller may reuse frame, and the ids kept for
	// answering on failure point into it.
	body := bytes.Clone(frame)
	m, msgs, err := decodeFrame(body)
	if err != nil {
		return fmt.Errorf("writing to the upstream: %w", err)
	}
	req, err := http.NewRequestWithContext(c.ctx, http.MethodPost, c.url, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("writing to the upstream: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if !m.Batch && m.IsRequest() && m.Method == "tools/call" {
		if key, ok := idempotencyKey(m.Params); ok {
			// Under a key net/http does not look up: under the canonical
			// one, it takes the POST for one it may send again itself, on
			// a new connection, when a reused one breaks before the
			// answer starts; the tool would run twice, the proxy none the
			// wiser. Header names are case-insensitive on the wire.
			req.Header[strings.ToLower(headerIdempotencyKey)] = []string{key}
		}
	}
	if !m.Batch && bytes.Contains(m.Params, []byte(headerTraceparent)) {
		setTraceHeaders(req.Header, m.Params)
	}
	var own transportEra // what m, if a request, declares
	if !m.Batch && m.IsRequest() {
		if own.version, own.stateless, err = statelessVersion(m); err != nil {
			return fmt.Errorf("writing to the upstream: %s: %w", m.Method, err)
		}
	}
	s := sentOf(msgs)

	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return ErrClosed
	}
	if c.gone {
		return ErrSessionExpired
	}
	e := c.eraLocked(m, own)
	if m.IsNotification() && m.Method == "notifications/cancelled" {
		if c.cancelLocked(m) {
			return nil
		}
		e = transportEra{}
	}
	req = c.prepareLocked(req, m, msgs, &s, e)
	c.wg.Add(1) // under mu, so that Close's Wait cannot have started
	c.posts++
	go c.post(req, s)
	return nil
}

// decodeFrame decodes a frame written to the Client: m, and the messages
// it holds (m alone, or a batch's).
func decodeFrame(body []byte) (m *jsonrpc.Message, msgs []*jsonrpc.Message, err error) {
	m, err = jsonrpc.Decode(body)
	if err != nil {
		return nil, nil, err
	}
	if !m.Batch {
		return m, []*jsonrpc.Message{m}, nil
	}
	if msgs, err = jsonrpc.DecodeBatch(body); err != nil {
		return nil, nil, err
	}
	return m, msgs, nil
}

// sentOf describes the requests among msgs, for answering them when the
// server does not.
func sentOf(msgs []*jsonrpc.Message) sent {
	var s sent
	for _, m := range msgs {
		if m.IsRequest() {
			s.ids = append(s.ids, m.ID)
			if m.Method == "initialize" {
				s.isInit = true
			}
		}
	}
	return s
}

// prepareLocked readies the POST req of frame m (messages msgs) for the
// era e: a stateless request's headers and its entry in c.calls, the
// initialize request's id, the session's headers, and the order against
// notifications/initialized. It returns req, with a context of its own
// for a stateless request.
func (c *Client) prepareLocked(req *http.Request, m *jsonrpc.Message, msgs []*jsonrpc.Message, s *sent, e transportEra) *http.Request {
	s.stateless = e.stateless
	if s.stateless {
		setRequestMetadata(req.Header, m, e.version)
		if m.Method == "tools/call" {
			name, _ := requestName(m)
			setParamHeaders(req.Header, m.Params, c.tools[name])
		}
		if len(s.ids) == 1 {
			// Its own context, so that a cancellation can close the
			// response stream of this request alone.
			ctx, cancel := context.WithCancel(c.ctx)
			req = req.WithContext(ctx)
			s.call = &statelessCall{method: m.Method, cancel: cancel}
			c.calls[string(jsonrpc.IDKey(s.ids[0]))] = s.call
		}
	}
	if s.isInit {
		c.handshake = true
		for _, m := range msgs {
			if m.Method == "initialize" {
				c.initID = string(jsonrpc.IDKey(m.ID))
			}
		}
		s.headers = make(chan struct{})
		c.initHeaders = s.headers
	} else if !s.stateless && c.sessionID == "" && c.initHeaders != nil {
		// Written before the initialize answer came (a ping may be):
		// sent without the session id, a server refuses it.
		s.sessionWait = c.initHeaders
	}
	c.setHeadersLocked(req, s.stateless)
	s.hasSID = !s.stateless && c.sessionID != ""
	if m.Batch || !m.IsResponse() {
		// Not an answer to the server's own request, which the server
		// may be waiting for to take the notification (roots/list).
		s.after = c.initialized
	}
	if !m.Batch && m.IsNotification() && m.Method == "notifications/initialized" {
		s.taken = make(chan struct{})
		c.initialized = s.taken
	}
	return req
}

// eraLocked decides which rules m follows, and notes the era of a request
// for the notifications after it. A request says for itself, in own (see
// statelessVersion); a notification declares no version, so it follows the
// last request; a response answers a server's request, which only the 2025
// era has; and only a 2025-era peer sends a batch, since 2025-06-18 removed
// them and 2026-07-28 allows one message a POST.
func (c *Client) eraLocked(m *jsonrpc.Message, own transportEra) transportEra {
	switch {
	case m.Batch || m.IsResponse():
		return transportEra{}
	case m.IsNotification():
		return c.era
	}
	e := own
	if !e.stateless {
		e.version = ""
	}
	c.era = e
	return e
}

// cancelLocked carries out a notifications/cancelled m for a stateless
// request: on Streamable HTTP, 2026-07-28 has no client notifications, and
// "closing the SSE response stream is itself the cancellation signal" (spec
// 2026-07-28, basic/transports/streamable-http, "Sending Messages" and
// "Cancellation"). It reports whether m is done with; if not, m goes to the
// 2025-era session, whose server may still be working on the request.
func (c *Client) cancelLocked(m *jsonrpc.Message) bool {
	if cl, ok := c.calls[string(jsonrpc.IDKey(member(m.Params, "requestId")))]; ok {
		cl.cancelled = true
		cl.cancel()
		c.log.Debug("cancelled a stateless request by closing its response stream")
		return true
	}
	// Without a session, the request is a stateless one already answered,
	// and needs nothing.
	return !c.handshake
}

// setHeadersLocked adds the configured headers, but none the transport has
// set already, and, for a POST of the 2025 era, the session's headers.
func (c *Client) setHeadersLocked(req *http.Request, stateless bool) {
	for k, vs := range c.header {
		k = wireKey(k)
		if _, ok := req.Header[k]; !ok {
			req.Header[k] = slices.Clone(vs)
		}
	}
	if stateless {
		// 2026-07-28 has no sessions, and each request carries its own
		// version: the session of a 2025-era exchange on this Client,
		// if any, is not this request's.
		return
	}
	if c.sessionID != "" {
		req.Header.Set(headerSessionID, c.sessionID)
	}
	if c.version != "" {
		req.Header.Set(headerProtocolVersion, c.version)
	}
}

// wireKey returns the key under which a configured header goes into a
// request's Header: the canonical one, but for the names under which
// net/http takes a POST for one it may send again itself, on a new
// connection, when a reused one breaks before the answer starts
// (Idempotency-Key, X-Idempotency-Key). Those go under a key it does not
// look up, as the call's own key does: a call would otherwise run twice,
// the proxy none the wiser.
func wireKey(name string) string {
	k := http.CanonicalHeaderKey(name)
	if k == headerIdempotencyKey || k == "X-Idempotency-Key" {
		return strings.ToLower(k)
	}
	return k
}

// idempotencyKey returns the Idempotency-Key header value for a tools/call
// whose params._meta holds an execution id: an RFC 8941 sf-string. An id
// that a sf-string cannot hold (not printable ASCII) gives none.
func idempotencyKey(params json.RawMessage) (string, bool) {
	id, ok := jsonrpc.StringValue(member(member(params, "_meta"), mcp.MetaExecutionID))
	if !ok || id == "" {
		return "", false
	}
	return sfString(id)
}

// setTraceHeaders copies the W3C trace context in params._meta to the
// headers of its POST, so that a server traced at the HTTP layer sees the
// same parent as one that reads _meta. A value that is not printable
// ASCII, which no valid one is, is left out, and so is one longer than
// maxTraceHeader: in _meta it is the client's to send, but as a header
// it would have the server refuse the call (431), which went untraced.
func setTraceHeaders(h http.Header, params json.RawMessage) {
	meta := member(params, "_meta")
	for _, name := range []string{headerTraceparent, headerTracestate} {
		if v, ok := jsonrpc.StringValue(member(meta, name)); ok && v != "" && len(v) <= maxTraceHeader && printable(v) {
			h.Set(name, v)
		}
	}
}

// maxTraceHeader bounds a trace context header the proxy adds: W3C
// Trace Context has a traceparent of 55 bytes, and asks that a tracestate
// of 512 be carried on; a longer one may be dropped. Node's server
// refuses a request whose headers pass 16 KiB, Go's 1 MiB.
const maxTraceHeader = 512

// printable reports whether s is printable ASCII, as a header value may be.
func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// sfString encodes s as an RFC 8941 section 3.3.3 String.
func sfString(s string) (string, bool) {
	var b []byte
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		ch := s[i]
		if ch < 0x20 || ch > 0x7e {
			return "", false
		}
		if ch == '"' || ch == '\\' {
			b = append(b, '\\')
		}
		b = append(b, ch)
	}
	return string(append(b, '"')), true
}
