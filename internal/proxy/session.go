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
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/intercept"
	"github.com/mcp-idempotent/mcp-idempotent/internal/jsonrpc"
	"github.com/mcp-idempotent/mcp-idempotent/internal/policy"
	"github.com/mcp-idempotent/mcp-idempotent/internal/retry"
)

// A Conn carries JSON-RPC frames. ReadFrame is called from one goroutine,
// and the frame it returns is the caller's to keep; WriteFrame may be
// called from many. Close must unblock the peer's reads of what we write
// (it closes our write side).
type Conn interface {
	ReadFrame() ([]byte, error)
	WriteFrame(frame []byte) error
	Close() error
}

// A frameBuilder is a Conn that builds the frames the proxy makes in a
// buffer of its own (stdio.Conn does), which saves making each frame
// first and copying it there.
type frameBuilder interface {
	WriteResponse(id, result json.RawMessage) error
	WriteRequest(id string, method string, params json.RawMessage) error
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
	// Restart starts the upstream again after it has closed; nil means a
	// closed upstream ends the session. Run replays the client's handshake
	// on the new connection and carries on.
	Restart func(ctx context.Context) (Conn, error)
	// MaxRestarts and RestartWindow stop a crash loop: the upstream is not
	// started again once it has closed MaxRestarts times within
	// RestartWindow. Zero means 5 in a minute.
	MaxRestarts   int
	RestartWindow time.Duration
	// ShutdownGrace bounds how long Run waits, once the client has gone,
	// for calls under way to settle. Zero means 10 seconds.
	ShutdownGrace time.Duration
	// Instance sets the ids of the proxy's own requests upstream apart
	// from another proxy's: they are "mcp-idempotent:INSTANCE:N", so one
	// mcp-idempotent may stand in front of another. Letters and digits
	// only; empty means "mcp-idempotent:N".
	Instance string
}

// A Session relays one client connection to one upstream connection.
type Session struct {
	client Conn
	// The client's Conn as a frameBuilder and an answerWriter, or nil:
	// asked once, not on every answer.
	clientFrames  frameBuilder
	clientAnswers answerWriter
	opts          Options
	log           *slog.Logger
	debug         bool // log takes debug records; read once
	tools         *toolTable

	// idPrefix starts the JSON text of the ids of the proxy's own
	// requests: ownIDs, and the Instance.
	idPrefix string
	nextID   atomic.Int64
	// inflight counts the client's tools/call requests not yet answered
	// or detached.
	inflight sync.WaitGroup

	mu sync.Mutex // protects the maps below
	// pending holds the proxy's own requests upstream, by id.
	pending map[string]sent
	// givenUp holds the ids of the proxy's own requests it cancelled
	// (cancelSent), whose answer may still come and is then dropped
	// quietly; at most maxGivenUp, since most never get one.
	givenUp map[string]struct{}
	// sending counts the proxy's own requests not yet answered and acted
	// on; idle, when not nil, is closed once it is zero: shutdown waits on
	// it for executions sent whose callers have all left.
	sending int
	idle    chan struct{}
	// forwarded holds the client's requests passed upstream and not yet
	// answered, by jsonrpc.IDKey of their id; forwardIdle, when not nil,
	// is closed once it is empty: shutdown waits on it.
	forwarded   map[string]forwardedRequest
	forwardIdle chan struct{}
	// calls holds the client's tools/call requests being handled, by id.
	calls map[string]*clientCall
	// up is the upstream connection in use; it changes when the upstream
	// is restarted. While up.ready is open, the connection is being set up
	// (the handshake replayed) and only the proxy's own requests use it.
	up *link
	// handshake is the client's initialize params (2025 protocol era), to
	// replay on a restarted upstream; nil if the client sent none.
	handshake   json.RawMessage
	initialized bool // the client sent notifications/initialized
}

// A forwardedRequest is a client's request passed upstream: its id as the
// client spelled it, to answer it under if the upstream never does, and
// its method.
type forwardedRequest struct {
	id     json.RawMessage
	method string
}

// sent is one of the proxy's own requests upstream, waiting for its
// answer.
type sent struct {
	method string
	done   func(json.RawMessage, error)
	// stop stops the cancellation of the request when its sender's
	// context ends (see Send); nil if there is none.
	stop func() bool
}

// A link is one connection to the upstream.
type link struct {
	conn   Conn
	frames frameBuilder  // conn as a frameBuilder, or nil
	ready  chan struct{} // closed once the client's traffic may use it
	gone   chan struct{} // closed when the upstream has closed it
}

func newLink(conn Conn) *link {
	l := &link{ready: make(chan struct{}), gone: make(chan struct{})}
	l.setConn(conn)
	return l
}

// setConn makes conn the link's connection.
func (l *link) setConn(conn Conn) {
	l.conn = conn
	l.frames, _ = conn.(frameBuilder)
}

func closed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// clientCall is one tools/call of the client's while it is handled.
type clientCall struct {
	s    *Session
	key  string
	id   json.RawMessage
	ctx  callContext // ended when the caller is answered or detaches; never stops an execution
	once sync.Once   // guards finish

	// raw, call and req are the request as it came, the call as parsed
	// and as handed to the interceptor, kept here so that a call is one
	// allocation.
	raw  []byte
	call intercept.ToolCall
	req  intercept.Request

	mu          sync.Mutex // held while the request is forwarded
	passThrough bool       // the request went upstream as it came
}

// finish forgets the call: it was answered, passed through or detached.
func (c *clientCall) finish() {
	c.once.Do(func() {
		c.release()
		c.ctx.end()
		c.s.inflight.Done()
	})
}

// release frees the call's id, before its answer is written: a client that
// has its answer may send another request under the same id at once.
func (c *clientCall) release() {
	c.s.mu.Lock()
	if c.s.calls[c.key] == c {
		delete(c.s.calls, c.key)
	}
	c.s.mu.Unlock()
}

// callContext is the context of one client call: the session's, ended
// early when the call is answered or its caller detaches. It is part of the
// clientCall, so a call allocates no context of its own and touches
// nothing of the session's context; a Done channel is made only when one
// is asked for (a caller that waits for another's execution). Its first
// error stays its error. context.Cause is not tracked: it reports the
// session's cause.
type callContext struct {
	context.Context // the session's
	err             atomic.Pointer[error]

	mu         sync.Mutex    // protects the fields below, and the setting of err
	done       chan struct{} // made by Done
	doneClosed bool
	stop       func() bool // stops ending the call when the session's context ends
	afters     *afterFuncs // made by the first AfterFunc: most calls have none
}

