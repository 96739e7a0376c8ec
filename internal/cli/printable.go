package cli

import (
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Much of what activity prints for a person came from a client: its
// clientInfo, a tool name, an approval's note. A line break in one would
// add lines that look like the output's own (a forged "authorized by"),
// and an escape sequence would act on the terminal. So each string that
// holds a control or bidi character, or is not UTF-8, is printed quoted,
// as Go quotes it. --json needs none of this: JSON escapes them.

// printable returns s, or s quoted if it holds what a terminal would act
// on rather than show.
func printable(s string) string {
	if !utf8.ValidString(s) {
		return strconv.Quote(s)
	}
	for _, r := range s {
		if unicode.IsControl(r) || unicode.Is(unicode.Bidi_Control, r) {
			return strconv.Quote(s)
		}
	}
	return s
}

// makePrintable applies printable to every string v holds, through its
// pointers, exported struct fields and slices, in place. Byte slices are
// left alone: they are JSON, which need not escape a bidi character or a
// C1 control, so each is made printable where it is printed. So are
// fields tagged print:"quoted", which are printed with %q: quoted twice,
// they would show their escapes escaped.
func makePrintable(v reflect.Value) {
	switch v.Kind() {
	case reflect.Pointer:
		if !v.IsNil() {
			makePrintable(v.Elem())
		}
	case reflect.Struct:
		for i := range v.NumField() {
			if f := v.Type().Field(i); f.IsExported() && f.Tag.Get("print") != "quoted" {
				makePrintable(v.Field(i))
			}
		}
	case reflect.Slice, reflect.Array:
		if v.Type().Elem().Kind() == reflect.Uint8 {
			return
		}
		for i := range v.Len() {
			makePrintable(v.Index(i))
		}
	case reflect.String:
		if v.CanSet() {
			v.SetString(printable(v.String()))
		}
	}
}

// printableError is an error whose message is made printable: a file
// name or argument it echoes may hold a line break or an escape, which
// printed raw would forge a line of output or act on the terminal.
type printableError struct{ err error }

func (e *printableError) Error() string {
	s := e.err.Error()
	var joined interface {
		error
		Unwrap() []error
	}
	if !errors.As(e.err, &joined) {
		return escapeControls(s)
	}
	// Errors joined one a line, such as a policy file's problems, stay
	// one a line: each is escaped on its own.
	parts := make([]string, 0, len(joined.Unwrap()))
	for _, p := range joined.Unwrap() {
		if p != nil {
			parts = append(parts, p.Error())
		}
	}
	j := joined.Error()
	i := strings.Index(s, j)
	if i < 0 || j != strings.Join(parts, "\n") {
		return escapeControls(s)
	}
	for k, p := range parts {
		parts[k] = escapeControls(p)
	}
	return escapeControls(s[:i]) + strings.Join(parts, "\n") + escapeControls(s[i+len(j):])
}
func (e *printableError) Unwrap() error { return e.err }

// escapeControls writes each control or bidi character of s, and each
// byte that is not UTF-8, as Go escapes it (\n, \x1b, \u202e), and leaves
// the rest, quotes included, as it is: the message stays readable.
func escapeControls(s string) string {
	if printable(s) == s {
		return s
	}
	var b strings.Builder
	for i, r := range s {
		switch {
		case r == utf8.RuneError && !strings.HasPrefix(s[i:], string(utf8.RuneError)):
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case unicode.IsControl(r) || unicode.Is(unicode.Bidi_Control, r):
			q := strconv.QuoteRune(r)
			b.WriteString(q[1 : len(q)-1])
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}
