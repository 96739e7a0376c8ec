// Package cli parses the command line and wires the concrete parts
// together. It is the only package that does.
package cli

import (
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	neturl "net/url"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel/trace"

	"github.com/mcp-idempotent/mcp-idempotent/internal/fingerprint"
	"github.com/mcp-idempotent/mcp-idempotent/internal/intercept"
	"github.com/mcp-idempotent/mcp-idempotent/internal/journal"
	"github.com/mcp-idempotent/mcp-idempotent/internal/metrics"
	"github.com/mcp-idempotent/mcp-idempotent/internal/policy"
	"github.com/mcp-idempotent/mcp-idempotent/internal/proxy"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
	"github.com/mcp-idempotent/mcp-idempotent/internal/telemetry"
	"github.com/mcp-idempotent/mcp-idempotent/internal/transport/stdio"
)

// Version is the program's version, set at build time with
// -ldflags "-X github.com/mcp-idempotent/mcp-idempotent/internal/cli.Version=...".
var Version = "dev"

// A usageError is a mistake on the command line. cmd is the command
// whose usage it refers to ("" for the proxy itself); Run sets it.
type usageError struct{ cmd, msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

// UsageHint returns the line that follows a command-line mistake's
// message, saying where the usage is; "" for any other error.
func UsageHint(err error) string {
	u, ok := errors.AsType[*usageError](err)
	if !ok {
		return ""
	}
	return fmt.Sprintf("Run '%s --help' for usage.", strings.TrimSpace("mcp-idempotent "+u.cmd))
}

// wantsHelp reports whether args ask for help: -h, -help or --help before
// any --, or help alone.
func wantsHelp(args []string) bool {
	if len(args) == 1 && args[0] == "help" {
		return true
	}
	for _, a := range args {
		switch a {
		case "--":
			return false
		case "-h", "-help", "--help":
			return true
		}
	}
	return false
}

// askedHelp reports whether args ask for help, and the command whose
// usage answers ("" for the proxy's).
func askedHelp(args []string) (cmd string, ok bool) {
	if len(args) == 0 {
		return "", false
	}
	switch cmd, rest := args[0], args[1:]; cmd {
	case "serve":
		ok := len(rest) == 1 && rest[0] == "help"
		return cmd, ok || helpBeforeCommand(newServeFlags(io.Discard).fs, rest)
	case "policy":
		if len(rest) > 0 && rest[0] == "show" {
			fs, _, _ := newPolicyShowFlags()
			return cmd, helpBeforeCommand(fs, rest[1:])
		}
		return cmd, wantsHelp(rest)
	case "demo", "activity", "audit", "version":
		return cmd, wantsHelp(rest)
	}
	if len(args) == 1 && args[0] == "help" {
		return "", true
	}
	return "", helpBeforeCommand(newProxyFlags(io.Discard).fs, args)
}

// helpBeforeCommand reports whether args ask for help among the flags
// fs reads: -h, -help or --help before the upstream command. The flags
// end, as for fs.Parse, at -- or at the first word that is neither a
// flag nor a flag's value; the words after it are the command's, so
// `mcp-idempotent srv -h 127.0.0.1` starts srv with its own -h.
func helpBeforeCommand(fs *flag.FlagSet, args []string) bool {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" || len(a) < 2 || a[0] != '-' {
			return false
		}
		name, _, hasValue := strings.Cut(strings.TrimPrefix(a[1:], "-"), "=")
		if name == "h" || name == "help" {
			return true
		}
		f := fs.Lookup(name)
		if f == nil || hasValue {
			continue
		}
		if !isBoolFlag(f) {
			i++ // the flag's value, whatever it looks like
		}
	}
	return false
}

// ExitCode maps an error from Run to the process exit status: 2 for a
// command-line mistake, 1 otherwise.
func ExitCode(err error) int {
	var u *usageError
	if errors.As(err, &u) {
		return 2
	}
	return 1
}

