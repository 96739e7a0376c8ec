// Package proxy pumps one MCP session between a client and an upstream
// server. tools/call requests go to the interceptor; everything else passes
// through byte for byte, in both directions.
package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/intercept"
	"github.com/mcp-idempotent/mcp-idempotent/internal/jsonrpc"
	"github.com/mcp-idempotent/mcp-idempotent/internal/policy"
	"github.com/mcp-idempotent/mcp-idempotent/internal/retry"
)

// A Conn carries JSON-RPC frames. ReadFrame is called from one goroutine;
// WriteFrame may be called from many. Close must unblock the peer's reads of
// what we write (it closes our write side).
type Conn interface {
	ReadFrame() ([]byte, error)
	WriteFrame(frame []byte) error
	Close() error
}

// ErrUpstreamClosed is returned by Run when the upstream closed its side
// while the client was still there.
var ErrUpstreamClosed = errors.New("upstream closed the connection")

// Options configures a Session.
type Options struct {
	Interceptor *intercept.Interceptor // required
	// Actor and Scope are the session's part of every fingerprint.
	Actor string
	Scope string
	// UpstreamID names the upstream in fingerprints and records.
	UpstreamID string
	// Resolve gives each tool its policy; nil means the defaults from its
	// annotations.
	Resolve Resolver
	// Logger; nil discards.
	Logger *slog.Logger
	// ShutdownGrace bounds how long Run waits, once the client has gone,
	// for calls under way to settle. Zero means 10 seconds.
	ShutdownGrace time.Duration
}

// A Session relays one client connection to one upstream connection.
type Session struct {
	client   Conn
	upstream Conn
	opts     Options
	log      *slog.Logger
	tools    *toolTable

	nextID atomic.Int64
	// inflight counts the client's tools/call requests not yet answered
	// or detached.
	inflight sync.WaitGroup

	mu sync.Mutex // protects the maps below
	// pending holds the proxy's own requests upstream, by id, with what to
	// do with the answer.
	pending map[string]func(*jsonrpc.Message, error)
	// forwarded holds the client's requests passed upstream and not yet
	// answered, by id, with their method.
	forwarded map[string]string
	// calls holds the client's tools/call requests being handled, by id.
	calls map[string]*clientCall
	// gone is closed when the upstream has closed its side.
	gone chan struct{}
}

// clientCall is one tools/call of the client's while it is handled.
type clientCall struct {
	s      *Session
	key    string
	id     json.RawMessage
	ctx    context.Context
	cancel context.CancelFunc // detaches the caller; never stops an execution
	once   sync.Once          // guards finish

	mu          sync.Mutex // held while the request is forwarded
	passThrough bool       // the request went upstream as it came
}

// finish forgets the call: it was answered, passed through or detached.
func (c *clientCall) finish() {
	c.once.Do(func() {
		c.s.mu.Lock()
		if c.s.calls[c.key] == c {
			delete(c.s.calls, c.key)
		}
		c.s.mu.Unlock()
		c.cancel()
		c.s.inflight.Done()
	})
}

// Reply implements intercept.Replier.
func (c *clientCall) Reply(a intercept.Answer) error {
	defer c.finish()
	if a.Error != nil {
		return c.s.client.WriteFrame(jsonrpc.NewRawErrorResponse(c.id, a.Error))
	}
	return c.s.client.WriteFrame(jsonrpc.NewResponse(c.id, a.Result))
}

// New returns a Session between client and upstream.
func New(client, upstream Conn, opts Options) *Session {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if opts.ShutdownGrace == 0 {
		opts.ShutdownGrace = 10 * time.Second
	}
	return &Session{
		client:    client,
		upstream:  upstream,
		opts:      opts,
		log:       log,
		tools:     newToolTable(opts.Resolve),
		pending:   make(map[string]func(*jsonrpc.Message, error)),
		forwarded: make(map[string]string),
		calls:     make(map[string]*clientCall),
		gone:      make(chan struct{}),
	}
}

// idPrefix starts every id the proxy puts on its own requests upstream. A
// client request whose id starts with it is refused, so the proxy's ids and
// the client's can never collide.
const idPrefix = `"mcp-idempotent:`

