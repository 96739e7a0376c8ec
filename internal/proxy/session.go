// Package proxy pumps one MCP session between a client and an upstream
// server. tools/call requests go to the interceptor; everything else passes
// through byte for byte, in both directions.
package proxy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/mcp-idempotent/mcp-idempotent/internal/intercept"
	"github.com/mcp-idempotent/mcp-idempotent/internal/journal"
	"github.com/mcp-idempotent/mcp-idempotent/internal/workcount"
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

// A writeFailer is a client Conn that tells when a write to it failed, so
// that no later one can succeed (stdio.Conn: the client closed the pipe it
// reads). The session then ends, as at the end of the client's input.
type writeFailer interface {
	WriteFailed() <-chan struct{}
	WriteErr() error
}

// ErrClientStoppedReading is what Run returns when the client stopped
// reading (writeFailer): the session ended, since nothing it asks could
// be answered, and the calls under way were recorded as at its end.
var ErrClientStoppedReading = errors.New("the client stopped reading the proxy's output, so its later calls were not run")

// A relatedWriter is a Conn that can carry a message the proxy starts
// beside the client's request it relates to (streamhttp.ServerSession:
// on that request's SSE stream), rather than where the server's other
// messages go. key is the request's jsonrpc.IDKey.
type relatedWriter interface {
	WriteRelated(frame []byte, key string) error
}

// A renamingConn is a client Conn that may pass a request on under an id
// of its own (streamhttp.ServerSession: a stateless lane's, so that the
// ids of the clients sharing it cannot clash). ClientID returns the id
// the client sent for the request passed under key, or nil if it kept
// the client's.
type renamingConn interface {
	ClientID(key string) json.RawMessage
}

// clientID returns the id the client sent for the request that came
// under id, whose key is key: what the journal, logs and traces name it
// by, and whether the client Conn renamed it (renamingConn): if not, it
// is id itself. The answer and matching keep to id.
func (s *Session) clientID(id json.RawMessage, key string) (json.RawMessage, bool) {
	if s.clientRenaming != nil {
		if orig := s.clientRenaming.ClientID(key); orig != nil {
			return orig, true
		}
	}
	return id, false
}

// ErrUpstreamClosed is returned by Run when the upstream closed its side
// while the client was still there.
var ErrUpstreamClosed = errors.New("upstream closed the connection")

// ErrCrashLoop is wrapped by the error Run returns when the upstream kept
// closing and was not started again.
var ErrCrashLoop = errors.New("the upstream keeps exiting; not starting it again")

// A RestartError is why an upstream that exited could not be started
// again; Run's error wraps it with ErrUpstreamClosed.
type RestartError struct{ Err error }

func (e *RestartError) Error() string { return "starting it again failed: " + e.Err.Error() }
func (e *RestartError) Unwrap() error { return e.Err }

// Options configures a Session.
// DefaultShutdownGrace is how long a session waits, once its client has
// gone, for calls under way to settle, unless Options say otherwise.
const DefaultShutdownGrace = 10 * time.Second

type Options struct {
	Interceptor *intercept.Interceptor // required
	// Actor and Scope are the session's part of every fingerprint.
	Actor string
	Scope string
	// UpstreamID names the upstream in fingerprints; UpstreamName is what
	// records and logs show of it (intercept.Request.UpstreamName).
	UpstreamID   string
	UpstreamName string
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
	// for calls under way to settle. Zero means DefaultShutdownGrace.
	ShutdownGrace time.Duration
	// Instance sets the ids of the proxy's own requests upstream apart
	// from another proxy's: they are "mcp-idempotent:INSTANCE:N", so one
	// mcp-idempotent may stand in front of another. Letters and digits
	// only; empty means "mcp-idempotent:N".
	Instance string
	// Tracer, if set, starts a span for each tools/call of the client's
	// (telemetry.StartCall), which the interceptor, given the same
	// tracer, fills in; nil traces nothing.
	Tracer trace.Tracer
	// Client describes the client's end of the session for the journal's
	// lines of its start and end (transport, Mcp-Session-Id, remote
	// address, parent process); the session fills in what the client's
	// first request says. Nil writes no such lines, as does an
	// Interceptor without a journal.
	Client *journal.SessionClient
	// EndReason, if set, says why the client's Conn closed (deleted,
	// idle), for the session's end line; "" means the client closed it.
	EndReason func() string
	// ToolWarnings, shared by the sessions of a process, has each
	// warning of a tool's policy logged once, not once a session; nil:
	// the session's own.
	ToolWarnings *ToolWarnings
}