const usage = `mcp-idempotent makes retried MCP tool calls safe: a retry attaches to the
execution that already happened instead of running the tool again.

Usage:
  mcp-idempotent [flags] -- COMMAND [ARGS...]   proxy a stdio MCP server
  mcp-idempotent [flags] --upstream URL        proxy a Streamable HTTP MCP server
  mcp-idempotent serve --listen ADDR [flags] (-- COMMAND... | --upstream URL)
                                               serve MCP over Streamable HTTP
  mcp-idempotent demo                          show the problem and the fix
  mcp-idempotent policy check FILE             validate a policy file
  mcp-idempotent policy show [--policy FILE] [--scope S] -- COMMAND [ARGS...]
                                               the effective policy of each tool
  mcp-idempotent activity list|show|resolve|approve|deny --store URL ...
                                               what the executions in a store did
  mcp-idempotent audit verify|checkpoint|keygen ...
                                               check an activity journal and its signed
                                               checkpoints; make a key to sign them
  mcp-idempotent version                       print the version

Flags:
`

// Run runs the program with args (without the program name).
func Run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	if _, ok := stderr.(*os.File); !ok {
		// The logger and the upstream's stderr copier both write to it.
		// (A file is handed to the child as it is, and its writes are
		// atomic.)
		stderr = &lockedWriter{w: stderr}
	}
	cmd, err := "", error(nil)
	if len(args) > 0 {
		cmd = args[0]
	}
	if help, ok := askedHelp(args); ok {
		fmt.Fprint(stdout, commandUsage(help))
		return nil
	}
	switch cmd {
	case "demo":
		err = runDemo(ctx, args[1:], stdout, stderr)
	case "serve":
		err = runServe(ctx, args[1:], stderr)
	case "policy":
		err = runPolicy(ctx, args[1:], stdout, stderr)
	case "activity":
		err = runOutput(stdout, func(stdout io.Writer) error { return runActivity(ctx, args[1:], stdout, stderr) })
	case "audit":
		err = runOutput(stdout, func(stdout io.Writer) error { return runAudit(ctx, args[1:], stdout, stderr) })
	case "version":
		if len(args) > 1 {
			err = usagef("version takes no arguments; got %q", args[1])
			break
		}
		fmt.Fprintln(stdout, "mcp-idempotent", Version)
	default:
		cmd = ""
		err = runProxy(ctx, args, stdin, stdout, stderr)
	}
	if u, ok := errors.AsType[*usageError](err); ok && u.cmd == "" {
		u.cmd = cmd
	}
	if err != nil && printable(err.Error()) != err.Error() {
		err = &printableError{err}
	}
	return err
}

// commandUsage is the help of cmd ("" for the proxy itself).
func commandUsage(cmd string) string {
	var b strings.Builder
	switch cmd {
	case "":
		b.WriteString(usage)
		newProxyFlags(&b).fs.PrintDefaults()
	case "serve":
		b.WriteString(serveUsage)
		newServeFlags(&b).fs.PrintDefaults()
	case "policy":
		b.WriteString(policyUsage)
	case "activity":
		b.WriteString(activityHelp())
	case "audit":
		b.WriteString(auditUsage)
	case "demo":
		b.WriteString("Usage:\n  mcp-idempotent demo    play a client that loses an answer and retries, without the proxy and with it\n")
	case "version":
		b.WriteString("Usage:\n  mcp-idempotent version    print the version\n")
	}
	return b.String()
}

// proxyFlags are the flags of the proxy command.
type proxyFlags struct {
	fs         *flag.FlagSet
	logLevel   string
	logFormat  string
	maxMessage string
	actor      string
	policy     string
	scope      string
	store      string
	upstream   string
	headers    headerFlags
	lease      time.Duration
	restarts   int
	window     time.Duration
	metrics    string
	journal    string
	journalKey string
	ckptLines  int
	ckptEvery  time.Duration
	shadow     bool
}