// Run pumps frames until the client goes (it returns nil), the upstream
// goes (ErrUpstreamClosed), or ctx is done (nil). Once the client has gone,
// Run waits up to ShutdownGrace for calls under way to settle, closes the
// upstream connection, and relays what the upstream still writes until it
// closes its side (for up to two seconds). When the upstream goes first,
// every caller still waiting is answered before Run returns.
func (s *Session) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	upstreamDone := make(chan error, 1)
	go func() { upstreamDone <- s.pumpUpstream(ctx) }()
	clientDone := make(chan error, 1)
	go func() { clientDone <- s.pumpClient(ctx) }()

	select {
	case err := <-upstreamDone:
		s.upstreamGone()
		s.inflight.Wait() // every caller is answered at once: the upstream is gone
		if err != nil {
			return fmt.Errorf("%w: %v", ErrUpstreamClosed, err)
		}
		return ErrUpstreamClosed
	case err := <-clientDone:
		if err != nil {
			s.log.Error("reading from the client", "err", err)
		}
	case <-ctx.Done():
	}
	// The client has gone: let calls under way finish within the grace,
	// then pass the end of input on to the upstream, and keep relaying
	// what it still writes until it closes too.
	deadline := time.NewTimer(s.opts.ShutdownGrace)
	defer deadline.Stop()
	settled := make(chan struct{})
	go func() {
		s.inflight.Wait()
		close(settled)
	}()
	select {
	case <-settled:
	case <-deadline.C:
		s.log.Warn("calls still under way at shutdown", "grace", s.opts.ShutdownGrace)
	case <-upstreamDone:
		s.upstreamGone()
		return nil
	}
	s.upstream.Close()
	select {
	case <-upstreamDone:
		s.upstreamGone()
	case <-time.After(drainWait):
		s.log.Debug("the upstream is still open after the end of input", "waited", drainWait)
	}
	return nil
}

// drainWait bounds how long Run relays the upstream's output after passing
// on the end of input; a server that does not exit by then is stopped by
// the caller of Run.
const drainWait = 2 * time.Second

