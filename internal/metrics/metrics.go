// Package metrics counts what the interceptor decides and does, and how
// long the upstream and the store take, and serves the counts to
// Prometheus. Every series lives in a registry of its own, never the
// process-wide default one, so two proxies in one process (as in tests)
// never collide.
package metrics

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/mcp-idempotent/mcp-idempotent/internal/intercept"
	"github.com/mcp-idempotent/mcp-idempotent/internal/policy"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
)

// MaxTools bounds the distinct values of the tool label. Tool names come
// from the upstream, which may list any number of them; past this many,
// further tools are counted under OtherTool, so a large or misbehaving
// upstream cannot grow the series without bound.
const MaxTools = 200

// OtherTool is the tool label of every listed tool past the first
// MaxTools, and of every listed name longer than MaxToolName.
const OtherTool = "other"

// UnlistedTool is the tool label of every call of a tool the upstream did
// not list: such a name is the client's alone, and taking one of the
// MaxTools places would let a client push the upstream's real tools into
// OtherTool.
const UnlistedTool = "unlisted"

// MaxToolName bounds the length, in bytes, of a tool label value: the MCP
// specification has tool names of at most 128 characters. The name comes
// from the client's call, which may name any tool at any length; a longer
// one as a label would be repeated in every series and every scrape.
const MaxToolName = 128

// Metrics implements the interceptor's Observer and records the store's
// latency (see TimeStore). Its methods are safe for concurrent use and
// never block on I/O.
type Metrics struct {
	reg *prometheus.Registry

	calls       *prometheus.CounterVec   // tool, class, decision
	shadow      *prometheus.CounterVec   // tool, class, decision: in shadow mode, what it would have been
	shadowAsks  *prometheus.CounterVec   // tool, approver, outcome: in shadow mode, the approvals it would have needed
	transitions *prometheus.CounterVec   // tool, state
	attempts    *prometheus.CounterVec   // tool, why
	retryWait   *prometheus.HistogramVec // tool
	upstream    *prometheus.HistogramVec // tool
	store       *prometheus.HistogramVec // op
	storeErrors *prometheus.CounterVec   // op
	journalErrs prometheus.Counter       // see CountJournal

	mu    sync.Mutex          // protects tools
	tools map[string]struct{} // the tool label values handed out so far
}

// upstreamBuckets reach minutes: a tool call may run that long.
var upstreamBuckets = []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300}

// storeBuckets start below a millisecond: the memory store answers in
// microseconds, a remote one in milliseconds.
var storeBuckets = []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5}

// New returns Metrics with every series registered in a fresh registry.
func New() *Metrics {
	m := &Metrics{
		reg:   prometheus.NewRegistry(),
		tools: make(map[string]struct{}),
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mcp_idempotent_calls_total",
			Help: "Tool calls, by what became of each: decision is new, attached, replayed, passed_through, key_refused, invalid, store_unavailable, session_ended, unknown, in_progress, redispatched or recovered.",
		}, []string{"tool", "class", "decision"}),
		transitions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mcp_idempotent_transitions_total",
			Help: "Executions that moved to state (dispatched, completed, delivered, failed, unknown; an approval's authorized or refused).",
		}, []string{"tool", "state"}),
		attempts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mcp_idempotent_attempts_total",
			Help: "Calls sent upstream again (retries), by why: not_sent (the request never left), transient (the tool's result said try again later) or http_status (an HTTP upstream answered 429, 502, 503 or 504).",
		}, []string{"tool", "why"}),
		retryWait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "mcp_idempotent_retry_wait_seconds",
			Help:    "The backoff waited before each retry counted in mcp_idempotent_attempts_total.",
			Buckets: upstreamBuckets,
		}, []string{"tool"}),
		upstream: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "mcp_idempotent_upstream_seconds",
			Help:    "Time from sending a tools/call upstream to its answer, per send; a send that never left is not timed.",
			Buckets: upstreamBuckets,
		}, []string{"tool"}),
		store: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "mcp_idempotent_store_seconds",
			Help:    "Latency of execution-store operations (op is reserve, update, get, renew or replay, the read before a reservation that answers a replay; wait blocks by design and is not timed).",
			Buckets: storeBuckets,
		}, []string{"op"}),
		storeErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mcp_idempotent_store_errors_total",
			Help: "Execution-store operations that failed, by op; not-found, conflict and a caller's cancellation are answers, not failures, and are not counted.",
		}, []string{"op"}),
		journalErrs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "mcp_idempotent_journal_errors_total",
			Help: "Transitions that could not be written to the activity journal (--journal); the calls went on, but the journal misses them.",
		}),
	}
	m.shadow = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "mcp_idempotent_shadow_decisions_total",
		Help: "In shadow mode (--shadow), where every call goes upstream as it came: what each recorded tool call would have become, decision as in mcp_idempotent_calls_total.",
	}, []string{"tool", "class", "decision"})
	m.shadowAsks = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "mcp_idempotent_shadow_approvals_total",
		Help: "In shadow mode (--shadow): the new executions normal mode would have held for approval, by approver (client, operator) and outcome: asked, or refused because nobody could be asked.",
	}, []string{"tool", "approver", "outcome"})
	m.reg.MustRegister(m.shadow, m.shadowAsks, m.calls, m.transitions, m.attempts, m.retryWait, m.upstream, m.store, m.storeErrors, m.journalErrs)
	return m
}