// afterFuncs are the functions registered with a callContext's AfterFunc,
// by registration.
type afterFuncs struct {
	funcs map[int]func()
	next  int
}

// AfterFunc arranges for f to run in its own goroutine once the call's
// context ends, as context.AfterFunc does; stop unregisters f and reports
// whether that kept it from running. A context derived from the call's
// (the deadline of a caller waiting for another's execution) registers
// here rather than starting a goroutine to watch Done.
func (c *callContext) AfterFunc(f func()) (stop func() bool) {
	c.Done() // the session's end must end the call, and so run f
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.doneClosed {
		go f()
		return func() bool { return false }
	}
	if c.afters == nil {
		c.afters = &afterFuncs{funcs: make(map[int]func())}
	}
	a := c.afters
	id := a.next
	a.next++
	a.funcs[id] = f
	return func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		_, ok := a.funcs[id]
		delete(a.funcs, id)
		return ok
	}
}

func (c *callContext) Err() error {
	if p := c.err.Load(); p != nil {
		return *p
	}
	if err := c.Context.Err(); err != nil {
		// The session's context ended first: so did the call's.
		c.mu.Lock()
		defer c.mu.Unlock()
		c.endLocked(sessionEnded(err))
		return *c.err.Load()
	}
	return nil
}

func (c *callContext) Done() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done == nil {
		c.done = make(chan struct{})
		if c.err.Load() != nil {
			c.endLocked(nil)
		} else {
			c.stop = context.AfterFunc(c.Context, func() {
				c.mu.Lock()
				defer c.mu.Unlock()
				c.endLocked(sessionEnded(c.Context.Err()))
			})
		}
	}
	return c.done
}

// end ends the call's context.
func (c *callContext) end() { c.endWith(context.Canceled) }

// endWith ends the call's context with err, unless it has ended.
func (c *callContext) endWith(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stop != nil {
		c.stop()
		c.stop = nil
	}
	c.endLocked(err)
}

// endLocked sets the error unless one is set, then closes done if it was
// made. c.mu must be held.
func (c *callContext) endLocked(err error) {
	if c.err.Load() == nil {
		c.err.Store(errorPointer(err))
	}
	if c.done != nil && !c.doneClosed {
		close(c.done)
		c.doneClosed = true
		if c.afters != nil {
			for _, f := range c.afters.funcs {
				go f()
			}
			c.afters = nil
		}
	}
}

// sessionEnded is the error of a call whose session's context ended with
// err: intercept.ErrSessionEnded, which is not the caller leaving, and err.
func sessionEnded(err error) error {
	return fmt.Errorf("%w: %w", intercept.ErrSessionEnded, err)
}

// The errors a context ends with, to point at without an allocation.
var (
	errCanceled         = context.Canceled
	errDeadlineExceeded = context.DeadlineExceeded
)

func errorPointer(err error) *error {
	switch err {
	case context.Canceled:
		return &errCanceled
	case context.DeadlineExceeded:
		return &errDeadlineExceeded
	}
	other := err // err itself must not escape: that would cost every call
	return &other
}

// Reply implements intercept.Replier.
func (c *clientCall) Reply(a intercept.Answer) error {
	c.release()
	defer c.finish()
	if a.Error != nil {
		return c.s.client.WriteFrame(jsonrpc.NewRawErrorResponse(c.id, a.Error))
	}
	if b := c.s.clientFrames; b != nil {
		return b.WriteResponse(c.id, a.Result)
	}
	return c.s.client.WriteFrame(jsonrpc.NewResponse(c.id, a.Result))
}

// refuse answers the call with e: it was not sent, nor recorded.
func (c *clientCall) refuse(e *jsonrpc.Error) {
	if err := c.Reply(intercept.Answer{Error: e.Object()}); err != nil {
		c.s.log.Warn("writing the answer failed", "request", c.key, "err", err)
	}
}

// An answerWriter is a Conn that learns when an answer reached the client,
// later than the write (streamhttp.ServerSession, whose streams hold it
// until the client reads it): WriteAnswer calls written then.
type answerWriter interface {
	WriteAnswer(frame []byte, written func()) error
}

// DeliversLater implements intercept.DeliveryReplier: over a Conn that
// takes a frame only when it writes it (stdio), the write is the delivery.
func (c *clientCall) DeliversLater() bool {
	return c.s.clientAnswers != nil
}

// ReplyThen implements intercept.DeliveryReplier: written is called once
// the answer reached the client.
func (c *clientCall) ReplyThen(a intercept.Answer, written func()) error {
	w := c.s.clientAnswers
	if w == nil {
		if err := c.Reply(a); err != nil {
			return err
		}
		written()
		return nil
	}
	c.release()
	defer c.finish()
	frame := jsonrpc.NewResponse(c.id, a.Result)
	if a.Error != nil {
		frame = jsonrpc.NewRawErrorResponse(c.id, a.Error)
	}
	return w.WriteAnswer(frame, written)
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
	if opts.MaxRestarts == 0 {
		opts.MaxRestarts = 5
	}
	if opts.RestartWindow == 0 {
		opts.RestartWindow = time.Minute
	}
	up := newLink(upstream)
	close(up.ready)
	clientFrames, _ := client.(frameBuilder)
	clientAnswers, _ := client.(answerWriter)
	idPrefix := ownIDs
	if opts.Instance != "" {
		idPrefix += opts.Instance + ":"
	}
	return &Session{
		idPrefix:      idPrefix,
		client:        client,
		clientFrames:  clientFrames,
		clientAnswers: clientAnswers,
		up:            up,
		opts:          opts,
		log:           log,
		debug:         log.Enabled(context.Background(), slog.LevelDebug),
		tools:         newToolTable(opts.Resolve),
		pending:       make(map[string]sent),
		forwarded:     make(map[string]forwardedRequest),
		calls:         make(map[string]*clientCall),
	}
}

// ownIDs starts the JSON text of every id the proxy puts on its own
// requests upstream (the session's idPrefix), followed by the session's
// Instance and a colon if it has one. A client request whose id starts
// with the session's idPrefix is refused, so the proxy's ids and the
// client's can never collide.
const ownIDs = `"mcp-idempotent:`

