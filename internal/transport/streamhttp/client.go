// Package streamhttp speaks MCP's Streamable HTTP transport on both sides
// of the proxy, as frame-level connections the session pump uses in place
// of pipes: Client is the upstream side (a server reached by URL), Server
// the front (clients that connect over HTTP, each session a ServerSession).
// Both speak both eras of the transport: the session-based one of protocol
// versions 2025-06-18 and 2025-11-25, and the stateless one of 2026-07-28
// (SEP-2575), choosing per message.
//
// Spec: https://modelcontextprotocol.io/specification/2025-11-25/basic/transports#streamable-http
// and https://modelcontextprotocol.io/specification/2026-07-28/basic/transports/streamable-http
package streamhttp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/jsonrpc"
)

// Header names of the Streamable HTTP transport.
const (
	headerSessionID       = "Mcp-Session-Id"
	headerProtocolVersion = "MCP-Protocol-Version"
	headerLastEventID     = "Last-Event-ID"
	// headerIdempotencyKey carries a tools/call's execution id, per the IETF
	// draft "The Idempotency-Key HTTP Header Field".
	headerIdempotencyKey = "Idempotency-Key"
)

// executionIDKey is the _meta key under which the interceptor puts the
// execution id of a tools/call it dispatches.
const executionIDKey = "mcp-idempotent/execution-id"

// DefaultMaxMessage is the largest frame or SSE line accepted when
// Options.MaxMessage is zero.
const DefaultMaxMessage = 16 << 20

// deleteTimeout bounds the DELETE that Close sends.
const deleteTimeout = 5 * time.Second

// ErrClosed is returned by WriteFrame after Close.
var ErrClosed = errors.New("streamhttp: client closed")

// ErrSessionExpired is returned by ReadFrame, after the frames already
// received, once the server has answered 404 to a request carrying the
// session id: the session is gone, and a new Client must initialise anew.
var ErrSessionExpired = errors.New("streamhttp: the upstream session expired (HTTP 404)")

// Options configures a Client. The zero value is usable.
type Options struct {
	// Header holds extra headers sent on every request, such as
	// Authorization. Their values are never logged.
	Header http.Header
	// HTTPClient sends the requests; nil means http.DefaultClient. It should
	// have no overall Timeout: responses to long tool calls and the GET
	// stream stay open for as long as the server needs.
	HTTPClient *http.Client
	// Logger receives transport events; nil discards them.
	Logger *slog.Logger
	// MaxMessage bounds one frame, and one SSE line, in bytes; zero means
	// DefaultMaxMessage.
	MaxMessage int
}

// A Client is one session with a Streamable HTTP MCP server. It carries
// JSON-RPC frames like a connection: each frame written is POSTed on its own
// goroutine, and every message the server answers with, in a JSON body, in
// an SSE response or on the GET stream, is returned by ReadFrame.
//
// Each message follows the rules of its own era, so one Client serves a
// client of either era, and a client that probes with server/discover and
// then falls back to initialize. A request of the 2025 era (initialize and
// what follows it) uses the session: Mcp-Session-Id, the negotiated
// MCP-Protocol-Version, the GET stream, resumption, DELETE. A request of
// the 2026-07-28 era (server/discover, or a request whose _meta declares
// that version or a later one) is sent alone: MCP-Protocol-Version from its
// _meta, Mcp-Method and Mcp-Name, no session id, and no resumption. Its
// notifications/cancelled is not sent: the Client closes the request's
// response stream instead, which is how that era cancels over HTTP.
//
// A request that gets no answer from the server because of an HTTP error, a
// transport failure or a stream that ended early is answered by the Client
// itself, so no caller waits for ever: ReadFrame returns a
// *jsonrpc.NoAnswer for it, which says whether the request left and which
// HTTP status and Retry-After came instead of the answer. It is never a
// frame: nothing the server sends can pass for it.
type Client struct {
	url    string
	shown  string // url as errors show it (ShownURL)
	hc     *http.Client
	header http.Header
	log    *slog.Logger
	max    int

	ctx    context.Context // parent of every request; cancelled by Close
	cancel context.CancelFunc
	frames chan inbound  // what ReadFrame returns, in order
	done   chan struct{} // closed by Close
	// expired is closed, once, when the server says the session is gone.
	expired     chan struct{}
	expiredOnce sync.Once
	wg          sync.WaitGroup

	mu          sync.Mutex // protects the fields below
	closed      bool
	sessionID   string // from the initialize response's Mcp-Session-Id
	version     string // the protocolVersion the server chose
	initID      string // raw id of the initialize request, once written
	handshake   bool   // an initialize request has been written
	listening   bool   // the GET stream has been started
	lastEventID string // the id of the last SSE event received, any stream
	// era is that of the last request written, which notifications follow:
	// they declare no version of their own.
	era transportEra
	// calls holds the stateless requests in flight by raw id, so that a
	// cancellation can close their response streams.
	calls map[string]*statelessCall
	// tools holds the x-mcp-header bindings of the tools listed to
	// stateless requests, by tool name, for the Mcp-Param-* headers.
	tools map[string][]paramHeader
	// initialized is closed once the server has taken the POST of
	// notifications/initialized; nil before one is written. POSTs written
	// after it wait for it: separate POSTs race, and the lifecycle puts
	// the notification before the session's other messages.
	initialized chan struct{}
}