// tool returns the label value for t: UnlistedTool for a tool the
// upstream did not list; else the name itself for the first MaxTools
// distinct names of at most MaxToolName bytes, OtherTool for any other.
func (m *Metrics) tool(t intercept.Tool) string {
	if !t.Listed {
		return UnlistedTool
	}
	name := t.Name
	if len(name) > MaxToolName {
		return OtherTool
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.tools[name]; ok {
		return name
	}
	if len(m.tools) >= MaxTools {
		return OtherTool
	}
	m.tools[name] = struct{}{}
	return name
}

// Decision implements intercept.Observer.
func (m *Metrics) Decision(tool intercept.Tool, class policy.Class, decision string) {
	m.calls.WithLabelValues(m.tool(tool), string(class), decision).Inc()
}

// ShadowDecision implements intercept.ShadowObserver.
func (m *Metrics) ShadowDecision(tool intercept.Tool, class policy.Class, decision string) {
	m.shadow.WithLabelValues(m.tool(tool), string(class), decision).Inc()
}

// ShadowApproval implements intercept.ShadowApprovalObserver.
func (m *Metrics) ShadowApproval(tool intercept.Tool, approver policy.Approver, outcome string) {
	m.shadowAsks.WithLabelValues(m.tool(tool), string(approver), outcome).Inc()
}

// Attempt implements intercept.Observer.
func (m *Metrics) Attempt(tool intercept.Tool, n int, why string, wait time.Duration) {
	t := m.tool(tool)
	m.attempts.WithLabelValues(t, whyLabel(why)).Inc()
	m.retryWait.WithLabelValues(t).Observe(wait.Seconds())
}

// whyLabel reduces the interceptor's reason for a retry to a bounded set:
// a "not sent" reason carries the error's text, which must not become a
// label value.
func whyLabel(why string) string {
	switch {
	case strings.HasPrefix(why, "not sent"):
		return "not_sent"
	case strings.HasPrefix(why, "transient"):
		return "transient"
	case strings.HasPrefix(why, "HTTP "):
		// The status is left out too: the set of statuses retried is
		// small, but one label value per reason is what the rest keep.
		return "http_status"
	}
	return "other"
}

// Transition implements intercept.Observer.
func (m *Metrics) Transition(tool intercept.Tool, state record.State) {
	m.transitions.WithLabelValues(m.tool(tool), string(state)).Inc()
}

// Upstream implements intercept.Observer.
func (m *Metrics) Upstream(tool intercept.Tool, d time.Duration) {
	m.upstream.WithLabelValues(m.tool(tool)).Observe(d.Seconds())
}

// Handler serves the metrics in the Prometheus exposition format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}

// Serve serves /metrics on addr until ctx is done. It binds exactly where
// told: a host of 0.0.0.0, or none (":9090"), exposes the metrics on every
// interface, so give 127.0.0.1:PORT to keep them on this host. To report a
// bad address before starting anything else, call Listen and ServeOn
// instead.
func (m *Metrics) Serve(ctx context.Context, addr string, log *slog.Logger) error {
	ln, err := Listen(addr)
	if err != nil {
		return err
	}
	return m.ServeOn(ctx, ln, log)
}

// Listen opens addr, a host:port, for ServeOn.
func Listen(addr string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listening on %s: %w", addr, err)
	}
	return ln, nil
}

// ServeOn serves /metrics on ln until ctx is done, then shuts the server
// down and closes ln. It returns nil after a shutdown ctx caused.
func (m *Metrics) ServeOn(ctx context.Context, ln net.Listener, log *slog.Logger) error {
	defer ln.Close() // Serve does not close it if ctx was done before it began
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", m.Handler())
	srv := &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	shut := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		defer close(shut)
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	})
	// At info: with port 0, or a host left out, this says where.
	log.Info("serving Prometheus metrics", "url", "http://"+ln.Addr().String()+"/metrics")
	err := srv.Serve(ln)
	if !stop() {
		// The shutdown began; return once it is over, leaving nothing
		// running behind.
		<-shut
	}
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return fmt.Errorf("serving metrics on %s: %w", ln.Addr(), err)
}

// WatchAccounts reports, at every scrape, each account's level as
// mcp_idempotent_account_tokens{account} (what is left of its allowance)
// and mcp_idempotent_account_retry_budget{account} (its retry budget's
// level), read from levels.
func (m *Metrics) WatchAccounts(levels func() []intercept.AccountLevel) {
	m.reg.MustRegister(accountCollector{levels})
}

var (
	accountTokens = prometheus.NewDesc("mcp_idempotent_account_tokens",
		"What is left of an account's allowance: calls that may go now.", []string{"account"}, nil)
	accountBudget = prometheus.NewDesc("mcp_idempotent_account_retry_budget",
		"An account's retry budget level; retries stop below half its maximum.", []string{"account"}, nil)
)

type accountCollector struct {
	levels func() []intercept.AccountLevel
}

func (c accountCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- accountTokens
	ch <- accountBudget
}

func (c accountCollector) Collect(ch chan<- prometheus.Metric) {
	for _, l := range c.levels() {
		ch <- prometheus.MustNewConstMetric(accountTokens, prometheus.GaugeValue, l.Tokens, l.Name)
		ch <- prometheus.MustNewConstMetric(accountBudget, prometheus.GaugeValue, l.RetryBudget, l.Name)
	}
}