// reservedID reports whether a client's request id is in the proxy's id
// space, however it is spelled: the upstream reads "mcp\u002didempotent:1"
// as the proxy's "mcp-idempotent:1", and would answer it as such.
func (s *Session) reservedID(id json.RawMessage) bool {
	if bytes.HasPrefix(id, []byte(s.idPrefix)) {
		return true
	}
	if len(id) == 0 || id[0] != '"' || bytes.IndexByte(id, '\\') < 0 {
		return false
	}
	v, ok := jsonrpc.StringValue(id)
	return ok && strings.HasPrefix(v, s.idPrefix[1:])
}

// reservedMessage is the error a request under a reserved id gets.
func (s *Session) reservedMessage() string {
	return "mcp-idempotent: request ids starting with " + s.idPrefix[1:] + " are reserved for the proxy's own requests"
}

// ErrCrashLoop is wrapped by the error Run returns when the upstream kept
// closing and was not started again.
var ErrCrashLoop = errors.New("the upstream keeps exiting; not starting it again")

// Run pumps frames until the client goes (it returns nil), the upstream
// goes and cannot be restarted (ErrUpstreamClosed), or ctx is done (nil).
//
// When the upstream closes, every caller still waiting on it is answered
// at once (outcome unknown for calls sent, failed for the rest, an error
// for pass-through requests). With Options.Restart set, the upstream is
// then started again with backoff, the client's handshake is replayed, and
// the session carries on; a crash loop ends it.
//
// Once the client has gone, Run waits up to ShutdownGrace for calls under
// way to settle, closes the upstream connection, and relays what the
// upstream still writes until it closes its side (for up to two seconds).
func (s *Session) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	clientDone := make(chan error, 1)
	go func() { clientDone <- s.pumpClient(ctx) }()
	upstreamDone := s.startPump(ctx, s.current())
	var exits []time.Time // recent upstream exits, for the crash-loop limit

pump:
	for {
		select {
		case err := <-upstreamDone:
			if err != nil {
				s.log.Warn("reading from the upstream", "err", err)
			}
			gone := s.current()
			if s.opts.Restart == nil {
				s.upstreamGone(gone)
				s.inflight.Wait() // every caller is answered at once: the upstream is gone
				return ErrUpstreamClosed
			}
			now := time.Now()
			exits = append(exits, now)
			for now.Sub(exits[0]) > s.opts.RestartWindow {
				exits = exits[1:]
			}
			if len(exits) > s.opts.MaxRestarts {
				s.upstreamGone(gone)
				s.log.Error("the upstream keeps exiting; giving up", "exits", len(exits), "window", s.opts.RestartWindow)
				s.inflight.Wait()
				return fmt.Errorf("%w: %w (%d exits within %v)", ErrUpstreamClosed, ErrCrashLoop, len(exits), s.opts.RestartWindow)
			}
			// The next link is in use before the callers of the one that
			// is gone are answered: a call that comes once they are waits
			// for the restart, instead of meeting the closed connection.
			l := &link{ready: make(chan struct{}), gone: make(chan struct{})}
			s.mu.Lock()
			s.up = l
			s.mu.Unlock()
			s.upstreamGone(gone)
			next, err := s.restart(ctx, l, len(exits))
			if err != nil {
				s.inflight.Wait()
				if ctx.Err() != nil {
					return nil
				}
				return fmt.Errorf("%w: starting it again: %v", ErrUpstreamClosed, err)
			}
			upstreamDone = next
		case err := <-clientDone:
			if err != nil {
				s.log.Error("reading from the client", "err", err)
			}
			break pump
		case <-ctx.Done():
			break pump
		}
	}
	// The client has gone: let calls under way finish within the grace,
	// then pass the end of input on to the upstream, and keep relaying
	// what it still writes until it closes too.
	deadline := time.NewTimer(s.opts.ShutdownGrace)
	defer deadline.Stop()
	settled := make(chan struct{})
	go func() {
		// The callers still attached, then the executions sent whose
		// callers left: a dispatched side effect is not cut off by the
		// client going, within the grace.
		s.inflight.Wait()
		<-s.sendsSettled()
		<-s.forwardsSettled()
		close(settled)
	}()
	select {
	case <-settled:
	case <-deadline.C:
		s.log.Warn("calls still under way at shutdown", "grace", s.opts.ShutdownGrace)
	case <-ctx.Done():
		// Told to stop (SIGTERM, SIGINT): no grace. What is under way
		// is answered below, as at the end of the grace.
		select {
		case <-settled:
		default:
			s.log.Warn("told to stop; calls still under way are answered now")
		}
	case <-upstreamDone:
		s.upstreamGone(s.current())
		s.endCalls()
		return nil
	}
	if l := s.current(); !closed(l.gone) {
		s.mu.Lock()
		conn := l.conn // nil while a restart has not started the upstream yet
		s.mu.Unlock()
		if conn != nil {
			conn.Close()
		}
	}
	select {
	case <-upstreamDone:
		s.upstreamGone(s.current())
		s.endCalls()
		return nil
	case <-time.After(drainWait):
		s.log.Debug("the upstream is still open after the end of input", "waited", drainWait)
	case <-ctx.Done():
		// Told to stop: no more relaying either.
	}
	// Whoever still waits is answered before the upstream is stopped: no
	// request is left without an answer.
	s.abandon(s.current(), errSessionEnded, "the session ended before the upstream answered %s")
	s.endCalls()
	return nil
}

// endCalls ends, with intercept.ErrSessionEnded, the calls still waiting
// when the session ends (callers attached to an execution under way in
// another process), so that each is told the execution is still in
// progress rather than taken for a caller who cancelled; then it waits,
// not for ever, for those answers to be written.
func (s *Session) endCalls() {
	s.mu.Lock()
	calls := make([]*clientCall, 0, len(s.calls))
	for _, c := range s.calls {
		calls = append(calls, c)
	}
	s.mu.Unlock()
	for _, c := range calls {
		c.ctx.endWith(intercept.ErrSessionEnded)
	}
	waited := make(chan struct{})
	go func() {
		s.inflight.Wait()
		close(waited)
	}()
	select {
	case <-waited:
	case <-time.After(drainWait):
	}
}

// drainWait bounds how long Run relays the upstream's output after passing
// on the end of input; a server that does not exit by then is stopped by
// the caller of Run.
const drainWait = 2 * time.Second

// usable returns the upstream link once the client's traffic may use it:
// while the upstream is being started again, it waits until the handshake
// is replayed (or that start fails).
func (s *Session) usable() *link {
	l := s.current()
	if closed(l.ready) {
		return l // the common case, without the locks of a select
	}
	select {
	case <-l.ready:
	case <-l.gone:
	}
	return l
}