// A transportEra is the generation of the transport a message follows.
type transportEra struct {
	stateless bool
	version   string // the protocol version a stateless message declares
}

// A statelessCall is one stateless request in flight.
type statelessCall struct {
	method    string
	cancel    context.CancelFunc // aborts the POST
	cancelled bool               // the client cancelled it; set under Client.mu
}

// ShownURL returns u as an error or a log shows it: its scheme, host and
// path. A user or a query, either of which may hold a credential (a token
// as the user name, ?key=...), shows only as "***".
func ShownURL(u *url.URL) string {
	shown := u.Scheme + "://"
	if u.User != nil {
		shown += "***@"
	}
	shown += u.Host + u.EscapedPath()
	if u.RawQuery != "" {
		shown += "?***"
	}
	return shown
}

// do is c.hc.Do, with the URL in its error as ShownURL gives it: net/http
// hides only a password.
func (c *Client) do(req *http.Request) (*http.Response, error) {
	resp, err := c.hc.Do(req)
	if ue, ok := errors.AsType[*url.Error](err); ok {
		ue.URL = c.shown
	}
	return resp, err
}

// Dial returns a Client for the MCP endpoint at rawURL. It sends nothing:
// a 2025-era session starts with the initialize request written to it, and
// a 2026-07-28 request needs none. Cancelling
// ctx aborts every request in flight; Close must still be called.
func Dial(ctx context.Context, rawURL string, opts Options) (*Client, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		if ue, ok := errors.AsType[*url.Error](err); ok {
			err = ue.Err // without the URL, which may hold a credential
		}
		return nil, fmt.Errorf("parsing upstream URL: %w", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return nil, fmt.Errorf("upstream URL %q: want http:// or https:// and a host", ShownURL(u))
	}
	c := &Client{
		url:     rawURL,
		shown:   ShownURL(u),
		hc:      opts.HTTPClient,
		header:  opts.Header.Clone(),
		log:     opts.Logger,
		max:     opts.MaxMessage,
		frames:  make(chan inbound, 64),
		done:    make(chan struct{}),
		expired: make(chan struct{}),
		calls:   make(map[string]*statelessCall),
		tools:   make(map[string][]paramHeader),
	}
	if c.hc == nil {
		c.hc = http.DefaultClient
	}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	if c.max <= 0 {
		c.max = DefaultMaxMessage
	}
	c.ctx, c.cancel = context.WithCancel(ctx)
	return c, nil
}

// SessionID returns the session id the server assigned, or "" before the
// initialize response or if the server uses none.
func (c *Client) SessionID() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sessionID
}

// LastEventID returns the id of the last SSE event received on any stream.
func (c *Client) LastEventID() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lastEventID
}

// ReadFrame returns the next frame from the server, or a *jsonrpc.NoAnswer
// for a request the server did not answer, after which reading goes on.
// After Close it returns what was already received, then io.EOF.
func (c *Client) ReadFrame() ([]byte, error) {
	select {
	case in := <-c.frames:
		return in.read()
	case <-c.expired:
		select {
		case in := <-c.frames:
			return in.read()
		default:
			return nil, ErrSessionExpired
		}
	case <-c.done:
		select {
		case in := <-c.frames:
			return in.read()
		default:
			return nil, io.EOF
		}
	}
}

