package policy

import (
	"path"
	"strings"
	"time"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"
)

// A fileSpec is a policy file as written: decoded, not yet validated.
type fileSpec struct {
	defaults *ruleSpec // nil when the file has none
	tools    []*toolSpec
	accounts []*accountSpec
}

// A toolSpec is one entry of tools: an exact tool name or a glob pattern,
// and its rule.
type toolSpec struct {
	name string
	glob bool
	rule *ruleSpec
}

// isGlob reports whether a tools key is a pattern rather than a name:
// whether it holds one of path.Match's special characters.
func isGlob(name string) bool { return strings.ContainsAny(name, `*?[\`) }

// reversedRange returns the first range in a character class of pattern,
// a valid path.Match pattern, whose ends are high to low ("[z-a]"):
// path.Match takes it, and the class then matches nothing by it, which is
// never what its writer meant.
func reversedRange(pattern string) (string, bool) {
	inClass := false
	for i := 0; i < len(pattern); {
		switch c := pattern[i]; {
		case !inClass && c == '\\':
			_, n := classChar(pattern, i)
			i += n
		case !inClass && c == '[':
			inClass = true
			i++
			if i < len(pattern) && pattern[i] == '^' {
				i++
			}
		case !inClass:
			i++
		case c == ']':
			inClass = false
			i++
		default:
			lo, n := classChar(pattern, i)
			end := i + n
			if end < len(pattern) && pattern[end] == '-' {
				hi, m := classChar(pattern, end+1)
				if hi < lo {
					return pattern[i : end+1+m], true
				}
				end += 1 + m
			}
			i = end
		}
	}
	return "", false
}

// classChar returns the character at pattern[i], a backslash escaping
// the one after it, and how many bytes it takes.
func classChar(pattern string, i int) (rune, int) {
	if pattern[i] == '\\' && i+1 < len(pattern) {
		r, n := utf8.DecodeRuneInString(pattern[i+1:])
		return r, 1 + n
	}
	r, n := utf8.DecodeRuneInString(pattern[i:])
	return r, n
}

// A ruleSpec is a rule as written: the defaults, or one tool's entry.
type ruleSpec struct {
	block
	class         val[Class]
	scope         val[Scope]
	retention     val[time.Duration]
	replay        val[Replay]
	attachWindow  val[time.Duration]
	ignore        val[[]string] // fingerprint.ignore
	defaults      val[bool]     // fingerprint.defaults
	onUnknown     val[OnUnknown]
	recover       *recoverSpec // nil when not written, as are retry and alreadyDone
	forwardKey    val[bool]
	retry         *retrySpec
	alreadyDone   []*matchSpec
	journalArgs   val[JournalMode]
	journalResult val[JournalMode]
	approval      val[Approval]
	approver      val[Approver]
	approvalWait  val[time.Duration] // approval_timeout
}

// The keys each level accepts, in the order errors list them.
var (
	fileKeys     = []string{"defaults", "tools", "accounts"}
	defaultsKeys = []string{"scope", "retention", "replay", "attach_window", "on_unknown", "forward_key", "fingerprint", "journal", "approver", "approval_timeout"}
	toolKeys     = []string{"class", "scope", "retention", "replay", "attach_window", "fingerprint", "on_unknown", "recover", "forward_key", "retry", "already_done", "journal", "approval", "approver", "approval_timeout"}

	classes    = []string{string(ReadOnly), string(Idempotent), string(SideEffect)}
	scopes     = []string{string(ScopeSession), string(ScopeActor), string(ScopeKey), string(ScopeGlobal)}
	replays    = []string{string(ReplayAlways), string(ReplayUndelivered)}
	onUnknowns = []string{string(Block), string(Retry), string(Recover)}
	journals   = []string{string(JournalHash), string(JournalRedact), string(JournalClear)}
)

// file decodes the document's root node.
func (d *decoder) file(root *yaml.Node) *fileSpec {
	s := &fileSpec{}
	read := map[string]func(v *yaml.Node, field string){
		"defaults": func(v *yaml.Node, f string) { s.defaults = d.rule(v, f, false) },
		"tools":    func(v *yaml.Node, _ string) { s.tools = d.tools(v) },
		"accounts": func(v *yaml.Node, _ string) { s.accounts = d.accounts(v) },
	}
	d.fields(root, "", "a mapping with defaults and tools", keysOf(fileKeys, read))
	return s
}

// keysOf lists names as keys, each read by its function in read.
func keysOf(names []string, read map[string]func(v *yaml.Node, field string)) []key {
	keys := make([]key, len(names))
	for i, name := range names {
		keys[i] = key{name: name, read: read[name]}
	}
	return keys
}

func (d *decoder) tools(n *yaml.Node) []*toolSpec {
	fields, ok := d.mapping(n, "tools", "a mapping of tool names and glob patterns to rules")
	if !ok {
		return nil
	}
	tools := make([]*toolSpec, 0, len(fields))
	for _, kv := range fields {
		t := &toolSpec{name: kv.key.Value, glob: isGlob(kv.key.Value)}
		field := "tools." + fieldName(t.name)
		switch {
		case t.name == "":
			d.errorf(kv.key, "tools", "empty tool name")
		case t.glob:
			if _, err := path.Match(t.name, ""); err != nil {
				d.errorf(kv.key, field, "%q is not a valid glob pattern (path.Match syntax: * ? [a-z], \\ to escape)", t.name)
			} else if r, ok := reversedRange(t.name); ok {
				d.errorf(kv.key, field, "%q has the range %q, high to low, which matches no character (write it low to high)", t.name, r)
			}
		}
		t.rule = d.rule(kv.val, field, true)
		tools = append(tools, t)
	}
	return tools
}

// rule decodes one rule: a tool's, or the defaults (tool false), which
// refuse the keys that only one tool can have.
func (d *decoder) rule(n *yaml.Node, field string, tool bool) *ruleSpec {
	s := &ruleSpec{}
	read := map[string]func(v *yaml.Node, field string){
		"class":            into(d, &s.class, parseEnum[Class]("a class", classes)),
		"scope":            into(d, &s.scope, parseEnum[Scope]("a scope", scopes)),
		"retention":        into(d, &s.retention, parseRetention),
		"replay":           into(d, &s.replay, parseEnum[Replay]("a replay mode", replays)),
		"attach_window":    into(d, &s.attachWindow, parseDuration),
		"fingerprint":      func(v *yaml.Node, f string) { d.fingerprint(v, f, s) },
		"on_unknown":       into(d, &s.onUnknown, parseEnum[OnUnknown]("an on_unknown mode", onUnknowns)),
		"recover":          func(v *yaml.Node, f string) { s.recover = d.recover(v, f) },
		"forward_key":      into(d, &s.forwardKey, parseBool),
		"retry":            func(v *yaml.Node, f string) { s.retry = d.retry(v, f) },
		"already_done":     func(v *yaml.Node, f string) { s.alreadyDone = d.alreadyDone(v, f) },
		"journal":          func(v *yaml.Node, f string) { d.journal(v, f, s) },
		"approval":         into(d, &s.approval, parseEnum[Approval]("an approval mode", approvals)),
		"approver":         into(d, &s.approver, parseEnum[Approver]("an approver", approvers)),
		"approval_timeout": into(d, &s.approvalWait, parseApprovalTimeout),
	}
	if tool {
		s.block = d.fields(n, field, "a mapping of rule fields", keysOf(toolKeys, read))
		return s
	}
	keys := append(keysOf(defaultsKeys, read),
		key{name: "class", refuse: "class can only be set per tool, under tools"},
		key{name: "recover", refuse: "recover names a status tool, so it can only be set per tool, under tools"},
		key{name: "approval", refuse: "approval names the tools a person approves, so it can only be set per tool, under tools (a glob covers many)"},
		key{name: "retry", refuse: "retry can only be set per tool, under tools (a glob covers many)"},
		key{name: "already_done", refuse: "already_done names a tool's results, so it can only be set per tool, under tools (a glob covers many)"})
	s.block = d.fields(n, field, "a mapping of rule fields", keys)
	return s
}

func (d *decoder) fingerprint(n *yaml.Node, field string, s *ruleSpec) {
	d.fields(n, field, "a mapping with ignore and defaults", []key{
		{name: "ignore", read: func(v *yaml.Node, f string) { s.ignore = d.ignoreList(v, f) }},
		{name: "defaults", read: into(d, &s.defaults, parseBool)},
	})
}

// ignoreList reads fingerprint.ignore: argument paths. An empty list is
// set, and clears the defaults' list.
func (d *decoder) ignoreList(n *yaml.Node, field string) val[[]string] {
	if n.Kind != yaml.SequenceNode {
		d.errorf(n, field, "want a list of argument paths such as [note, trace.id], not %s", describe(n))
		return failed[[]string](d.place(n))
	}
	if !d.spend(len(n.Content), n) {
		return failed[[]string](d.place(n))
	}
	paths := []string{}
	ok := true
	for i, e := range n.Content {
		p := scalar(d, resolve(e), indexField(field, i), parsePath("an argument path such as trace.id"))
		if p.ok {
			paths = append(paths, p.v)
		}
		ok = ok && p.ok
	}
	return val[[]string]{place: d.place(n), v: paths, ok: ok}
}

// journal reads a journal block: how arguments and results appear in the
// activity journal.
func (d *decoder) journal(n *yaml.Node, field string, s *ruleSpec) {
	d.fields(n, field, "a mapping with arguments and result", []key{
		{name: "arguments", read: into(d, &s.journalArgs, parseEnum[JournalMode]("a journal mode", journals))},
		{name: "result", read: into(d, &s.journalResult, parseEnum[JournalMode]("a journal mode", journals))},
	})
}