func newProxyFlags(stderr io.Writer) *proxyFlags {
	f := &proxyFlags{fs: flag.NewFlagSet("mcp-idempotent", flag.ContinueOnError)}
	// Only PrintDefaults writes, for commandUsage; a mistake is an error
	// that Run returns, with a hint, not the whole usage.
	f.fs.SetOutput(stderr)
	f.fs.Usage = func() {}
	f.fs.StringVar(&f.logLevel, "log-level", "info", "log level: debug, info, warn or error (logs go to stderr)")
	f.fs.StringVar(&f.logFormat, "log-format", "text", "log format: text or json")
	f.fs.StringVar(&f.maxMessage, "max-message-size", "16MiB", "largest JSON-RPC message accepted, in bytes (suffixes KiB, MiB, GiB)")
	f.fs.StringVar(&f.actor, "actor", "", "who the calls are made for; part of every fingerprint but a scope: global tool's (default: the OS user)")
	f.fs.StringVar(&f.policy, "policy", "", "the policy `FILE` (YAML): each tool's replay contract; see `mcp-idempotent policy check`")
	f.fs.StringVar(&f.scope, "scope", "", "the default intent scope: session (default), actor or key; a scope in the policy file wins")
	f.fs.StringVar(&f.upstream, "upstream", "", "a Streamable HTTP MCP server's `URL` to proxy, instead of a command after --")
	f.fs.Var(&f.headers, "upstream-header", "a header for every request to --upstream, as 'Name: value' (repeatable; values are never logged)")
	f.fs.StringVar(&f.store, "store", "memory", "where execution records live: memory; sqlite:PATH[?sync=full] (durable, shared on one host); redis://HOST:PORT/DB[?prefix=P] or rediss://... (shared across hosts; &master_name=M behind Sentinel, ?cluster=true on a Redis Cluster); postgres://...[&schema=S] (shared, durable, queryable)")
	f.fs.IntVar(&f.restarts, "max-restarts", 5, "start the upstream again when it exits, at most this many times within --restart-window; 0 ends the session when it exits")
	f.fs.DurationVar(&f.window, "restart-window", time.Minute, "the window of --max-restarts: more exits within it are a crash loop, which ends the session")
	f.fs.DurationVar(&f.lease, "lease", 30*time.Second, "how long an execution stays claimed by this process without renewal; a crashed proxy's executions are taken over after it")
	f.fs.StringVar(&f.journal, "journal", "", "append one hash-chained JSON line per execution transition to `FILE` (created mode 0600; one proxy process per file); arguments and results appear as each tool's policy says (default: arguments hashed, results redacted); check it with `mcp-idempotent audit verify FILE`")
	f.fs.StringVar(&f.journalKey, "journal-key", "", "sign the --journal with checkpoints, using the signer key in `FILE` (made by `mcp-idempotent audit keygen`); check them with `mcp-idempotent audit verify --key`")
	f.fs.IntVar(&f.ckptLines, "journal-checkpoint-lines", journal.DefaultCheckpointLines, "with --journal-key, append a checkpoint once this many journal lines follow the last one")
	f.fs.DurationVar(&f.ckptEvery, "journal-checkpoint-every", journal.DefaultCheckpointEvery, "with --journal-key, append a checkpoint this long after a line no checkpoint covers, if --journal-checkpoint-lines has not come first; and one at a clean stop")
	f.fs.BoolVar(&f.shadow, "shadow", false, "shadow mode: every call goes upstream as it came, and the proxy records, counts (mcp_idempotent_shadow_decisions_total), logs and journals what it would have done; to learn before letting it change anything")
	f.fs.StringVar(&f.metrics, "metrics", "", "serve Prometheus metrics at http://`ADDR`/metrics (host:port; it binds where told, so 127.0.0.1:9464 keeps them on this host); off when left out")
	return f
}

func runProxy(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	f := newProxyFlags(io.Discard)
	if err := parseFlags(f.fs, args); err != nil {
		return err
	}
	if err := f.checkUpstream("mcp-idempotent", f.fs.Args()); err != nil {
		return err
	}
	if argv := f.fs.Args(); len(argv) > 0 {
		// As for serve: a script whose interpreter is missing starts,
		// and fails as "no such file" naming the script, or exits at
		// once through env, again at every restart.
		if err := checkCommand(argv[0]); err != nil {
			switch {
			case len(argv) == len(args):
				// The first word, taken as a command: perhaps a
				// mistyped command name.
				err = suggestCommand(err, argv[0])
			case args[len(args)-len(argv)-1] != "--":
				// After flags: perhaps a command given its flags
				// before its name.
				err = commandAfterFlags(err, argv[0])
			}
			return fmt.Errorf("the upstream command cannot start: %w", err)
		}
	}
	w, err := f.wire(ctx, f.fs.Args(), stderr)
	if err != nil {
		return err
	}
	defer w.close()
	warnMisplacedFlags(w.log, f.fs, args, f.fs.Args())
	scope := "session:" + strings.TrimPrefix(record.NewID(time.Now()), "exe_")
	who := clientEnd{client: journal.SessionClient{Transport: "stdio", Parent: parentProcess()}}
	if f, ok := stdin.(*os.File); ok {
		in, done := stdio.Pollable(f, os.O_RDONLY)
		defer done()
		stdin = in
	}
	if f, ok := stdout.(*os.File); ok {
		out, done := stdio.Pollable(f, os.O_WRONLY)
		defer done()
		stdout = out
	}
	return w.session(ctx, stdio.NewConn(stdin, stdout, w.maxMessage), w.actor, scope, who)
}

