package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/mcp-idempotent/mcp-idempotent/internal/intercept"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record/pgstore"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record/sqlitestore"
)

const activityUsage = `Usage:
  mcp-idempotent activity list --store URL [--tool T] [--fingerprint F] [--state S] [--awaiting] [--since 1h] [--limit N] [--json]
  mcp-idempotent activity show EXE_ID --store URL [--journal FILE ...] [--json]
  mcp-idempotent activity resolve EXE_ID --as failed|completed --store URL [--note TEXT] [--journal FILE [--journal-key KEY]] [--json]
  mcp-idempotent activity approve|deny EXE_ID --store URL [--note TEXT] [--journal FILE [--journal-key KEY]] [--json]
`

// parseInterspersed parses flags that may come before or after the
// positional arguments, as in `activity show exe_1 --store x`, and
// refuses a flag given an empty value, as parseFlags does, naming those
// of required that have no default to fall back on.
func parseInterspersed(fs *flag.FlagSet, args []string, required ...string) ([]string, error) {
	var pos []string
	refused := guardFlags(fs)
	for {
		if err := fs.Parse(args); err != nil {
			return nil, usageOf(withMeantFlag(err, fs, args), *refused, required...)
		}
		if fs.NArg() == 0 {
			return pos, nil
		}
		if name, word := boolValueApart(fs, args); name != "" {
			// `activity list --json false` would be refused only as
			// an argument too many, naming no flag; `activity show
			// --json false` would look up an execution "false".
			return nil, errBoolValueApart(name, word, "would be taken as an argument")
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

func runActivity(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	a, err := parseActivity(args)
	if err != nil {
		return err
	}
	if mode, open := readableByOthers(a.journalKey); a.journalKey != "" && open {
		// As the proxy warns: the key is an operator's to keep.
		fmt.Fprintf(stderr, "warning: --journal-key %s is readable by others than its owner (mode %s): whoever reads it can sign checkpoints for a journal they rewrote; chmod 600 it\n", escapeControls(a.journalKey), mode)
	}
	// The store's warnings, for a command whose output is for a person.
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	// A command that only reads opens the store to read only: it may be
	// a copy, kept where nothing may write.
	readOnly := a.verb == "list" || a.verb == "show"
	if !readOnly {
		if err := sqliteMade(ctx, a.store, log); err != nil {
			return err
		}
	}
	store, durable, err := openStore(ctx, a.store, log, readOnly, nil)
	if errors.Is(err, sqlitestore.ErrNoSchema) {
		return usagef("%v: give the file the proxy used", err)
	}
	if err != nil {
		return err
	}
	if durable == nil {
		if a.verb == "show" && len(a.journals) > 0 {
			// Its records went with the proxy: the journals are all
			// that tells of them.
			return a.show(ctx, nil, stdout, stderr)
		}
		return usagef("--store: the memory store lives inside a proxy process; give the durable store the proxy used, or, to show an execution, the proxy's --journal")
	}
	defer durable.Close()
	if pg, ok := durable.(*pgstore.Store); ok {
		// Its first use would make a mistyped schema, empty.
		if err := pg.Made(ctx); errors.Is(err, pgstore.ErrNoSchema) {
			return usagef("--store: %v; give the schema= the proxy used", err)
		} else if err != nil {
			return err
		}
	}

	switch a.verb {
	case "list":
		return a.list(ctx, store, stdout, stderr)
	case "show":
		return a.show(ctx, store, stdout, stderr)
	case "approve", "deny":
		return a.decide(ctx, store, stdout)
	}
	return a.resolve(ctx, store, stdout)
}

// sqliteMade refuses a SQLite --store file that holds no store, before
// a command that writes opens it: opened to write, it would be made an
// empty store, and the command refused as "no such execution" in it.
func sqliteMade(ctx context.Context, url string, log *slog.Logger) error {
	if !strings.HasPrefix(lowerScheme(url), "sqlite:") {
		return nil
	}
	_, durable, err := openStore(ctx, url, log, true, nil)
	if errors.Is(err, sqlitestore.ErrNoSchema) {
		return usagef("%v: give the file the proxy used", err)
	}
	if err == nil {
		durable.Close()
	}
	return nil // any other failure, the open to write names
}

// print prints r as a asks.
func (a *activityArgs) print(stdout io.Writer, r *record.Record) error {
	if a.json {
		if err := notJSON(r); err != nil {
			return err
		}
		return writeJSON(stdout, r)
	}
	printRecord(stdout, r)
	return nil
}

// activityArgs are an activity command's verb, flags and arguments.
type activityArgs struct {
	verb, store        string
	json               bool
	tool, state, since string   // list
	fingerprint        string   // list
	limit              int      // list
	awaiting           bool     // list
	as, note, journal  string   // resolve, approve, deny
	journalKey         string   // resolve, approve, deny
	journals           []string // show
	pos                []string
}

// parseActivity parses and checks an activity command line, before any
// store is opened.
func parseActivity(args []string) (*activityArgs, error) {
	if len(args) == 0 {
		return nil, usagef("activity: say list, show, resolve, approve or deny")
	}
	a := &activityArgs{verb: args[0]}
	fs, err := a.flags(io.Discard)
	if err != nil {
		return nil, err
	}
	if a.pos, err = parseInterspersed(fs, args[1:], "store"); err != nil {
		return nil, &usageError{msg: err.Error()}
	}
	return a, a.check()
}

// flags returns the flag set of a's verb, writing its defaults, when
// asked, to out.
func (a *activityArgs) flags(out io.Writer) (*flag.FlagSet, error) {
	fs := flag.NewFlagSet("activity "+a.verb, flag.ContinueOnError)
	fs.SetOutput(out)
	fs.StringVar(&a.store, "store", "", "the store `URL`, as given to the proxy (sqlite:PATH, ...)")
	fs.BoolVar(&a.json, "json", false, "print JSON for scripts")
	switch a.verb {
	case "list":
		fs.StringVar(&a.tool, "tool", "", "only this tool's executions")
		fs.StringVar(&a.fingerprint, "fingerprint", "", "only executions of this fingerprint, whole (64 hex digits), as activity show prints it")
		fs.StringVar(&a.state, "state", "", "only executions in this state")
		fs.StringVar(&a.since, "since", "", "only executions accepted within this `duration` (such as 1h or 7d)")
		fs.IntVar(&a.limit, "limit", 100, "at most this many")
		fs.BoolVar(&a.awaiting, "awaiting", false, "only executions that await an approval")
	case "show":
		fs.Func("journal", "read the activity journal `FILE` too; repeat it for several", func(file string) error {
			a.journals = append(a.journals, file)
			return nil
		})
	case "resolve":
		fs.StringVar(&a.as, "as", "", "what the execution turned out to be: failed (it did not happen; a retry runs it) or completed (it happened; retries get the note)")
		fs.StringVar(&a.note, "note", "", "why: recorded with the resolution")
		fs.StringVar(&a.journal, "journal", "", "append the resolution to the activity journal `FILE`, as a proxy's --journal; refused while a proxy writes it")
		fs.StringVar(&a.journalKey, "journal-key", "", "sign the --journal with a checkpoint after the line, using the signer key in `FILE`")
	case "approve", "deny":
		fs.StringVar(&a.note, "note", "", "why: recorded with the decision, and shown to the callers")
		fs.StringVar(&a.journal, "journal", "", "append the decision to the activity journal `FILE`, as a proxy's --journal; refused while a proxy writes it")
		fs.StringVar(&a.journalKey, "journal-key", "", "sign the --journal with a checkpoint after the line, using the signer key in `FILE`")
	default:
		return nil, usagef("activity: unknown subcommand %q", a.verb)
	}
	return fs, nil
}

// activityHelp is activity's usage, then each verb's flags with their
// meanings and defaults.
func activityHelp() string {
	var b strings.Builder
	b.WriteString(activityUsage)
	for _, verb := range []string{"list", "show", "resolve", "approve"} {
		name := verb
		if verb == "approve" {
			name = "approve|deny"
		}
		fmt.Fprintf(&b, "\nFlags of activity %s:\n", name)
		fs, _ := (&activityArgs{verb: verb}).flags(&b)
		fs.PrintDefaults()
	}
	return b.String()
}

// check checks a's flags and arguments.
func (a *activityArgs) check() error {
	if a.store == "" {
		return usagef("activity %s: --store is required: the store the proxy used", a.verb)
	}
	if path, _, err := sqlitestore.ParseURL(a.store, sqlitestore.Options{}); err == nil {
		// Opening a file that is not there would make an empty store,
		// and a mistyped path would read as "no executions".
		if _, err := os.Stat(path); err != nil {
			return usagef("--store: %v: give the file the proxy used", err)
		}
	}
	if a.journalKey != "" && a.journal == "" {
		return usagef("--journal-key: it signs the --journal, and none is given")
	}
	if err := sameJournalKey(a.journal, a.journalKey); err != nil {
		return err
	}
	if a.verb == "resolve" && a.as == "" {
		return usagef("activity resolve: --as is required: failed (it did not happen) or completed (it did)")
	}
	if a.verb == "resolve" && a.as != string(record.Failed) && a.as != string(record.Completed) {
		// Checked before the store is opened: the execution's own state
		// is no answer to a mistyped flag.
		return usagef("--as: %q is not failed or completed", a.as)
	}
	if !utf8.ValidString(a.note) {
		// Kept as JSON text, where each byte that is not UTF-8 becomes
		// U+FFFD: every caller would be shown another note.
		return usagef("--note: %q is not UTF-8 text", a.note)
	}
	if n := utf8.RuneCountInString(a.note); n > record.MaxNote {
		// Kept with the record and shown to every caller it has.
		return usagef("--note: %d characters; at most %d", n, record.MaxNote)
	}
	wantPos := 1
	if a.verb == "list" {
		wantPos = 0
		if a.state != "" && !slices.Contains(record.States, record.State(a.state)) {
			return usagef("--state: %q is not a state: want one of %s", a.state, stateNames())
		}
		if a.limit < 1 {
			return usagef("--limit: %d; want 1 or more", a.limit)
		}
		// Records hold lower-case hex; a fingerprint copied from a tool
		// that prints upper case is the same one.
		if fp := strings.ToLower(a.fingerprint); isFingerprint(fp) {
			a.fingerprint = fp
		} else if a.fingerprint != "" {
			// Logs print a fingerprint's first 12 digits: matched as a
			// whole, that would list nothing, which reads as "no calls".
			return usagef("--fingerprint: %q is not a whole fingerprint: give its 64 hex digits, as activity show prints them (logs print the first 12)", a.fingerprint)
		}
	}
	switch {
	case len(a.pos) == 1 && wantPos == 1 && a.pos[0] == "":
		// Looked up, it would read as an execution the store lacks.
		return usagef("activity %s: the execution id is empty: give one as activity list prints it (exe_...)", a.verb)
	case len(a.pos) == 1 && wantPos == 1 && printable(a.pos[0]) != a.pos[0]:
		// No id holds one, and the store's "no such execution" would
		// echo it raw: a line break or an escape acting on the terminal.
		return usagef("activity %s: %q is not an execution id: give one as activity list prints it (exe_...)", a.verb, a.pos[0])
	case len(a.pos) == wantPos:
		return nil
	case wantPos == 0:
		return usagef("activity list takes no arguments, only flags; got %q", a.pos[0])
	default:
		return usagef("activity %s: want one execution id, got %d arguments", a.verb, len(a.pos))
	}
}

// isFingerprint reports whether s is a fingerprint as records hold it:
// the 64 lower-case hex digits of an HMAC-SHA-256.
func isFingerprint(s string) bool {
	if len(s) != 64 {
		return false
	}
	for _, c := range s {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// list prints the executions a's filter selects, and says on stderr when
// --limit left some out.
func (a *activityArgs) list(ctx context.Context, store record.Store, stdout, stderr io.Writer) error {
	lister, ok := store.(record.Lister)
	if !ok {
		return fmt.Errorf("the store %s cannot list its executions", redact(a.store))
	}
	// One more than asked, to tell a list cut short from a whole one:
	// the oldest left out could be the one an operator looks for.
	f := record.Filter{Tool: a.tool, Fingerprint: a.fingerprint, State: record.State(a.state), Awaiting: a.awaiting, Limit: a.limit}
	if f.Limit < math.MaxInt {
		f.Limit++
	}
	if a.since != "" {
		d, err := parseDays(a.since)
		if err != nil {
			return usagef("--since: %v", err)
		}
		f.Since = time.Now().Add(-d)
	}
	recs, err := lister.List(ctx, f)
	if err != nil {
		return err
	}
	if len(recs) > a.limit {
		recs = recs[:a.limit]
		fmt.Fprintf(stderr, "the newest %d executions only: --limit %d left older ones out\n", a.limit, a.limit)
	}
	if a.json {
		if recs == nil {
			recs = []*record.Record{} // [] for none, not null
		}
		for _, r := range recs {
			if err := notJSON(r); err != nil {
				return err
			}
		}
		return writeJSON(stdout, recs)
	}
	printList(stdout, recs)
	return nil
}

// stateNames lists the states, for a message.
func stateNames() string {
	names := make([]string, len(record.States))
	for i, s := range record.States {
		names[i] = string(s)
	}
	return strings.Join(names, ", ")
}

// notJSON says which of r's result and error is not JSON, for --json,
// which encoding/json would refuse without naming r. Only a store that
// something else wrote to holds such a record.
func notJSON(r *record.Record) error {
	for _, m := range []struct {
		name string
		v    json.RawMessage
	}{{"result", r.Result}, {"error", r.Error}} {
		if m.v != nil && !json.Valid(m.v) {
			return fmt.Errorf("execution %s: the store holds its %s as what is not JSON, which --json cannot print", r.ID, m.name)
		}
	}
	return nil
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func printList(w io.Writer, recs []*record.Record) {
	makePrintable(reflect.ValueOf(recs))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "EXECUTION\tTOOL\tSTATE\tACCEPTED\tATTEMPTS\tATTACHED\tACTOR")
	now := time.Now()
	for _, r := range recs {
		state := string(r.State)
		switch {
		case r.Awaiting != "" && r.Orphaned(now):
			// Refused by approve: nothing would send it.
			state += " (awaiting " + r.Awaiting + ", its proxy went away)"
		case r.Awaiting != "":
			state += " (awaiting " + r.Awaiting + ")"
		}
		if intercept.ShadowOwner(r.Owner) {
			state += " (shadow)"
		}
		if expired(r, now) {
			state += " (expired)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%s\n", r.ID, r.Tool, state,
			r.At(record.Accepted).Local().Format(time.DateTime+" MST"), r.Attempts, r.Attached, r.Actor)
	}
	tw.Flush()
}

// printRecord prints r's fields and its history.
func printRecord(w io.Writer, r *record.Record) {
	makePrintable(reflect.ValueOf(r))
	printFields(w, r)
	fmt.Fprintln(w, "\nhistory:")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, h := range r.History {
		note := h.Note
		if h.By != "" || h.Via != "" {
			note = byWhom(h)
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\n", stamp(h.At), h.State, note)
	}
	tw.Flush()
}

// printFields prints r's fields, one a line, its history left out.
func printFields(w io.Writer, r *record.Record) {
	state := string(r.State)
	if intercept.ShadowOwner(r.Owner) {
		state += " (shadow)" // as list marks it
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, kv := range [][2]string{
		{"execution", r.ID},
		{"tool", r.Tool},
		{"state", state},
		{"actor", r.Actor},
		{"scope", r.Scope},
		{"upstream", r.Upstream},
		{"fingerprint", r.Fingerprint},
		{"attempts", fmt.Sprint(r.Attempts)},
		{"attached callers", fmt.Sprint(r.Attached)},
		{"result", resultSize(r)},
		{"owner", r.Owner},
		{"awaiting approval from", r.Awaiting},
	} {
		if kv[1] != "" {
			fmt.Fprintf(tw, "%s\t%s\n", kv[0], kv[1])
		}
	}
	switch {
	case r.ExpiresAt.IsZero():
	case expired(r, time.Now()):
		fmt.Fprintf(tw, "expired\t%s (no call matches it: the next identical call runs again; a purge of the store drops it)\n", stamp(r.ExpiresAt))
	case r.State == record.Failed:
		// A store replaces a failed execution with the next identical
		// call's: it is kept, and never replayed.
		fmt.Fprintf(tw, "kept until\t%s (failed: the next identical call runs it again)\n", stamp(r.ExpiresAt))
	default:
		fmt.Fprintf(tw, "replays until\t%s\n", stamp(r.ExpiresAt))
	}
	if r.State.InFlight() && !r.LeaseUntil.IsZero() {
		lapsed := ""
		if r.Orphaned(time.Now()) {
			lapsed = " (lapsed: its owner stopped renewing it; the next call of it settles it)"
		}
		fmt.Fprintf(tw, "lease until\t%s%s\n", stamp(r.LeaseUntil), lapsed)
	}
	tw.Flush()
}

// expired reports whether r is settled and its retention ran out by now:
// the store holds it until its next purge, and no call matches it.
func expired(r *record.Record, now time.Time) bool {
	return r.State.Settled() && !r.ExpiresAt.IsZero() && !now.Before(r.ExpiresAt)
}

func resultSize(r *record.Record) string {
	switch {
	case r.Result != nil:
		return fmt.Sprintf("%d bytes", len(r.Result))
	case r.Error != nil:
		return "JSON-RPC error " + printable(strings.TrimSpace(string(r.Error)))
	}
	return ""
}

// parseDays reads a Go duration or a whole number of days such as 7d.
func parseDays(s string) (time.Duration, error) {
	const maxDays = math.MaxInt64 / int64(24*time.Hour) // past it the duration wraps
	tooLong := fmt.Errorf("%q is too long: at most %dd (about 292 years)", s, maxDays)
	if n, ok := strings.CutSuffix(s, "d"); ok && n != "" && n[0] != '0' && strings.Trim(n, "0123456789") == "" {
		days, err := strconv.ParseInt(n, 10, 64)
		if err != nil || days > maxDays {
			return 0, tooLong
		}
		return time.Duration(days) * 24 * time.Hour, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil && durationSyntax.MatchString(s) {
		// Well formed, so time.ParseDuration refused it for overflowing.
		return 0, tooLong
	}
	if err == nil && d <= 0 {
		// A duration, but a window that selects nothing.
		return 0, fmt.Errorf("%q is not a duration of more than 0, such as 90m, 24h or 7d", s)
	}
	if err != nil {
		return 0, fmt.Errorf("%q is not a duration such as 90m, 24h or 7d", s)
	}
	return d, nil
}

// durationSyntax matches what time.ParseDuration reads, without a sign.
var durationSyntax = regexp.MustCompile(`^(([0-9]+(\.[0-9]*)?|\.[0-9]+)(ns|us|µs|μs|ms|s|m|h))+$`)