// An inbound is one thing for ReadFrame: a frame from the server, or the
// Client's own account of a request the server did not answer.
type inbound struct {
	frame    []byte
	noAnswer *jsonrpc.NoAnswer
}

func (in inbound) read() ([]byte, error) {
	if in.noAnswer != nil {
		return nil, in.noAnswer
	}
	return in.frame, nil
}

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
}

// WriteFrame POSTs frame to the server and returns without waiting for the
// answer, which ReadFrame returns when it comes. It fails only for a frame
// that is not JSON-RPC or after Close.
func (c *Client) WriteFrame(frame []byte) error {
	// Our own copy: the caller may reuse frame, and the ids kept for
	// answering on failure point into it.
	body := bytes.Clone(frame)
	var msgs []*jsonrpc.Message
	m, err := jsonrpc.Decode(body)
	if err != nil {
		return fmt.Errorf("writing to the upstream: %w", err)
	}
	if m.Batch {
		if msgs, err = jsonrpc.DecodeBatch(body); err != nil {
			return fmt.Errorf("writing to the upstream: %w", err)
		}
	} else {
		msgs = []*jsonrpc.Message{m}
	}
	var s sent
	for _, m := range msgs {
		if m.IsRequest() {
			s.ids = append(s.ids, m.ID)
			if m.Method == "initialize" {
				s.isInit = true
			}
		}
	}
	req, err := http.NewRequestWithContext(c.ctx, http.MethodPost, c.url, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("writing to the upstream: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if !m.Batch && m.IsRequest() && m.Method == "tools/call" {
		if key, ok := idempotencyKey(m.Params); ok {
			req.Header.Set(headerIdempotencyKey, key)
		}
	}

	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return ErrClosed
	}
	e := c.eraLocked(m)
	if m.IsNotification() && m.Method == "notifications/cancelled" {
		if c.cancelLocked(m) {
			return nil
		}
		e = transportEra{}
	}
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
			c.calls[string(s.ids[0])] = s.call
		}
	}
	if s.isInit {
		c.handshake = true
		for _, m := range msgs {
			if m.Method == "initialize" {
				c.initID = string(m.ID)
			}
		}
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
	c.wg.Add(1) // under mu, so that Close's Wait cannot have started
	go c.post(req, s)
	return nil
}