// checkUpstream checks that the upstream is named once: a command after
// -- or --upstream URL. command is how the usage names the command run,
// for the example in the error.
func (f *proxyFlags) checkUpstream(command string, argv []string) error {
	switch {
	case f.upstream != "" && len(argv) > 0:
		return usagef("--upstream and a command after -- both name the upstream: give one")
	case f.upstream == "" && len(argv) == 0:
		return usagef("no upstream command: put it after --, as in: %s -- node server.js, or give --upstream URL", command)
	case f.upstream == "" && emptyCommand(argv):
		return errEmptyCommand()
	case f.upstream == "" && len(f.headers) > 0:
		return usagef("--upstream-header goes with --upstream")
	case f.upstream != "":
		// At start, for serve too, whose sessions each dial it.
		if u, err := neturl.Parse(f.upstream); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return usagef("--upstream: %q is not an http:// or https:// URL", redact(f.upstream))
		}
		if !utf8.ValidString(f.upstream) {
			// As a header's value: its query enters the identity as
			// JSON text. Not shown: it may hold a credential.
			return usagef("--upstream: the URL is not UTF-8 text: percent-encode its bytes")
		}
	}
	return f.headers.check()
}

// emptyCommand reports whether argv, an upstream command, names no
// program: `-- "$SERVER"` with SERVER not set. Run, it would fail as a
// program "" not found, which says nothing of the variable.
func emptyCommand(argv []string) bool {
	return len(argv) > 0 && strings.TrimSpace(argv[0]) == ""
}

// errEmptyCommand is the usage error of an empty upstream command; a
// new one each time, as Run names its command in it.
func errEmptyCommand() error {
	return usagef("the upstream command is empty, as an unset shell variable after -- gives: give the command")
}

// A wiring is what every session of one proxy process shares: the logger,
// the store, the fingerprint key, the policy and the interceptor.
type wiring struct {
	f          *proxyFlags
	argv       []string // the upstream command, when it is one
	dir        string   // the working directory it runs in
	stderr     io.Writer
	log        *slog.Logger
	maxMessage int
	actor      string // the actor of a session that names none
	hasher     *fingerprint.Hasher
	resolve    proxy.Resolver
	in         *intercept.Interceptor
	// started is in, once made: the store's purges, which run on its
	// own goroutines, tell it of the orphans they settle.
	started atomic.Pointer[intercept.Interceptor]
	tracer  trace.Tracer // nil when no OTEL_* variable asks for traces
	// instance sets this process's own request ids upstream apart from
	// those of another mcp-idempotent before or behind it.
	instance string
	// toolWarnings has a warning of a tool's policy said once a process.
	toolWarnings *proxy.ToolWarnings
	closers      []func()
}

// close releases what wire opened, in reverse order.
func (w *wiring) close() {
	for i := len(w.closers) - 1; i >= 0; i-- {
		w.closers[i]()
	}
}

// wire checks the flags and builds what the sessions share. On success the
// caller must call close.
func (f *proxyFlags) wire(ctx context.Context, argv []string, stderr io.Writer) (w *wiring, err error) {
	// Eight base32 letters and digits: a proxy before this one would need
	// luck of one in 2^40 to use the same.
	w = &wiring{f: f, argv: argv, stderr: stderr, instance: strings.ToLower(rand.Text()[:8]), toolWarnings: proxy.NewToolWarnings()}
	built := w // what to release on failure, once w is nil
	defer func() {
		if err != nil {
			built.close()
		}
	}()
	if w.log, err = newLogger(stderr, f.logLevel, f.logFormat); err != nil {
		return nil, err
	}
	if err := w.checkFlags(); err != nil {
		return nil, err
	}
	f.headers.warnSentAnyway(w.log)
	if err := w.startTracing(ctx); err != nil {
		return nil, err
	}
	obs, err := w.serveMetrics(ctx)
	if err != nil {
		return nil, err
	}
	resolve, policyFile, err := newResolver(ctx, f.policy, f.scope)
	if err != nil {
		return nil, err
	}
	w.resolve = resolve
	store, durable, err := openStore(ctx, f.store, w.log, false, func(o *record.Record) {
		// An orphan no call met, settled by a purge: journaled here, as
		// a takeover a call makes is.
		if in := w.started.Load(); in != nil {
			in.JournalOrphan(o)
		}
	})
	if err != nil {
		return nil, err
	}
	if durable != nil {
		w.closers = append(w.closers, func() { durable.Close() })
	}
	if err := f.checkApprovals(policyFile, durable != nil); err != nil {
		return nil, err
	}
	secretCtx, stopSecret := context.WithCancel(ctx)
	w.closers = append(w.closers, stopSecret)
	if w.hasher, err = newHasher(secretCtx, durable, w.log.With("store", redact(f.store)), f.shadow); err != nil {
		return nil, err
	}
	// Last of the files: a start refused for a flag or the store leaves
	// no empty journal behind.
	jw, err := w.openJournal(ctx)
	if err != nil {
		return nil, err
	}
	w.startInterceptor(ctx, w.interceptOptions(store, durable != nil, policyFile, jw, obs), obs)
	return w, nil
}

