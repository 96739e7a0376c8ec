package cli

import (
	"errors"
	"strings"
	"unicode"
	"unicode/utf8"
)

// checkActor says what is wrong with an actor's name, given with
// --actor or in a token file; nil if nothing is.
//
// The actor enters every fingerprint, and is logged and journaled: a
// name that holds a line break or an escape sequence would forge lines
// in logs and act on the terminal that reads them, and one that is all
// space, or has space at an end, reads as another actor, or as none,
// while it never shares an execution with it. The fingerprint takes it
// as JSON text, where each byte that is not UTF-8 becomes U+FFFD: two
// such actors would be one.
func checkActor(name string) error {
	switch {
	case !utf8.ValidString(name):
		return errors.New("is not UTF-8 text")
	case strings.TrimSpace(name) == "":
		return errors.New("is all space: give a name")
	case strings.TrimSpace(name) != name:
		return errors.New("has space at an end, which no log shows: give the name alone")
	}
	for _, r := range name {
		if unicode.IsControl(r) || unicode.Is(unicode.Bidi_Control, r) {
			return errors.New("holds a control character (a line break, a tab, an escape): give a name of printable characters")
		}
	}
	return nil
}