// current returns the upstream link in use.
func (s *Session) current() *link {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.up
}

// startPump reads l until it closes; the channel then receives the error.
func (s *Session) startPump(ctx context.Context, l *link) <-chan error {
	done := make(chan error, 1)
	go func() { done <- s.pumpUpstream(ctx, l) }()
	return done
}

// restart starts the upstream again on l, the link already in use, after
// a backoff that grows with the number of recent exits, replays the
// client's handshake on it, and makes it ready. It returns l's pump
// channel.
func (s *Session) restart(ctx context.Context, l *link, exits int) (<-chan error, error) {
	// l is in use already, not ready: the client's traffic waits for it
	// instead of meeting the connection that is gone.
	s.mu.Lock()
	handshake, initialized := s.handshake, s.initialized
	s.mu.Unlock()
	s.tools.invalidate()
	fail := func(err error) (<-chan error, error) {
		s.upstreamGone(l) // wakes the traffic that waited, with errors
		return nil, err
	}

	wait := restartBackoff(exits)
	s.log.Warn("the upstream exited; starting it again", "in", wait, "recent_exits", exits)
	select {
	case <-time.After(wait):
	case <-ctx.Done():
		return fail(ctx.Err())
	}
	conn, err := s.opts.Restart(ctx)
	if err != nil {
		return fail(err)
	}
	s.mu.Lock()
	l.setConn(conn)
	s.mu.Unlock()
	done := s.startPump(ctx, l)
	if handshake != nil {
		hctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		answered := make(chan error, 1)
		go func() {
			_, err := s.call(hctx, "initialize", handshake)
			answered <- err
		}()
		var err error
		select {
		case err = <-answered:
		case perr := <-done:
			// The upstream exited during the handshake: one more exit,
			// which Run counts and acts on as any other. Its callers,
			// the handshake among them, are answered then.
			cancel()
			<-answered
			s.log.Warn("the upstream exited during the replayed handshake")
			exited := make(chan error, 1)
			exited <- perr
			return exited, nil
		}
		cancel()
		if err == nil && initialized {
			err = conn.WriteFrame([]byte(`{"jsonrpc":"2.0","method":"notifications/initialized"}`))
		}
		if err != nil {
			conn.Close()
			return fail(fmt.Errorf("replaying the client's handshake: %w", err))
		}
	}
	close(l.ready)
	s.log.Info("the upstream was started again", "handshake_replayed", handshake != nil)
	return done, nil
}

// restartBackoff is the wait before a restart: 100ms, doubling with each
// recent exit, at most 5s.
func restartBackoff(exits int) time.Duration {
	d := 100 * time.Millisecond << min(exits-1, 6)
	return min(d, 5*time.Second)
}

