package pgstore

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record/recordtest"
	"github.com/mcp-idempotent/mcp-idempotent/internal/skipnote"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		skipnote.Report("internal/record/pgstore")
		os.Exit(code)
	}))
}

func TestSemantics(t *testing.T) {
	serverURL(t)
	recordtest.Run(t, func(t *testing.T, now func() time.Time) record.Store {
		return newStore(t, now)
	})
}

func TestOpenRejectsOtherURLs(t *testing.T) {
	for _, u := range []string{"redis://127.0.0.1:6379", "sqlite:/tmp/x.db", "postgres://%zz"} {
		if s, err := Open(context.Background(), u, Options{}); err == nil {
			s.Close()
			t.Errorf("Open(%q) succeeded", u)
		}
	}
}

// TestOpenSaysWhatDoesNotParse: a URL pgx does not take is refused
// naming the parameter, and quoting none of its passwords.
func TestOpenSaysWhatDoesNotParse(t *testing.T) {
	for _, tt := range []struct{ url, want, secret string }{
		{"postgres://bob:pw-one@db.example/app?pool_max_conns=0", "pool_max_conns too small", "pw-one"},
		{"postgres://bob@db.example/app?connect_timeout=soon", `invalid connect_timeout (strconv.ParseInt: parsing "soon"`, ""},
		{"postgres://bob:pw-two@db.example/app?pool_max_conn_lifetime=pw-two", "the URL does not parse", "pw-two"},
		{"postgres://bob@db.example/app?password=pw-three&connect_timeout=pw-three", "the URL does not parse", "pw-three"},
		// pgxpool would panic.
		{"postgres://bob@db.example/app?pool_health_check_period=0s", "pool_health_check_period=0s: want a duration above zero", ""},
		{"postgres://bob:pw-four@db.example/app?pool_health_check_period=-1m", "pool_health_check_period=-1m0s: want a duration above zero", "pw-four"},
	} {
		s, err := Open(context.Background(), tt.url, Options{})
		if err == nil {
			s.Close()
			t.Errorf("Open(%q) succeeded", tt.url)
			continue
		}
		if !strings.Contains(err.Error(), tt.want) || tt.secret != "" && strings.Contains(err.Error(), tt.secret) {
			t.Errorf("Open(%q): %v; want it to say %q and not quote the password", tt.url, err, tt.want)
		}
	}
}

func TestAttachCounts(t *testing.T) {
	recordtest.RunAttachCounts(t, func(t *testing.T) (record.Store, record.Store, func(string) int) {
		u, schema := serverURL(t), newSchema(t)
		s := open(t, u, schema, nil)
		return s, open(t, u, schema, nil), func(id string) (n int) {
			if err := s.pool.QueryRow(context.Background(), s.sql(`SELECT attached FROM {schema}.records WHERE id = $1`), id).Scan(&n); err != nil {
				t.Fatal(err)
			}
			return n
		}
	})
}

// Two Stores on one schema are two processes: one waits for the decision
// the other makes.
func TestDecisions(t *testing.T) {
	recordtest.RunDecisions(t, func(t *testing.T) (record.Store, record.Store) {
		u, schema := serverURL(t), newSchema(t)
		return open(t, u, schema, nil), open(t, u, schema, nil)
	})
}

func TestAllowances(t *testing.T) {
	recordtest.RunAllowances(t, func(t *testing.T) (recordtest.AllowanceStore, recordtest.AllowanceStore) {
		u, schema := serverURL(t), newSchema(t)
		return open(t, u, schema, nil), open(t, u, schema, nil)
	})
}

func TestPGDuration(t *testing.T) {
	for v, want := range map[string]time.Duration{
		"5000": 5 * time.Second, "5s": 5 * time.Second, "1.5min": 90 * time.Second,
		"250ms": 250 * time.Millisecond, "2 h": 2 * time.Hour, "0": 0,
	} {
		if got, ok := pgDuration(v); !ok || got != want {
			t.Errorf("pgDuration(%q) = %v, %v; want %v", v, got, ok, want)
		}
	}
	for _, v := range []string{"", "soon", "5 fortnights"} {
		if _, ok := pgDuration(v); ok {
			t.Errorf("pgDuration(%q) read a duration", v)
		}
	}
}

// TestTimeoutFollowsTheURL: a URL that gives statement_timeout gives the
// client's timeout too, a second longer, so that the client does not give
// up on a statement the server still runs.
func TestTimeoutFollowsTheURL(t *testing.T) {
	s, err := Open(context.Background(), "postgres://u@127.0.0.1:1/db?statement_timeout=30s", Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.timeout != 31*time.Second {
		t.Errorf("timeout %v; want 31s", s.timeout)
	}
}
