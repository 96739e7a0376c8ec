package metrics_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/intercept"
	"github.com/mcp-idempotent/mcp-idempotent/internal/journal"
	"github.com/mcp-idempotent/mcp-idempotent/internal/metrics"
	"github.com/mcp-idempotent/mcp-idempotent/internal/policy"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record/memstore"
)

var _ intercept.Observer = (*metrics.Metrics)(nil)

// listed is a tool the upstream listed.
func listed(name string) intercept.Tool { return intercept.Tool{Name: name, Listed: true} }

// scrape returns the exposition the handler serves.
func scrape(t *testing.T, m *metrics.Metrics) string {
	t.Helper()
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape: %s\n%s", resp.Status, body)
	}
	return string(body)
}

func TestObserverExposition(t *testing.T) {
	m := metrics.New()
	m.Decision(listed("create_issue"), policy.SideEffect, "new")
	m.Decision(listed("create_issue"), policy.SideEffect, "attached")
	m.Decision(listed("create_issue"), policy.SideEffect, "attached")
	m.Decision(listed("search"), policy.ReadOnly, "passed_through")
	m.Transition(listed("create_issue"), record.Dispatched)
	m.Transition(listed("create_issue"), record.Completed)
	m.Attempt(listed("upload"), 2, "transient result", 200*time.Millisecond)
	m.Attempt(listed("upload"), 3, "not sent: dial tcp 10.0.0.1:80: connection refused", time.Second)
	m.Attempt(listed("upload"), 4, "HTTP 503", 0)
	m.Upstream(listed("create_issue"), 1500*time.Millisecond)
	m.ShadowApproval(listed("create_issue"), policy.ApproverClient, "refused")

	got := scrape(t, m)
	for _, want := range []string{
		`mcp_idempotent_calls_total{class="side_effect",decision="new",tool="create_issue"} 1`,
		`mcp_idempotent_calls_total{class="side_effect",decision="attached",tool="create_issue"} 2`,
		`mcp_idempotent_calls_total{class="read_only",decision="passed_through",tool="search"} 1`,
		`mcp_idempotent_transitions_total{state="dispatched",tool="create_issue"} 1`,
		`mcp_idempotent_transitions_total{state="completed",tool="create_issue"} 1`,
		`mcp_idempotent_attempts_total{tool="upload",why="transient"} 1`,
		`mcp_idempotent_attempts_total{tool="upload",why="not_sent"} 1`,
		`mcp_idempotent_attempts_total{tool="upload",why="http_status"} 1`,
		`mcp_idempotent_retry_wait_seconds_count{tool="upload"} 3`,
		`mcp_idempotent_retry_wait_seconds_sum{tool="upload"} 1.2`,
		`mcp_idempotent_upstream_seconds_count{tool="create_issue"} 1`,
		`mcp_idempotent_upstream_seconds_sum{tool="create_issue"} 1.5`,
		`mcp_idempotent_upstream_seconds_bucket{tool="create_issue",le="1"} 0`,
		`mcp_idempotent_upstream_seconds_bucket{tool="create_issue",le="2.5"} 1`,
		`# TYPE mcp_idempotent_upstream_seconds histogram`,
		`mcp_idempotent_shadow_approvals_total{approver="client",outcome="refused",tool="create_issue"} 1`,
	} {
		if !strings.Contains(got, want+"\n") {
			t.Errorf("the exposition lacks %s", want)
		}
	}
	// The error text of a not-sent retry never becomes a label value.
	if strings.Contains(got, "connection refused") {
		t.Errorf("an error's text became a label value:\n%s", got)
	}
	// Nothing from the process-wide default registry leaks in.
	if strings.Contains(got, "go_goroutines") {
		t.Errorf("the exposition holds the default registry's series")
	}
}

// A client may call a tool by any name, at any length: a long one never
// becomes a label value, nor takes one of the MaxTools places.
func TestToolLabelLength(t *testing.T) {
	m := metrics.New()
	long := strings.Repeat("A", 1<<20)
	m.Decision(listed(long), policy.SideEffect, "new")
	m.Transition(listed(long), record.Dispatched)
	m.Upstream(listed(long), time.Millisecond)
	m.Decision(listed(strings.Repeat("b", metrics.MaxToolName)), policy.SideEffect, "new")

	got := scrape(t, m)
	if len(got) > 64<<10 {
		t.Errorf("the exposition is %d bytes: a long tool name became a label value", len(got))
	}
	for _, want := range []string{
		`mcp_idempotent_calls_total{class="side_effect",decision="new",tool="other"} 1`,
		`mcp_idempotent_transitions_total{state="dispatched",tool="other"} 1`,
		`mcp_idempotent_upstream_seconds_count{tool="other"} 1`,
		`mcp_idempotent_calls_total{class="side_effect",decision="new",tool="` + strings.Repeat("b", metrics.MaxToolName) + `"} 1`,
	} {
		if !strings.Contains(got, want+"\n") {
			t.Errorf("the exposition lacks %.120s", want)
		}
	}
	for i := range metrics.MaxTools - 1 {
		m.Decision(listed(fmt.Sprintf("tool_%03d", i)), policy.SideEffect, "new")
	}
	if got := scrape(t, m); !strings.Contains(got, `tool="tool_198"`) {
		t.Errorf("a long name took one of the %d label places", metrics.MaxTools)
	}
}

