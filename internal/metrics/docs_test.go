package metrics_test

import (
	"errors"
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/intercept"
	"github.com/mcp-idempotent/mcp-idempotent/internal/journal"
	"github.com/mcp-idempotent/mcp-idempotent/internal/metrics"
	"github.com/mcp-idempotent/mcp-idempotent/internal/policy"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
)

// series is one metric as the exposition or the guide describes it.
type series struct {
	kind   string // counter, gauge or histogram
	labels string // its label names, sorted, comma-separated
}

// documented reads the Series table of docs/operations.md: an operator
// alerts on what it lists, so it must be what the proxy serves.
func documented(t *testing.T) map[string]series {
	t.Helper()
	b, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("^\\| `(mcp_idempotent_[a-z_]+)` \\| ([a-z]+) \\|([^|]*)\\|")
	quoted := regexp.MustCompile("`([a-z_]+)`")
	docs := make(map[string]series)
	for line := range strings.Lines(string(b)) {
		f := row.FindStringSubmatch(line)
		if f == nil {
			continue
		}
		var labels []string
		for _, q := range quoted.FindAllStringSubmatch(f[3], -1) {
			labels = append(labels, q[1])
		}
		slices.Sort(labels)
		docs[f[1]] = series{f[2], strings.Join(labels, ",")}
	}
	return docs
}

// served touches every series the proxy has and reads from the
// exposition each metric's type and label names.
func served(t *testing.T) map[string]series {
	t.Helper()
	m := metrics.New()
	tool := listed("t")
	m.Decision(tool, policy.SideEffect, "new")
	m.ShadowDecision(tool, policy.SideEffect, "new")
	m.ShadowApproval(tool, policy.ApproverClient, "asked")
	m.Transition(tool, record.Dispatched)
	m.Attempt(tool, 2, "transient result", time.Second)
	m.Upstream(tool, time.Second)
	if _, err := m.TimeStore(failingStore{}).Get(t.Context(), "exe_1"); err == nil {
		t.Fatal("the failing store did not fail")
	}
	_ = m.CountJournal(failingJournal{errors.New("disk full")}).Record(journal.Entry{})
	m.WatchAccounts(func() []intercept.AccountLevel { return []intercept.AccountLevel{{Name: "a"}} })

	typeLine := regexp.MustCompile(`^# TYPE (\S+) (\S+)$`)
	sample := regexp.MustCompile(`^([a-z_]+)(?:\{([^}]*)\})? `)
	label := regexp.MustCompile(`([a-z_]+)="`)
	got := make(map[string]series)
	for line := range strings.Lines(scrape(t, m)) {
		line = strings.TrimSuffix(line, "\n")
		if f := typeLine.FindStringSubmatch(line); f != nil {
			got[f[1]] = series{kind: f[2]}
			continue
		}
		f := sample.FindStringSubmatch(line)
		if f == nil {
			continue
		}
		name := f[1]
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if s, ok := got[strings.TrimSuffix(name, suffix)]; ok && s.kind == "histogram" {
				name = strings.TrimSuffix(name, suffix)
			}
		}
		var labels []string
		for _, l := range label.FindAllStringSubmatch(f[2], -1) {
			if l[1] != "le" {
				labels = append(labels, l[1])
			}
		}
		slices.Sort(labels)
		s := got[name]
		s.labels = strings.Join(labels, ",")
		got[name] = s
	}
	return got
}

// TestDocsListEverySeries: the guide's table of series and what the
// proxy serves are the same metrics, of the same types, with the same
// labels.
func TestDocsListEverySeries(t *testing.T) {
	docs, got := documented(t), served(t)
	if len(docs) == 0 {
		t.Fatal("no series read from docs/operations.md")
	}
	for _, name := range slices.Sorted(maps.Keys(got)) {
		d, ok := docs[name]
		switch {
		case !ok:
			t.Errorf("%s is served but docs/operations.md does not list it", name)
		case d != got[name]:
			t.Errorf("%s: docs/operations.md says %s {%s}; served as %s {%s}", name, d.kind, d.labels, got[name].kind, got[name].labels)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(docs)) {
		if _, ok := got[name]; !ok {
			t.Errorf("docs/operations.md lists %s, which is not served", name)
		}
	}
}
