package streamhttp

import (
	"context"
	"crypto/sha256"
	"log/slog"
	"mime"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/jsonrpc"
)

// DefaultIdleTimeout is ServerOptions.IdleTimeout's default. Each session
// of serve holds an upstream process; clients that never send DELETE
// leave theirs until it runs out.
const DefaultIdleTimeout = 10 * time.Minute

// ServerOptions configures a Server.
type ServerOptions struct {
	// Open runs the proxy for one session, reading the client's frames
	// from s and writing what goes back to s, until s.ReadFrame returns
	// io.EOF. It is called on its own goroutine when the session starts;
	// when it returns, the session ends. Required.
	Open func(ctx context.Context, s *ServerSession) error
	// Tokens maps each bearer token a client may present to the actor it
	// acts for. Nil means no authentication: every request acts for Actor.
	// A non-nil map always requires a token, so an empty one accepts none.
	Tokens map[string]string
	Actor  string
	// AllowOrigins lists the Origin header values accepted besides the
	// loopback ones (http or https, localhost, 127.0.0.1 or [::1], any
	// port); "*" accepts any. A request without Origin is not a browser's
	// and passes.
	AllowOrigins []string
	// AllowHosts lists the Host header names (without port) accepted
	// besides the loopback ones and the hosts of AllowOrigins: a foreign
	// Host is how a DNS rebinding attack shows.
	AllowHosts []string
	// MaxSessions bounds the sessions open at once; zero means 100.
	MaxSessions int
	// IdleTimeout ends a session with no request under way (no stream
	// open) for that long, answers owed or not; zero means
	// DefaultIdleTimeout.
	IdleTimeout time.Duration
	// MaxMessage bounds a request body; zero means DefaultMaxMessage.
	MaxMessage int
	// BodyTimeout bounds the reading of a request body, so that a client
	// that sends part of one and stops does not hold a connection for
	// ever; zero means 60 seconds. (http.Server's ReadTimeout would also
	// end the long-lived SSE streams.)
	BodyTimeout time.Duration
	// MaxBodyReads bounds the request bodies being read at once; zero
	// means DefaultMaxBodyReads. A request past it is refused unread.
	// It bounds the bodies, not the requests: one whose body is read
	// holds no place while it is answered.
	MaxBodyReads int
	// bodyReadWait is how long a request waits for a place among
	// MaxBodyReads; zero means defaultBodyReadWait. Tests set it.
	bodyReadWait time.Duration
	// EventBuffer and EventBufferBytes bound the events a session holds
	// for clients that reconnect; zero means 1024 events and 32 MiB.
	EventBuffer      int
	EventBufferBytes int
	// JSONResponse answers a POST with one JSON body instead of an SSE
	// stream. Messages the server starts then go on the GET stream.
	JSONResponse bool
	// KeepAlive is how long an SSE stream may write nothing before it
	// writes a comment, so that clients and proxies that drop a silent
	// response keep it through a long call; zero means DefaultKeepAlive,
	// and a negative value sends none.
	KeepAlive time.Duration
	// Logger; nil discards.
	Logger *slog.Logger
	// Now is the clock for idle timeouts; nil means time.Now.
	Now func() time.Time
}

// A Server is the Streamable HTTP front of the proxy (spec 2025-11-25,
// "Streamable HTTP"; and the 2026-07-28 stateless requests of SEP-2575).
// Each session a client initialises gets its own proxy session from
// Options.Open; the stateless requests of one actor share one lane.
type Server struct {
	opts ServerOptions
	log  *slog.Logger

	ctx    context.Context // parent of every session; cancelled by Close
	cancel context.CancelFunc
	wg     sync.WaitGroup

	// auth and tokens are set by NewServer, only read after. auth is
	// whether Tokens was given at all: an empty map accepts no token, it
	// does not turn authentication off.
	auth   bool
	tokens []token

	// bodyReads holds a place for each request body being read: its
	// capacity is MaxBodyReads.
	bodyReads chan struct{}
	bodyWaits atomic.Int32 // requests waiting for a place in bodyReads

	mu       sync.Mutex // guards sessions, running, lanes and closed
	sessions map[string]*ServerSession
	// running counts the sessions whose Open has not returned: those in
	// sessions, and those ended (DELETE, idle) whose upstream is still
	// stopping. MaxSessions bounds it, and so the upstreams running.
	running int
	lanes   map[string]*ServerSession // stateless lanes, by actor
	closed  bool

	// losses counts the answers being reported lost (reportLost), each
	// on a goroutine of its own; Close waits for them, as a report may
	// write a line of the journal.
	losses reports
}