func TestToolLabelCap(t *testing.T) {
	m := metrics.New()
	for i := range metrics.MaxTools + 50 {
		m.Decision(listed(fmt.Sprintf("tool_%03d", i)), policy.SideEffect, "new")
	}
	// A tool seen before the cap keeps its own label after it.
	m.Decision(listed("tool_000"), policy.SideEffect, "new")
	m.Upstream(listed("tool_249"), time.Millisecond)

	got := scrape(t, m)
	if n := strings.Count(got, "mcp_idempotent_calls_total{"); n != metrics.MaxTools+1 {
		t.Errorf("%d calls_total series; want %d tools and %q", n, metrics.MaxTools, metrics.OtherTool)
	}
	for _, want := range []string{
		`mcp_idempotent_calls_total{class="side_effect",decision="new",tool="tool_000"} 2`,
		`mcp_idempotent_calls_total{class="side_effect",decision="new",tool="tool_199"} 1`,
		`mcp_idempotent_calls_total{class="side_effect",decision="new",tool="other"} 50`,
		`mcp_idempotent_upstream_seconds_count{tool="other"} 1`,
	} {
		if !strings.Contains(got, want+"\n") {
			t.Errorf("the exposition lacks %s", want)
		}
	}
	if strings.Contains(got, `tool="tool_200"`) {
		t.Errorf("a tool past the cap has its own label")
	}
}

// A client may call any number of names the upstream does not list: they
// all count as UnlistedTool, and none takes a place a listed tool needs.
// A listed tool named like the fixed labels keeps its own.
func TestToolLabelUnlisted(t *testing.T) {
	m := metrics.New()
	for i := range 300 {
		name := intercept.Tool{Name: fmt.Sprintf("nosuch_%03d", i)}
		m.Decision(name, policy.SideEffect, "new")
		m.Transition(name, record.Dispatched)
		m.Upstream(name, time.Millisecond)
		m.Attempt(name, 2, "transient result", 0)
	}
	m.Decision(listed("create_issue"), policy.SideEffect, "new")
	m.Decision(listed(metrics.OtherTool), policy.SideEffect, "new")

	got := scrape(t, m)
	for _, want := range []string{
		`mcp_idempotent_calls_total{class="side_effect",decision="new",tool="unlisted"} 300`,
		`mcp_idempotent_transitions_total{state="dispatched",tool="unlisted"} 300`,
		`mcp_idempotent_upstream_seconds_count{tool="unlisted"} 300`,
		`mcp_idempotent_attempts_total{tool="unlisted",why="transient"} 300`,
		`mcp_idempotent_calls_total{class="side_effect",decision="new",tool="create_issue"} 1`,
		`mcp_idempotent_calls_total{class="side_effect",decision="new",tool="other"} 1`,
	} {
		if !strings.Contains(got, want+"\n") {
			t.Errorf("the exposition lacks %s", want)
		}
	}
	if strings.Contains(got, "nosuch_") {
		t.Errorf("a name the upstream did not list became a label value")
	}
	// Every place is still free for listed tools.
	for i := range metrics.MaxTools - 2 {
		m.Decision(listed(fmt.Sprintf("tool_%03d", i)), policy.SideEffect, "new")
	}
	if got := scrape(t, m); !strings.Contains(got, `tool="tool_197"`) {
		t.Errorf("unlisted names took label places: the %dth listed tool has none", metrics.MaxTools)
	}
}