// pumpClient reads the client's frames until it closes.
func (s *Session) pumpClient(ctx context.Context) error {
	for {
		frame, err := s.client.ReadFrame()
		if err != nil {
			if isFrameTooLarge(err) {
				s.writeClient(jsonrpc.NewErrorResponse(nil, jsonrpc.Errorf(jsonrpc.CodeInvalidRequest, "mcp-idempotent: %v", err)))
				continue
			}
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		s.fromClient(ctx, frame)
	}
}

// isFrameTooLarge reports whether err is a transport's size-limit error,
// after which the stream is still usable.
func isFrameTooLarge(err error) bool {
	var limited interface{ FrameTooLarge() bool }
	return errors.As(err, &limited) && limited.FrameTooLarge()
}

func (s *Session) fromClient(ctx context.Context, frame []byte) {
	msg, err := jsonrpc.Decode(frame)
	if err != nil {
		s.log.Warn("unparseable message from the client", "err", err, "size", len(frame))
		s.writeClient(jsonrpc.NewErrorResponse(nil, jsonrpc.Errorf(jsonrpc.CodeParseError, "mcp-idempotent: %v", err)))
		return
	}
	switch {
	case msg.Batch:
		s.fromClientBatch(frame)
	case msg.IsRequest() && bytes.HasPrefix(msg.ID, []byte(idPrefix)):
		s.writeClient(jsonrpc.NewErrorResponse(msg.ID, jsonrpc.Errorf(jsonrpc.CodeInvalidRequest,
			"mcp-idempotent: request ids starting with %s are reserved for the proxy", idPrefix[1:])))
	case msg.IsRequest() && msg.Method == "tools/call":
		s.startToolCall(ctx, msg)
	case msg.IsRequest():
		s.mu.Lock()
		s.forwarded[string(msg.ID)] = msg.Method
		s.mu.Unlock()
		s.writeUpstream(msg.Raw)
	case msg.Method == "notifications/cancelled":
		s.cancelled(msg)
	default:
		// Notifications and the client's responses to server requests.
		s.writeUpstream(msg.Raw)
	}
}

// fromClientBatch passes a batch through unless it holds a tools/call:
// splitting a batch would change what the client asked for, and passing
// the call through would skip deduplication, so such a batch is refused.
func (s *Session) fromClientBatch(frame []byte) {
	msgs, err := jsonrpc.DecodeBatch(frame)
	if err != nil {
		s.writeClient(jsonrpc.NewErrorResponse(nil, jsonrpc.Errorf(jsonrpc.CodeParseError, "mcp-idempotent: %v", err)))
		return
	}
	for _, m := range msgs {
		if m.Method == "tools/call" {
			var errs [][]byte
			for _, m := range msgs {
				if m.IsRequest() {
					errs = append(errs, jsonrpc.NewErrorResponse(m.ID, jsonrpc.Errorf(jsonrpc.CodeInvalidRequest,
						"mcp-idempotent: tools/call cannot be sent in a batch; send each request on its own")))
				}
			}
			if len(errs) > 0 {
				s.writeClient(append(append([]byte("["), bytes.Join(errs, []byte(","))...), ']'))
			}
			return
		}
	}
	s.mu.Lock()
	for _, m := range msgs {
		if m.IsRequest() {
			s.forwarded[string(m.ID)] = m.Method
		}
	}
	s.mu.Unlock()
	s.writeUpstream(frame)
}

// startToolCall validates a tools/call and starts it. When the tool's
// policy is known, which is the common case, everything up to the dispatch
// happens here on the reading goroutine; only a tool the proxy must first
// list sends the call to a goroutine of its own.
func (s *Session) startToolCall(ctx context.Context, msg *jsonrpc.Message) {
	call, perr := intercept.ParseToolCall(msg.Params)
	if perr != nil {
		s.writeClient(jsonrpc.NewErrorResponse(msg.ID, perr))
		return
	}
	cctx, cancel := context.WithCancel(ctx)
	c := &clientCall{s: s, key: string(msg.ID), id: msg.ID, ctx: cctx, cancel: cancel}
	s.inflight.Add(1)
	s.mu.Lock()
	s.calls[c.key] = c
	s.mu.Unlock()

	if info, ok := s.tools.cached(call.Name); ok {
		s.handleToolCall(c, msg, call, info)
		return
	}
	go func() {
		info := s.tools.lookup(cctx, call.Name, func(ctx context.Context, cursor string) (policy.ListPage, error) {
			return s.listTools(ctx, cursor, call.Meta)
		})
		if cctx.Err() != nil {
			c.finish() // cancelled before anything was decided: nothing ran
			return
		}
		s.handleToolCall(c, msg, call, info)
	}()
}

func (s *Session) handleToolCall(c *clientCall, msg *jsonrpc.Message, call *intercept.ToolCall, info toolInfo) {
	pol := info.policy
	if pol.Class == policy.ReadOnly || pol.Scope == policy.ScopeKey && call.Key == "" {
		// Read-only tools, and calls without a client key to a tool whose
		// calls are matched by key only, pass through unrecorded.
		if s.log.Enabled(c.ctx, slog.LevelDebug) {
			s.log.Debug("passes through", "tool", call.Name, "class", pol.Class, "scope", pol.Scope, "request", string(msg.ID))
		}
		c.mu.Lock()
		c.passThrough = true
		s.mu.Lock()
		s.forwarded[c.key] = msg.Method
		s.mu.Unlock()
		s.writeUpstream(msg.Raw)
		c.mu.Unlock()
		c.finish()
		return
	}
	s.opts.Interceptor.Handle(c.ctx, &intercept.Request{
		Call:           call,
		Policy:         pol,
		SchemaDefaults: info.defaults,
		Actor:          s.opts.Actor,
		Scope:          s.opts.Scope,
		UpstreamID:     s.opts.UpstreamID,
		Upstream:       s,
		Reply:          c,
		Correlation:    c.key,
	})
}

// cancelled handles notifications/cancelled from the client. For a
// tools/call the interceptor handles, it detaches the caller and goes no
// further: the execution belongs to the record now, and other callers may
// be attached to it. Any other cancellation passes through.
func (s *Session) cancelled(msg *jsonrpc.Message) {
	var p struct {
		RequestID json.RawMessage `json:"requestId"`
	}
	if json.Unmarshal(msg.Params, &p) == nil && p.RequestID != nil {
		s.mu.Lock()
		c, ok := s.calls[string(p.RequestID)]
		s.mu.Unlock()
		if ok {
			c.mu.Lock()
			defer c.mu.Unlock()
			if !c.passThrough {
				s.log.Info("client cancelled a tools/call; detaching it", "request", string(p.RequestID))
				c.finish()
				return
			}
		}
	}
	s.writeUpstream(msg.Raw)
}

// pumpUpstream reads the upstream's frames until it closes.
func (s *Session) pumpUpstream(ctx context.Context) error {
	for {
		frame, err := s.upstream.ReadFrame()
		if err != nil {
			if isFrameTooLarge(err) {
				s.log.Error("dropped a message from the upstream", "err", err)
				continue
			}
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		s.fromUpstream(frame)
	}
}

func (s *Session) fromUpstream(frame []byte) {
	msg, err := jsonrpc.Decode(frame)
	if err != nil {
		// Not ours to judge: the client sees what the server sent.
		s.log.Warn("unparseable message from the upstream, passed on", "err", err, "size", len(frame))
		s.writeClient(frame)
		return
	}
	if msg.IsResponse() {
		key := string(msg.ID)
		s.mu.Lock()
		if done, ok := s.pending[key]; ok {
			delete(s.pending, key)
			s.mu.Unlock()
			done(msg, nil)
			return
		}
		method := s.forwarded[key]
		delete(s.forwarded, key)
		s.mu.Unlock()
		if method == "tools/list" && msg.Result != nil {
			if page, err := policy.ParseListResult(msg.Result); err == nil {
				s.tools.learn(page)
			}
		}
	} else if msg.Method == "notifications/tools/list_changed" {
		s.tools.invalidate()
	}
	s.writeClient(frame)
}

// upstreamGone answers everyone still waiting on the upstream.
func (s *Session) upstreamGone() {
	s.mu.Lock()
	select {
	case <-s.gone:
		s.mu.Unlock()
		return
	default:
	}
	close(s.gone)
	forwarded := s.forwarded
	s.forwarded = make(map[string]string)
	pending := s.pending
	s.pending = make(map[string]func(*jsonrpc.Message, error))
	s.mu.Unlock()
	for _, done := range pending {
		done(nil, errUpstreamExited)
	}
	for id, method := range forwarded {
		s.writeClient(jsonrpc.NewErrorResponse(json.RawMessage(id), jsonrpc.Errorf(jsonrpc.CodeInternalError,
			"mcp-idempotent: the upstream closed before answering %s", method)))
	}
}

// errUpstreamExited is the outcome of a request that was sent but never
// answered because the upstream went away: not NotSent, since the upstream
// may have acted on it.
var errUpstreamExited = errors.New("the upstream exited before answering")

// Send implements intercept.Upstream: it sends one of the proxy's own
// requests upstream, under an id of the proxy's, and calls done with the
// outcome from the goroutine that reads the upstream.
func (s *Session) Send(method string, params json.RawMessage, done func(json.RawMessage, error)) {
	id := json.RawMessage(idPrefix + strconv.FormatInt(s.nextID.Add(1), 10) + `"`)
	key := string(id)
	s.mu.Lock()
	select {
	case <-s.gone:
		s.mu.Unlock()
		done(nil, retry.NotSent(errors.New("the upstream has closed")))
		return
	default:
	}
	s.pending[key] = func(msg *jsonrpc.Message, err error) {
		switch {
		case err != nil:
			done(nil, err)
		case msg.Error != nil:
			done(nil, jsonrpc.DecodeError(msg.Error))
		case msg.Result == nil:
			done(nil, fmt.Errorf("the upstream answered %s with neither result nor error", method))
		default:
			done(msg.Result, nil)
		}
	}
	s.mu.Unlock()

	if err := s.upstream.WriteFrame(jsonrpc.NewRequest(id, method, params)); err != nil {
		s.mu.Lock()
		_, still := s.pending[key]
		delete(s.pending, key)
		s.mu.Unlock()
		if still {
			// A request the upstream could not take whole was never received.
			done(nil, retry.NotSent(fmt.Errorf("writing to the upstream: %w", err)))
		}
	}
}

// call is Send for a caller that waits.
func (s *Session) call(ctx context.Context, method string, params json.RawMessage) (json.RawMessage, error) {
	type outcome struct {
		result json.RawMessage
		err    error
	}
	ch := make(chan outcome, 1)
	s.Send(method, params, func(result json.RawMessage, err error) { ch <- outcome{result, err} })
	select {
	case o := <-ch:
		return o.result, o.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// listTools asks the upstream for one page of its tools, in the protocol
// the client speaks (meta is the client request's _meta).
func (s *Session) listTools(ctx context.Context, cursor string, meta json.RawMessage) (policy.ListPage, error) {
	params := map[string]any{}
	if cursor != "" {
		params["cursor"] = cursor
	}
	if pm := protocolMeta(meta); pm != nil {
		params["_meta"] = pm
	}
	var raw json.RawMessage
	if len(params) > 0 {
		raw, _ = json.Marshal(params)
	}
	result, err := s.call(ctx, "tools/list", raw)
	if err != nil {
		s.log.Warn("listing the upstream's tools; treating unlisted tools as side effects", "err", err)
		return policy.ListPage{}, err
	}
	return policy.ParseListResult(result)
}

func (s *Session) writeClient(frame []byte) {
	if err := s.client.WriteFrame(frame); err != nil {
		s.log.Debug("writing to the client", "err", err)
	}
}

func (s *Session) writeUpstream(frame []byte) {
	if err := s.upstream.WriteFrame(frame); err != nil {
		s.log.Debug("writing to the upstream", "err", err)
	}
}