// NewServer returns a Server; Close ends its sessions.
func NewServer(opts ServerOptions) *Server {
	if opts.MaxSessions <= 0 {
		opts.MaxSessions = 100
	}
	if opts.IdleTimeout <= 0 {
		opts.IdleTimeout = DefaultIdleTimeout
	}
	if opts.MaxMessage <= 0 {
		opts.MaxMessage = DefaultMaxMessage
	}
	if opts.BodyTimeout <= 0 {
		opts.BodyTimeout = time.Minute
	}
	if opts.MaxBodyReads <= 0 {
		opts.MaxBodyReads = DefaultMaxBodyReads
	}
	if opts.bodyReadWait <= 0 {
		opts.bodyReadWait = defaultBodyReadWait
	}
	if opts.EventBuffer <= 0 {
		opts.EventBuffer = 1024
	}
	if opts.EventBufferBytes <= 0 {
		opts.EventBufferBytes = 32 << 20
	}
	if opts.KeepAlive == 0 {
		opts.KeepAlive = DefaultKeepAlive
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	// Host names are compared as check reads the Host header: lower case,
	// an IPv6 address without its brackets.
	hosts := make([]string, len(opts.AllowHosts))
	for i, h := range opts.AllowHosts {
		hosts[i] = hostName(h)
	}
	opts.AllowHosts = hosts
	s := &Server{
		opts:     opts,
		log:      opts.Logger,
		sessions: make(map[string]*ServerSession),
		lanes:    make(map[string]*ServerSession),

		bodyReads: make(chan struct{}, opts.MaxBodyReads),
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	s.auth = opts.Tokens != nil
	for t, actor := range opts.Tokens {
		s.tokens = append(s.tokens, token{sum: sha256.Sum256([]byte(t)), actor: actor})
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	return s
}

func (s *Server) now() time.Time { return s.opts.Now() }

// Close ends every session and waits for their Open calls to return, and
// for the answers found lost meanwhile to be reported. Requests still
// under way may report more: Close again once they have ended.
func (s *Server) Close() error {
	s.mu.Lock()
	s.closed = true
	all := make([]*ServerSession, 0, len(s.sessions)+len(s.lanes))
	for _, ss := range s.sessions {
		all = append(all, ss)
	}
	for _, ss := range s.lanes {
		all = append(all, ss)
	}
	s.mu.Unlock()
	for _, ss := range all {
		ss.closeFor(EndStopped)
	}
	s.wg.Wait()
	s.losses.wait()
	s.cancel()
	return nil
}

// Hurry ends the context every session was opened with: sessions that
// Close is winding down stop waiting for their calls under way, and
// answer them at once, as a session told to stop does.
func (s *Server) Hurry() { s.cancel() }

// ServeHTTP implements http.Handler for the MCP endpoint.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		// Only a POST's body is read: one a GET or DELETE comes with
		// would else hold back its answer, the GET stream included.
		leaveUnread(w, r)
	}
	if herr := s.checkSource(r); herr != nil {
		refuseUnread(w, r, herr, jsonrpc.CodeInvalidRequest)
		return
	}
	allowCORS(w, r)
	if isPreflight(r) {
		preflight(w, r)
		return
	}
	actor, herr := s.checkCaller(r)
	if herr != nil {
		// Before the body is read: an unauthenticated client's body is
		// never read.
		refuseUnread(w, r, herr, jsonrpc.CodeInvalidRequest)
		return
	}
	switch r.Method {
	case http.MethodPost:
		s.post(w, r, actor)
	case http.MethodGet:
		s.get(w, r, actor)
	case http.MethodDelete:
		s.delete(w, r, actor)
	default:
		refuseUnread(w, r, &httpError{status: http.StatusMethodNotAllowed,
			msg:    r.Method + " is not a method of the MCP endpoint: use POST, GET or DELETE",
			header: http.Header{"Allow": {"GET, POST, DELETE"}}}, jsonrpc.CodeInvalidRequest)
	}
}

// post handles a POST: one JSON-RPC message, or a batch of them.
func (s *Server) post(w http.ResponseWriter, r *http.Request, actor string) {
	if ct, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || ct != "application/json" {
		refuseUnread(w, r, refuse(http.StatusUnsupportedMediaType, "Content-Type must be application/json, not %q", r.Header.Get("Content-Type")), jsonrpc.CodeInvalidRequest)
		return
	}
	if !accepts(r, "application/json") || !accepts(r, "text/event-stream") {
		refuseUnread(w, r, refuse(http.StatusNotAcceptable, "Accept must list both application/json and text/event-stream"), jsonrpc.CodeInvalidRequest)
		return
	}
	body, ok := s.readBody(w, r)
	if !ok {
		return
	}
	msgs, herr, code := decodeBody(body)
	if herr != nil {
		writeRefusal(w, herr, code)
		return
	}
	ss, ok := s.postSession(w, r, actor, body, msgs)
	if !ok {
		return
	}
	ss.begin()
	defer ss.end()
	s.deliver(w, r, ss, body, msgs)
}

// postSession returns the session a POST goes to: the one it names, a
// new one for an initialize, or the actor's lane for a stateless
// request. It answers the refusal itself when there is none.
func (s *Server) postSession(w http.ResponseWriter, r *http.Request, actor string, body []byte, msgs []*jsonrpc.Message) (*ServerSession, bool) {
	var ss *ServerSession
	var herr *httpError
	isInit := len(msgs) == 1 && msgs[0].IsRequest() && msgs[0].Method == "initialize"
	switch {
	case r.Header.Get(headerSessionID) != "":
		if ss, herr = s.lookup(r, actor); herr != nil {
			writeRefusal(w, herr, jsonrpc.CodeInvalidRequest)
			return nil, false
		}
		if v := ss.batchVersion(r); isBatch(body) && v >= batchlessSince {
			writeRefusal(w, refuse(http.StatusBadRequest, "a session of protocol %s takes one message per POST, not a batch", v), jsonrpc.CodeInvalidRequest)
			return nil, false
		}
		if n := countRequests(msgs); n > s.opts.EventBuffer {
			// After the lookup: a client of an unknown session is told
			// so, not to send a smaller batch there. A session owes at
			// most EventBuffer answers at once (admitLocked), so this
			// one would never fit.
			writeRefusal(w, refuse(http.StatusBadRequest, "the batch holds %d requests, more than the %d answers a session owes at once: send at most %d in one batch", n, s.opts.EventBuffer, s.opts.EventBuffer), jsonrpc.CodeInvalidRequest)
			return nil, false
		}
	case isInit:
		// The Mcp-Session-Id goes with the answer, if it is a result
		// (answer, answerJSON).
		if ss, herr = s.startSession(actor, r.RemoteAddr); herr != nil {
			writeRefusal(w, herr, jsonrpc.CodeInternalError)
			return nil, false
		}
	default:
		return s.statelessLane(w, r, actor, body, msgs)
	}
	return ss, true
}

// holdsInitialize reports whether msgs hold an initialize request.
func holdsInitialize(msgs []*jsonrpc.Message) bool {
	for _, m := range msgs {
		if m.IsRequest() && m.Method == "initialize" {
			return true
		}
	}
	return false
}

// statelessLane returns the actor's lane for a POST that names no session
// and is no initialize, if it is a stateless request whose headers agree
// with its body. It answers the refusal itself when it is not.
func (s *Server) statelessLane(w http.ResponseWriter, r *http.Request, actor string, body []byte, msgs []*jsonrpc.Message) (*ServerSession, bool) {
	stateless, herr := isStateless(r, msgs)
	switch {
	case herr != nil:
		writeRefusal(w, herr, jsonrpc.CodeInvalidRequest)
		return nil, false
	case !stateless && holdsInitialize(msgs):
		// MCP 2025-03-26, lifecycle: the initialize request must not be
		// part of a batch. Saying a session is required would send the
		// client to the initialize it just sent.
		writeRefusal(w, refuse(http.StatusBadRequest, "initialize starts a session alone: send it in a POST of its own, not in a batch"), jsonrpc.CodeInvalidRequest)
		return nil, false
	case !stateless:
		writeRefusal(w, refuse(http.StatusBadRequest, "Mcp-Session-Id is required: start a session with initialize"), jsonrpc.CodeInvalidRequest)
		return nil, false
	case len(msgs) != 1 || isBatch(body):
		writeRefusal(w, refuse(http.StatusBadRequest, "a %s request is one message, not a batch", statelessSince), jsonrpc.CodeInvalidRequest)
		return nil, false
	case msgs[0].IsResponse():
		// Else refused for its missing Mcp-Method, under its id, which
		// its client would read as the answer to a request of its own.
		writeRefusal(w, refuse(http.StatusBadRequest, "an answer without an Mcp-Session-Id answers nothing: no request of the server's reaches a %s client without a session", statelessSince), jsonrpc.CodeInvalidRequest)
		return nil, false
	}
	if herr := checkStatelessHeaders(r, msgs[0]); herr != nil {
		writeRefusal(w, herr, codeHeaderMismatch)
		return nil, false
	}
	if herr := checkStatelessVersion(msgs[0]); herr != nil {
		writeRefusal(w, herr, jsonrpc.CodeInvalidRequest)
		return nil, false
	}
	ss, herr := s.lane(actor, r.RemoteAddr)
	if herr != nil {
		writeRefusal(w, herr, jsonrpc.CodeInternalError)
		return nil, false
	}
	return ss, true
}

// get handles a GET: the standing stream for messages the server starts,
// or, with Last-Event-ID, the rest of a stream the client lost.
func (s *Server) get(w http.ResponseWriter, r *http.Request, actor string) {
	if !accepts(r, "text/event-stream") {
		writeRefusal(w, refuse(http.StatusNotAcceptable, "Accept must list text/event-stream"), jsonrpc.CodeInvalidRequest)
		return
	}
	if r.Header.Get(headerSessionID) == "" {
		writeRefusal(w, &httpError{status: http.StatusMethodNotAllowed,
			msg:    "GET needs an Mcp-Session-Id: there is no stream without a session",
			header: http.Header{"Allow": {"POST"}}}, jsonrpc.CodeInvalidRequest)
		return
	}
	ss, herr := s.lookup(r, actor)
	if herr != nil {
		writeRefusal(w, herr, jsonrpc.CodeInvalidRequest)
		return
	}
	ss.begin()
	defer ss.end()

	st, from, gen, herr := s.getStream(r, ss)
	if herr != nil {
		writeRefusal(w, herr, jsonrpc.CodeInvalidRequest)
		return
	}
	if r.Header.Get(headerLastEventID) == "" && r.Header.Get(headerProtocolVersion) >= primingVersion {
		// The GET stream opens with a priming event too, as a POST's
		// does: a quiet stream gives the client no other id. With it, a
		// client whose connection died unseen (no FIN, so this server
		// still writes to it) takes the stream over with Last-Event-ID,
		// where a GET without one gets 409 until a write fails.
		ss.mu.Lock()
		ss.appendLocked(st, nil)
		ss.mu.Unlock()
	}
	openStream(w)
	s.pumpAs(w, r, ss, st, from, gen)
}

// getStream returns the stream a GET writes, the sequence number it
// writes from, and the generation of the writer it makes for it
// (claimLocked), which pumpAs releases: with Last-Event-ID, the stream
// that event belongs to, from the event after it; else the standing GET
// stream, unless another GET writes it already.
func (s *Server) getStream(r *http.Request, ss *ServerSession) (*stream, int64, int64, *httpError) {
	last := r.Header.Get(headerLastEventID)
	if last == "" {
		ss.mu.Lock()
		defer ss.mu.Unlock()
		st := ss.getStreamLocked()
		if st.writer != 0 {
			return nil, 0, 0, refuse(http.StatusConflict, "the session's GET stream is already open")
		}
		// Claimed under the lock that saw it free: two GETs that come at
		// once would both find it so, and the later take it over from
		// the earlier, which the client had been told was open.
		return st, st.sent, ss.claimLocked(st), nil
	}
	num, seq, ok := parseEventID(last)
	var st *stream
	ss.mu.Lock()
	if ok {
		st = ss.streams[num]
	}
	// The event must be one the stream has had (an id past its end would
	// make the resumed stream skip every later event), and the events
	// after it must all be held still, or be none.
	held := st != nil && seq < st.next && seq+1 >= st.gone
	// One it never sent is told so: "not held any more" would send the
	// client looking for a buffer it overran.
	sent := ok && num >= 1 && num <= ss.nextStream && (st == nil || seq < st.next)
	var gen int64
	if sent && held {
		// The resume takes the stream over now, not at its first
		// write: its answers are pinned from here, and a writer before
		// it that lets go meanwhile does not unpin them; else one that
		// came in between could be evicted, and lost to the client
		// resuming for it. pumpAs releases the stream.
		gen = ss.claimLocked(st)
	}
	ss.mu.Unlock()
	switch {
	case !sent:
		return nil, 0, 0, refuse(http.StatusBadRequest, "event %q is not one this session sent: resume from the id of an event it did, or send the request again", last)
	case !held:
		return nil, 0, 0, refuse(http.StatusBadRequest, "event %q is not held any more (a session holds its last %d events): send the request again", last, s.opts.EventBuffer)
	}
	s.log.Debug("client resumes a stream", "session", ss.id, "last_event_id", last)
	return st, seq + 1, gen, nil
}

// delete handles a DELETE: the client ends its session.
func (s *Server) delete(w http.ResponseWriter, r *http.Request, actor string) {
	if r.Header.Get(headerSessionID) == "" {
		writeRefusal(w, refuse(http.StatusBadRequest, "DELETE needs the Mcp-Session-Id of the session to end"), jsonrpc.CodeInvalidRequest)
		return
	}
	ss, herr := s.lookup(r, actor)
	if herr != nil {
		writeRefusal(w, herr, jsonrpc.CodeInvalidRequest)
		return
	}
	s.log.Info("session deleted by the client", "session", ss.id)
	ss.closeFor(EndDeleted)
	s.mu.Lock()
	delete(s.sessions, ss.id)
	s.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}