// pumpClient reads the client's frames until it closes.
func (s *Session) pumpClient(ctx context.Context) error {
	for {
		frame, err := s.client.ReadFrame()
		if err != nil {
			if isFrameTooLarge(err) {
				s.tooLargeFromClient(err)
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

// tooLargeFromClient answers a message from the client over the size
// limit, which was dropped: under its id, when its first bytes hold it,
// else under a null id, as JSON-RPC answers a request whose id cannot be
// read. An answer of the client's to a request of the upstream's is only
// logged: no answer goes to an answer.
func (s *Session) tooLargeFromClient(err error) {
	id, method := jsonrpc.HeadRequest(frameHead(err))
	if method == "" && id != nil {
		s.log.Error("dropped an answer from the client", "err", err, "id", string(id))
		return
	}
	s.log.Warn("refused a message from the client", "err", err, "method", method, "id", string(id))
	s.writeClient(jsonrpc.NewErrorResponse(id, jsonrpc.Errorf(jsonrpc.CodeInvalidRequest, "mcp-idempotent: %v", err)))
}

// frameHead returns the first bytes of a message over the size limit,
// which a transport's size-limit error keeps; nil if err has none.
func frameHead(err error) []byte {
	var h interface{ FrameHead() []byte }
	if errors.As(err, &h) {
		return h.FrameHead()
	}
	return nil
}

// isFrameTooLarge reports whether err is a transport's size-limit error,
// after which the stream is still usable.
func isFrameTooLarge(err error) bool {
	var limited interface{ FrameTooLarge() bool }
	return errors.As(err, &limited) && limited.FrameTooLarge()
}

func (s *Session) fromClient(ctx context.Context, frame []byte) {
	var m jsonrpc.Message // on the stack: what outlives the frame is copied
	msg := &m
	if err := jsonrpc.DecodeInto(msg, frame); err != nil {
		s.log.Warn("unparseable message from the client", "err", err, "size", len(frame))
		s.writeClient(jsonrpc.NewErrorResponse(nil, jsonrpc.Errorf(jsonrpc.CodeParseError, "mcp-idempotent: %v", err)))
		return
	}
	if msg.Method != "" && !msg.Batch {
		if why := jsonrpc.CheckRequest(msg); why != "" {
			// Not passed on: a server may end the session on it.
			s.log.Warn("refused a message from the client", "method", msg.Method, "why", why)
			id := msg.ID
			if !jsonrpc.ValidID(id) {
				id = nil // JSON-RPC answers a request whose id is bad under null
			}
			s.writeClient(jsonrpc.NewErrorResponse(id, jsonrpc.Errorf(jsonrpc.CodeInvalidRequest, "mcp-idempotent: %s", why)))
			return
		}
	}
	switch {
	case msg.Batch:
		s.fromClientBatch(frame)
	case msg.IsRequest() && s.reservedID(msg.ID):
		s.writeClient(jsonrpc.NewErrorResponse(msg.ID, jsonrpc.Errorf(jsonrpc.CodeInvalidRequest, "%s", s.reservedMessage())))
	case msg.IsRequest() && msg.Method == "tools/call":
		s.startToolCall(ctx, msg)
	case msg.IsRequest():
		s.forward(msg)
	case msg.Method == "notifications/cancelled":
		s.cancelled(msg)
	default:
		// Notifications and the client's responses to server requests.
		if msg.Method == "notifications/initialized" {
			s.mu.Lock()
			s.initialized = true
			s.mu.Unlock()
		}
		s.writeUpstream(msg.Raw)
	}
}

// forward passes a client's request upstream, remembering it until it is
// answered. While the upstream is being restarted it waits for it; if the
// upstream is gone for good it is answered with an error at once.
func (s *Session) forward(msg *jsonrpc.Message) {
	l := s.usable()
	s.mu.Lock()
	if closed(l.gone) || l != s.up {
		s.mu.Unlock()
		s.writeClient(jsonrpc.NewErrorResponse(msg.ID, jsonrpc.Errorf(jsonrpc.CodeInternalError,
			"mcp-idempotent: the upstream is not running; %s was not sent", msg.Method)))
		return
	}
	key := string(jsonrpc.IDKey(msg.ID))
	if s.inUseLocked(key, msg.Method == "tools/call") {
		s.mu.Unlock()
		s.refuseInUse(msg.ID)
		return
	}
	s.forwarded[key] = forwardedRequest{msg.ID, msg.Method}
	if msg.Method == "initialize" && msg.Params != nil {
		s.handshake = msg.Params
	}
	s.mu.Unlock()
	if err := l.conn.WriteFrame(msg.Raw); err != nil {
		s.log.Debug("writing to the upstream", "err", err)
	}
}

// inUseLocked reports whether a request of the client's under key is
// still being answered: a tools/call the session handles, or a request
// passed upstream. passing is set when the tools/call under key is the
// request being passed upstream now (its own entry in calls).
func (s *Session) inUseLocked(key string, passing bool) bool {
	_, forwarded := s.forwarded[key]
	_, called := s.calls[key]
	return forwarded || called && !passing
}

// refuseInUse answers a request whose id another request of the client's,
// still being answered, holds: under a null id, since an answer under
// this one would be taken for the other request's.
func (s *Session) refuseInUse(id json.RawMessage) {
	s.log.Warn("refused a request whose id is in use", "id", string(id))
	s.writeClient(jsonrpc.NewErrorResponse(nil, jsonrpc.Errorf(jsonrpc.CodeInvalidRequest,
		"mcp-idempotent: request id %s is already in use by a request still being answered; send it under another id", id)))
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
	if len(msgs) == 0 {
		// JSON-RPC 2.0: an empty array is an invalid request, answered
		// with one error.
		s.writeClient(jsonrpc.NewErrorResponse(nil, jsonrpc.Errorf(jsonrpc.CodeInvalidRequest, "mcp-idempotent: an empty batch is not a request")))
		return
	}
	for _, m := range msgs {
		var why string
		if m.Method != "" {
			why = jsonrpc.CheckRequest(m)
		}
		switch {
		case why != "":
			why = "mcp-idempotent: " + why
		case m.Method == "tools/call":
			why = "mcp-idempotent: tools/call cannot be sent in a batch; send each request on its own"
		case m.IsRequest() && s.reservedID(m.ID):
			why = s.reservedMessage()
		default:
			continue
		}
		s.refuseBatch(msgs, why, "")
		return
	}
	s.mu.Lock()
	keys := make(map[string]bool, len(msgs))
	for _, m := range msgs {
		if !m.IsRequest() {
			continue
		}
		key := string(jsonrpc.IDKey(m.ID))
		if keys[key] || s.inUseLocked(key, false) {
			s.mu.Unlock()
			s.refuseBatch(msgs, fmt.Sprintf("mcp-idempotent: request id %s is already in use by a request still being answered, or twice in the batch; the batch was not sent", m.ID), key)
			return
		}
		keys[key] = true
	}
	for _, m := range msgs {
		if m.IsRequest() {
			s.forwarded[string(jsonrpc.IDKey(m.ID))] = forwardedRequest{m.ID, m.Method}
		}
	}
	s.mu.Unlock()
	s.writeUpstream(frame)
}

// refuseBatch answers each request of a batch refused for why, under its
// id, or under a null id where the id is not valid or is busy (the key of
// an id in use): an answer under it would be taken for another request's.
func (s *Session) refuseBatch(msgs []*jsonrpc.Message, why, busy string) {
	var errs [][]byte
	for _, m := range msgs {
		if m.IsRequest() {
			id := m.ID
			if !jsonrpc.ValidID(id) || busy != "" && string(jsonrpc.IDKey(id)) == busy {
				id = nil
			}
			errs = append(errs, jsonrpc.NewErrorResponse(id, jsonrpc.Errorf(jsonrpc.CodeInvalidRequest, "%s", why)))
		}
	}
	if len(errs) == 0 {
		// Notifications only: JSON-RPC answers none, so the log says why
		// they went nowhere.
		s.log.Warn("dropped a batch of notifications", "why", why)
		return
	}
	s.writeClient(append(append([]byte("["), bytes.Join(errs, []byte(","))...), ']'))
}

// startToolCall validates a tools/call and starts it. When the tool's
// policy is known, which is the common case, everything up to the dispatch
// happens here on the reading goroutine; only a tool the proxy must first
// list sends the call to a goroutine of its own.
func (s *Session) startToolCall(ctx context.Context, in *jsonrpc.Message) {
	// in is on the caller's stack: what the call keeps of it is copied.
	c := &clientCall{s: s, id: in.ID, raw: in.Raw, ctx: callContext{Context: ctx}}
	call := &c.call
	if perr := call.Parse(in.Params); perr != nil {
		s.writeClient(jsonrpc.NewErrorResponse(in.ID, perr))
		return
	}
	c.key = string(jsonrpc.IDKey(in.ID))
	cctx := &c.ctx
	s.mu.Lock()
	if s.inUseLocked(c.key, false) {
		s.mu.Unlock()
		s.refuseInUse(in.ID)
		return
	}
	s.inflight.Add(1)
	s.calls[c.key] = c
	s.mu.Unlock()

	if info, ok := s.tools.cached(call.Name); ok {
		s.handleToolCall(c, call, info)
		return
	}
	go func() {
		info := s.tools.lookup(cctx, call.Name, func(ctx context.Context, cursor string) (policy.ListPage, error) {
			return s.listTools(ctx, cursor, call.Meta)
		})
		switch err := cctx.Err(); {
		case errors.Is(err, intercept.ErrSessionEnded):
			// Not the caller leaving: it is told that nothing ran.
			if err := c.Reply(intercept.Answer{Error: intercept.NotRunAtSessionEnd(call.Name).Object()}); err != nil {
				s.log.Warn("writing the answer failed", "request", c.key, "err", err)
			}
			return
		case err != nil:
			c.finish() // cancelled before anything was decided: nothing ran
			return
		}
		s.handleToolCall(c, call, info)
	}()
}

func (s *Session) handleToolCall(c *clientCall, call *intercept.ToolCall, info toolInfo) {
	pol := info.policy
	// A client key that cannot be read refuses the call, but a read-only
	// tool's, whose calls are never matched by key: taken for a call
	// without one, it would go unrecorded to a tool matched by key only.
	if call.KeyErr != nil && pol.Class != policy.ReadOnly {
		c.refuse(call.KeyErr)
		return
	}
	// Read-only tools, and calls without a client key to a tool whose
	// calls are matched by key only, are not recorded.
	unrecorded := pol.Class == policy.ReadOnly || pol.Scope == policy.ScopeKey && call.Key == ""
	if unrecorded && pol.Retry == nil {
		// With no retry rule (and so no account) to apply, as they came.
		if s.debug {
			s.log.Debug("passes through", "tool", call.Name, "class", pol.Class, "scope", pol.Scope, "request", c.key)
		}
		s.opts.Interceptor.PassedThrough(call.Name, pol.Class)
		c.mu.Lock()
		c.passThrough = true
		s.forward(&jsonrpc.Message{Raw: c.raw, ID: c.id, Method: "tools/call", Params: call.Params})
		c.mu.Unlock()
		c.finish()
		return
	}
	// Anything else the proxy sends itself, within the client's deadline.
	if call.DeadlineErr != nil {
		c.refuse(call.DeadlineErr)
		return
	}
	c.req = intercept.Request{
		Call:           call,
		Policy:         pol,
		SchemaDefaults: info.defaults,
		Actor:          s.opts.Actor,
		Scope:          s.opts.Scope,
		UpstreamID:     s.opts.UpstreamID,
		Upstream:       s,
		Reply:          c,
		Correlation:    c.key,
	}
	if unrecorded {
		// Unrecorded still, but its sends take from its account and its
		// transient answers are retried where that is safe: the proxy
		// sends it.
		s.opts.Interceptor.PassedThrough(call.Name, pol.Class)
		s.opts.Interceptor.Unrecorded(&c.ctx, &c.req)
		return
	}
	s.opts.Interceptor.Handle(&c.ctx, &c.req)
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
		c, ok := s.calls[string(jsonrpc.IDKey(p.RequestID))]
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
		// A request passed upstream and cancelled is owed nothing more:
		// its id is free (an answer the upstream still sends passes on,
		// for the client to ignore).
		s.mu.Lock()
		s.forgetLocked(string(jsonrpc.IDKey(p.RequestID)))
		s.mu.Unlock()
	}
	s.writeUpstream(msg.Raw)
}

// pumpUpstream reads the upstream's frames until it closes.
func (s *Session) pumpUpstream(ctx context.Context, l *link) error {
	for {
		frame, err := l.conn.ReadFrame()
		if err != nil {
			if isFrameTooLarge(err) {
				s.tooLargeFromUpstream(err)
				continue
			}
			if na, ok := errors.AsType[*jsonrpc.NoAnswer](err); ok {
				s.noAnswer(na)
				continue
			}
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		s.fromUpstream(l, frame)
	}
}

// fromUpstream handles a message the upstream link l sent.
func (s *Session) fromUpstream(l *link, frame []byte) {
	var m jsonrpc.Message // on the stack, as in fromClient
	msg := &m
	if err := jsonrpc.DecodeInto(msg, frame); err != nil {
		if s.unreadableAnswer(frame, err) {
			return
		}
		// Not ours to judge: the client sees what the server sent.
		s.log.Warn("unparseable message from the upstream, passed on", "err", err, "size", len(frame))
		s.writeClient(frame)
		return
	}
	if msg.Batch {
		s.fromUpstreamBatch(l, frame)
		return
	}
	if msg.IsResponse() {
		key := string(jsonrpc.IDKey(msg.ID))
		s.mu.Lock()
		if p, ok := s.pending[key]; ok {
			delete(s.pending, key)
			s.mu.Unlock()
			s.answered(p, msg, nil)
			return
		}
		if closed(l.gone) {
			// Everyone who waited on l was answered when it was given up
			// on (abandon): this answer came too late, and passed on it
			// would be the client's second.
			s.mu.Unlock()
			s.log.Warn("dropped an answer that came after the session gave up on the upstream", "id", string(msg.ID))
			return
		}
		f := s.forwarded[key]
		s.forgetLocked(key)
		s.mu.Unlock()
		if s.reservedID(msg.ID) {
			s.droppedOwn(key)
			return
		}
		if f.method == "tools/list" && msg.Result != nil {
			if page, err := policy.ParseListResult(msg.Result); err == nil {
				s.tools.learn(page)
			}
		}
	} else if msg.Method == "notifications/tools/list_changed" {
		s.tools.invalidate()
	}
	s.writeClient(frame)
}

// fromUpstreamBatch handles a batch from the upstream: the answers to a
// batch the client sent, which no request waits on any more, and which
// pass on. An answer in it to one of the proxy's own requests (which the
// proxy never sends in a batch) is taken out and acted on, and one to no
// request of the proxy's is dropped: the client never sees the proxy's ids.
func (s *Session) fromUpstreamBatch(l *link, frame []byte) {
	msgs, err := jsonrpc.DecodeBatch(frame)
	if err != nil {
		s.writeClient(frame)
		return
	}
	var own []sent
	var ownMsgs []*jsonrpc.Message
	var rest [][]byte
	var toolsChanged bool
	s.mu.Lock()
	late := closed(l.gone) // as in fromUpstream
	for _, m := range msgs {
		if !m.IsResponse() {
			toolsChanged = toolsChanged || m.Method == "notifications/tools/list_changed"
			rest = append(rest, m.Raw)
			continue
		}
		key := string(jsonrpc.IDKey(m.ID))
		if p, ok := s.pending[key]; ok {
			delete(s.pending, key)
			own, ownMsgs = append(own, p), append(ownMsgs, m)
			continue
		}
		if late {
			s.log.Warn("dropped an answer that came after the session gave up on the upstream", "id", string(m.ID))
			continue
		}
		s.forgetLocked(key)
		if s.reservedID(m.ID) {
			s.droppedOwnLocked(key)
			continue
		}
		rest = append(rest, m.Raw)
	}
	s.mu.Unlock()
	if toolsChanged {
		s.tools.invalidate()
	}
	for i, p := range own {
		s.answered(p, ownMsgs[i], nil)
	}
	switch {
	case len(rest) == len(msgs):
		s.writeClient(frame)
	case len(rest) > 0:
		s.writeClient(append(append([]byte("["), bytes.Join(rest, []byte(","))...), ']'))
	}
}

// tooLargeFromUpstream handles a message from the upstream over the size
// limit, which was dropped: if it was the answer to a request still
// waiting, that request is answered now, or it would wait for ever. The
// answer's id is read from the frame's first bytes, where encoders put it
// before a large result.
func (s *Session) tooLargeFromUpstream(err error) {
	id, isResponse := jsonrpc.HeadID(frameHead(err))
	if !isResponse {
		s.log.Error("dropped a message from the upstream", "err", err)
		return
	}
	key := string(jsonrpc.IDKey(id))
	s.mu.Lock()
	p, own := s.pending[key]
	delete(s.pending, key)
	f, forwarded := s.forwarded[key]
	s.forgetLocked(key)
	s.mu.Unlock()
	s.log.Error("dropped an answer from the upstream", "err", err, "id", key)
	switch {
	case own:
		// Not a NotSent error: the upstream ran the request and answered.
		s.answered(p, nil, fmt.Errorf("the upstream's answer was dropped: %w", err))
	case forwarded:
		s.writeClient(jsonrpc.NewErrorResponse(f.id, jsonrpc.Errorf(jsonrpc.CodeInternalError,
			"mcp-idempotent: the upstream's answer to %s was dropped: %v", f.method, err)))
	}
}

// noAnswer handles the transport's own account na of a request it carried
// that got no answer: one of the proxy's own requests is answered with
// the failure as the transport saw it; a client's is answered with the
// JSON-RPC error that stands for it.
func (s *Session) noAnswer(na *jsonrpc.NoAnswer) {
	key := string(jsonrpc.IDKey(na.ID))
	s.mu.Lock()
	p, own := s.pending[key]
	delete(s.pending, key)
	f, forwarded := s.forwarded[key]
	s.forgetLocked(key)
	s.mu.Unlock()
	switch {
	case own:
		s.answered(p, nil, sendFailure(na))
	case forwarded:
		s.writeClient(jsonrpc.NewErrorResponse(f.id, na.Object()))
	case s.reservedID(na.ID):
		s.droppedOwn(key)
	}
}

// sendFailure is the error a sender of the proxy's own is told for na, as
// Upstream.Send's contract reads: a retry.NotSentError when nothing left;
// na itself for an HTTP status that came instead of the answer, for the
// retry classifier to read; otherwise an error that says the request may
// have been received.
func sendFailure(na *jsonrpc.NoAnswer) error {
	switch {
	case na.NotSent:
		return retry.NotSent(na)
	case na.Refused():
		return na
	}
	return fmt.Errorf("no answer from the upstream: %w", na)
}

// unreadableAnswer handles a frame from the upstream that is not JSON but
// whose valid members, before the first that is not, name one of the
// proxy's own requests: that request is answered with the error, as an
// answer that came and could not be read (for a tools/call, an outcome
// not observed), rather than left waiting for ever while the client got a
// frame under an id it never sent. It reports whether the frame was such
// an answer. Any other frame passes on as it came; a client's request it
// may answer stays remembered, since the frame may as well be a request
// of the upstream's whose "method" comes after the broken member.
func (s *Session) unreadableAnswer(frame []byte, err error) bool {
	id, isResponse := jsonrpc.HeadID(frame)
	if !isResponse {
		return false
	}
	key := string(jsonrpc.IDKey(id))
	s.mu.Lock()
	p, own := s.pending[key]
	delete(s.pending, key)
	s.mu.Unlock()
	if !own {
		return false
	}
	s.log.Error("an answer from the upstream is not JSON", "err", err, "id", key, "size", len(frame))
	s.answered(p, nil, fmt.Errorf("the upstream's answer could not be read: %w", err))
	return true
}

// acted notes that one of the proxy's own requests has been answered and
// its answer acted on.
func (s *Session) acted() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sending--; s.sending == 0 && s.idle != nil {
		close(s.idle)
		s.idle = nil
	}
}

// sendsSettled returns a channel closed once every request of the
// proxy's own has been answered and its answer acted on (an execution
// recorded as completed, say).
func (s *Session) sendsSettled() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sending == 0 {
		// Not kept: a later send (a retry after its wait) and its answer
		// would close it again.
		return closedChannel
	}
	if s.idle == nil {
		s.idle = make(chan struct{})
	}
	return s.idle
}

// closedChannel is a channel closed from the start.
var closedChannel = func() chan struct{} {
	ch := make(chan struct{})
	close(ch)
	return ch
}()

// forgetLocked forgets the client's request key, forwarded and now
// answered. s.mu must be held.
func (s *Session) forgetLocked(key string) {
	delete(s.forwarded, key)
	if len(s.forwarded) == 0 && s.forwardIdle != nil {
		close(s.forwardIdle)
		s.forwardIdle = nil
	}
}

// forwardsSettled returns a channel closed once no request of the
// client's passed upstream waits for its answer.
func (s *Session) forwardsSettled() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.forwarded) == 0 {
		return closedChannel
	}
	if s.forwardIdle == nil {
		s.forwardIdle = make(chan struct{})
	}
	return s.forwardIdle
}

