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
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
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
	// headerTraceparent and headerTracestate carry W3C trace context
	// (https://www.w3.org/TR/trace-context/); MCP carries the same
	// fields in params._meta.
	headerTraceparent = "traceparent"
	headerTracestate  = "tracestate"
)

// DefaultMaxMessage is the largest message, a JSON body or an SSE
// event's data, accepted when Options.MaxMessage is zero.
const DefaultMaxMessage = 16 << 20

// deleteTimeout bounds the DELETE that Close sends.
const deleteTimeout = 5 * time.Second

// ErrClosed is returned by WriteFrame after Close.
var ErrClosed = errors.New("streamhttp: client closed")

// ErrSessionExpired is returned by ReadFrame, after the frames already
// received, once the server has answered 404 to a request carrying the
// session id (or 400 to it and to a ping in the session) and the POSTs
// under way are done: the session is gone, and a new Client must
// initialise anew. WriteFrame returns it from that answer on.
var ErrSessionExpired = errors.New("streamhttp: the upstream session expired")

// Options configures a Client. The zero value is usable.
type Options struct {
	// Header holds extra headers sent on every request, such as
	// Authorization. Their values are never logged.
	Header http.Header
	// HTTPClient sends the requests; nil means a zero http.Client. It should
	// have no overall Timeout: responses to long tool calls and the GET
	// stream stay open for as long as the server needs. Its CheckRedirect
	// is not used: redirects are followed within the origin only. A POST
	// that an *http.Transport fails before it reports a connection to
	// httptrace (GotConn) is taken for not sent: a protocol it registers
	// (RegisterProtocol) must report one too. Another transport's is
	// only on a failed dial before any connection was reported.
	HTTPClient *http.Client
	// Logger receives transport events; nil discards them.
	Logger *slog.Logger
	// MaxMessage bounds one message, a JSON body or an SSE event's data,
	// in bytes; zero means DefaultMaxMessage.
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
	// tracesConns says that hc's transport is net/http's, which reports
	// to an httptrace.ClientTrace the connection each request gets.
	tracesConns bool

	ctx    context.Context // parent of every request; cancelled by Close
	cancel context.CancelFunc
	frames chan inbound  // what ReadFrame returns, in order
	done   chan struct{} // closed by Close
	// expired is closed, once, when the server says the session is gone.
	expired     chan struct{}
	expiredOnce sync.Once
	wg          sync.WaitGroup

	mu        sync.Mutex // guards closed through initialized below, and each statelessCall.cancelled
	closed    bool
	sessionID string // from the initialize response's Mcp-Session-Id
	version   string // the protocolVersion the server chose
	initID    string // IDKey of the initialize request's id, once written
	// initHeaders is closed once the headers of the answer to the last
	// initialize written are read (sent.headers); nil before one.
	initHeaders chan struct{}
	handshake   bool   // an initialize request has been written
	listening   bool   // the GET stream has been started
	getServed   bool   // a GET was answered with a stream: a 404 to a later one means the session is gone
	posts       int    // POSTs under way
	gone        bool   // the server forgot the session (a 404): nothing more is POSTed
	lastEventID string // the id of the last SSE event received, any stream
	// era is that of the last request written, which notifications follow:
	// they declare no version of their own.
	era transportEra
	// calls holds the stateless requests in flight by IDKey, so that a
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
	hc := http.Client{}
	if opts.HTTPClient != nil {
		hc = *opts.HTTPClient // a copy shares its Transport, so its connections
	}
	hc.CheckRedirect = sameOriginRedirect
	c.hc = &hc
	rt := hc.Transport
	if rt == nil {
		rt = http.DefaultTransport // which a program may have replaced
	}
	_, c.tracesConns = rt.(*http.Transport)
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	if c.max <= 0 {
		c.max = DefaultMaxMessage
	}
	c.ctx, c.cancel = context.WithCancel(ctx)
	return c, nil
}

// maxRedirects is how many redirects a request follows, as net/http's
// default does.
const maxRedirects = 10

// sameOriginRedirect follows a redirect only to the same scheme, host and
// port, and only one that keeps the method. The headers given for the
// upstream may carry a credential, and net/http passes all but a few of
// them on to any host. A tools/call sent elsewhere would run on a server
// the fingerprint does not name. And a POST turned into a GET (301, 302,
// 303) loses its message, for an answer that says nothing of a redirect.
// The redirect not followed is answered as an HTTP error.
func sameOriginRedirect(req *http.Request, via []*http.Request) error {
	first := via[0]
	switch {
	case req.URL.Scheme != first.URL.Scheme || req.URL.Host != first.URL.Host || req.Method != first.Method:
		return http.ErrUseLastResponse
	case len(via) >= maxRedirects:
		return fmt.Errorf("stopped after %d redirects", maxRedirects)
	}
	return nil
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
	tooLarge *MessageTooLargeError
}

func (in inbound) read() ([]byte, error) {
	switch {
	case in.noAnswer != nil:
		return nil, in.noAnswer
	case in.tooLarge != nil:
		return nil, in.tooLarge
	}
	return in.frame, nil
}

// A MessageTooLargeError is what ReadFrame returns, in its place, for a
// message from the server over the size limit that it dropped, other than
// the answer to a request of a POST under way (that request is answered
// with a *jsonrpc.NoAnswer): a request of the server's, which the caller
// is to answer, a notification, or a message whose head does not tell.
// Where the rest of the message gave ids its head did not, a second one
// follows, its Head standing for them (jsonrpc.LateHead). Reading goes on
// after it.
type MessageTooLargeError struct {
	Limit int
	// Head is the message's first bytes (at most 1024), from which the
	// caller can tell what it was, and its id (jsonrpc.HeadMessage).
	Head []byte
}

// FrameTooLarge marks the error as one after which reading goes on.
func (e *MessageTooLargeError) FrameTooLarge() bool { return true }

// FrameHead returns the dropped message's first bytes.
func (e *MessageTooLargeError) FrameHead() []byte { return e.Head }

func (e *MessageTooLargeError) Error() string { return tooLarge(e.Limit) }

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