// eraLocked decides which rules m follows, and notes the era of a request
// for the notifications after it. A request says for itself (see
// statelessVersion); a notification declares no version, so it follows the
// last request; a response answers a server's request, which only the 2025
// era has; and only a 2025-era peer sends a batch, since 2025-06-18 removed
// them and 2026-07-28 allows one message a POST.
func (c *Client) eraLocked(m *jsonrpc.Message) transportEra {
	switch {
	case m.Batch || m.IsResponse():
		return transportEra{}
	case m.IsNotification():
		return c.era
	}
	var e transportEra
	e.version, e.stateless = statelessVersion(m)
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
	if cl, ok := c.calls[string(member(m.Params, "requestId"))]; ok {
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
		k = http.CanonicalHeaderKey(k)
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

// post sends one POST and relays what comes back.
func (c *Client) post(req *http.Request, s sent) {
	defer c.wg.Done()
	if s.call != nil {
		defer c.forget(s)
	}
	if s.after != nil {
		select {
		case <-s.after:
		case <-c.ctx.Done(): // Do fails at once
		}
	}
	resp, err := c.do(req)
	if s.taken != nil {
		close(s.taken)
	}
	if err != nil {
		c.log.Warn("POST to the upstream failed", "err", err)
		// A failed dial sent nothing; any other failure may have come
		// after the upstream read the request.
		var op *net.OpError
		c.fail(s, s.ids, jsonrpc.NoAnswer{
			NotSent: errors.As(err, &op) && op.Op == "dial",
			Reason:  "upstream unreachable: " + err.Error(),
		})
		return
	}
	defer resp.Body.Close()
	if s.isInit && resp.StatusCode/100 == 2 {
		if sid := resp.Header.Get(headerSessionID); sid != "" {
			c.mu.Lock()
			c.sessionID = sid
			c.mu.Unlock()
		}
	}
	pending := make(map[string]json.RawMessage, len(s.ids))
	for _, id := range s.ids {
		pending[string(id)] = id
	}
	if resp.StatusCode/100 != 2 {
		if s.stateless {
			c.relayErrorBody(resp, pending)
		}
		msg := "upstream answered HTTP " + strconv.Itoa(resp.StatusCode)
		if resp.StatusCode == http.StatusNotFound && s.hasSID {
			// Spec, "Session Management": a 404 to a request with a session
			// id means the session is gone.
			msg = "upstream session expired (HTTP 404)"
			defer c.expiredOnce.Do(func() { close(c.expired) })
		}
		c.log.Warn("upstream refused a POST", "status", resp.StatusCode)
		c.fail(s, unansweredIDs(s.ids, pending), noAnswer(resp, msg))
		return
	}
	if resp.StatusCode == http.StatusAccepted || len(s.ids) == 0 {
		// 202 is the answer to notifications and responses; a body, if
		// any, carries nothing we need.
		if len(s.ids) > 0 {
			// Accepted for processing: it may run, unseen.
			c.fail(s, s.ids, noAnswer(resp, "upstream accepted the request without answering it (HTTP 202)"))
		}
		return
	}
	ct, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	switch ct {
	case "application/json":
		body, err := io.ReadAll(io.LimitReader(resp.Body, int64(c.max)+1))
		switch {
		case err != nil:
			c.log.Warn("reading the upstream's answer", "err", err)
		case len(body) > c.max:
			c.log.Warn("the upstream's answer is too large", "limit", c.max)
		default:
			c.deliver(body, pending)
		}
	case "text/event-stream":
		c.relayStream(resp.Body, pending, !s.stateless)
	default:
		c.log.Warn("the upstream answered with an unexpected Content-Type", "content_type", ct)
	}
	if len(pending) > 0 {
		c.fail(s, unansweredIDs(s.ids, pending), noAnswer(resp, "upstream response ended without an answer"))
	}
}

// relayErrorBody delivers the JSON-RPC error with which a stateless-era
// server explains an HTTP error, when it answers a request in pending. The
// client needs it as it came: an UnsupportedProtocolVersionError lists the
// versions to retry with, and a client probing with server/discover falls
// back to initialize only on an error it does not recognise as modern
// (spec 2026-07-28, basic/transports/streamable-http, "Protocol Version
// Header" and "Backward Compatibility").
func (c *Client) relayErrorBody(resp *http.Response, pending map[string]json.RawMessage) {
	if ct, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); ct != "application/json" {
		return
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, int64(c.max)+1))
	if err != nil || len(body) > c.max {
		return
	}
	m, err := jsonrpc.Decode(bytes.TrimSpace(body))
	if err != nil || !m.IsResponse() || m.Error == nil {
		return
	}
	if _, ok := pending[string(m.ID)]; ok {
		c.deliver(body, pending)
	}
}

// fail answers ids with na, unless the client cancelled the request: it
// expects no answer then, and the server sends none (spec 2026-07-28,
// "Cancellation": the server "MUST NOT send any further messages for it").
func (c *Client) fail(s sent, ids []json.RawMessage, na jsonrpc.NoAnswer) {
	if s.call != nil {
		c.mu.Lock()
		cancelled := s.call.cancelled
		c.mu.Unlock()
		if cancelled {
			c.log.Debug("not answering a cancelled request", "reason", na.Reason)
			return
		}
	}
	c.answer(ids, na)
}

// forget removes a finished stateless request from c.calls.
func (c *Client) forget(s sent) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if id := string(s.ids[0]); c.calls[id] == s.call {
		delete(c.calls, id)
	}
	s.call.cancel()
}

// unansweredIDs returns the ids still in pending, in the order sent.
func unansweredIDs(ids []json.RawMessage, pending map[string]json.RawMessage) []json.RawMessage {
	var out []json.RawMessage
	for _, id := range ids {
		if _, ok := pending[string(id)]; ok {
			out = append(out, id)
		}
	}
	return out
}

// maxResumes bounds the attempts in a row to resume a broken stream that
// bring no new event.
const maxResumes = 5