func TestTimeStore(t *testing.T) {
	m := metrics.New()
	s := m.TimeStore(memstore.New(memstore.Options{}))
	ctx := context.Background()
	now := time.Now()

	r := &record.Record{ID: record.NewID(now), Key: "k1", Tool: "create_issue", Owner: "p1", LeaseUntil: now.Add(time.Minute), Retention: time.Hour}
	if _, won, err := s.Reserve(ctx, r, record.ReserveOptions{}); err != nil || !won {
		t.Fatalf("Reserve: won %v, %v", won, err)
	}
	if _, err := s.Get(ctx, r.ID); err != nil {
		t.Fatalf("Get: %v", err)
	}
	if _, err := s.Get(ctx, "exe_missing"); !errors.Is(err, record.ErrNotFound) {
		t.Fatalf("Get of a missing id: %v; want ErrNotFound", err)
	}
	if _, err := s.Update(ctx, r.ID, record.Change{To: record.Dispatched}); err != nil {
		t.Fatalf("Update: %v", err)
	}
	if err := s.Renew(ctx, "p1", now.Add(2*time.Minute)); err != nil {
		t.Fatalf("Renew: %v", err)
	}

	// The memory store lists its records; the wrapper must not hide that.
	l, ok := s.(record.Lister)
	if !ok {
		t.Fatalf("TimeStore(memstore) is not a record.Lister")
	}
	recs, err := l.List(ctx, record.Filter{})
	if err != nil || len(recs) != 1 || recs[0].ID != r.ID {
		t.Fatalf("List = %v, %v; want the one record", recs, err)
	}

	got := scrape(t, m)
	for _, want := range []string{
		`mcp_idempotent_store_seconds_count{op="reserve"} 1`,
		`mcp_idempotent_store_seconds_count{op="get"} 2`,
		`mcp_idempotent_store_seconds_count{op="update"} 1`,
		`mcp_idempotent_store_seconds_count{op="renew"} 1`,
	} {
		if !strings.Contains(got, want+"\n") {
			t.Errorf("the exposition lacks %s", want)
		}
	}
	// Not found is an answer, not a failure of the store.
	if strings.Contains(got, "mcp_idempotent_store_errors_total{") {
		t.Errorf("a store error was counted:\n%s", got)
	}
}

// failingStore fails every operation, as an unreachable store does.
type failingStore struct{ record.Store }

var errDown = errors.New("connection refused")

func (failingStore) Get(context.Context, string) (*record.Record, error) { return nil, errDown }

func TestTimeStoreErrors(t *testing.T) {
	m := metrics.New()
	s := m.TimeStore(failingStore{})
	if _, ok := s.(record.Lister); ok {
		t.Errorf("TimeStore of a store without List is a record.Lister")
	}
	if _, err := s.Get(context.Background(), "exe_1"); !errors.Is(err, errDown) {
		t.Fatalf("Get: %v; want the store's error", err)
	}
	if got, want := scrape(t, m), `mcp_idempotent_store_errors_total{op="get"} 1`; !strings.Contains(got, want+"\n") {
		t.Errorf("the exposition lacks %s:\n%s", want, got)
	}
}

func TestServe(t *testing.T) {
	m := metrics.New()
	m.Decision(listed("t"), policy.SideEffect, "new")
	ln, err := metrics.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	var logged bytes.Buffer
	go func() { done <- m.ServeOn(ctx, ln, slog.New(slog.NewTextHandler(&logged, nil))) }()

	resp, err := http.Get("http://" + ln.Addr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), `mcp_idempotent_calls_total{class="side_effect",decision="new",tool="t"} 1`) {
		t.Errorf("GET /metrics lacks the call:\n%s", body)
	}
	// Only the proxy's own series, as docs/operations.md lists them.
	for line := range strings.Lines(string(body)) {
		if !strings.HasPrefix(line, "#") && !strings.HasPrefix(line, "mcp_idempotent_") {
			t.Errorf("GET /metrics serves %q, which is not one of the proxy's series", strings.TrimSpace(line))
		}
	}

	cancel()
	if err := <-done; err != nil {
		t.Errorf("ServeOn after cancel: %v; want nil", err)
	}
	// Where, at info: the port of :0 is known only once bound.
	if url := "http://" + ln.Addr().String() + "/metrics"; !strings.Contains(logged.String(), "level=INFO") || !strings.Contains(logged.String(), url) {
		t.Errorf("ServeOn logged %q; want %s at info", logged.String(), url)
	}
}

func TestServeBadAddress(t *testing.T) {
	err := metrics.New().Serve(context.Background(), "256.1.1.1:1", nil)
	if err == nil || !strings.Contains(err.Error(), "256.1.1.1:1") {
		t.Errorf("Serve on a bad address: %v; want an error naming it", err)
	}
}

func TestAccountLevels(t *testing.T) {
	m := metrics.New()
	m.WatchAccounts(func() []intercept.AccountLevel {
		return []intercept.AccountLevel{{Name: "cloudinary", Tokens: 17, RetryBudget: 9.5}}
	})
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	for _, want := range []string{`mcp_idempotent_account_tokens{account="cloudinary"} 17`, `mcp_idempotent_account_retry_budget{account="cloudinary"} 9.5`} {
		if !strings.Contains(rec.Body.String(), want) {
			t.Errorf("the exposition lacks %s:\n%s", want, rec.Body)
		}
	}
}

type failingJournal struct{ err error }

func (f failingJournal) Record(journal.Entry) error { return f.err }

