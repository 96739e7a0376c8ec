package cli

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode"

	"github.com/mcp-idempotent/mcp-idempotent/internal/journal"
	"github.com/mcp-idempotent/mcp-idempotent/internal/proxy"
	"github.com/mcp-idempotent/mcp-idempotent/internal/transport/streamhttp"
)

// serveFlags are the flags of the serve command: the proxy's, and the
// HTTP front's.
type serveFlags struct {
	*proxyFlags
	listen       string
	path         string
	origins      stringsFlag
	hosts        stringsFlag
	tokenFile    string
	maxSessions  int
	maxBodyReads int
	idleTimeout  time.Duration
	keepAlive    time.Duration
	jsonResponse bool
}

// stringsFlag collects a repeatable flag's values.
type stringsFlag []string

func (s *stringsFlag) String() string     { return strings.Join(*s, ",") }
func (s *stringsFlag) Set(v string) error { *s = append(*s, v); return nil }

func newServeFlags(stderr io.Writer) *serveFlags {
	f := &serveFlags{proxyFlags: newProxyFlags(stderr)}
	fs := f.fs
	fs.Init("mcp-idempotent serve", flag.ContinueOnError)
	fs.StringVar(&f.listen, "listen", "127.0.0.1:8080", "the `ADDR` (host:port) to serve MCP on; keep it loopback unless clients on other hosts need it, and then set --auth-token-file")
	fs.StringVar(&f.path, "path", "/mcp", "the URL path of the MCP endpoint")
	fs.Var(&f.origins, "allow-origin", "an Origin to accept besides the loopback ones, as https://app.example.com, or * for any (repeatable); a browser page from any other origin gets 403")
	fs.Var(&f.hosts, "allow-host", "a Host name to accept besides loopback names, the --listen host and the --allow-origin hosts (repeatable); any other Host gets 403 (DNS rebinding)")
	fs.StringVar(&f.tokenFile, "auth-token-file", "", "require a bearer token: `FILE` has one 'TOKEN ACTOR' per line (# starts a comment); the actor enters every fingerprint but a scope: global tool's, so two tokens share no other execution")
	fs.IntVar(&f.maxSessions, "max-sessions", 100, "the most client sessions open at once (each has its own upstream); one more gets 503, and the session idle longest, if a minute or more, is ended to make room")
	fs.IntVar(&f.maxBodyReads, "max-body-reads", streamhttp.DefaultMaxBodyReads, "the most request bodies read at once, each at most --max-message-size; more get 503 unread (requests being answered and open streams do not count)")
	fs.DurationVar(&f.idleTimeout, "idle-timeout", streamhttp.DefaultIdleTimeout, "end a session (and stop its upstream) after this long with no request or stream open, answers owed or not; with the session scope, a retry after that runs again")
	fs.DurationVar(&f.keepAlive, "keep-alive", streamhttp.DefaultKeepAlive, "write an SSE comment on a stream that has sent nothing for this long, so that clients and proxies that drop a silent response (Node's fetch after 5m) keep it through a long call; 0 sends none")
	fs.BoolVar(&f.jsonResponse, "json-response", false, "answer each POST with one JSON body instead of an SSE stream (no progress on the request's stream, no resumption)")
	return f
}

const serveUsage = `mcp-idempotent serve is a Streamable HTTP MCP server in front of an MCP
server: every client session gets its own upstream (a child process, or a
session with the HTTP upstream), and retried tool calls are made safe.

Usage:
  mcp-idempotent serve [flags] -- COMMAND [ARGS...]
  mcp-idempotent serve [flags] --upstream URL

Flags:
`

