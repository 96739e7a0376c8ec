package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"
)

// parseFlags parses args into fs, and refuses a flag given an empty
// value, or a value that would replace one given before.
//
// Leaving a flag out gives its default, which for many is "off": no
// journal, no authentication, the memory store. An empty value, as a
// shell variable that is not set expands to, would take that default
// silently: `--store "$STORE"` would keep the records of one process in
// memory while the user believes them shared, and `--auth-token-file
// "$FILE"` would serve without authentication.
func parseFlags(fs *flag.FlagSet, args []string) error {
	refused := guardFlags(fs)
	if err := fs.Parse(args); err != nil {
		return usageOf(withMeantFlag(err, fs, args), *refused)
	}
	if name, word := boolValueApart(fs, args); name != "" {
		return errBoolValueApart(name, word, "would run as the upstream command")
	}
	return nil
}

// errBoolValueApart is the usage error of a boolean flag given its value
// word apart from it, which is taken as what fate says.
func errBoolValueApart(name, word, fate string) error {
	return usagef("--%s takes its value after =, as --%s=%s: %q apart from it %s", name, name, word, word, fate)
}

// boolValueApart returns the name of the boolean flag that ends the
// flags of args, parsed into fs, given without =, and the word after
// it, if that word is a boolean: `--shadow false -- node server.js`.
// The flag package takes a boolean's value only after = (a boolean
// needs none), so the flags end at "false", which would run as the
// upstream command, with shadow mode on. Past a --, the word is the
// command's.
func boolValueApart(fs *flag.FlagSet, args []string) (name, word string) {
	rest := fs.Args()
	n := len(args) - len(rest)
	if n == 0 || len(rest) == 0 {
		return "", ""
	}
	if _, err := strconv.ParseBool(rest[0]); err != nil {
		return "", ""
	}
	for i := 0; i < n; i++ {
		a := args[i]
		if a == "--" || len(a) < 2 {
			return "", ""
		}
		name, _, hasValue := strings.Cut(strings.TrimPrefix(a[1:], "-"), "=")
		f := fs.Lookup(name)
		switch {
		case f == nil || hasValue:
		case isBoolFlag(f) && i == n-1:
			return name, rest[0]
		case !isBoolFlag(f):
			i++ // the flag's value, whatever it looks like
		}
	}
	return "", ""
}