// upstreamGone answers everyone still waiting on the upstream link l,
// which closed.
func (s *Session) upstreamGone(l *link) {
	s.abandon(l, errUpstreamExited, "the upstream closed before answering %s")
}

// abandon answers everyone still waiting on the upstream link l, whose
// answers will not come: the proxy's own requests with err, the client's
// with an error saying why (why holds a %s for the method).
func (s *Session) abandon(l *link, err error, why string) {
	s.mu.Lock()
	if closed(l.gone) {
		s.mu.Unlock()
		return
	}
	close(l.gone)
	forwarded := s.forwarded
	s.forwarded = make(map[string]forwardedRequest)
	if s.forwardIdle != nil {
		close(s.forwardIdle)
		s.forwardIdle = nil
	}
	pending := s.pending
	s.pending = make(map[string]sent)
	s.mu.Unlock()
	for _, p := range pending {
		s.answered(p, nil, err)
	}
	for _, f := range forwarded {
		s.writeClient(jsonrpc.NewErrorResponse(f.id, jsonrpc.Errorf(jsonrpc.CodeInternalError,
			"mcp-idempotent: "+why, f.method)))
	}
}

// errUpstreamExited is the outcome of a request that was sent but never
// answered because the upstream went away: not NotSent, since the upstream
// may have acted on it.
var errUpstreamExited = errors.New("the upstream exited before answering")