// A Session relays one client connection to one upstream connection.
type Session struct {
	client Conn
	// The client's Conn as a frameBuilder, an answerWriter and a
	// responseThenWriter, or nil: asked once, not on every answer.
	clientFrames    frameBuilder
	clientAnswers   answerWriter
	clientResponses responseThenWriter
	clientRelated   relatedWriter
	// clientStateless is set when the client's Conn carries requests
	// that belong to no session (a 2026-07-28 lane): nothing there reads
	// a request of the proxy's.
	clientStateless bool
	// clientRenaming is the client's Conn, if it passes requests on
	// under ids of its own (renamingConn): asked once, not on every call.
	clientRenaming renamingConn

	opts Options
	// origin is opts' Actor, Scope and upstream, as every call's
	// intercept.Request points at them.
	origin     intercept.Origin
	log        *slog.Logger
	debug      bool // log takes debug records; read once
	tools      *toolTable
	sessionLog *sessionLog // nil: no journal, or no Options.Client

	// idPrefix starts the JSON text of the ids of the proxy's own
	// requests: ownIDs, and the Instance.
	idPrefix string
	nextID   atomic.Int64
	// notWrittenFunc is s.notWritten, made once: a held request is
	// written with it (requestThenWriter).
	notWrittenFunc func(key string, err error)
	// notForwardedFunc and batchNotSentFunc are s.notForwarded and
	// s.batchNotSent, made once: the client's requests are written with
	// them (sendForwarded).
	notForwardedFunc func(key string, err error)
	batchNotSentFunc func(batch string, err error)
	// askPrefix starts the JSON text of the ids of the proxy's own
	// requests to the client (Ask): idPrefix and "ask:".
	askPrefix string
	nextAsk   atomic.Int64
	// serverPrefix starts the JSON text of the ids the client gets the
	// requests of a restarted upstream under: idPrefix and "server:".
	serverPrefix string
	// handling is held while the client's pump handles a message it
	// read: a session that ends with the upstream waits for it
	// (clientAnswered), since a request may wait there for the upstream,
	// and is answered once that is gone.
	handling sync.Mutex
	// inflight counts the client's tools/call requests not yet answered
	// or detached, and the queue while it runs (order.go).
	inflight workcount.Count

	// queueing is set while a queue of the client's messages runs
	// (order.go); qmu guards queue, the messages waiting in it, and the
	// setting of queueing.
	queueing atomic.Bool
	qmu      sync.Mutex
	queue    []queued

	// mu guards pending, givenUp, sending, idle, forwarded, awaited,
	// forwardIdle, batches, calls, callsEnded, up, handshake, initialized,
	// protocol, elicitForm, asks, asksEnded, serverReqs, serverIDs, voided,
	// serverAnswered, relayed and asksRefused, and the conn and frames of a link being started again
	// (see link).
	mu sync.Mutex
	// pending holds the proxy's own requests upstream, by the number
	// their id ends in (ownSeq).
	pending map[int64]sent
	// givenUp holds the ids of the proxy's own requests it cancelled,
	// upstream (cancelSent) or to the client (cancelAsk), whose answer
	// may still come and is then dropped quietly; at most maxGivenUp,
	// since most never get one.
	givenUp map[string]struct{}
	// sending counts the proxy's own requests not yet answered and acted
	// on; idle, when not nil, is closed once it is zero: shutdown waits on
	// it for executions sent whose callers have all left.
	sending int
	idle    chan struct{}
	// forwarded holds the client's requests passed upstream and not yet
	// answered, by jsonrpc.IDKey of their id; awaited counts those of them
	// not standing; forwardIdle, when not nil, is closed once awaited is
	// 0: shutdown waits on it.
	forwarded   map[string]forwardedRequest
	awaited     int
	forwardIdle chan struct{}
	// cancelledShadows holds, in shadow mode, the tools/calls passed
	// upstream that the client cancelled, by key as forwarded held them:
	// the upstream's answer, if it comes, is their outcome (keepCancelled).
	cancelledShadows map[string]*shadowCall
	batches          uint64 // the client's batches passed upstream, to number them
	// calls holds the client's tools/call requests being handled, by id.
	calls map[string]*clientCall
	// clientDeaf is closed once a write to the client failed, which
	// deaf then tells (writeFailer); both nil when the client's Conn does
	// not tell.
	clientDeaf <-chan struct{}
	// clientEnded is closed once the client's input has ended: a
	// restart under way stops waiting on the upstream then (restart).
	clientEnded chan struct{}
	deaf        writeFailer
	// callsEnded is set once the session is ending and takes no more of
	// the client's tools/calls (endCallIntake).
	callsEnded bool
	// up is the upstream connection in use; it changes when the upstream
	// is restarted. While up.ready is open, the connection is being set up
	// (the handshake replayed) and only the proxy's own requests use it.
	up *link
	// handshake is the client's initialize params (2025 protocol era), to
	// replay on a restarted upstream; nil until an initialize has a result.
	handshake   json.RawMessage
	initialized bool // the client sent notifications/initialized
	// protocol is the protocolVersion of the upstream's result to the
	// client's initialize, as the client got it; "" before one.
	protocol string
	// toolsChange is set when the upstream's result to the client's
	// initialize declared tools.listChanged: the client may be told the
	// tools changed (a restart tells it so).
	toolsChange bool
	// elicitForm is set when the handshake declared elicitation in form
	// mode (elicitsForm), read from it once.
	elicitForm bool
	// asks holds the proxy's own requests to the client, by id; nil
	// until the first. asksEnded is set once no answer can come (the
	// client has gone, or Run returns): an ask then fails at once.
	asks      map[string]ask
	asksEnded bool
	// ownProgress holds, by the jsonrpc.IDKey of a call's progress
	// token, how many notifications/progress the proxy itself sent on
	// it (clientCall.Progress); nil until the first.
	ownProgress map[string]int64
	// tokens holds the progress tokens the proxy gave its own requests
	// upstream in place of the client's, by the key of the request's id,
	// which is the token; oldest first in tokenOrder, which may also
	// hold keys let go already (progresstoken.go).
	tokens     map[string]upToken
	tokenOrder []string
	// refusing counts the refusals of the upstream's requests being
	// written to it (refuseUnasked).
	refusing atomic.Int32
	// serverReqs holds the upstreams' requests to the client not yet
	// answered, by the jsonrpc.IDKey of the id the client knows;
	// serverIDs maps the IDKey of each one's upstream id to that key.
	// voided holds the keys of those whose upstream exited, so that
	// a late answer to one is logged for what it is (voidServerRequests).
	// relayed numbers the requests of restarted upstreams.
	serverReqs map[string]serverRequest
	serverIDs  map[string]string
	voided     map[string]struct{}
	// serverAnswered holds the client's keys of the upstream's requests
	// it has answered, so that a second answer is dropped (answerServer).
	serverAnswered map[string]struct{}
	relayed        int64
	// asksRefused says why no answer to a request of the upstream's can
	// come, once the client's input has ended or it stopped reading
	// (endServerRequests); "" before.
	asksRefused string
}

