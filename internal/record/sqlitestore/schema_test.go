package sqlitestore_test

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record/sqlitestore"
)

// schemaV1 is the schema as version 1 of this code created it, with one
// execution in flight.
const schemaV1 = `
CREATE TABLE schema_version (version INTEGER NOT NULL);
INSERT INTO schema_version (version) VALUES (1);
CREATE TABLE records (
	id          TEXT PRIMARY KEY,
	key         TEXT NOT NULL,
	holder      INTEGER NOT NULL DEFAULT 0, -- 1: the record a Reserve of key finds
	fingerprint TEXT NOT NULL,
	actor       TEXT NOT NULL,
	scope       TEXT NOT NULL,
	upstream    TEXT NOT NULL,
	tool        TEXT NOT NULL,
	state       TEXT NOT NULL,
	history     TEXT NOT NULL,              -- JSON array of transitions
	attempts    INTEGER NOT NULL,
	attached    INTEGER NOT NULL,
	result      TEXT,                       -- JSON, as the upstream sent it
	error       TEXT,                       -- JSON, as the upstream sent it
	retention   INTEGER NOT NULL,           -- nanoseconds
	expires_at  INTEGER,                    -- unix nanoseconds; NULL in flight
	owner       TEXT NOT NULL,
	lease_until INTEGER                     -- unix nanoseconds; NULL when none
);
CREATE UNIQUE INDEX records_holder ON records (key) WHERE holder = 1;
CREATE INDEX records_expiry ON records (expires_at) WHERE expires_at IS NOT NULL;
CREATE INDEX records_owner ON records (owner) WHERE state IN ('accepted', 'dispatched');
CREATE TABLE secrets (
	name  TEXT PRIMARY KEY,
	value BLOB NOT NULL
);
INSERT INTO records (id, key, holder, fingerprint, actor, scope, upstream, tool, state, history,
	attempts, attached, retention, owner, lease_until)
VALUES ('exe_old', 'k-old', 1, 'f-old', 'alice', 'session:1', 'stdio:server', 'charge_card', 'accepted',
	'[{"state":"accepted","at":"2026-07-28T12:00:00Z"}]', 0, 0, 3600000000000, 'proxy-1', %d);
`

// TestUpgradeFromVersion1 opens a file that version 1 made: it gets the
// awaiting column, and records_owner covers the authorized state, as in
// a new file; its execution goes on through an approval.
func TestUpgradeFromVersion1(t *testing.T) {
	ctx := t.Context()
	path := dbPath(t)
	lease := time.Now().Add(time.Hour).Round(0).UTC()
	if _, err := rawDB(t, path).ExecContext(ctx, fmt.Sprintf(schemaV1, lease.UnixNano())); err != nil {
		t.Fatal(err)
	}
	s := open(t, path, sqlitestore.Options{})
	old, err := s.Get(ctx, "exe_old")
	if err != nil || old.State != record.Accepted || old.Awaiting != "" || !old.LeaseUntil.Equal(lease) {
		t.Fatalf("the old execution = %+v, %v; want it accepted, awaiting nothing", old, err)
	}
	if _, err := s.Update(ctx, old.ID, record.Change{To: record.Authorized, By: "bob", Via: record.ApproverOperator}); err != nil {
		t.Fatal(err)
	}
	// Renew covers authorized executions in the upgraded file.
	renewed := lease.Add(time.Hour)
	if err := s.Renew(ctx, "proxy-1", renewed); err != nil {
		t.Fatal(err)
	}
	r := newRecord("k-new")
	r.Awaiting = record.ApproverClient
	if _, won, err := s.Reserve(ctx, r, record.ReserveOptions{}); err != nil || !won {
		t.Fatalf("Reserve in the upgraded file = won %v, %v", won, err)
	}
	s.Close()

	s = open(t, path, sqlitestore.Options{})
	got, err := s.Get(ctx, old.ID)
	if err != nil {
		t.Fatal(err)
	}
	last := got.History[len(got.History)-1]
	if got.State != record.Authorized || last.By != "bob" || last.Via != record.ApproverOperator || !got.LeaseUntil.Equal(renewed) {
		t.Errorf("reopened: %+v, last transition %+v; want authorized by bob via operator, its lease renewed", got, last)
	}
	if recs, err := s.List(ctx, record.Filter{Awaiting: true}); err != nil || len(recs) != 1 || recs[0].Awaiting != record.ApproverClient {
		t.Errorf("List(Awaiting) = %v, %v; want the new execution, awaiting the client", recs, err)
	}
	if plan, err := s.RenewPlan(ctx); err != nil || !strings.Contains(plan, "records_owner") {
		t.Errorf("Renew's plan in the upgraded file: %q, %v; want it to use records_owner", plan, err)
	}

	fresh := dbPath(t)
	if plan, err := open(t, fresh, sqlitestore.Options{}).RenewPlan(ctx); err != nil || !strings.Contains(plan, "records_owner") {
		t.Errorf("Renew's plan in a new file: %q, %v; want it to use records_owner", plan, err)
	}
	if up, nw := shape(t, rawDB(t, path)), shape(t, rawDB(t, fresh)); !slices.Equal(up, nw) {
		t.Errorf("the upgraded file's schema:\n%s\nwant a new file's:\n%s", strings.Join(up, "\n"), strings.Join(nw, "\n"))
	}
}

// shape describes db's schema: its version, the columns of records, and
// the indexes' definitions.
func shape(t *testing.T, db *sql.DB) []string {
	t.Helper()
	var out []string
	query := func(q string) {
		rows, err := db.QueryContext(context.Background(), q)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		for rows.Next() {
			var line string
			if err := rows.Scan(&line); err != nil {
				t.Fatal(err)
			}
			out = append(out, line)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
	}
	query("SELECT 'version ' || max(version) FROM schema_version")
	query(`SELECT name || ' ' || type || ' ' || "notnull" || ' ' || coalesce(dflt_value, 'NULL') FROM pragma_table_info('records') ORDER BY cid`)
	query("SELECT sql FROM sqlite_schema WHERE type = 'index' AND sql IS NOT NULL ORDER BY name")
	return out
}

// TestListFingerprintUsesIndex: activity show lists the executions of a
// record's fingerprint, and activity list --fingerprint too. Both read
// records_fingerprint, not the whole table, in a new file and in one an
// older build made without the index.
func TestListFingerprintUsesIndex(t *testing.T) {
	ctx := t.Context()
	filters := []record.Filter{
		{Fingerprint: "f1", Limit: 101},
		{Tool: "charge_card", Fingerprint: "f1", Since: time.Now().Add(-48 * time.Hour), Limit: 1000},
	}
	check := func(s *sqlitestore.Store, which string) {
		t.Helper()
		for _, f := range filters {
			if plan, err := s.ListPlan(ctx, f); err != nil || !strings.Contains(plan, "records_fingerprint") {
				t.Errorf("%s: List(%+v)'s plan: %q, %v; want it to use records_fingerprint", which, f, plan, err)
			}
		}
	}
	path := dbPath(t)
	s := open(t, path, sqlitestore.Options{})
	check(s, "a new file")
	s.Close()

	if _, err := rawDB(t, path).ExecContext(ctx, "DROP INDEX records_fingerprint"); err != nil {
		t.Fatal(err)
	}
	check(open(t, path, sqlitestore.Options{}), "a file without the index")
}