// errSessionEnded is the outcome of a request still unanswered when the
// session ended: the client had gone, the grace had passed, and the
// upstream had not closed; the upstream is stopped without answering it.
var errSessionEnded = errors.New("the session ended before the upstream answered")

// Send implements intercept.Upstream: it sends one of the proxy's own
// requests upstream, under an id of the proxy's, and calls done with the
// outcome from the goroutine that reads the upstream.
func (s *Session) Send(ctx context.Context, method string, params json.RawMessage, done func(json.RawMessage, error)) {
	// The id's JSON text, which is also its key in pending.
	var buf [64]byte
	key := string(append(strconv.AppendInt(append(buf[:0], s.idPrefix...), s.nextID.Add(1), 10), '"'))
	var l *link
	if method == "initialize" {
		l = s.current()
	} else {
		// While the upstream is being started again, only the replayed
		// handshake goes first; everything else waits for it.
		l = s.usable()
	}
	if err := ctx.Err(); err != nil {
		// Given up on while it waited for the upstream: never sent.
		done(nil, retry.NotSent(err))
		return
	}
	s.mu.Lock()
	if closed(l.gone) || l != s.up {
		s.mu.Unlock()
		done(nil, retry.NotSent(errors.New("the upstream has closed")))
		return
	}
	s.sending++
	s.pending[key] = sent{method: method, done: done}
	s.mu.Unlock()

	var err error
	if b := l.frames; b != nil {
		err = b.WriteRequest(key, method, params)
	} else {
		err = l.conn.WriteFrame(jsonrpc.NewRequest(json.RawMessage(key), method, params))
	}
	if err != nil {
		s.mu.Lock()
		_, still := s.pending[key]
		delete(s.pending, key)
		s.mu.Unlock()
		if still {
			// A request the upstream could not take whole was never received.
			done(nil, retry.NotSent(fmt.Errorf("writing to the upstream: %w", err)))
			s.acted()
		}
		return
	}
	if ctx.Done() == nil {
		return // a context that never ends costs nothing here
	}
	stop := context.AfterFunc(ctx, func() { s.cancelSent(l, key, ctx.Err()) })
	s.mu.Lock()
	p, still := s.pending[key]
	if still {
		p.stop = stop
		s.pending[key] = p
	}
	s.mu.Unlock()
	if !still {
		stop() // answered already
	}
}

