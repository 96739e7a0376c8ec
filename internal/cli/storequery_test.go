package cli

import (
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

// TestCutParamKeepsSpaces: the URL left once schema= is taken out gives
// pgx the values it was given, a space included: pgx reads a "+" as
// itself, as libpq does, so a password or an options= with a space
// written back as "+" reached the server changed.
func TestCutParamKeepsSpaces(t *testing.T) {
	for _, raw := range []string{
		"postgres://bob@db.example/app?password=a%20b%2Bc&application_name=my%20app&options=-c%20search_path%3Dx&schema=s",
		"postgres://bob@db.example/app?password=a%20b%2Bc&application_name=my%20app&options=-c%20search_path%3Dx",
	} {
		u, _, err := cutParam(raw, "schema")
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := pgconn.ParseConfig(u)
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Password != "a b+c" || cfg.RuntimeParams["application_name"] != "my app" || cfg.RuntimeParams["options"] != "-c search_path=x" {
			t.Errorf("cutParam(%q) gives pgx password %q, application_name %q, options %q; want them as given",
				raw, cfg.Password, cfg.RuntimeParams["application_name"], cfg.RuntimeParams["options"])
		}
	}
}

// TestCutParamKeepsPlus: a "+" in a PostgreSQL URL's query is itself to
// pgx, as to libpq; once schema= is taken out, it still is, not a space.
func TestCutParamKeepsPlus(t *testing.T) {
	const raw = "postgres://bob@db.example/app?password=a+b&application_name=my+app"
	want, err := pgconn.ParseConfig(raw)
	if err != nil {
		t.Fatal(err)
	}
	u, _, err := cutParam(raw+"&schema=s", "schema")
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgconn.ParseConfig(u)
	if err != nil {
		t.Fatal(err)
	}
	if got.Password != want.Password || got.RuntimeParams["application_name"] != want.RuntimeParams["application_name"] {
		t.Errorf("cutParam gives pgx password %q, application_name %q; want %q, %q as given",
			got.Password, got.RuntimeParams["application_name"], want.Password, want.RuntimeParams["application_name"])
	}
}

// TestCutParamKeepsEmptyAuthority: a PostgreSQL URL with no host, user
// or path, its settings in the query as libpq allows, stays a
// postgres:// URL once schema= is taken out: written back as
// "postgres:?host=...", pgx refused it as no postgres:// URL.
func TestCutParamKeepsEmptyAuthority(t *testing.T) {
	for raw, want := range map[string]string{
		"postgres://?host=db.example&dbname=app&schema=s": "postgres://?host=db.example&dbname=app",
		"postgresql://?host=db.example":                   "postgresql://?host=db.example",
		"postgres://":                                     "postgres://",
		"postgres:///app?schema=s":                        "postgres:///app",
	} {
		u, _, err := cutParam(raw, "schema")
		if err != nil || u != want {
			t.Errorf("cutParam(%q) = %q, %v; want %q", raw, u, err, want)
			continue
		}
		if cfg, err := pgconn.ParseConfig(u); err != nil {
			t.Errorf("pgx reading %q: %v", u, err)
		} else if raw != "postgres://" && raw != "postgres:///app?schema=s" && cfg.Host != "db.example" {
			t.Errorf("pgx reading %q: host %q; want db.example", u, cfg.Host)
		}
	}
}
