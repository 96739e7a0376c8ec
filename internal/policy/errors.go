package policy

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"
)

// problems collects what is wrong with a policy file, each at a node.
// The decoder and the validator add to one list, so that a file is
// refused with every problem at once, up to maxErrors, in file order
// (see place).
type problems struct {
	name  string // the file's name, which every error starts with
	errs  []error
	found int // errors found: errs holds the first maxErrors
}

// maxErrors bounds the errors a file is refused with. A list of a
// million entries each wrong is a million errors, which nobody reads,
// and which would cost far more than the file to hold and print.
const maxErrors = 1000

// A fileError is one problem in a policy file, at a node.
type fileError struct {
	name         string
	line, column int
	step         int    // orders errors at one position: see place
	field        string // dot path of the field, such as tools.charge_card.scope
	msg          string
}

func (e *fileError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s:%d:%d: ", e.name, e.line, e.column)
	if e.field != "" {
		b.WriteString(e.field + ": ")
	}
	b.WriteString(e.msg)
	return b.String()
}

func (p *problems) add(n *yaml.Node, step int, field, format string, args ...any) {
	if p.found++; p.found > maxErrors {
		return
	}
	p.keep(n, step, field, format, args...)
}

// addAlways adds an error past maxErrors too: one about the file as a
// whole, found once, that may explain the thousand before it.
func (p *problems) addAlways(n *yaml.Node, step int, field, format string, args ...any) {
	p.keep(n, step, field, format, args...)
}

func (p *problems) keep(n *yaml.Node, step int, field, format string, args ...any) {
	for i, a := range args {
		if s, ok := a.(string); ok {
			args[i] = brief(s)
		}
	}
	p.errs = append(p.errs, &fileError{
		name: p.name, line: n.Line, column: n.Column, step: step,
		field: brief(field), msg: fmt.Sprintf(format, args...),
	})
}

// maxBrief is the longest text an error shows of a name, a value or a
// field path; longer ones lose their middle.
const maxBrief = 400

// brief shortens s, if it is longer than maxBrief, to its start and its
// end around an ellipsis: the quote that closes a quoted value, and the
// last members of a field path, stay. Every error of a rule names its
// tool, and an error may quote a value: a name or a value of a megabyte
// would make each error a megabyte, and a file of a million errors a
// terabyte.
func brief(s string) string {
	if len(s) <= maxBrief {
		return s
	}
	head, tail := maxBrief*3/4, len(s)-maxBrief/4
	for head > 0 && !utf8.RuneStart(s[head]) {
		head--
	}
	for tail < len(s) && !utf8.RuneStart(s[tail]) {
		tail++
	}
	return s[:head] + "…" + s[tail:]
}

// syntaxError words the YAML parser's error in the file's terms, as
// "name:line: ...", the form of every other error. The parser names the
// line of the block it was reading, which may be above the mistake.
func syntaxError(name string, data []byte, err error) error {
	msg, _ := strings.CutPrefix(err.Error(), "yaml: ")
	if rest, ok := strings.CutPrefix(msg, "line "); ok {
		if line, what, ok := strings.Cut(rest, ": "); ok {
			if n, aerr := strconv.Atoi(line); aerr == nil {
				if strings.Contains(what, "cannot start any token") && tabIndented(data, n) {
					// The parser's words for a tab before a key.
					what += ": the line is indented with a tab; YAML indents with spaces only"
				}
				return fmt.Errorf("%s:%s: YAML syntax error at or after this line: %s", name, line, what)
			}
		}
	}
	return fmt.Errorf("%s: YAML syntax error: %s", name, msg)
}

// tabIndented reports whether line n (from 1) of data begins with white
// space that holds a tab.
func tabIndented(data []byte, n int) bool {
	lines := bytes.SplitN(data, []byte("\n"), n+1)
	if n < 1 || n > len(lines) {
		return false
	}
	indent := bytes.TrimLeft(lines[n-1], " \t")
	return bytes.IndexByte(lines[n-1][:len(lines[n-1])-len(indent)], '\t') >= 0
}