// cancelSent gives up on the proxy's own request under key, sent on l,
// when its sender's context ends with err: the upstream is told with
// notifications/cancelled, so it can stop the work (but for initialize,
// which the MCP specification says is never cancelled), and then the
// sender gets err, rather than waiting for an answer the upstream need
// not send. An answer that comes anyway is dropped, as one to no request.
func (s *Session) cancelSent(l *link, key string, err error) {
	s.mu.Lock()
	p, ok := s.pending[key]
	delete(s.pending, key)
	if ok {
		if s.givenUp == nil || len(s.givenUp) >= maxGivenUp {
			s.givenUp = make(map[string]struct{})
		}
		s.givenUp[key] = struct{}{}
	}
	s.mu.Unlock()
	if !ok {
		return // answered meanwhile
	}
	if p.method != "initialize" && !closed(l.gone) {
		reason := "the caller cancelled the request"
		switch {
		case errors.Is(err, context.DeadlineExceeded):
			reason = "no answer came in time"
		case errors.Is(err, intercept.ErrSessionEnded):
			reason = "the session ended"
		}
		params := `{"requestId":` + key + `,"reason":"` + reason + `"}`
		if werr := l.conn.WriteFrame(jsonrpc.NewRequest(nil, "notifications/cancelled", json.RawMessage(params))); werr != nil {
			s.log.Debug("writing to the upstream", "err", werr)
		}
	}
	s.answered(p, nil, err)
}

// maxGivenUp bounds Session.givenUp.
const maxGivenUp = 256

// droppedOwn logs the drop of an answer under key, an id of the proxy's
// own that no request waits on: quietly for a request it cancelled, whose
// answer the upstream was free to send; else loudly, as a second answer or
// one to a request never made.
func (s *Session) droppedOwn(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.droppedOwnLocked(key)
}

// droppedOwnLocked is droppedOwn with s.mu held.
func (s *Session) droppedOwnLocked(key string) {
	if _, ok := s.givenUp[key]; ok {
		delete(s.givenUp, key)
		s.log.Debug("dropped the upstream's answer to a request the proxy cancelled", "id", key)
		return
	}
	s.log.Warn("dropped an answer from the upstream to no request of the proxy's", "id", key)
}

// answered hands the outcome of one of the proxy's own requests to its
// sender: the answer msg, or err when none came.
func (s *Session) answered(p sent, msg *jsonrpc.Message, err error) {
	defer s.acted()
	if p.stop != nil {
		p.stop()
	}
	// "error": null, as JSON-RPC 1.0 servers write beside a result, is no
	// error.
	hasError := msg != nil && msg.Error != nil && string(msg.Error) != "null"
	switch {
	case err != nil:
		p.done(nil, err)
	case hasError && msg.Result != nil:
		p.done(nil, retry.Malformed("a response to "+p.method+" with both a result and an error", msg.Raw))
	case hasError:
		// The upstream's own answer, whatever its data says: only the
		// transport, outside the frames, says what it saw (noAnswer).
		p.done(nil, jsonrpc.DecodeError(msg.Error))
	case msg.Result == nil:
		p.done(nil, retry.Malformed("a response to "+p.method+" with neither result nor error", msg.Raw))
	default:
		p.done(msg.Result, nil)
	}
}

// call is Send for a caller that waits.
func (s *Session) call(ctx context.Context, method string, params json.RawMessage) (json.RawMessage, error) {
	type outcome struct {
		result json.RawMessage
		err    error
	}
	ch := make(chan outcome, 1)
	s.Send(ctx, method, params, func(result json.RawMessage, err error) { ch <- outcome{result, err} })
	o := <-ch // at once when ctx ends (Send)
	return o.result, o.err
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
	l := s.usable()
	if closed(l.gone) {
		s.log.Debug("the upstream is not running; a message was dropped", "size", len(frame))
		return
	}
	if err := l.conn.WriteFrame(frame); err != nil {
		s.log.Debug("writing to the upstream", "err", err)
	}
}