// checkApprovals refuses a policy whose approvals could not be kept: an
// operator's under the memory store, which no operator reaches, or any
// under scope key. In shadow mode nobody is asked, so the file can be
// tried as it is.
func (f *proxyFlags) checkApprovals(policyFile *policy.File, durable bool) error {
	if f.shadow {
		return nil
	}
	if tools := policyFile.OperatorApproved(); len(tools) > 0 && !durable {
		return usagef("--policy: %s asks an operator for approval, and the memory store lives inside this process, "+
			"where no operator reaches it: give a durable store (--store sqlite:PATH, redis://... or postgres://...)", strings.Join(tools, ", "))
	}
	if tools := policyFile.KeyScopedApprovals(policy.Scope(f.scope)); len(tools) > 0 {
		return usagef("--scope key: %s asks for approval, and under scope key a call without a client key runs unrecorded, "+
			"where no approval could be kept: give the tool scope session or actor in the policy file", strings.Join(tools, ", "))
	}
	return nil
}

// startTracing starts the OpenTelemetry exporter that the OTEL_*
// variables configure, if they configure one (telemetry.Setup), and
// flushes it when the wiring closes, after everything else.
func (w *wiring) startTracing(ctx context.Context) error {
	tracer, shutdown, err := telemetry.Setup(ctx, Version, w.log)
	if err != nil {
		return fmt.Errorf("OpenTelemetry: %w", err)
	}
	if tracer == nil {
		return nil
	}
	w.tracer = tracer
	w.closers = append(w.closers, func() {
		flush, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := shutdown(flush); err != nil {
			w.log.Warn("flushing traces", "err", err)
		}
	})
	w.log.Debug("tracing with OpenTelemetry")
	return nil
}

// checkFlags checks the flags that need no resource, and takes from them
// the message limit, the actor and the upstream's directory.
func (w *wiring) checkFlags() (err error) {
	f := w.f
	if w.maxMessage, err = parseSize(f.maxMessage); err != nil {
		return usagef("--max-message-size: %v", err)
	}
	if w.maxMessage < minMessage {
		// Below it, every initialize is refused as too large.
		return usagef("--max-message-size: %q is under the smallest size, %d bytes: a client's initialize alone takes some hundreds", f.maxMessage, minMessage)
	}
	w.actor = f.actor
	if w.actor == "" {
		w.actor = osUser()
	} else if err := checkActor(w.actor); err != nil {
		return usagef("--actor: %q %v", w.actor, err)
	}
	if len(w.argv) > 0 {
		if w.dir, err = os.Getwd(); err != nil {
			return fmt.Errorf("the working directory, where the upstream runs: %w", err)
		}
		// The directory, not its spelling: Getwd gives $PWD, which may
		// reach it through a symbolic link, and the identity must not
		// change with the shell it was started from.
		if real, err := filepath.EvalSymlinks(w.dir); err == nil {
			w.dir = real
		}
	}
	switch {
	case f.restarts < 0:
		return usagef("--max-restarts: %d is negative", f.restarts)
	case f.window <= 0:
		return usagef("--restart-window: %v must be positive", f.window)
	case f.restarts > 0 && f.window < proxy.CrashLoopSpan(f.restarts):
		// The waits before restarts spread the exits out: a window
		// shorter than they take never holds a crash loop. Said, not
		// refused: a large --max-restarts is how one asks for restarts
		// without end, and worked so before.
		w.log.Warn("--restart-window cannot hold more than --max-restarts exits, with the waits before the restarts between them: the upstream is started again after every exit, never stopped as a crash loop",
			"restart_window", f.window, "max_restarts", f.restarts)
	case f.lease < time.Second:
		return usagef("--lease: %v is too short; it must be at least 1s", f.lease)
	case f.lease > maxLease:
		return usagef("--lease: %v is too long; it must be at most %v (7 days)", f.lease, maxLease)
	}
	return f.checkJournalFlags()
}