// New returns a Session between client and upstream.
func New(client, upstream Conn, opts Options) *Session {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if opts.ShutdownGrace == 0 {
		opts.ShutdownGrace = DefaultShutdownGrace
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
	clientResponses, _ := client.(responseThenWriter)
	clientRelated, _ := client.(relatedWriter)
	st, ok := client.(interface{ Stateless() bool })
	clientStateless := ok && st.Stateless()
	clientRenaming, _ := client.(renamingConn)
	idPrefix := ownIDs
	if opts.Instance != "" {
		idPrefix += opts.Instance + ":"
	}
	s := &Session{
		idPrefix:        idPrefix,
		askPrefix:       idPrefix + "ask:",
		serverPrefix:    idPrefix + "server:",
		client:          client,
		clientFrames:    clientFrames,
		clientAnswers:   clientAnswers,
		clientResponses: clientResponses,
		clientRelated:   clientRelated,
		clientStateless: clientStateless,
		clientRenaming:  clientRenaming,
		up:              up,
		opts:            opts,
		origin: intercept.Origin{Actor: opts.Actor, Scope: opts.Scope, Session: opts.Scope,
			UpstreamID: opts.UpstreamID, UpstreamName: opts.UpstreamName},
		log:            log,
		debug:          log.Enabled(context.Background(), slog.LevelDebug),
		tools:          newToolTable(opts.Resolve, log, opts.ToolWarnings),
		pending:        make(map[int64]sent),
		forwarded:      make(map[string]forwardedRequest),
		calls:          make(map[string]*clientCall),
		serverReqs:     make(map[string]serverRequest),
		serverIDs:      make(map[string]string),
		voided:         make(map[string]struct{}),
		serverAnswered: make(map[string]struct{}),
	}
	if wf, ok := client.(writeFailer); ok {
		s.clientDeaf, s.deaf = wf.WriteFailed(), wf
	}
	s.sessionLog = newSessionLog(s)
	s.notWrittenFunc = s.notWritten
	s.notForwardedFunc = s.notForwarded
	s.batchNotSentFunc = s.batchNotSent
	return s
}

// Run pumps frames until the client goes (it returns nil), the upstream
// goes and cannot be restarted (ErrUpstreamClosed), the client stops
// reading (ErrClientStoppedReading; it ends as if the client had gone), or
// ctx is done (nil).
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
func (s *Session) Run(ctx context.Context) (err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	clientLeft := false
	if s.sessionLog != nil {
		defer func() { s.sessionLog.end(s.endReason(err, clientLeft)) }()
	}
	if in := s.opts.Interceptor; in != nil {
		// The session's approvals (approval: session) end with it, and
		// its waits for an operator, journaled before its end.
		defer in.EndSession(s.opts.Scope)
	}

	// No answer to a question of the proxy's comes once Run returns.
	defer s.endAsks()

	clientDone := make(chan error, 1)
	s.clientEnded = make(chan struct{})
	go func() {
		err := s.pumpClient(ctx)
		close(s.clientEnded)
		clientDone <- err
	}()
	upstreamDone := s.startPump(ctx, s.current())
	var exits exitLog

	for {
		select {
		case err := <-upstreamDone:
			if err != nil {
				s.log.Warn("reading from the upstream", "err", err)
			}
			if upstreamDone, err = s.upstreamExited(ctx, &exits); upstreamDone == nil {
				// A restart ends so when the client goes, not when told to stop.
				clientLeft = err == nil && ctx.Err() == nil && closed(s.clientEnded)
				return err
			}
		case err := <-clientDone:
			if err != nil {
				s.log.Error("reading from the client", "err", err)
			}
			clientLeft = true
			// Before shutdown waits for the calls: one may wait on a
			// question to the client, which will never be answered now.
			s.endAsks()
			s.endServerRequests(s.current(), inputEnded)
			s.shutdown(ctx, upstreamDone)
			return nil
		case <-s.clientDeaf:
			// startToolCall already refuses the client's calls: their
			// side effects would run, and their answers be lost.
			werr := s.deaf.WriteErr()
			s.log.Error("the client stopped reading the proxy's output; ending the session as at the end of its input: calls under way are recorded, later ones are not run", "err", werr)
			clientLeft = true
			s.endAsks()
			// A client that reads nothing cannot see a question to answer.
			s.endServerRequests(s.current(), stoppedReading)
			s.shutdown(ctx, upstreamDone)
			return fmt.Errorf("%w (%v)", ErrClientStoppedReading, werr)
		case <-ctx.Done():
			s.endAsks()
			s.shutdown(ctx, upstreamDone)
			return nil
		}
	}
}

// clientStoppedReading reports whether a write to the client has failed,
// after which none can succeed. It is asked on every call: WriteErr is a
// load, where a receive on clientDeaf is a call into the runtime.
func (s *Session) clientStoppedReading() bool {
	return s.deaf != nil && s.deaf.WriteErr() != nil
}

func (s *Session) writeClient(frame []byte) {
	if err := s.client.WriteFrame(frame); err != nil {
		s.log.Debug("writing to the client", "err", err)
	}
}