func runServe(ctx context.Context, args []string, stderr io.Writer) error {
	f := newServeFlags(io.Discard)
	if err := parseFlags(f.fs, args); err != nil {
		return err
	}
	argv := f.fs.Args()
	if err := f.check(argv); err != nil {
		return err
	}
	if len(argv) > 0 {
		// Each session starts its own upstream: a command that cannot
		// start would fail every one of them, with nothing at start to
		// say why.
		if err := checkCommand(argv[0]); err != nil {
			return fmt.Errorf("the upstream command cannot start: %w", err)
		}
	}
	var tokens map[string]string
	if f.tokenFile != "" {
		var err error
		if tokens, err = readTokens(ctx, f.tokenFile); err != nil {
			return fmt.Errorf("--auth-token-file: %w", err)
		}
	}
	host, _, _ := net.SplitHostPort(f.listen)
	hosts := f.hosts
	if ip := net.ParseIP(host); host != "" && (ip == nil || !ip.IsUnspecified()) {
		hosts = append(hosts, strings.ToLower(host))
	}

	w, err := f.wire(ctx, argv, stderr)
	if err != nil {
		return err
	}
	defer w.close()
	warnMisplacedFlags(w.log, f.fs, args, argv)
	f.warnExposed(w.log, host, tokens != nil)
	ln, err := f.listenOn()
	if err != nil {
		return err
	}
	front := streamhttp.NewServer(streamhttp.ServerOptions{
		Open: func(ctx context.Context, s *streamhttp.ServerSession) error {
			who := clientEnd{client: journal.SessionClient{Transport: "http", Remote: s.RemoteAddr()}, endReason: s.EndReason}
			scope := "session:" + s.ID()
			if s.Stateless() {
				// A lane is named for its actor, the same in every serve
				// process: as a session scope alone, it would match a call
				// from any client of the actor, across restarts with a
				// durable store. It is one session while this process
				// runs, as a stdio proxy's process is.
				scope += ":" + w.instance
			} else {
				who.client.MCPSessionID = s.ID()
			}
			return w.session(ctx, s, s.Actor(), scope, who)
		},
		Tokens:       tokens,
		Actor:        w.actor,
		AllowOrigins: f.origins,
		AllowHosts:   hosts,
		MaxSessions:  f.maxSessions,
		MaxBodyReads: f.maxBodyReads,
		IdleTimeout:  f.idleTimeout,
		KeepAlive:    f.keepAliveOption(),
		MaxMessage:   w.maxMessage,
		JSONResponse: f.jsonResponse,
		Logger:       w.log,
	})
	return f.serve(ctx, w, ln, front, tokens != nil)
}

// warnExposed warns of what lets others call the upstream's tools: a
// token file others can read, or no tokens where others can reach serve
// (host, the address it listens on).
func (f *serveFlags) warnExposed(log *slog.Logger, host string, authenticated bool) {
	if mode, open := readableByOthers(f.tokenFile); f.tokenFile != "" && open {
		// As for a signer key: the tokens are the clients' credentials.
		log.Warn("--auth-token-file: the token file is readable by others than its owner: whoever reads it can act for any actor it lists; chmod 600 it", "file", f.tokenFile, "mode", mode.String())
	}
	if !isLoopbackHost(host) && !authenticated {
		log.Warn("serving on a non-loopback address without --auth-token-file: anyone who can reach it can call the upstream's tools", "listen", f.listen)
	}
	if slices.Contains(f.origins, "*") && !authenticated {
		// The browser reaches a loopback address for the page, so the
		// Host check does not stop it: only a token would.
		log.Warn("--allow-origin * without --auth-token-file: any web page opened in a browser that can reach serve can call the upstream's tools")
	}
}