// relayStream delivers the message events of the SSE body answering a POST
// until every request in pending is answered. A stream that ends first is
// resumed with GET and Last-Event-ID (spec 2025-11-25, "Resumability and
// Redelivery"): losing the connection must not lose the answer. Only a
// resumable stream is: 2026-07-28 has no GET and no resumption (spec
// 2026-07-28, basic/transports/streamable-http, "Receiving Messages").
func (c *Client) relayStream(body io.ReadCloser, pending map[string]json.RawMessage, resumable bool) {
	r := newSSEReader(body, c.max)
	lastID, retry := "", -1
	// failures counts the resumptions in a row that read no event;
	// quiet, those that read events but no message (a server that closes
	// its stream while it works, after a priming event, so that the
	// client polls: SEP-1699). A quiet server is alive, and is not given
	// up on, but it is not asked again at once either.
	for failures, quiet := 0, 0; ; {
		if r != nil {
			events, messages, err := c.relaySSE(r, pending)
			body.Close()
			if err != nil {
				c.log.Debug("the upstream's event stream broke", "err", err)
			}
			switch {
			case messages > 0:
				failures, quiet = 0, 0
			case events > 0:
				failures = 0
				quiet++
			}
			lastID, retry = r.lastID, r.retry
		}
		if len(pending) == 0 || c.ctx.Err() != nil || !resumable {
			return
		}
		if lastID == "" {
			c.log.Warn("the upstream's event stream ended before the answer and has no event id to resume from")
			return
		}
		if failures++; failures > maxResumes {
			c.log.Warn("giving up resuming the upstream's event stream", "attempts", maxResumes)
			return
		}
		if wait := resumeWait(failures, quiet, retry); wait > 0 && !c.sleep(wait) {
			return
		}
		resp, err := c.get(lastID)
		var se *statusError
		switch {
		case errors.As(err, &se) && !transient(se.status):
			c.log.Warn("the upstream refused to resume its event stream", "err", err)
			return
		case err != nil:
			// The server may not have seen the old stream go yet (the
			// go-sdk answers 409 until then), or the network is down.
			c.log.Debug("resuming the upstream's event stream", "err", err, "attempt", failures)
			r = nil
			continue
		}
		body = resp.Body
		r = newSSEReader(body, c.max)
		r.lastID, r.retry = lastID, retry
	}
}

// resumeWait is the pause before a resumption: what the server asked for
// with the SSE retry field (at least minQuietWait after a quiet stream);
// else none after a stream that broke with messages read (failures 1,
// quiet 0), a doubling from 250ms for attempt failures from 2, and after
// quiet streams in a row a doubling from minQuietWait up to maxQuietWait.
func resumeWait(failures, quiet, retryMS int) time.Duration {
	switch {
	case retryMS >= 0 && quiet > 0:
		// A server asking for no pause between polls would have its
		// client spin.
		return max(serverRetry(retryMS), minQuietWait)
	case retryMS >= 0:
		return serverRetry(retryMS)
	case failures > 1:
		return 250 * time.Millisecond << (failures - 2)
	case quiet > 0:
		return min(minQuietWait<<min(quiet-1, 8), maxQuietWait)
	}
	return 0
}

// minQuietWait is the least pause before asking a quiet server again.
const minQuietWait = 250 * time.Millisecond

// maxQuietWait bounds the pause before asking a quiet server again.
const maxQuietWait = 5 * time.Second

// maxServerRetry bounds the reconnection delay a server may ask for with
// the SSE retry field: a huge value would overflow a Duration, or park the
// stream for ever.
const maxServerRetry = time.Minute

func serverRetry(ms int) time.Duration {
	if ms > int(maxServerRetry/time.Millisecond) {
		return maxServerRetry
	}
	return time.Duration(ms) * time.Millisecond
}

// transient reports whether an HTTP status refusing a resumption may go
// away by itself.
func transient(status int) bool {
	return status == http.StatusConflict || status == http.StatusTooManyRequests || status >= 500
}

// sleep waits for d, and reports false if the Client was closed first.
func (c *Client) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-c.done:
		return false
	case <-c.ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// get opens an event stream with GET, resuming after lastID if it is set.
