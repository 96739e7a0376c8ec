package pgstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record/recordtest"
	"github.com/mcp-idempotent/mcp-idempotent/internal/retry"
)

// TestMigrateFromVersion1 opens a schema an older build laid out: the
// first use adds the allowances and moves it to version 2.
func TestMigrateFromVersion1(t *testing.T) {
	ctx := t.Context()
	s := newStore(t, nil)
	if _, err := s.pool.Exec(ctx, s.sql("CREATE SCHEMA {schema}; CREATE TABLE {schema}.schema_version (version integer NOT NULL)")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.pool.Exec(ctx, s.sql(ddl)); err != nil {
		t.Fatal(err)
	}
	r := newRecord("kept", time.Now())
	if _, err := s.pool.Exec(ctx, s.sql("INSERT INTO {schema}.records (id, key, holds_key, fingerprint, actor, scope, upstream, tool, state, history, attempts, attached, retention, owner) VALUES ($1, $2, true, 'f', 'a', 's', 'u', 't', 'accepted', '[]', 0, 0, '1h', 'o')"), r.ID, r.Key); err != nil {
		t.Fatal(err)
	}
	if ok, _, err := s.TakeAllowance(ctx, "bank", retry.Allowance{Rate: 1, Burst: 1}, time.Now()); !ok || err != nil {
		t.Fatalf("TakeAllowance on a migrated schema = %v, %v", ok, err)
	}
	if v, notifies, indexed, err := s.version(ctx, s.pool); v != schemaVersion || !notifies || !indexed || err != nil {
		t.Fatalf("version %d (trigger replaced: %v, indexed: %v), %v; want %d, replaced, indexed", v, notifies, indexed, err, schemaVersion)
	}
	if _, err := s.Get(ctx, r.ID); err != nil {
		t.Fatalf("a record of version 1: %v", err)
	}
}

// TestMigrateFromVersion2 lays out a schema as the build before version 3
// did (testdata/schema_v2.sql), holding an execution in flight, and opens
// it from several Stores at once, as proxies restarted together would:
// each finds it at version 3, which one of them made. Then the new states
// work across them: a decision wakes the waiter in the other Store, and a
// settling still wakes the waiter of the older execution.
func TestMigrateFromVersion2(t *testing.T) {
	ctx := t.Context()
	u, schema := serverURL(t), newSchema(t)
	stores := make([]*Store, 4)
	for i := range stores {
		stores[i] = open(t, u, schema, nil)
		stores[i].minPoll, stores[i].maxPoll = time.Hour, time.Hour // the notification alone wakes
	}
	v2, err := os.ReadFile("testdata/schema_v2.sql")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stores[0].pool.Exec(ctx, stores[0].sql(string(v2))); err != nil {
		t.Fatal(err)
	}
	old := newRecord("old", time.Now())
	if _, err := stores[0].pool.Exec(ctx, stores[0].sql(`INSERT INTO {schema}.records (id, key, holds_key, fingerprint, actor, scope, upstream, tool, state, history, attempts, attached, retention, owner)
		VALUES ($1, $2, true, $2, 'a', 's', 'u', 't', 'dispatched', '[]', 1, 0, '1h', 'o')`), old.ID, old.Key); err != nil {
		t.Fatal(err)
	}

	var wg sync.WaitGroup
	for _, s := range stores {
		wg.Go(func() {
			if got, err := s.Get(ctx, old.ID); err != nil || got.State != record.Dispatched || got.Awaiting != "" {
				t.Errorf("the execution of version 2 reads %+v, %v; want it dispatched, awaiting nothing", got, err)
			}
		})
	}
	wg.Wait()
	var v, made int
	if err := stores[0].pool.QueryRow(ctx, stores[0].sql(`SELECT max(version), count(*) FILTER (WHERE version = 3) FROM {schema}.schema_version`)).Scan(&v, &made); err != nil || v != schemaVersion || made != 1 {
		t.Fatalf("schema_version: at %d, version 3 made %d times (%v); want %d, once", v, made, err, schemaVersion)
	}

	s, other := stores[0], stores[1]
	r := newRecord("new", time.Now())
	r.Awaiting = record.ApproverOperator
	if _, _, err := s.Reserve(ctx, r, record.ReserveOptions{}); err != nil {
		t.Fatal(err)
	}
	decideAndSettle(t, s, other, r.ID, old.ID)
}

// TestSchemaKnowsTheStates: the partial index of the records in flight
// and the trigger's function that wakes waiters name exactly the in-flight states of
// record.States, as the statements (inFlight) do. A new state fails it
// until a migration adds the state to them.
func TestSchemaKnowsTheStates(t *testing.T) {
	if len(migrations) != schemaVersion {
		t.Fatalf("%d migrations for version %d", len(migrations), schemaVersion)
	}
	ctx := t.Context()
	s := newStore(t, nil)
	if err := s.ensure(ctx); err != nil {
		t.Fatal(err)
	}
	var index, notify string
	if err := s.pool.QueryRow(ctx, `SELECT pg_get_expr(i.indpred, i.indrelid) FROM pg_index i WHERE i.indexrelid = $1::regclass`,
		s.quoted+".records_owner_in_flight").Scan(&index); err != nil {
		t.Fatal(err)
	}
	if err := s.pool.QueryRow(ctx, `SELECT pg_get_functiondef($1::regprocedure)`, s.quoted+"."+notifyFunc+"()").Scan(&notify); err != nil {
		t.Fatal(err)
	}
	for _, st := range record.States {
		for name, def := range map[string]string{"records_owner_in_flight": index, "the trigger's function " + notifyFunc: notify} {
			if named := strings.Contains(def, "'"+string(st)+"'"); named != st.InFlight() {
				t.Errorf("%s names %s: %v; want %v (in flight): %s", name, st, named, st.InFlight(), def)
			}
		}
		if named := strings.Contains(inFlight, "'"+string(st)+"'"); named != st.InFlight() {
			t.Errorf("inFlight names %s: %v; want %v", st, named, st.InFlight())
		}
	}
}

// TestTriggerReplacedAtVersion3 lays out a schema as a build of version 3
// from before notifyDDL did, holding executions in flight, and opens it
// from several Stores at once: the trigger is replaced, its WHEN reads
// watched alone (what it costs each update is in notifyDDL's
// comment), and it wakes waiters as before, on a settling and on a
// decision.
func TestTriggerReplacedAtVersion3(t *testing.T) {
	ctx := t.Context()
	u, schema := serverURL(t), newSchema(t)
	stores := make([]*Store, 4)
	for i := range stores {
		stores[i] = open(t, u, schema, nil)
		stores[i].minPoll, stores[i].maxPoll = time.Hour, time.Hour // the notification alone wakes
	}
	layOutOlderVersion3(t, stores[0])
	var wg sync.WaitGroup
	for _, s := range stores {
		wg.Go(func() {
			if err := s.ensure(ctx); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	var (
		when  string
		funcs int
	)
	if err := stores[0].pool.QueryRow(ctx, `SELECT pg_get_triggerdef(t.oid), (SELECT count(*) FROM pg_proc p WHERE p.pronamespace = c.relnamespace AND p.proname = $2)
		FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid WHERE t.tgname = 'records_settled' AND t.tgrelid = $1::regclass`,
		stores[0].quoted+".records", notifyFunc).Scan(&when, &funcs); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(when, "WHEN (new.watched) EXECUTE FUNCTION") || funcs != 1 {
		t.Fatalf("the trigger: %s, with %d functions %s; want it WHEN (new.watched), with one", when, funcs, notifyFunc)
	}

	settling, deciding := newRecord("settling", time.Now()), newRecord("deciding", time.Now())
	deciding.Awaiting = record.ApproverOperator
	for _, r := range []*record.Record{settling, deciding} {
		if _, _, err := stores[0].Reserve(ctx, r, record.ReserveOptions{Dispatch: r.Awaiting == ""}); err != nil {
			t.Fatal(err)
		}
	}
	s, other := stores[1], stores[2]
	decideAndSettle(t, s, other, deciding.ID, settling.ID)
}

// TestRoleThatMayNotReplaceTheTrigger: a role that may read and write
// the tables of a schema made by an older build of version 3, but not
// create a schema nor alter the table, opens it as before: it keeps the
// older trigger, whose notifications still wake waiters.
func TestRoleThatMayNotReplaceTheTrigger(t *testing.T) {
	ctx := t.Context()
	u, schema := serverURL(t), newSchema(t)
	admin := open(t, u, schema, nil)
	layOutOlderVersion3(t, admin)
	b := make([]byte, 6)
	rand.Read(b)
	role, password := "mcpi_limited_"+hex.EncodeToString(b), hex.EncodeToString(b)
	quoted := pgx.Identifier{role}.Sanitize()
	if _, err := admin.pool.Exec(ctx, "CREATE ROLE "+quoted+" LOGIN PASSWORD '"+password+"'"); err != nil {
		t.Skipf("cannot make a role to test with: %v", err)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		for _, q := range []string{"DROP OWNED BY " + quoted, "DROP ROLE " + quoted} {
			if _, err := admin.pool.Exec(ctx, q); err != nil {
				t.Errorf("%s: %v", q, err)
			}
		}
	})
	if _, err := admin.pool.Exec(ctx, admin.sql("GRANT USAGE ON SCHEMA {schema} TO "+quoted+"; GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {schema} TO "+quoted)); err != nil {
		t.Fatal(err)
	}
	limitedURL, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	limitedURL.User = url.UserPassword(role, password)
	s := open(t, limitedURL.String(), schema, nil)
	s.minPoll, s.maxPoll = time.Hour, time.Hour // the notification alone wakes

	r := newRecord("k", time.Now())
	if _, _, err := s.Reserve(ctx, r, record.ReserveOptions{Dispatch: true}); err != nil {
		t.Fatalf("Reserve as a role that may not alter the table: %v", err)
	}
	if triggerReplaced(t, admin) {
		t.Fatal("the trigger was replaced; want the older one kept")
	}
	settled := waitFor(s, r.ID)
	waiting(t, s, r.ID, 1)
	complete(t, s, r.ID, settled)
}

// TestBusyTableKeepsTheOlderTrigger: a transaction that touched the
// records table and stays open keeps the trigger from being replaced.
// The Store that tried keeps the older one and works; it neither waits
// for the transaction nor makes every other statement wait behind it.
func TestBusyTableKeepsTheOlderTrigger(t *testing.T) {
	ctx := t.Context()
	u, schema := serverURL(t), newSchema(t)
	admin := open(t, u, schema, nil)
	layOutOlderVersion3(t, admin)
	holder, err := connect(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close(context.Background())
	if _, err := holder.Exec(ctx, admin.sql("BEGIN; SELECT count(*) FROM {schema}.records")); err != nil {
		t.Fatal(err)
	}

	// Without a bound of its own on the wait for the table, the
	// replacement would wait out the statement timeout: make that longer
	// than the call's deadline, which is far longer than the bound.
	patient, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	q := patient.Query()
	q.Set("statement_timeout", "60000")
	patient.RawQuery = q.Encode()
	s := open(t, patient.String(), schema, nil)
	callCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	r := newRecord("k", time.Now())
	if _, _, err := s.Reserve(callCtx, r, record.ReserveOptions{Dispatch: true}); err != nil {
		t.Fatalf("Reserve while another transaction holds the table: %v", err)
	}
	if triggerReplaced(t, admin) {
		t.Fatal("the trigger was replaced; want the older one kept")
	}
	if _, err := holder.Exec(ctx, "COMMIT"); err != nil {
		t.Fatal(err)
	}
	if err := open(t, u, schema, nil).ensure(ctx); err != nil {
		t.Fatal(err)
	}
	if !triggerReplaced(t, admin) {
		t.Fatal("the trigger was kept once the table was free; want it replaced")
	}
}

// layOutOlderVersion3 makes s's schema as a build of version 3 from
// before notifyDDL did, with the older trigger.
func layOutOlderVersion3(t *testing.T, s *Store) {
	t.Helper()
	older := "CREATE SCHEMA {schema}; CREATE TABLE {schema}.schema_version (version integer NOT NULL);" + strings.Join(migrations, "")
	if _, err := s.pool.Exec(t.Context(), s.sql(older)); err != nil {
		t.Fatal(err)
	}
}

// triggerReplaced reports whether s's schema has notifyDDL's trigger.
func triggerReplaced(t *testing.T, s *Store) bool {
	t.Helper()
	_, notifies, _, err := s.version(t.Context(), s.pool)
	if err != nil {
		t.Fatal(err)
	}
	return notifies
}

// decideAndSettle waits in s for the decision on deciding, which awaits
// an operator, and for settling to settle, while other decides the one
// and completes the other: both waiters are woken by the notifications
// alone (s must not poll).
func decideAndSettle(t *testing.T, s, other *Store, deciding, settling string) {
	t.Helper()
	decided := make(chan *record.Record, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		got, _ := s.WaitDecided(ctx, deciding)
		decided <- got
	}()
	waiting(t, s, deciding, 1)
	settled := waitFor(s, settling)
	waiting(t, s, settling, 1)
	if _, err := other.Update(t.Context(), deciding, record.Change{To: record.Authorized, From: record.Accepted, By: "bob", Via: record.ApproverOperator}); err != nil {
		t.Fatal(err)
	}
	if got := <-decided; got == nil || got.State != record.Authorized || got.Awaiting != "" {
		t.Fatalf("WaitDecided = %+v; want it authorized, awaiting no one", got)
	}
	complete(t, other, settling, settled)
}

// complete settles the record id through s and checks that the waiter
// of settled is woken with it.
func complete(t *testing.T, s *Store, id string, settled <-chan *record.Record) {
	t.Helper()
	if _, err := s.Update(t.Context(), id, record.Change{To: record.Completed, Result: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	if got := <-settled; got == nil || got.State != record.Completed {
		t.Fatalf("Wait = %+v; want it completed", got)
	}
}

func TestPurgeTellsOfOrphans(t *testing.T) {
	url := serverURL(t)
	recordtest.RunPurgeTellsOfOrphans(t, func(t *testing.T, now func() time.Time, orphaned func(*record.Record)) record.Store {
		s, err := Open(context.Background(), url, Options{Now: now, Schema: newSchema(t), Orphaned: orphaned})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	})
}

// TestSchemaOfAnotherApplication: a schema= that names one where another
// application keeps a table named as the store's (such as public, with
// its own records) stops the start: no wait makes the names free. Its
// table is left as it was.
func TestSchemaOfAnotherApplication(t *testing.T) {
	ctx := t.Context()
	s := newStore(t, nil)
	if _, err := s.pool.Exec(ctx, s.sql("CREATE SCHEMA {schema}; CREATE TABLE {schema}.records (id integer PRIMARY KEY, name text); INSERT INTO {schema}.records VALUES (1, 'theirs')")); err != nil {
		t.Fatal(err)
	}
	err := s.Check(ctx)
	if !errors.Is(err, record.ErrStoreRefused) || !strings.Contains(err.Error(), `"records" already exists`) {
		t.Fatalf("Check on a schema holding another application's records: %v; want ErrStoreRefused saying records already exists", err)
	}
	var name string
	if err := s.pool.QueryRow(ctx, s.sql("SELECT name FROM {schema}.records WHERE id = 1")).Scan(&name); err != nil || name != "theirs" {
		t.Errorf("their row: %q, %v; want it as it was", name, err)
	}
}

// TestListFingerprintUsesIndex: activity show lists the executions of a
// record's fingerprint, and activity list --fingerprint too. Both read
// records_fingerprint, not the whole table, in a new schema and in one
// an older build made without the index. Sequential scans are off, so
// the plan shows the index whatever the table's size.
func TestListFingerprintUsesIndex(t *testing.T) {
	ctx := t.Context()
	u, schema := serverURL(t), newSchema(t)
	check := func(s *Store, which string) {
		t.Helper()
		if err := s.ensure(ctx); err != nil {
			t.Fatal(err)
		}
		for _, f := range []record.Filter{
			{Fingerprint: "f1", Limit: 101},
			{Tool: "charge_card", Fingerprint: "f1", Since: time.Now().Add(-48 * time.Hour), Limit: 1000},
		} {
			if plan := listPlan(t, s, f); !strings.Contains(plan, "records_fingerprint") {
				t.Errorf("%s: List(%+v)'s plan:\n%s\nwant it to use records_fingerprint", which, f, plan)
			}
		}
	}
	s := open(t, u, schema, nil)
	check(s, "a new schema")
	if _, err := s.pool.Exec(ctx, s.sql("DROP INDEX {schema}.records_fingerprint")); err != nil {
		t.Fatal(err)
	}
	check(open(t, u, schema, nil), "a schema without the index")
}

// listPlan returns PostgreSQL's plan for List's query of f, with
// sequential scans off.
func listPlan(t *testing.T, s *Store, f record.Filter) string {
	t.Helper()
	tx, err := s.pool.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background()) //nolint:errcheck // read only
	if _, err := tx.Exec(t.Context(), "SET LOCAL enable_seqscan = off"); err != nil {
		t.Fatal(err)
	}
	q, args := s.listQuery(f)
	rows, err := tx.Query(t.Context(), "EXPLAIN "+q, args...)
	if err != nil {
		t.Fatal(err)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return strings.Join(lines, "\n")
}