// check checks serve's own flags and the upstream.
func (f *serveFlags) check(argv []string) error {
	if err := f.checkUpstream("mcp-idempotent serve", argv); err != nil {
		return err
	}
	switch {
	case !strings.HasPrefix(f.path, "/"):
		return usagef("--path: %q must start with /", f.path)
	case strings.ContainsAny(f.path, "?#"):
		// A request's query and fragment never reach its path, so the
		// endpoint could not be reached.
		return usagef("--path: %q is a URL path: it cannot hold ? or #", f.path)
	case strings.ContainsFunc(f.path, unicode.IsControl):
		// A line break or a tab from a quoting slip: only a client that
		// percent-encodes it could reach the endpoint.
		return usagef("--path: %q holds a control character", f.path)
	case f.maxSessions <= 0:
		return usagef("--max-sessions: %d must be positive", f.maxSessions)
	case f.maxBodyReads <= 0:
		return usagef("--max-body-reads: %d must be positive", f.maxBodyReads)
	case f.idleTimeout < time.Second:
		// The reaper looks each second at best, so a shorter timeout
		// would not be kept; and one that short ends a session between
		// its client's requests, the initialize and the next.
		return usagef("--idle-timeout: %v is too short; it must be at least 1s", f.idleTimeout)
	case f.keepAlive < 0:
		return usagef("--keep-alive: %v must not be negative; 0 sends no keep-alive", f.keepAlive)
	case f.keepAlive > 0 && f.keepAlive < time.Second:
		// A comment each few milliseconds on every stream is load for
		// nothing: no client or proxy drops a stream that fast.
		return usagef("--keep-alive: %v is too short; it must be at least 1s, or 0 for none", f.keepAlive)
	}
	if err := checkAddr("--listen", f.listen); err != nil {
		return err
	}
	if f.upstream != "" && servesItself(f.listen, f.path, f.upstream) {
		return usagef("--upstream %s is serve's own endpoint, at --listen %s and --path %s: each session would open another as its upstream", redact(f.upstream), f.listen, f.path)
	}
	if f.metrics != "" && sameBind(f.metrics, f.listen) {
		// --metrics listens first: --listen alone would be named, as
		// if another program held its port.
		return usagef("--listen %s and --metrics %s are on the same port: give each its own", f.listen, f.metrics)
	}
	for _, o := range f.origins {
		if err := checkOrigin(o); err != nil {
			return usagef("--allow-origin: %q %v", o, err)
		}
	}
	for _, h := range f.hosts {
		if strings.Trim(h, ".") == "" || strings.ContainsAny(h, "/ \t@?#") {
			return usagef("--allow-host: %q is not a host name, such as app.example.com", h)
		}
		if _, _, err := net.SplitHostPort(h); err == nil {
			// The Host check compares names, whatever the port: one
			// given with its port would never match, and refuse the
			// very clients it was given for.
			return usagef("--allow-host: %q has a port: give the host name alone, such as app.example.com; any port passes", h)
		}
	}
	return nil
}

// listenOn listens on --listen.
func (f *serveFlags) listenOn() (net.Listener, error) {
	ln, err := net.Listen("tcp", f.listen)
	if err != nil && errors.Is(err, syscall.EADDRINUSE) && samePort(f.listen, f.metrics) {
		// The same address by a name, which sameBind does not resolve:
		// localhost and 127.0.0.1.
		return nil, fmt.Errorf("--listen: %w; --metrics %s is on the same port: give each its own", err, f.metrics)
	}
	if err != nil {
		return nil, fmt.Errorf("--listen: %w", err)
	}
	return ln, nil
}

// keepAliveOption is --keep-alive as ServerOptions.KeepAlive takes it,
// where zero is the default and a negative value sends none.
func (f *serveFlags) keepAliveOption() time.Duration {
	if f.keepAlive == 0 {
		return -1
	}
	return f.keepAlive
}