// describe names a node's kind for a type error.
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		switch n.ShortTag() {
		case "!!null":
			return "an empty value"
		case "!!bool":
			return "the boolean " + n.Value
		case "!!int", "!!float":
			return "the number " + n.Value
		}
		return strconv.Quote(n.Value)
	}
	return "an unsupported YAML node"
}

// quoted shows a value in an error: scalars as written, others by kind.
func quoted(n *yaml.Node) string {
	if n.Kind == yaml.ScalarNode && !isNull(n) {
		return strconv.Quote(n.Value)
	}
	return describe(n)
}

// fieldName shows a tool name or key in a field path, quoting it when it
// would not read as one path element, or holds a character that is not
// printable: a line break would start a line of the error's own, an
// escape would drive the terminal.
func fieldName(s string) string {
	if s != "" && !strings.ContainsAny(s, ". \"[]") && !strings.ContainsFunc(s, notPrintable) {
		return s
	}
	return strconv.Quote(s)
}

func notPrintable(r rune) bool { return !unicode.IsPrint(r) }

func orList(vs []string) string {
	if len(vs) < 2 {
		return strings.Join(vs, "")
	}
	return strings.Join(vs[:len(vs)-1], ", ") + " or " + vs[len(vs)-1]
}

// textError finds the first character a YAML reader refuses: a byte that
// is not UTF-8, as a Latin-1 "é" saved in a comment, or a control
// character. The parser refuses both without a line, so this names it.
// A file that starts with a UTF-16 byte order mark is left to the parser,
// which reads UTF-16.
func textError(name string, data []byte) error {
	if bytes.HasPrefix(data, []byte{0xFE, 0xFF}) || bytes.HasPrefix(data, []byte{0xFF, 0xFE}) {
		return nil
	}
	line, column := 1, 1
	for i := 0; i < len(data); {
		r, size := utf8.DecodeRune(data[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			return fmt.Errorf("%s:%d:%d: not UTF-8: byte 0x%02X; save the file as UTF-8", name, line, column, data[i])
		case !yamlPrintable(r):
			return fmt.Errorf("%s:%d:%d: the control character %U may not appear in YAML", name, line, column, r)
		case r == '\n':
			line, column = line+1, 1
		default:
			column++
		}
		i += size
	}
	return nil
}

// yamlPrintable reports whether YAML 1.2 allows r in a file (c-printable).
func yamlPrintable(r rune) bool {
	switch {
	case r == '\t', r == '\n', r == '\r', r == 0x85:
		return true
	case r >= 0x20 && r <= 0x7E, r >= 0xA0 && r <= 0xD7FF, r >= 0xE000 && r <= 0xFFFD:
		return true
	}
	return r >= 0x10000 && r <= 0x10FFFF
}

// coreTags are the tags a file may write out: YAML's own, which say what
// kind of value it is. A timestamp or binary value is taken as its text.
var coreTags = map[string]bool{
	"!!str": true, "!!int": true, "!!float": true, "!!bool": true, "!!null": true,
	"!!map": true, "!!seq": true, "!!timestamp": true, "!!binary": true,
}

// checkTags adds an error for each value written with another tag, such
// as !env. Nothing reads tags: such a value was taken as if untagged in
// one key, and refused in another in words that named only its text, as
// "side_effect" is not a class.
func checkTags(p *problems, n *yaml.Node) {
	if n.Kind == yaml.AliasNode {
		return // its anchor is checked where it is written
	}
	if n.Style&yaml.TaggedStyle != 0 && !coreTags[n.ShortTag()] {
		p.add(n, -1, "", "the tag %s is not one a policy file reads: drop it", n.Tag)
	}
	for _, c := range n.Content {
		checkTags(p, c)
	}
}
