package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/mcp-idempotent/mcp-idempotent/internal/journal"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record/sqlitestore"
)

// TestShowsALapsedLease: activity show says when an execution in flight
// lost its owner, which is what an operator looks for after a crash.
func TestShowsALapsedLease(t *testing.T) {
	r := &record.Record{ID: "exe_1", Tool: "charge_card", State: record.Dispatched, Owner: "host:1",
		LeaseUntil: time.Now().Add(-time.Minute)}
	var out strings.Builder
	printRecord(&out, r)
	if !strings.Contains(out.String(), "lease until") || !strings.Contains(out.String(), "lapsed") {
		t.Fatalf("activity show printed:\n%s\nwant the lease, said to have lapsed", out.String())
	}
}

// TestShowFailedIsNotReplayed: a failed execution is kept for its
// retention, but the next identical call runs it again: show does not
// say it replays.
func TestShowFailedIsNotReplayed(t *testing.T) {
	for _, tt := range []struct {
		state record.State
		want  string
	}{
		{record.Failed, "kept until"},
		{record.Completed, "replays until"},
	} {
		r := &record.Record{ID: "exe_1", Tool: "charge_card", State: tt.state, ExpiresAt: time.Now().Add(time.Hour)}
		var out strings.Builder
		printRecord(&out, r)
		if !strings.Contains(out.String(), tt.want) {
			t.Errorf("activity show of a %s execution printed:\n%s\nwant %q", tt.state, out.String(), tt.want)
		}
	}
}

// TestExpiredExecutionIsSaidToBe: a record whose retention ran out stays
// in a store until its next purge, but no call matches it any more:
// list marks it, and show says it expired rather than that it replays
// until a time already past.
func TestExpiredExecutionIsSaidToBe(t *testing.T) {
	at := []record.Transition{{State: record.Accepted, At: time.Now().Add(-time.Hour)}}
	for _, st := range []record.State{record.Delivered, record.Unknown, record.Failed} {
		r := &record.Record{ID: "exe_1", Tool: "charge_card", State: st, History: at, ExpiresAt: time.Now().Add(-time.Minute)}
		var list, show strings.Builder
		printList(&list, []*record.Record{r})
		if !strings.Contains(list.String(), string(st)+" (expired)") {
			t.Errorf("activity list of an expired %s execution printed:\n%s\nwant it marked (expired)", st, list.String())
		}
		printRecord(&show, r)
		if out := show.String(); !regexp.MustCompile(`(?m)^expired +\d`).MatchString(out) || strings.Contains(out, "until") {
			t.Errorf("activity show of an expired %s execution printed:\n%s\nwant it said to have expired", st, out)
		}
	}
}

// TestListMarksShadowExecutions: activity list tells what a proxy in
// shadow mode recorded, what it would have done, from what ran for real.
func TestListMarksShadowExecutions(t *testing.T) {
	at := []record.Transition{{State: record.Accepted, At: time.Now()}}
	var out strings.Builder
	printList(&out, []*record.Record{
		{ID: "exe_1", Tool: "charge_card", State: record.Delivered, Owner: "shadow-proxy-1", History: at},
		{ID: "exe_2", Tool: "charge_card", State: record.Delivered, Owner: "proxy-2", History: at},
	})
	lines := strings.Split(out.String(), "\n")
	if !strings.Contains(lines[1], "delivered (shadow)") || strings.Contains(lines[2], "shadow") {
		t.Fatalf("activity list printed:\n%s\nwant exe_1 marked shadow, and exe_2 not", out.String())
	}
}