// serve serves front on ln until ctx ends or the server fails, then ends
// the sessions and stops.
func (f *serveFlags) serve(ctx context.Context, w *wiring, ln net.Listener, front *streamhttp.Server, auth bool) error {
	srv := &http.Server{Handler: front.Handler(f.path), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
	reaping, stopReaping := context.WithCancel(ctx)
	defer stopReaping()
	go front.RunReaper(reaping, min(max(f.idleTimeout/4, time.Second), time.Minute))

	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	u, listen := servedURL(f.listen, ln.Addr(), f.path)
	w.log.Info("serving MCP over Streamable HTTP", "url", u, "listen", listen, "auth", auth)
	var err error
	select {
	case err = <-served:
	case <-ctx.Done():
		// Listen before saying so: a second signal sent on reading the
		// line must find the listener in place.
		defer hurryOnSignal(ctx, front.Hurry)()
		w.log.Info("stopping: calls under way have up to " + proxy.DefaultShutdownGrace.String() + " to finish; signal again to stop them now")
	}
	// End the sessions first: their open streams would keep Shutdown
	// waiting. Each session's calls under way settle, and its upstream
	// stops.
	front.Close()
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	srv.Shutdown(shutdown)
	// The requests that ended since may have found answers lost: their
	// reports write to the journal, which closes once serve returns.
	front.Close()
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

// servedURL returns a URL a client on this host can paste to reach the
// endpoint, and the --listen address with the port the listener got (the
// one the OS chose for port 0). The URL keeps the --listen host, as the
// Host check accepts it, except one that means every interface (none,
// 0.0.0.0 or ::): that is no address to connect to, and the Host check
// refuses it, so the URL names loopback instead. The listener's own
// address will not do: Go reports 0.0.0.0 as [::], and a name as the
// address it resolved to, which the Host check refuses.
func servedURL(listenFlag string, addr net.Addr, path string) (u, listen string) {
	host, port, _ := net.SplitHostPort(listenFlag)
	if a, ok := addr.(*net.TCPAddr); ok {
		port = strconv.Itoa(a.Port)
	}
	listen = net.JoinHostPort(host, port)
	switch ip := net.ParseIP(host); {
	case host == "", ip != nil && ip.Equal(net.IPv4zero):
		host = "127.0.0.1"
	case ip != nil && ip.IsUnspecified():
		host = "::1"
	}
	return (&url.URL{Scheme: "http", Host: net.JoinHostPort(host, port), Path: path}).String(), listen
}

func isLoopbackHost(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// checkAddr checks that the value of flag is host:port, the port a number
// from 0 to 65535 or a service name: a usage error if not.
func checkAddr(flag, addr string) error {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return usagef("%s: %q is not host:port: %v", flag, addr, err)
	}
	if port == "" {
		// The listener would take it as port 0 and pick one, where
		// `127.0.0.1:$PORT` with PORT not set meant a port of its own.
		return usagef("%s: %q has no port, as an unset shell variable after the colon gives: give the port, or 0 to pick one", flag, addr)
	}
	if _, err := net.LookupPort("tcp", port); err != nil {
		return usagef("%s: %q: %v", flag, addr, err)
	}
	return nil
}

// checkOrigin checks that o is * or an origin as browsers send it: a
// scheme (http or https), a host and maybe a port, nothing more.
func checkOrigin(o string) error {
	if o == "*" {
		return nil
	}
	u, err := url.Parse(o)
	switch {
	case err != nil:
		return fmt.Errorf("is not an origin: %v", err)
	case u.Scheme != "http" && u.Scheme != "https", u.Host == "", u.User != nil,
		u.Path != "", u.RawQuery != "", u.Fragment != "", strings.HasSuffix(o, "?") || strings.HasSuffix(o, "#"):
		return errors.New("is not an origin such as https://app.example.com or http://localhost:3000, or *")
	}
	if p := u.Port(); p != "" {
		// url.Parse takes any digits: a port no browser could be on
		// would match no Origin, and the flag pass nothing.
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return fmt.Errorf("has port %s: a port is from 1 to 65535", p)
		}
	}
	return nil
}

// readTokens reads a token file: one "TOKEN ACTOR" per line; blank lines
// and lines starting with # are skipped.
func readTokens(ctx context.Context, path string) (map[string]string, error) {
	b, err := readText(ctx, path)
	if err != nil {
		return nil, err
	}
	tokens := make(map[string]string)
	sc := bufio.NewScanner(bytes.NewReader(b))
	// Any line of a file readText takes: the default bound, 64KiB, made
	// a long token fail as "bufio.Scanner: token too long", naming no line.
	sc.Buffer(nil, maxTextFile+1)
	for n := 1; sc.Scan(); n++ {
		fields := strings.Fields(sc.Text())
		// A field that starts with # starts a comment, to the end of the
		// line: "tok-a alice # laptop".
		for i, f := range fields {
			if strings.HasPrefix(f, "#") {
				fields = fields[:i]
				break
			}
		}
		if len(fields) == 0 {
			continue
		}
		if len(fields) != 2 {
			return nil, fmt.Errorf("%s:%d: want 'TOKEN ACTOR', two fields, not %d", path, n, len(fields))
		}
		if _, dup := tokens[fields[0]]; dup {
			return nil, fmt.Errorf("%s:%d: the token is listed twice", path, n)
		}
		if err := checkActor(fields[1]); err != nil {
			// Not shown: in a line with its fields swapped, it
			// would be the token.
			return nil, fmt.Errorf("%s:%d: the actor %v", path, n, err)
		}
		tokens[fields[0]] = fields[1]
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	if len(tokens) == 0 {
		return nil, fmt.Errorf("%s lists no token: add lines of 'TOKEN ACTOR'", path)
	}
	return tokens, nil
}