func TestCountJournal(t *testing.T) {
	m := metrics.New()
	if !strings.Contains(scrape(t, m), "mcp_idempotent_journal_errors_total 0") {
		t.Error("the journal error count is not served before any error")
	}
	j := m.CountJournal(failingJournal{errors.New("disk full")})
	for range 2 {
		if err := j.Record(journal.Entry{}); err == nil {
			t.Fatal("CountJournal swallowed the error; the interceptor must still see it")
		}
	}
	m.CountJournal(failingJournal{}).Record(journal.Entry{})
	if got := scrape(t, m); !strings.Contains(got, "mcp_idempotent_journal_errors_total 2") {
		t.Errorf("want 2 journal errors counted:\n%s", got)
	}
}

// deciderStore is a store in memory with a WaitDecided, as a shared store
// has.
type deciderStore struct{ *memstore.Store }

func (s deciderStore) WaitDecided(ctx context.Context, id string) (*record.Record, error) {
	return s.Get(ctx, id)
}

// TestTimeStoreKeepsDecider: a store an operator decides in stays one
// through the wrapper, or approvals by an operator would be refused.
func TestTimeStoreKeepsDecider(t *testing.T) {
	s := metrics.New().TimeStore(deciderStore{memstore.New(memstore.Options{})})
	if _, ok := s.(record.Decider); !ok {
		t.Fatal("TimeStore of a record.Decider is not one")
	}
	if _, ok := s.(record.Lister); !ok {
		t.Fatal("TimeStore of a record.Decider and Lister is no record.Lister")
	}
}

// The help of each series names every value its labels take, as the
// operations guide lists them: a reader of the exposition alone sees
// them all.
func TestHelpNamesEveryValue(t *testing.T) {
	m := metrics.New()
	m.Decision(listed("t"), policy.SideEffect, "new")
	m.Transition(listed("t"), record.Dispatched)
	got := scrape(t, m)
	help := func(name string) string {
		for line := range strings.Lines(got) {
			if strings.HasPrefix(line, "# HELP "+name+" ") {
				return line
			}
		}
		t.Fatalf("no help for %s", name)
		return ""
	}
	for name, values := range map[string][]string{
		"mcp_idempotent_calls_total": {"new", "attached", "replayed", "passed_through", "key_refused", "invalid",
			"store_unavailable", "session_ended", "unknown", "in_progress", "redispatched", "recovered"},
		"mcp_idempotent_transitions_total": {"dispatched", "completed", "delivered", "failed", "unknown", "authorized", "refused"},
	} {
		h := help(name)
		for _, v := range values {
			if !strings.Contains(h, v) {
				t.Errorf("the help of %s lacks %s: %s", name, v, h)
			}
		}
	}
}

// purgingStore is a store that drops expired records when asked, as
// SQLite and PostgreSQL do; purged counts the asks.
type purgingStore struct {
	record.Store
	purged *int
}

func (s purgingStore) Purge(context.Context, int) (int, error) {
	*s.purged++
	return 0, nil
}

// purgingDecider is a purgingStore an operator decides in, as both
// durable stores are.
type purgingDecider struct {
	deciderStore
	purged *int
}

func (s purgingDecider) Purge(context.Context, int) (int, error) {
	*s.purged++
	return 0, nil
}

// TestTimeStoreKeepsPurger: the interceptor asks the store it is given
// to purge at each lease renewal; through the wrapper the store still
// gets the ask, or an idle proxy serving metrics keeps expired records.
func TestTimeStoreKeepsPurger(t *testing.T) {
	var purged int
	mem := memstore.New(memstore.Options{})
	plain := purgingStore{mem, &purged}
	for _, s := range []record.Store{plain, purgingDecider{deciderStore{mem}, &purged}} {
		p, ok := metrics.New().TimeStore(s).(intercept.Purger)
		if !ok {
			t.Fatalf("TimeStore of %T is no intercept.Purger", s)
		}
		before := purged
		if _, err := p.Purge(t.Context(), 10); err != nil || purged != before+1 {
			t.Fatalf("Purge through the wrapper of %T: %v, the store asked %d times; want once", s, err, purged-before)
		}
	}
}

// replayerFunc is a record.Replayer.
type replayerFunc func() bool

func (f replayerFunc) Replay(context.Context, *record.Record, record.ReserveOptions) (*record.Record, bool, bool) {
	return nil, false, f()
}

// TestTimeReplayer: each read for a replay is timed as the op replay,
// answered or not.
func TestTimeReplayer(t *testing.T) {
	m := metrics.New()
	answered := true
	r := m.TimeReplayer(replayerFunc(func() bool { answered = !answered; return answered }))
	for range 3 {
		r.Replay(t.Context(), &record.Record{Key: "k"}, record.ReserveOptions{})
	}
	if got := scrape(t, m); !strings.Contains(got, `mcp_idempotent_store_seconds_count{op="replay"} 3`+"\n") {
		t.Errorf("the exposition lacks three replays:\n%s", got)
	}
}