// TestListMarksAwaitingExecutionsWhoseProxyWentAway: an execution that
// awaits an operator, whose proxy's lease lapsed, is listed as such:
// approve refuses it, as nothing would send it.
func TestListMarksAwaitingExecutionsWhoseProxyWentAway(t *testing.T) {
	at := []record.Transition{{State: record.Accepted, At: time.Now()}}
	var out strings.Builder
	printList(&out, []*record.Record{
		{ID: "exe_1", Tool: "charge_card", State: record.Accepted, Awaiting: record.ApproverOperator, LeaseUntil: time.Now().Add(-time.Minute), History: at},
		{ID: "exe_2", Tool: "charge_card", State: record.Accepted, Awaiting: record.ApproverOperator, LeaseUntil: time.Now().Add(time.Minute), History: at},
	})
	lines := strings.Split(out.String(), "\n")
	if !strings.Contains(lines[1], "accepted (awaiting operator, its proxy went away)") || !strings.Contains(lines[2], "accepted (awaiting operator) ") {
		t.Fatalf("activity list printed:\n%s\nwant exe_1 marked as its proxy gone, and exe_2 awaiting", out.String())
	}
}

// unknownExecution stores an execution sent and never answered in a new
// SQLite store, and returns the store's URL and the execution's id.
func unknownExecution(t *testing.T) (store, id string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "records.db")
	s, err := sqlitestore.Open(t.Context(), path, sqlitestore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	r := &record.Record{ID: record.NewID(time.Now()), Key: "k", Fingerprint: "f", Actor: "alice", Tool: "charge_card", Retention: time.Hour}
	if _, _, err := s.Reserve(t.Context(), r, record.ReserveOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, to := range []record.State{record.Dispatched, record.Unknown} {
		if _, err := s.Update(t.Context(), r.ID, record.Change{To: to}); err != nil {
			t.Fatal(err)
		}
	}
	return "sqlite:" + path, r.ID
}

// TestResolveJournals: activity resolve --journal appends the resolution
// to the journal, in the proxy's line format, naming the operator and
// the process; the journal still verifies.
func TestResolveJournals(t *testing.T) {
	store, id := unknownExecution(t)
	file := writeJournal(t, 2) // a journal a proxy wrote, and stopped
	if _, _, err := run(t, "activity", "resolve", id, "--store", store, "--as", "failed", "--note", "no charge at the bank", "--journal", file); err != nil {
		t.Fatal(err)
	}
	if stdout, _, err := run(t, "audit", "verify", file); err != nil || !strings.Contains(stdout, "3 lines verify") {
		t.Fatalf("audit verify after a resolution = %q, %v; want 3 lines that verify", stdout, err)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	ls := strings.Split(strings.TrimSpace(string(b)), "\n")
	var got journal.Entry
	if err := json.Unmarshal([]byte(ls[2]), &got); err != nil {
		t.Fatal(err)
	}
	host, _ := os.Hostname()
	if got.Execution != id || got.State != "failed" || got.Tool != "charge_card" || got.Actor != "alice" ||
		!strings.Contains(got.Note, "no charge at the bank") || got.Time.IsZero() {
		t.Errorf("the resolution's line is %+v; want execution %s failed, with the note", got, id)
	}
	if want := (journal.Process{Host: host, PID: os.Getpid(), Operator: osUser()}); got.Writer != want {
		t.Errorf("the resolution's writer is %+v; want %+v", got.Writer, want)
	}
}

// TestResolveRefusesAHeldJournal: a journal a proxy is writing refuses
// activity resolve before it resolves anything, saying why, so no
// resolution goes unjournaled.
func TestResolveRefusesAHeldJournal(t *testing.T) {
	store, id := unknownExecution(t)
	file := writeJournal(t, 1)
	held, err := journal.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	_, _, err = run(t, "activity", "resolve", id, "--store", store, "--as", "failed", "--journal", file)
	if err == nil || ExitCode(err) != 1 || !strings.Contains(err.Error(), "another process is writing this journal") ||
		!strings.Contains(err.Error(), "nothing was resolved") {
		t.Fatalf("activity resolve into a held journal = %v (exit %d); want exit 1, saying the journal is held and nothing was resolved", err, ExitCode(err))
	}
	stdout, _, err := run(t, "activity", "show", id, "--store", store, "--json")
	var show record.Record
	if err != nil || json.Unmarshal([]byte(stdout), &show) != nil || show.State != record.Unknown {
		t.Fatalf("after the refusal the execution is %q (%v); want it still unknown", stdout, err)
	}
}

// TestParseDaysOverflow: a --since too long for a duration is refused,
// as time.ParseDuration refuses "4800000h", not wrapped round to a
// negative window that selects nothing; and refused as too long, not as
// something other than a duration.
func TestParseDaysOverflow(t *testing.T) {
	for _, s := range []string{"200000d", "4800000h"} {
		if d, err := parseDays(s); err == nil {
			t.Errorf("parseDays(%q) = %v, nil; want an error", s, d)
		}
	}
	for _, s := range []string{"106752d", "99999999d", "99999999999999999999d", "4800000h", "2562048h", "9223372037s"} {
		if _, err := parseDays(s); err == nil || !strings.Contains(err.Error(), "too long: at most 106751d") {
			t.Errorf("parseDays(%q): %v; want it said too long", s, err)
		}
	}
	for _, s := range []string{"7x", "0d", "-1h", "1.5d", ".h", "d", "h"} {
		if _, err := parseDays(s); err == nil || !strings.Contains(err.Error(), "is not a duration") {
			t.Errorf("parseDays(%q): %v; want it said not a duration", s, err)
		}
	}
	// Durations, but none of more than 0: said so, not called no
	// duration at all.
	for _, s := range []string{"0s", "-1h", "-90m"} {
		if _, err := parseDays(s); err == nil || !strings.Contains(err.Error(), "is not a duration of more than 0") {
			t.Errorf("parseDays(%q): %v; want it said not more than 0", s, err)
		}
	}
	if d, err := parseDays("106751d"); err != nil || d <= 0 {
		t.Errorf("parseDays(\"106751d\") = %v, %v; want the longest whole days a duration holds", d, err)
	}
}

// TestActivityRefusesAnUnmadeSchema: a mistyped PostgreSQL schema= is a
// mistake on the command line (exit 2) naming --store, as a mistyped
// SQLite path is, and nothing is made on the server.
func TestActivityRefusesAnUnmadeSchema(t *testing.T) {
	u := os.Getenv("MCPI_POSTGRES_URL")
	if u == "" {
		if os.Getenv("MCPI_REQUIRE_SERVICES") != "" {
			t.Fatal("MCPI_POSTGRES_URL is not set, and MCPI_REQUIRE_SERVICES is")
		}
		t.Skip("MCPI_POSTGRES_URL is not set")
	}
	schema := fmt.Sprintf("cli_typo_%d", time.Now().UnixNano())
	sep := "?"
	if strings.Contains(u, "?") {
		sep = "&"
	}
	store := u + sep + "schema=" + schema
	for _, args := range [][]string{
		{"activity", "list", "--store", store},
		{"activity", "approve", "exe_01M91E6JBNBSF578PXNMTMEHCG", "--store", store},
	} {
		var out, errOut strings.Builder
		err := Run(t.Context(), args, strings.NewReader(""), &out, &errOut)
		if _, ok := errors.AsType[*usageError](err); !ok || !strings.Contains(err.Error(), "--store") || !strings.Contains(err.Error(), schema) {
			t.Fatalf("%s = %v; want a usage error naming --store and the schema", args[1], err)
		}
	}
	conn, err := pgx.Connect(t.Context(), u)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(t.Context())
	// Should a build make it after all, it is not left behind.
	defer conn.Exec(t.Context(), "DROP SCHEMA IF EXISTS "+schema+" CASCADE") //nolint:errcheck // cleanup
	var n int
	if err := conn.QueryRow(t.Context(), "SELECT count(*) FROM pg_namespace WHERE nspname = $1", schema).Scan(&n); err != nil || n != 0 {
		t.Fatalf("schema %s: %d found, %v; want none made", schema, n, err)
	}
}

// TestShowTellsAResolution: an execution an operator resolved is not
// shown as one whose upstream answered: nothing was observed, and a
// result is the operator's text.
func TestShowTellsAResolution(t *testing.T) {
	for _, as := range []string{"completed", "failed"} {
		store, id := unknownExecution(t)
		out, _, err := run(t, "activity", "resolve", id, "--store", store, "--as", as)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(out, "by "+osUser()+" through operator") {
			t.Errorf("--as %s: activity resolve printed:\n%s\nwant the resolution by %s through operator", as, out, osUser())
		}
		out, _, err = run(t, "activity", "show", id, "--store", store)
		if err != nil {
			t.Fatal(err)
		}
		answer := sections(t, out)[headAnswer]
		if !strings.Contains(answer, "nothing observed: an operator resolved it as "+as) || strings.Contains(answer, "result:") {
			t.Errorf("--as %s: section %q:\n%s\nwant it to say an operator resolved it, and no result of the upstream's", as, headAnswer, answer)
		}
		out, _, err = run(t, "activity", "show", id, "--store", store, "--json")
		var tl struct {
			Timeline struct {
				Answer struct{ Observed, Resolved bool }
			} `json:"timeline"`
		}
		if err != nil || json.Unmarshal([]byte(out), &tl) != nil || tl.Timeline.Answer.Observed || !tl.Timeline.Answer.Resolved {
			t.Errorf("--as %s: activity show --json = %v, answer %+v; want observed false, resolved true", as, err, tl.Timeline.Answer)
		}
	}
}

// TestTimelineQuotesTheActorOnce: activity show prints the actor and
// scope quoted, their control characters escaped once, not the escapes
// escaped again.
func TestTimelineQuotesTheActorOnce(t *testing.T) {
	rec := &record.Record{ID: "exe_1", Tool: "charge_card", State: record.Delivered, Actor: "a\nb", Scope: "actor:a\nb",
		History: []record.Transition{{State: record.Accepted, At: time.Now()}}}
	tl := &timeline{Record: rec}
	tl.Sessions = sessionsPart{Actor: rec.Actor, Scope: rec.Scope}
	var out strings.Builder
	printTimeline(&out, tl)
	if want := `the record names actor "a\nb", scope "actor:a\nb"`; !strings.Contains(out.String(), want) {
		t.Fatalf("activity show printed:\n%s\nwant %s", out.String(), want)
	}
}

// settledFirst is a store in which another operator's resolution lands
// between resolve's read of an execution and its change.
type settledFirst struct {
	record.Store
	other record.Change
}

func (s *settledFirst) Update(ctx context.Context, id string, c record.Change) (*record.Record, error) {
	if _, err := s.Store.Update(ctx, id, s.other); err != nil {
		return nil, err
	}
	return s.Store.Update(ctx, id, c)
}

// TestResolveRacedSaysWhoSettledIt: of two resolutions at once, the one
// that loses says what the execution is now and who made it so, not the
// store's "from completed to failed", which reads as a move it made.
func TestResolveRacedSaysWhoSettledIt(t *testing.T) {
	store, id := unknownExecution(t)
	s, err := sqlitestore.Open(t.Context(), strings.TrimPrefix(store, "sqlite:"), sqlitestore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	other := record.Change{From: record.Unknown, To: record.Completed, Result: json.RawMessage(`{"content":[]}`),
		By: "bob", Via: record.ApproverOperator, Note: "resolved by bob: the bank says yes"}
	_, err = resolveExecution(t.Context(), &settledFirst{Store: s, other: other}, id, "failed", "")
	want := "is completed (by bob through operator: resolved by bob: the bank says yes)"
	if err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "to failed") {
		t.Fatalf("resolve that lost to another = %v; want it to say %q", err, want)
	}
}

// TestUnknownIDNamesTheRedisPrefix: a Redis prefix is not checked, so of
// an id the store lacks, the prefix read is the one thing to look at:
// the message names it, though the URL's query is otherwise hidden.
func TestUnknownIDNamesTheRedisPrefix(t *testing.T) {
	u := os.Getenv("MCPI_REDIS_URL")
	if u == "" {
		if os.Getenv("MCPI_REQUIRE_SERVICES") != "" {
			t.Fatal("MCPI_REDIS_URL is not set, and MCPI_REQUIRE_SERVICES is")
		}
		t.Skip("MCPI_REDIS_URL is not set")
	}
	prefix := fmt.Sprintf("cli_nope_%d:", time.Now().UnixNano()) // reading makes no key
	sep := "?"
	if strings.Contains(u, "?") {
		sep = "&"
	}
	store := u + sep + "prefix=" + prefix
	for _, args := range [][]string{
		{"show", "exe_nope", "--store", store},
		{"resolve", "exe_nope", "--as", "failed", "--store", store},
		{"approve", "exe_nope", "--store", store},
	} {
		_, _, err := run(t, append([]string{"activity"}, args...)...)
		if err == nil || !strings.Contains(err.Error(), "no such execution") || !strings.Contains(err.Error(), `prefix "`+prefix+`"`) {
			t.Errorf("activity %s of an unknown id = %v; want it to name the prefix %q", args[0], err, prefix)
		}
	}
}

// TestListSaysWhenLimitLeftSomeOut: a list cut short at --limit says so
// on stderr, or an operator would take the newest N for all there are;
// a list that holds them all says nothing.
func TestListSaysWhenLimitLeftSomeOut(t *testing.T) {
	store, ids := awaitingExecutions(t, record.ApproverOperator, record.ApproverOperator, record.ApproverOperator)
	for _, format := range []string{"--json=false", "--json"} {
		out, errOut, err := run(t, "activity", "list", "--store", store, "--limit", "2", format)
		if err != nil || strings.Contains(out, ids[0]) || !strings.Contains(out, ids[1]) || !strings.Contains(out, ids[2]) {
			t.Errorf("%s: list --limit 2 of 3 = %v:\n%s\nwant the newest 2", format, err, out)
		}
		if !strings.Contains(errOut, "--limit 2 left older ones out") {
			t.Errorf("%s: list --limit 2 of 3 said on stderr %q; want it to say --limit left some out", format, errOut)
		}
		out, errOut, err = run(t, "activity", "list", "--store", store, "--limit", "3", format)
		if err != nil || !strings.Contains(out, ids[0]) || errOut != "" {
			t.Errorf("%s: list --limit 3 of 3 = %v:\n%s\nstderr %q; want all 3, and nothing on stderr", format, err, out, errOut)
		}
	}
}

// TestResolveRefusesAnExpiredExecution: an unknown execution whose
// retention ran out is no longer matched, and only waits for its purge.
// Resolving it would settle it anew, with a new retention, and bring
// it back to be replayed: in one store and not another, as their
// purges fell. It is refused, and left as it was.
func TestResolveRefusesAnExpiredExecution(t *testing.T) {
	path := filepath.Join(t.TempDir(), "records.db")
	then := time.Now().Add(-time.Hour)
	s, err := sqlitestore.Open(t.Context(), path, sqlitestore.Options{Now: func() time.Time { return then }})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	r := &record.Record{ID: record.NewID(then), Key: "k", Fingerprint: "f", Actor: "alice", Tool: "charge_card", Retention: time.Minute}
	if _, _, err := s.Reserve(t.Context(), r, record.ReserveOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, to := range []record.State{record.Dispatched, record.Unknown} {
		if _, err := s.Update(t.Context(), r.ID, record.Change{To: to}); err != nil {
			t.Fatal(err)
		}
	}
	_, _, err = run(t, "activity", "resolve", r.ID, "--store", "sqlite:"+path, "--as", "completed")
	if err == nil || !strings.Contains(err.Error(), "expired") {
		t.Fatalf("resolve of an expired execution = %v; want it refused as expired", err)
	}
	if got, err := s.Get(t.Context(), r.ID); err == nil && got.State != record.Unknown {
		t.Fatalf("the expired execution is %s after a refused resolve; want it left unknown", got.State)
	}
}