// isBoolFlag reports whether f is a boolean flag, which needs no value.
func isBoolFlag(f *flag.Flag) bool {
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// A refusal is why a guarded flag refused a value: the flag's name and
// what was wrong.
type refusal struct {
	name string
	err  error
}

var (
	errEmptyValue = errors.New("empty value")
	errGivenTwice = errors.New("given twice")
)

// guardFlags makes each flag of fs refuse an empty value (but the
// boolean ones: "" is not a boolean), and a second value where the flag
// holds one, and returns where the refusal is kept.
//
// A flag that holds one value (a flag.Getter: a string, a number, a
// duration, a boolean) would silently keep the last of two: `activity
// resolve --as failed --as completed` would record the execution as
// completed. A flag that collects its values (--upstream-header,
// --allow-origin, activity show --journal) is no Getter, and may repeat.
func guardFlags(fs *flag.FlagSet) *refusal {
	refused := new(refusal)
	fs.VisitAll(func(f *flag.Flag) {
		_, single := f.Value.(flag.Getter)
		f.Value = &guarded{Value: f.Value, name: f.Name, single: single, refused: refused}
	})
	return refused
}

// usageOf is the usage error of err, a parse error of a flag set whose
// flags guardFlags guards; required names the flags that have no
// default to point to.
func usageOf(err error, refused refusal, required ...string) error {
	switch {
	case errors.Is(refused.err, errEmptyValue) && slices.Contains(required, refused.name):
		return usagef("--%s is given an empty value; it is required: give its value", refused.name)
	case errors.Is(refused.err, errEmptyValue):
		return usagef("--%s is given an empty value; leave the flag out for its default", refused.name)
	case errors.Is(refused.err, errGivenTwice):
		// The values are not shown: one may be a credential (a store
		// URL's password).
		return usagef("--%s is given twice; it takes one value: give it once", refused.name)
	case refused.err != nil:
		return usagef("--%s: %v", refused.name, refused.err)
	}
	return &usageError{msg: err.Error()}
}

// guarded is a flag's value that refuses to be set to "", or set twice
// when it holds one value, and says in words what a value it cannot
// parse should look like.
type guarded struct {
	flag.Value
	name    string
	single  bool
	set     bool
	refused *refusal
}

func (v *guarded) Set(s string) error {
	isBool := v.IsBoolFlag()
	switch {
	case s == "" && !isBool:
		*v.refused = refusal{v.name, errEmptyValue}
		return errEmptyValue
	case v.set && v.single:
		*v.refused = refusal{v.name, errGivenTwice}
		return errGivenTwice
	}
	v.set = true
	if err := v.Value.Set(s); err != nil {
		*v.refused = refusal{v.name, v.explain(s, err)}
		return err
	}
	return nil
}

// explain says what a value of v's kind looks like, where the flag
// package says only "parse error": a duration needs a unit, which a
// bare number lacks.
func (v *guarded) explain(s string, err error) error {
	g, ok := v.Value.(flag.Getter)
	if !ok {
		return err
	}
	switch g.Get().(type) {
	case time.Duration:
		unsigned := s
		if s != "" && (s[0] == '-' || s[0] == '+') {
			unsigned = s[1:]
		}
		if durationSyntax.MatchString(unsigned) {
			// Well formed, but more than a Duration holds.
			return fmt.Errorf("%q is too long: at most 2562047h (about 292 years)", s)
		}
		return fmt.Errorf("%q is not a duration, such as 30s, 5m or 1h: a number needs a unit (ms, s, m, h)", s)
	case int:
		return fmt.Errorf("%q is not a whole number within range", s)
	case bool:
		return fmt.Errorf("%q is not true or false", s)
	}
	return err
}

// IsBoolFlag is the wrapped value's, so a boolean flag still needs no
// value.
func (v *guarded) IsBoolFlag() bool {
	b, ok := v.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// String is the wrapped value's; "" for the zero guarded, which the
// flag package makes to tell a default from a zero value.
func (v *guarded) String() string {
	if v.Value == nil {
		return ""
	}
	return v.Value.String()
}

// withMeantFlag adds to err, fs's error parsing args, the flag likely
// meant when the first flag of args that fs does not define is a typo
// away from one it does (--leas for --lease), or is one of serve's given
// to the stdio proxy (--listen): the flag package says only that it is
// not defined.
func withMeantFlag(err error, fs *flag.FlagSet, args []string) error {
	name := unknownFlag(fs, args)
	switch {
	case name == "":
		return err
	case fs.Name() == "mcp-idempotent" && newServeFlags(io.Discard).fs.Lookup(name) != nil:
		return fmt.Errorf("%w; --%s is a flag of serve: mcp-idempotent serve --%s ... -- COMMAND", err, name, name)
	}
	meant, least := "", 3
	fs.VisitAll(func(f *flag.Flag) {
		// As for command names: one letter off for a short name, two
		// for a longer one.
		if d := editDistance(name, f.Name); d < least && (d == 1 || len(f.Name) > 4) {
			meant, least = f.Name, d
		}
	})
	if meant == "" {
		return err
	}
	return fmt.Errorf("%w; did you mean --%s?", err, meant)
}

// unknownFlag returns the name of the first flag of args, up to the
// words that are no flags, that fs does not define; "" for none, or for
// a word the flag package refuses as no flag at all (---x).
func unknownFlag(fs *flag.FlagSet, args []string) string {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" || len(a) < 2 || a[0] != '-' {
			return ""
		}
		name, _, hasValue := strings.Cut(strings.TrimPrefix(a[1:], "-"), "=")
		if name == "" || name[0] == '-' || name[0] == '=' || name == "h" || name == "help" {
			return ""
		}
		f := fs.Lookup(name)
		switch {
		case f == nil:
			return name
		case !hasValue && !isBoolFlag(f):
			i++ // the flag's value, whatever it looks like
		}
	}
	return ""
}