// Any answer but a 2xx event stream is an error.
func (c *Client) get(lastID string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(c.ctx, http.MethodGet, c.url, nil)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.setHeadersLocked(req, false)
	c.mu.Unlock()
	req.Header.Set("Accept", "text/event-stream")
	if lastID != "" {
		req.Header.Set(headerLastEventID, lastID)
	}
	resp, err := c.do(req)
	if err != nil {
		return nil, err
	}
	ct, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if resp.StatusCode/100 != 2 || ct != "text/event-stream" {
		io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
		resp.Body.Close()
		return nil, &statusError{resp.StatusCode, ct}
	}
	return resp, nil
}

// A statusError is an answer to GET other than a 2xx event stream.
type statusError struct {
	status      int
	contentType string
}

func (e *statusError) Error() string {
	return fmt.Sprintf("HTTP %d, Content-Type %q", e.status, e.contentType)
}

// relaySSE delivers the message events of r until it ends, returning how
// many events it read and how many of them were messages. pending may be
// nil. The error is nil at a clean end of stream.
func (c *Client) relaySSE(r *sseReader, pending map[string]json.RawMessage) (events, messages int, err error) {
	for ; ; events++ {
		ev, err := r.next()
		if err == io.EOF {
			return events, messages, nil
		}
		if err != nil {
			return events, messages, err
		}
		if ev.ID != "" {
			c.mu.Lock()
			c.lastEventID = ev.ID
			c.mu.Unlock()
		}
		if len(bytes.TrimSpace(ev.Data)) == 0 {
			// An event id with empty data: the priming event a server
			// sends first, so that the stream can be resumed before its
			// first message (MCP 2025-11-25). Nothing to deliver.
			continue
		}
		if ev.Type != "message" {
			continue
		}
		messages++
		if !c.deliver(ev.Data, pending) {
			return events, messages, nil
		}
	}
}

// deliver hands frame to ReadFrame, noting the answers to pending and the
// initialize result. pending, when not nil, holds the requests of the POST
// whose answer frame came in: an answer in it to any other request (one
// already answered, or another POST's, which would then be taken for that
// request's) is dropped, as is a message that is neither a request nor an
// answer. It reports false once the Client is closed.
func (c *Client) deliver(frame []byte, pending map[string]json.RawMessage) bool {
	frame = bytes.TrimSpace(frame)
	if bytes.ContainsAny(frame, "\r\n") {
		// Frames are newline-free: the stdio side writes one per line.
		var b bytes.Buffer
		if err := json.Compact(&b, frame); err != nil {
			c.log.Warn("dropping a message from the upstream that is not JSON", "err", err)
			return true
		}
		frame = b.Bytes()
	}
	m, err := jsonrpc.Decode(frame)
	if err != nil {
		c.log.Warn("dropping a message from the upstream that is not JSON-RPC", "err", err)
		return true
	}
	msgs := []*jsonrpc.Message{m}
	if m.Batch {
		msgs, _ = jsonrpc.DecodeBatch(frame)
	}
	kept := msgs[:0:0]
	for _, m := range msgs {
		switch {
		case m.Method == "" && m.ID == nil:
			c.log.Warn("dropping a message from the upstream that is neither a request nor an answer", "size", len(m.Raw))
			continue
		case m.IsResponse() && pending != nil:
			if _, ok := pending[string(m.ID)]; !ok {
				c.log.Warn("dropping an answer from the upstream to no request of the POST it came on", "id", string(m.ID))
				continue
			}
		}
		if m.IsResponse() {
			delete(pending, string(m.ID))
			c.noteResponse(m)
		}
		kept = append(kept, m)
	}
	switch {
	case len(kept) == 0:
		return true
	case len(kept) < len(msgs):
		raws := make([][]byte, len(kept))
		for i, m := range kept {
			raws[i] = m.Raw
		}
		if m.Batch {
			frame = append(append([]byte("["), bytes.Join(raws, []byte(","))...), ']')
		} else {
			frame = raws[0]
		}
	}
	select {
	case <-c.done:
		return false // closed: nothing more is delivered
	default:
	}
	select {
	case c.frames <- inbound{frame: frame}:
		return true
	case <-c.done:
		return false
	}
}