// maxLease bounds --lease. The stores keep when a lease lapses in unix
// nanoseconds, which end in 2262: past it, a lease would read as lapsed
// long ago, and another process take over an execution still running.
// A week is far above any use: a crashed proxy's calls stay in flight
// that long.
const maxLease = 7 * 24 * time.Hour

// checkJournalFlags checks that the checkpoint flags come with what they
// need and are in range.
func (f *proxyFlags) checkJournalFlags() error {
	set := make(map[string]bool)
	f.fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	for _, name := range []string{"journal-checkpoint-lines", "journal-checkpoint-every"} {
		if set[name] && f.journalKey == "" {
			return usagef("--%s goes with --journal-key: without a key there are no checkpoints", name)
		}
	}
	if err := sameJournalKey(f.journal, f.journalKey); err != nil {
		return err
	}
	switch {
	case f.journalKey != "" && f.journal == "":
		return usagef("--journal-key signs the journal's checkpoints: it needs --journal FILE")
	case f.ckptLines < 1:
		return usagef("--journal-checkpoint-lines: %d must be at least 1", f.ckptLines)
	case f.ckptEvery < time.Second:
		return usagef("--journal-checkpoint-every: %v is too short; it must be at least 1s", f.ckptEvery)
	}
	return nil
}

// serveMetrics starts the --metrics server, if there is one, and returns
// what feeds it; nil without one.
func (w *wiring) serveMetrics(ctx context.Context) (*metrics.Metrics, error) {
	addr, log := w.f.metrics, w.log
	if addr == "" {
		return nil, nil
	}
	if err := checkAddr("--metrics", addr); err != nil {
		return nil, err
	}
	// Listen now, so a bad address or a port in use stops the proxy
	// before it opens the store or starts the upstream.
	ln, err := metrics.Listen(addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics: %w", err)
	}
	obs := metrics.New()
	serving, stopServing := context.WithCancel(ctx)
	served := make(chan struct{})
	w.closers = append(w.closers, func() { stopServing(); <-served })
	go func() {
		defer close(served)
		if err := obs.ServeOn(serving, ln, log); err != nil {
			log.Error("metrics server stopped", "addr", addr, "err", err)
		}
	}()
	return obs, nil
}

// openJournal opens the --journal file, if there is one; nil without one.
func (w *wiring) openJournal(ctx context.Context) (*journal.Writer, error) {
	file := w.f.journal
	if file == "" {
		return nil, nil
	}
	opts := journal.Options{CheckpointLines: w.f.ckptLines, CheckpointEvery: w.f.ckptEvery}
	if key := w.f.journalKey; key != "" {
		// Read before the journal is opened: a key that cannot sign
		// leaves no file behind.
		s, err := readSigner(ctx, key)
		if err != nil {
			return nil, fmt.Errorf("--journal-key: %w", err)
		}
		if mode, open := readableByOthers(key); open {
			w.log.Warn("--journal-key: the signer key is readable by others than its owner: whoever reads it can sign checkpoints for a journal they rewrote; chmod 600 it", "file", key, "mode", mode.String())
		}
		opts.Signer = s
	}
	// Opened before the store, so a journal another proxy holds, or one
	// with a torn tail, stops this one before anything runs; and closed
	// after it, so the last transitions, and the checkpoint that covers
	// them, still reach it.
	jw, err := journal.OpenWith(file, opts)
	if err != nil {
		return nil, fmt.Errorf("--journal: %w", err)
	}
	w.closers = append(w.closers, func() {
		if err := jw.Close(); err != nil {
			w.log.Error("closing the activity journal", "file", file, "err", err)
		}
	})
	return jw, nil
}

