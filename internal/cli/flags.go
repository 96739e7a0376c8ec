package cli

import (
	"errors"
	"flag"
	"slices"
)

// parseFlags parses args into fs, and refuses a flag given an empty
// value.
//
// Leaving a flag out gives its default, which for many is "off": no
// journal, no authentication, the memory store. An empty value, as a
// shell variable that is not set expands to, would take that default
// silently: `--store "$STORE"` would keep the records of one process in
// memory while the user believes them shared, and `--auth-token-file
// "$FILE"` would serve without authentication.
func parseFlags(fs *flag.FlagSet, args []string) error {
	refused := refuseEmpty(fs)
	if err := fs.Parse(args); err != nil {
		return usageOf(err, *refused)
	}
	return nil
}

// refuseEmpty makes each flag of fs, but the boolean ones, refuse an
// empty value, and returns where the name of the flag refused is kept.
// A boolean flag refuses one already: "" is not a boolean.
func refuseEmpty(fs *flag.FlagSet) *string {
	refused := new(string)
	fs.VisitAll(func(f *flag.Flag) {
		if b, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
			return
		}
		f.Value = &nonEmpty{Value: f.Value, name: f.Name, refused: refused}
	})
	return refused
}

// usageOf is the usage error of err, a parse error of a flag set whose
// flag refused, if one did, refused an empty value. A required flag has
// no default to point to.
func usageOf(err error, refused string, required ...string) error {
	switch {
	case refused != "" && slices.Contains(required, refused):
		return usagef("--%s is given an empty value; it is required: give its value", refused)
	case refused != "":
		return usagef("--%s is given an empty value; leave the flag out for its default", refused)
	}
	return &usageError{msg: err.Error()}
}

// nonEmpty is a flag's value that refuses to be set to "".
type nonEmpty struct {
	flag.Value
	name    string
	refused *string
}

var errEmptyValue = errors.New("empty value")

func (v *nonEmpty) Set(s string) error {
	if s == "" {
		*v.refused = v.name
		return errEmptyValue
	}
	return v.Value.Set(s)
}

// String is the wrapped value's; "" for the zero nonEmpty, which the
// flag package makes to tell a default from a zero value.
func (v *nonEmpty) String() string {
	if v.Value == nil {
		return ""
	}
	return v.Value.String()
}
