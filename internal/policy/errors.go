package policy

import (
	"fmt"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// A fileError is one problem in a policy file, at a node.
type fileError struct {
	name         string
	line, column int
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

// syntaxError words the YAML parser's error in the file's terms, as
// "name:line: ...", the form of every other error. The parser names the
// line of the block it was reading, which may be above the mistake.
func syntaxError(name string, err error) error {
	msg, _ := strings.CutPrefix(err.Error(), "yaml: ")
	if rest, ok := strings.CutPrefix(msg, "line "); ok {
		if line, what, ok := strings.Cut(rest, ": "); ok {
			if _, aerr := strconv.Atoi(line); aerr == nil {
				return fmt.Errorf("%s:%s: YAML syntax error at or after this line: %s", name, line, what)
			}
		}
	}
	return fmt.Errorf("%s: YAML syntax error: %s", name, msg)
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
// would not read as one path element.
func fieldName(s string) string {
	if s != "" && !strings.ContainsAny(s, ". \t\n\"[]") {
		return s
	}
	return strconv.Quote(s)
}

func orList(vs []string) string {
	if len(vs) < 2 {
		return strings.Join(vs, "")
	}
	return strings.Join(vs[:len(vs)-1], ", ") + " or " + vs[len(vs)-1]
}
