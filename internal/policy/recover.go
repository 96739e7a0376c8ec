package policy

import (
	"bytes"
	"encoding/json"
	"fmt"

	"go.yaml.in/yaml/v3"
)

// Default status-tool settings of a recover block (DESIGN section 6).
var (
	defaultDonePath   = "status"
	defaultDoneValues = []string{`"done"`, `"completed"`, `"succeeded"`, `"success"`}
	// defaultNotDoneValues say the action never happened: nothing is
	// running that a second send would double.
	defaultNotDoneValues = []string{`"not_found"`, `"not_started"`, `"failed"`}
	// defaultRecoverArguments is used when a recover block has no
	// arguments: the status tool is asked about the execution by its id.
	defaultRecoverArguments = json.RawMessage(`{"execution_id":"{{execution_id}}"}`)
)

// A recoverSpec is a recover block as written.
type recoverSpec struct {
	block
	tool          val[string]
	arguments     val[json.RawMessage]
	done, notDone *statusSpec // nil when not written
}

// A statusSpec is a status field and the values of it that say
// something: a recover block's done or not_done, or a result match's
// structured.
type statusSpec struct {
	block
	path val[string]
	in   val[[]string] // as JSON text; v holds those that could be read
}

// ok reports whether every part of s could be read.
func (s *statusSpec) ok() bool { return s.read && !s.path.bad() && !s.in.bad() }

func (d *decoder) recover(n *yaml.Node, field string) *recoverSpec {
	s := &recoverSpec{}
	s.block = d.fields(n, field, "a mapping with tool, arguments and done", []key{
		{name: "tool", read: into(d, &s.tool, parseStatusTool)},
		{name: "arguments", read: func(v *yaml.Node, f string) { s.arguments = d.arguments(v, f) }},
		{name: "done", read: func(v *yaml.Node, f string) {
			s.done = d.status(v, f, "done, such as [done, succeeded]")
		}},
		{name: "not_done", read: func(v *yaml.Node, f string) {
			s.notDone = d.status(v, f, "not done, such as [not_found, failed]")
		}},
	})
	return s
}

func parseStatusTool(n *yaml.Node) (string, string) {
	switch {
	case !isString(n):
		return "", fmt.Sprintf("want the name of the status tool, not %s", describe(n))
	case n.Value == "":
		return "", "the status tool's name is empty"
	}
	return n.Value, ""
}

// arguments reads the status call's arguments into a JSON object, in the
// order the file writes them.
func (d *decoder) arguments(n *yaml.Node, field string) val[json.RawMessage] {
	if n.Kind != yaml.MappingNode {
		d.errorf(n, field, "want a mapping, the status call's arguments, not %s", describe(n))
		return failed[json.RawMessage](d.place(n))
	}
	conv := &jsonConv{d: d, root: n, field: field, budget: maxArgumentNodes}
	var b bytes.Buffer
	if !conv.value(&b, n, field, 0) {
		return failed[json.RawMessage](d.place(n))
	}
	return good(d.place(n), json.RawMessage(b.Bytes()))
}

// status reads a status block; what says what its values mean, for the
// error that they are missing.
func (d *decoder) status(n *yaml.Node, field, what string) *statusSpec {
	s := &statusSpec{}
	s.block = d.fields(n, field, "a mapping with path and in", []key{
		{name: "path", read: into(d, &s.path, parsePath("a dot path in structuredContent such as status"))},
		{name: "in", read: func(v *yaml.Node, f string) { s.in = d.statusValues(v, f, what) }},
	})
	return s
}

// statusValues reads the values of a status field, each a scalar, as
// JSON text: "done", true, 404.
func (d *decoder) statusValues(n *yaml.Node, field, what string) val[[]string] {
	if n.Kind != yaml.SequenceNode || len(n.Content) == 0 {
		d.errorf(n, field, "want a non-empty list of the values that mean %s, not %s", what, describe(n))
		return failed[[]string](d.place(n))
	}
	if !d.spend(len(n.Content), n) {
		return failed[[]string](d.place(n))
	}
	var vals []string
	ok := true
	for i, e := range n.Content {
		e = resolve(e)
		sub := indexField(field, i)
		if e.Kind != yaml.ScalarNode {
			d.errorf(e, sub, "want a string, number, boolean or null, not %s", describe(e))
			ok = false
			continue
		}
		var b bytes.Buffer
		conv := &jsonConv{d: d, root: e, field: sub, budget: 1}
		if !conv.value(&b, e, sub, 0) {
			ok = false
			continue
		}
		vals = append(vals, b.String())
	}
	// Kept when some could not be read: a result match says more when
	// none could.
	return val[[]string]{place: d.place(n), v: vals, ok: ok}
}

// recover validates a recover block of the named tool: nil if it is not
// valid.
func (v *validator) recover(s *recoverSpec, tool string) *RecoverRule {
	if !s.read {
		return nil
	}
	ok := !s.arguments.bad()
	rr := &RecoverRule{
		Tool:          s.tool.v,
		Arguments:     s.arguments.or(defaultRecoverArguments),
		DonePath:      defaultDonePath,
		DoneValues:    defaultDoneValues,
		NotDoneValues: defaultNotDoneValues,
	}
	switch {
	case s.tool.at == nil:
		v.errorf(s.place, s.field, "want tool, the name of the status tool to call")
		ok = false
	case !s.tool.ok:
		ok = false
	case s.tool.v == tool:
		v.errorf(s.tool.place, s.field+".tool", "%q cannot be its own status tool", tool)
		ok = false
	}
	if s.done != nil {
		ok = s.done.ok() && ok
		rr.DonePath = s.done.path.or(rr.DonePath)
		rr.DoneValues = s.done.in.or(rr.DoneValues)
	}
	if s.notDone != nil {
		ok = s.notDone.ok() && ok
		rr.NotDonePath = s.notDone.path.or("")
		rr.NotDoneValues = s.notDone.in.or(rr.NotDoneValues)
	}
	if !ok {
		return nil
	}
	if rr.NotDonePath == "" {
		rr.NotDonePath = rr.DonePath // one status field, read both ways
	}
	return rr
}