// startInterceptor makes the interceptor the sessions share and keeps its
// leases until the wiring closes.
func (w *wiring) startInterceptor(ctx context.Context, opts intercept.Options, obs *metrics.Metrics) {
	in := intercept.New(opts)
	if obs != nil {
		obs.WatchAccounts(in.AccountLevels)
	}
	w.in = in
	w.started.Store(in)
	// Not ended by a signal: the calls under way may still finish after
	// one (serve winds its sessions down), and their leases must hold
	// until they have, or another process takes them over.
	leases, stopLeases := context.WithCancel(context.WithoutCancel(ctx))
	w.closers = append(w.closers, stopLeases)
	go in.KeepLeases(leases)
	// Run before the leases stop and the store closes: outcomes a store
	// refused while it was down are still being recorded, and leaving
	// would lose them.
	w.closers = append(w.closers, func() { waitForOutcomes(ctx, in, w.log) })
}

// outcomeWait bounds how long the proxy waits, as it exits, for outcomes
// a store refused to be recorded.
const outcomeWait = 30 * time.Second

// lateReservationWait bounds how long a proxy told to stop waits for a
// slow store's reservations of calls its sessions' ends answered: well
// within the 5 s a Go SDK client gives it before SIGKILL.
const lateReservationWait = 2 * time.Second

// waitForOutcomes waits, within outcomeWait or until ctx is done (a
// signal), for what in still has under way: after the sessions end, the
// outcomes a store refused, which in keeps trying to record, and the
// executions it will not send whose failure the store did not take
// (a reservation whose answer was lost).
func waitForOutcomes(ctx context.Context, in *intercept.Interceptor, log *slog.Logger) {
	if ctx.Err() != nil {
		// Told to stop: no long wait, but a short one for the calls
		// answered that they did not run while a slow store reserved
		// them. A reservation made after the process is gone would be
		// unknown once its lease lapsed, though never sent.
		late, cancel := context.WithTimeout(context.Background(), lateReservationWait)
		if err := in.WaitLate(late); err != nil {
			log.Error("exiting while the store still makes reservations of calls answered that they did not run: any it makes stays in flight, then is unknown", "err", err)
		}
		cancel()
	}
	// Most often there is nothing left: no line for it, signal or not.
	quick, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	err := cmp.Or(in.Wait(quick), in.SettleAbandoned(quick))
	cancel()
	if err == nil {
		return
	}
	if ctx.Err() == nil {
		log.Warn("waiting for the store to record outcomes it refused, and calls it did not send, before exiting", "at_most", outcomeWait)
	}
	wait, cancel := context.WithTimeout(ctx, outcomeWait)
	defer cancel()
	if err := in.Wait(wait); err != nil {
		log.Error("exiting with outcomes not recorded: their executions stay in flight until their leases lapse, then are unknown", "err", err)
	}
	if err := in.SettleAbandoned(wait); err != nil {
		log.Error("exiting with calls it did not send still in flight: once their leases lapse they are unknown", "err", err)
	}
}

func parseSize(s string) (int, error) {
	mult := 1
	num := s
	for _, u := range []struct {
		suffix string
		mult   int
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"B", 1}} {
		if strings.HasSuffix(s, u.suffix) {
			num, mult = strings.TrimSuffix(s, u.suffix), u.mult
			break
		}
	}
	// No space is passed over, before the number or after the unit,
	// as none is in a duration or a whole number: " 16MiB" and
	// "16MiB " are both refused.
	n, err := strconv.Atoi(num)
	if errors.Is(err, strconv.ErrRange) && n > 0 && strings.Trim(num, "0123456789") == "" {
		// Digits too many for an int (Atoi returns the largest): over
		// the limit. Atoi reports the range before a stray character.
		return 0, fmt.Errorf("%q is over the largest size, %d bytes", s, maxSize)
	}
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("%q is not a positive size such as 1048576, 512KiB or 16MiB", s)
	}
	if n > maxSize/mult {
		return 0, fmt.Errorf("%q is over the largest size, %d bytes", s, maxSize)
	}
	return n * mult, nil
}

// minMessage is the smallest --max-message-size taken.
const minMessage = 1 << 10

// maxSize is the largest size parseSize accepts: 2GiB, or the largest int
// where int has 32 bits.
const maxSize = min(1<<31, math.MaxInt)

func osUser() string {
	if u, err := user.Current(); err == nil && u.Username != "" {
		return u.Username
	}
	if u := os.Getenv("USER"); u != "" {
		return u
	}
	return "uid:" + strconv.Itoa(os.Getuid())
}