// noteResponse learns the x-mcp-header bindings from a stateless tools/list
// result, and takes the protocol version from the initialize result and
// then opens the GET stream.
func (c *Client) noteResponse(m *jsonrpc.Message) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cl, ok := c.calls[string(m.ID)]; ok && cl.method == "tools/list" && m.Result != nil {
		learnTools(c.tools, m.Result)
		return
	}
	if c.initID == "" || string(m.ID) != c.initID || m.Result == nil {
		return
	}
	c.initID = ""
	var r struct {
		ProtocolVersion string `json:"protocolVersion"`
	}
	if err := json.Unmarshal(m.Result, &r); err == nil && r.ProtocolVersion != "" {
		c.version = r.ProtocolVersion
	}
	// Protocol 2026-07-28 (SEP-2575) drops the GET stream.
	if c.listening || c.closed || c.version >= "2026-07-28" {
		return
	}
	c.listening = true
	c.wg.Add(1)
	go c.listen()
}

// listen keeps the GET stream open for server-to-client messages until
// Close, reconnecting, with Last-Event-ID once it has one, when the server
// ends it.
func (c *Client) listen() {
	defer c.wg.Done()
	lastID := ""
	for {
		resp, err := c.get(lastID)
		var se *statusError
		switch {
		case errors.As(err, &se) && se.status == http.StatusMethodNotAllowed:
			// Spec: the server offers no stream at this endpoint.
			c.log.Debug("the upstream offers no GET stream")
			return
		case err != nil:
			if c.ctx.Err() == nil {
				c.log.Warn("opening the upstream's GET stream", "err", err)
			}
			return
		}
		r := newSSEReader(resp.Body, c.max)
		r.lastID = lastID
		if _, _, err := c.relaySSE(r, nil); err != nil && c.ctx.Err() == nil {
			c.log.Debug("the upstream's GET stream broke", "err", err)
		}
		resp.Body.Close()
		lastID = r.lastID
		wait := time.Second
		if r.retry >= 0 {
			wait = serverRetry(r.retry)
		}
		if !c.sleep(wait) {
			return
		}
	}
}

// answer hands ReadFrame, for each id, the Client's own account na of a
// request that got no answer.
func (c *Client) answer(ids []json.RawMessage, na jsonrpc.NoAnswer) {
	for _, id := range ids {
		e := na
		e.ID = id
		select {
		case <-c.done:
			return // closed: nothing more is delivered
		default:
		}
		select {
		case c.frames <- inbound{noAnswer: &e}:
		case <-c.done:
			return // closed: nothing more is delivered
		}
	}
}

// Close ends the session: it aborts the requests and the GET stream still
// open, sends DELETE for the session if the server assigned one, and makes
// ReadFrame return io.EOF once the frames already received are read.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	sid := c.sessionID
	c.mu.Unlock()
	// done first: a request that fails because cancel aborted it then
	// finds the Client closed, and answers no one.
	close(c.done)
	c.cancel()
	c.wg.Wait()
	if sid == "" {
		return nil
	}
	// Spec, "Session Management": a client that no longer needs a session
	// SHOULD send DELETE with its id. The request outlives c.ctx.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(c.ctx), deleteTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodDelete, c.url, nil)
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.setHeadersLocked(req, false)
	c.mu.Unlock()
	resp, err := c.do(req)
	if err != nil {
		return fmt.Errorf("ending the upstream session: %w", err)
	}
	io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
	resp.Body.Close()
	// 405: the server does not let clients end sessions, which is allowed.
	if resp.StatusCode/100 != 2 && resp.StatusCode != http.StatusMethodNotAllowed && resp.StatusCode != http.StatusNotFound {
		return fmt.Errorf("ending the upstream session: HTTP %d", resp.StatusCode)
	}
	return nil
}

// noAnswer is the account of a request that an HTTP answer resp, which
// carried no JSON-RPC answer to it, leaves unanswered: its status and
// Retry-After, for the retry classifier.
func noAnswer(resp *http.Response, reason string) jsonrpc.NoAnswer {
	return jsonrpc.NoAnswer{Status: resp.StatusCode, RetryAfter: resp.Header.Get("Retry-After"), Reason: reason}
}

// idempotencyKey returns the Idempotency-Key header value for a tools/call
// whose params._meta holds an execution id: an RFC 8941 sf-string. An id
// that a sf-string cannot hold (not printable ASCII) gives none.
func idempotencyKey(params json.RawMessage) (string, bool) {
	id, ok := jsonrpc.StringValue(member(member(params, "_meta"), executionIDKey))
	if !ok || id == "" {
		return "", false
	}
	return sfString(id)
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
