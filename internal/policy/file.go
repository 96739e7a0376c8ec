package policy

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/mcp-idempotent/mcp-idempotent/internal/retry"
)

// MaxRetention is the longest retention a policy file may set.
const MaxRetention = 400 * 24 * time.Hour

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

// A File is a parsed policy file: the user's written replay contract,
// layered over the defaults that tool annotations give. It does not change
// once parsed, so it is safe for concurrent use.
type File struct {
	path     string
	defaults rule
	rules    []*rule          // tool rules, exact names and globs, in file order
	exact    map[string]*rule // rules of exact tool names
	accounts map[string]Account
}

// Accounts returns the accounts the file defines, by name.
func (f *File) Accounts() map[string]Account {
	if f == nil {
		return nil
	}
	out := make(map[string]Account, len(f.accounts))
	for k, v := range f.accounts {
		out[k] = v
	}
	return out
}

// Load reads and parses the policy file at path.
func Load(path string) (*File, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading policy file: %w", err)
	}
	return Parse(path, data)
}

// Parse parses a policy file's contents; name is used in errors (the path).
// An empty file is valid: every tool keeps its annotation defaults. Every
// problem found is reported, joined with errors.Join, each as
// "name:line:column: field.path: what is wrong"; a file with any problem
// is refused as a whole.
func Parse(name string, data []byte) (*File, error) {
	f := &File{path: name, exact: map[string]*rule{}}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	switch err := dec.Decode(&doc); {
	case errors.Is(err, io.EOF):
		return f, nil
	case err != nil:
		return nil, syntaxError(name, err)
	}
	for {
		// A stray "---" at the end starts an empty document: allow it.
		var extra yaml.Node
		err := dec.Decode(&extra)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, syntaxError(name, err)
		}
		if len(extra.Content) > 0 && !isNull(extra.Content[0]) {
			return nil, fmt.Errorf("%s:%d: a policy file holds one YAML document; remove the second (from this ---)", name, extra.Line)
		}
	}

	p := &parser{name: name}
	p.file(&doc, f)
	if len(p.errs) > 0 {
		// In file order, though the walk finds a duplicate key before
		// the errors in the first of its two values.
		slices.SortStableFunc(p.errs, func(a, b error) int {
			ea, eb := a.(*fileError), b.(*fileError)
			return cmp.Or(cmp.Compare(ea.line, eb.line), cmp.Compare(ea.column, eb.column))
		})
		return nil, errors.Join(p.errs...)
	}
	return f, nil
}

// Path returns the name the file was parsed under: its path for Load.
func (f *File) Path() string {
	if f == nil {
		return ""
	}
	return f.path
}

// Rules returns the exact tool names and glob patterns of the file, in file
// order, so `policy show` can list tools the file names but the upstream
// does not.
func (f *File) Rules() []string {
	if f == nil {
		return nil
	}
	names := make([]string, len(f.rules))
	for i, r := range f.rules {
		names[i] = r.name
	}
	return names
}

// The keys each level accepts, in the order errors list them.
var (
	fileKeys        = []string{"defaults", "tools", "accounts"}
	accountKeys     = []string{"rate", "burst", "max_concurrency", "retry_budget"}
	budgetKeys      = []string{"max_tokens", "token_ratio"}
	defaultsKeys    = []string{"scope", "retention", "replay", "attach_window", "on_unknown", "forward_key", "fingerprint", "journal"}
	toolKeys        = []string{"class", "scope", "retention", "replay", "attach_window", "fingerprint", "on_unknown", "recover", "forward_key", "retry", "already_done", "journal"}
	journalKeys     = []string{"arguments", "result"}
	retryKeys       = []string{"max_attempts", "base", "cap", "deadline", "transient", "retry_after", "account"}
	transientKeys   = []string{"result_text", "structured", "safe_to_resend"}
	fingerprintKeys = []string{"ignore", "defaults"}
	recoverKeys     = []string{"tool", "arguments", "done", "not_done"}
	doneKeys        = []string{"path", "in"}

	classes    = []string{string(ReadOnly), string(Idempotent), string(SideEffect)}
	scopes     = []string{string(ScopeSession), string(ScopeActor), string(ScopeKey), string(ScopeGlobal)}
	replays    = []string{string(ReplayAlways), string(ReplayUndelivered)}
	onUnknowns = []string{string(Block), string(Retry), string(Recover)}
	journals   = []string{string(JournalHash), string(JournalRedact), string(JournalClear)}
)

// A parser walks a policy file's node tree, collecting every error.
type parser struct {
	name      string
	errs      []error
	work      int  // values walked, counting each alias followed
	exhausted bool // work went over maxWork, and that was reported
}

func (p *parser) errorf(n *yaml.Node, field, format string, args ...any) {
	p.errs = append(p.errs, &fileError{
		name: p.name, line: n.Line, column: n.Column,
		field: field, msg: fmt.Sprintf(format, args...),
	})
}

// A field is one key and value of a mapping.
type field struct{ key, val *yaml.Node }

func (p *parser) file(doc *yaml.Node, f *File) {
	root := doc
	if doc.Kind == yaml.DocumentNode {
		if len(doc.Content) == 0 {
			return
		}
		root = doc.Content[0]
	}
	fields, ok := p.mapping(root, "", "a mapping with defaults and tools")
	if !ok {
		return
	}
	for _, kv := range fields {
		switch kv.key.Value {
		case "defaults":
			p.rule(kv.val, "defaults", &f.defaults, defaultsKeys)
		case "tools":
			p.tools(kv.val, f)
		case "accounts":
			p.accounts(kv.val, f)
		default:
			p.unknownKey(kv.key, "", fileKeys)
		}
	}
	// A retry rule may only name an account the file defines.
	for _, r := range f.rules {
		if r.retry != nil && r.retry.Account != "" {
			if _, ok := f.accounts[r.retry.Account]; !ok {
				p.errorf(r.retryAccount, "tools."+r.name+".retry.account", "%q is not an account defined under accounts", r.retry.Account)
			}
		}
	}
}

// accounts decodes the accounts block.
func (p *parser) accounts(n *yaml.Node, f *File) {
	fields, ok := p.mapping(n, "accounts", "a mapping of account names to allowances")
	if !ok {
		return
	}
	f.accounts = make(map[string]Account, len(fields))
	for _, kv := range fields {
		name := kv.key.Value
		field := "accounts." + name
		afs, ok := p.mapping(resolve(kv.val), field, "a mapping with rate, burst, max_concurrency and retry_budget")
		if !ok {
			continue
		}
		a := Account{Name: name, Burst: 1, MaxTokens: 10, TokenRatio: 0.1}
		rateSet := false // a rate was given, valid or not: one error for it is enough
		for _, akv := range afs {
			sub := field + "." + akv.key.Value
			v := resolve(akv.val)
			switch akv.key.Value {
			case "rate":
				rateSet = true
				r, err := retry.ParseRate(v.Value)
				if v.Kind != yaml.ScalarNode || err != nil {
					p.errorf(v, sub, "%q is not a rate such as 500/h, 10/s, 3/m or 1000/d (%v)", v.Value, err)
					continue
				}
				a.Rate = r
			case "burst", "max_concurrency":
				low := 0 // max_concurrency 0: no cap
				if akv.key.Value == "burst" {
					low = 1
				}
				n, err := strconv.Atoi(v.Value)
				if v.Kind != yaml.ScalarNode || err != nil || n < low || n > 1_000_000 {
					p.errorf(v, sub, "%q: want a whole number from %d to 1000000", v.Value, low)
					continue
				}
				if akv.key.Value == "burst" {
					a.Burst = n
				} else {
					a.MaxConcurrency = n
				}
			case "retry_budget":
				bfs, ok := p.mapping(v, sub, "a mapping with max_tokens and token_ratio")
				if !ok {
					continue
				}
				for _, bkv := range bfs {
					bv := resolve(bkv.val)
					x, err := strconv.ParseFloat(bv.Value, 64)
					if bv.Kind != yaml.ScalarNode || err != nil || !(x > 0) || x > 1000 {
						p.errorf(bv, sub+"."+bkv.key.Value, "%s: want a number more than 0 and at most 1000", quoted(bv))
						continue
					}
					switch bkv.key.Value {
					case "max_tokens":
						a.MaxTokens = x
					case "token_ratio":
						a.TokenRatio = x
					default:
						p.unknownKey(bkv.key, sub, budgetKeys)
					}
				}
			default:
				p.unknownKey(akv.key, field, accountKeys)
			}
		}
		if !rateSet {
			p.errorf(kv.key, field, "an account needs a rate, such as rate: 500/h")
			continue
		}
		f.accounts[name] = a
	}
}

func (p *parser) tools(n *yaml.Node, f *File) {
	fields, ok := p.mapping(n, "tools", "a mapping of tool names and glob patterns to rules")
	if !ok {
		return
	}
	for _, kv := range fields {
		name := kv.key.Value
		field := "tools." + fieldName(name)
		r := &rule{name: name, glob: isGlob(name)}
		switch {
		case name == "":
			p.errorf(kv.key, "tools", "empty tool name")
		case r.glob:
			if _, err := path.Match(name, ""); err != nil {
				p.errorf(kv.key, field, "%q is not a valid glob pattern (path.Match syntax: * ? [a-z], \\ to escape)", name)
			}
		}
		p.rule(kv.val, field, r, toolKeys)
		f.rules = append(f.rules, r)
		if !r.glob {
			f.exact[name] = r
		}
	}
}

// rule decodes one rule, the defaults or a tool's, accepting keys.
func (p *parser) rule(n *yaml.Node, field string, r *rule, keys []string) {
	inDefaults := field == "defaults"
	fields, ok := p.mapping(n, field, "a mapping of rule fields")
	if !ok {
		return
	}
	var onUnknown, recoverBlock *yaml.Node
	for _, kv := range fields {
		k, v := kv.key.Value, resolve(kv.val)
		sub := field + "." + k
		if !slices.Contains(keys, k) {
			switch {
			case inDefaults && k == "class":
				p.errorf(kv.key, sub, "class can only be set per tool, under tools")
			case inDefaults && k == "recover":
				p.errorf(kv.key, sub, "recover names a status tool, so it can only be set per tool, under tools")
			default:
				p.unknownKey(kv.key, field, keys)
			}
			continue
		}
		switch k {
		case "class":
			if s, ok := p.enum(v, sub, "a class", classes); ok {
				r.class = Class(s)
			}
		case "scope":
			s, ok := p.enum(v, sub, "a scope", scopes)
			switch {
			case !ok:
			case s == string(ScopeGlobal) && inDefaults:
				p.errorf(v, sub, "global is not allowed in defaults: only a tool named exactly may match calls across actors")
			case s == string(ScopeGlobal) && r.glob:
				p.errorf(v, sub, "global is not allowed on a glob pattern: only a tool named exactly may match calls across actors")
			default:
				r.scope = Scope(s)
			}
		case "retention":
			if d, ok := p.duration(v, sub); ok {
				if d > MaxRetention {
					p.errorf(v, sub, "%q is longer than the most allowed, 400d", v.Value)
				} else {
					r.retention = d
				}
			}
		case "replay":
			if s, ok := p.enum(v, sub, "a replay mode", replays); ok {
				r.replay = Replay(s)
			}
		case "attach_window":
			if d, ok := p.duration(v, sub); ok {
				r.attachWindow = d
			}
		case "fingerprint":
			p.fingerprint(v, sub, r)
		case "on_unknown":
			onUnknown = v
			s, ok := p.enum(v, sub, "an on_unknown mode", onUnknowns)
			switch {
			case !ok:
			case s == string(Recover) && inDefaults:
				p.errorf(v, sub, "recover is not allowed in defaults: it needs a status tool, set per tool under tools")
			default:
				r.onUnknown = OnUnknown(s)
			}
		case "recover":
			recoverBlock = v
			r.recover = p.recoverRule(v, sub, r.name)
		case "forward_key":
			if b, ok := p.boolean(v, sub); ok {
				r.forwardKey = &b
			}
		case "retry":
			r.retry, r.retryAccount = p.retryRule(v, sub)
		case "already_done":
			r.alreadyDone = p.alreadyDone(v, sub)
		case "journal":
			r.journal = p.journalRule(v, sub)
		}
	}
	switch {
	case r.onUnknown == Recover && recoverBlock == nil:
		p.errorf(onUnknown, field+".on_unknown", "recover needs a recover block naming the status tool (recover: {tool: ...})")
	case r.onUnknown == Recover && r.recover == nil:
		// The recover block is wrong, and said so already.
	case recoverBlock != nil && onUnknown == nil:
		p.errorf(recoverBlock, field+".recover", "a recover block is used only with on_unknown: recover, which this rule does not set")
	case recoverBlock != nil && r.onUnknown != "" && r.onUnknown != Recover:
		p.errorf(recoverBlock, field+".recover", "a recover block is used only with on_unknown: recover, not %s", r.onUnknown)
	}
}

// journalRule decodes a journal block: how arguments and results appear
// in the activity journal. A mode it leaves out is not set by the rule.
func (p *parser) journalRule(n *yaml.Node, field string) JournalRule {
	var jr JournalRule
	fields, ok := p.mapping(n, field, "a mapping with arguments and result")
	if !ok {
		return jr
	}
	for _, kv := range fields {
		sub := field + "." + kv.key.Value
		switch kv.key.Value {
		case "arguments":
			if s, ok := p.enum(kv.val, sub, "a journal mode", journals); ok {
				jr.Arguments = JournalMode(s)
			}
		case "result":
			if s, ok := p.enum(kv.val, sub, "a journal mode", journals); ok {
				jr.Result = JournalMode(s)
			}
		default:
			p.unknownKey(kv.key, field, journalKeys)
		}
	}
	return jr
}

// Bounds on a retry rule.
const maxRetryAttempts = 20

// retryRule decodes a tool's retry block.
func (p *parser) retryRule(n *yaml.Node, field string) (*RetryRule, *yaml.Node) {
	fields, ok := p.mapping(n, field, "a mapping with max_attempts, base, cap, deadline, transient, retry_after and account")
	if !ok {
		return nil, nil
	}
	var accountNode *yaml.Node
	rr := &RetryRule{MaxAttempts: 3, Base: 200 * time.Millisecond, Cap: 30 * time.Second, Deadline: DefaultDeadline}
	for _, kv := range fields {
		sub := field + "." + kv.key.Value
		v := resolve(kv.val)
		switch kv.key.Value {
		case "max_attempts":
			n, err := strconv.Atoi(v.Value)
			if v.Kind != yaml.ScalarNode || err != nil || n < 1 || n > maxRetryAttempts {
				p.errorf(v, sub, "want a whole number of attempts from 1 to %d, the first included", maxRetryAttempts)
				ok = false
				continue
			}
			rr.MaxAttempts = n
		case "base":
			if d, dok := p.duration(v, sub); dok {
				rr.Base = d
			} else {
				ok = false
			}
		case "cap":
			if d, dok := p.duration(v, sub); dok {
				rr.Cap = d
			} else {
				ok = false
			}
		case "deadline":
			if d, dok := p.duration(v, sub); dok {
				rr.Deadline = d
			} else {
				ok = false
			}
		case "transient":
			if v.Kind != yaml.SequenceNode {
				p.errorf(v, sub, "want a list of result matches, not %s", describe(v))
				ok = false
				continue
			}
			for i, e := range v.Content {
				m, mok := p.resultMatch(resolve(e), fmt.Sprintf("%s[%d]", sub, i))
				if !mok {
					ok = false
					continue
				}
				rr.Transient = append(rr.Transient, m)
			}
		case "retry_after":
			afs, aok := p.mapping(v, sub, "a mapping with structured: PATH")
			if !aok {
				ok = false
				continue
			}
			for _, a := range afs {
				av := resolve(a.val)
				if a.key.Value != "structured" {
					p.unknownKey(a.key, sub, []string{"structured"})
					ok = false
					continue
				}
				if !isString(av) || checkDotPath(av.Value) != "" {
					p.errorf(av, sub+".structured", "want a dot path in structuredContent such as retry_after_seconds")
					ok = false
					continue
				}
				rr.RetryAfterPath = av.Value
			}
		case "account":
			if !isString(v) || v.Value == "" {
				p.errorf(v, sub, "want the name of an account defined under accounts")
				ok = false
				continue
			}
			rr.Account, accountNode = v.Value, v
		default:
			p.unknownKey(kv.key, field, retryKeys)
			ok = false
		}
	}
	if rr.Cap < rr.Base {
		p.errorf(n, field, "cap (%v) is shorter than base (%v)", rr.Cap, rr.Base)
		ok = false
	}
	if !ok {
		return nil, nil
	}
	return rr, accountNode
}

// alreadyDone decodes an already_done block: one result match, or a list.
func (p *parser) alreadyDone(n *yaml.Node, field string) []ResultMatch {
	items := []*yaml.Node{n}
	if n.Kind == yaml.SequenceNode {
		items = n.Content
	}
	var out []ResultMatch
	for i, e := range items {
		sub := field
		if n.Kind == yaml.SequenceNode {
			sub = fmt.Sprintf("%s[%d]", field, i)
		}
		if m, ok := p.resultMatch(resolve(e), sub); ok {
			out = append(out, m)
		}
	}
	return out
}

// resultMatch decodes one entry of a transient list.
func (p *parser) resultMatch(n *yaml.Node, field string) (ResultMatch, bool) {
	var m ResultMatch
	fields, ok := p.mapping(n, field, "a mapping with result_text or structured, and safe_to_resend")
	if !ok {
		return m, false
	}
	for _, kv := range fields {
		sub := field + "." + kv.key.Value
		v := resolve(kv.val)
		switch kv.key.Value {
		case "result_text":
			if !isString(v) {
				p.errorf(v, sub, "want a regular expression (Go RE2 syntax) as a string, not %s; quote it", describe(v))
				ok = false
				continue
			}
			re, err := regexp.Compile(v.Value)
			if err != nil {
				p.errorf(v, sub, "not a regular expression (Go RE2 syntax): %v", err)
				ok = false
				continue
			}
			m.Text = re
		case "structured":
			var path string
			var values []string
			if !p.done(v, sub, &path, &values, "transient, such as [rate_limited]") || path == "" || len(values) == 0 {
				if path == "" || len(values) == 0 {
					p.errorf(v, sub, "want {path: FIELD, in: [VALUES...]}")
				}
				ok = false
				continue
			}
			m.Path, m.In = path, values
		case "safe_to_resend":
			b, bok := p.boolean(v, sub)
			if !bok {
				ok = false
			}
			m.SafeToResend = b
		default:
			p.unknownKey(kv.key, field, transientKeys)
			ok = false
		}
	}
	if ok && m.Text == nil && m.Path == "" {
		p.errorf(n, field, "a transient match needs result_text or structured")
		ok = false
	}
	return m, ok
}

func (p *parser) fingerprint(n *yaml.Node, field string, r *rule) {
	fields, ok := p.mapping(n, field, "a mapping with ignore and defaults")
	if !ok {
		return
	}
	for _, kv := range fields {
		sub := field + "." + kv.key.Value
		switch kv.key.Value {
		case "ignore":
			r.ignore, r.ignoreSet = p.ignoreList(kv.val, sub)
		case "defaults":
			if b, ok := p.boolean(kv.val, sub); ok {
				r.defaults = &b
			}
		default:
			p.unknownKey(kv.key, field, fingerprintKeys)
		}
	}
}

func (p *parser) ignoreList(n *yaml.Node, field string) ([]string, bool) {
	n = resolve(n)
	if n.Kind != yaml.SequenceNode {
		p.errorf(n, field, "want a list of argument paths such as [note, trace.id], not %s", describe(n))
		return nil, false
	}
	ok := true
	paths := []string{} // set, even if empty: "ignore: []" clears the defaults' list
	if !p.spend(len(n.Content), n) {
		return nil, false
	}
	for i, e := range n.Content {
		e = resolve(e)
		if !isString(e) {
			p.errorf(e, fmt.Sprintf("%s[%d]", field, i), "want an argument path such as trace.id, not %s", describe(e))
			ok = false
			continue
		}
		if err := checkDotPath(e.Value); err != "" {
			p.errorf(e, fmt.Sprintf("%s[%d]", field, i), "%q %s", e.Value, err)
			ok = false
			continue
		}
		paths = append(paths, e.Value)
	}
	return paths, ok
}

// checkDotPath returns what is wrong with a dot path of object members, or "".
func checkDotPath(s string) string {
	switch {
	case s == "":
		return "is empty: want a dot path of argument members such as trace.id"
	case s[0] == '.' || s[len(s)-1] == '.' || strings.Contains(s, ".."):
		return "has an empty member name: want a dot path such as trace.id, without leading, trailing or doubled dots"
	}
	return ""
}

func (p *parser) recoverRule(n *yaml.Node, field, tool string) *RecoverRule {
	fields, ok := p.mapping(n, field, "a mapping with tool, arguments and done")
	if !ok {
		return nil
	}
	rr := &RecoverRule{DonePath: defaultDonePath, DoneValues: defaultDoneValues, NotDoneValues: defaultNotDoneValues}
	var toolNode *yaml.Node
	for _, kv := range fields {
		sub := field + "." + kv.key.Value
		v := resolve(kv.val)
		switch kv.key.Value {
		case "tool":
			toolNode = v
			switch {
			case !isString(v):
				p.errorf(v, sub, "want the name of the status tool, not %s", describe(v))
				ok = false
			case v.Value == "":
				p.errorf(v, sub, "the status tool's name is empty")
				ok = false
			case v.Value == tool:
				p.errorf(v, sub, "%q cannot be its own status tool", tool)
				ok = false
			default:
				rr.Tool = v.Value
			}
		case "arguments":
			if v.Kind != yaml.MappingNode {
				p.errorf(v, sub, "want a mapping, the status call's arguments, not %s", describe(v))
				ok = false
				continue
			}
			conv := &jsonConv{p: p, root: v, field: sub, budget: maxArgumentNodes}
			var b bytes.Buffer
			if !conv.value(&b, v, sub, 0) {
				ok = false
				continue
			}
			rr.Arguments = b.Bytes()
		case "done":
			if !p.done(v, sub, &rr.DonePath, &rr.DoneValues, "done, such as [done, succeeded]") {
				ok = false
			}
		case "not_done":
			if !p.done(v, sub, &rr.NotDonePath, &rr.NotDoneValues, "not done, such as [not_found, failed]") {
				ok = false
			}
		default:
			p.unknownKey(kv.key, field, recoverKeys)
		}
	}
	if toolNode == nil {
		p.errorf(n, field, "want tool, the name of the status tool to call")
		ok = false
	}
	if !ok {
		return nil
	}
	if rr.Arguments == nil {
		rr.Arguments = defaultRecoverArguments
	}
	if rr.NotDonePath == "" {
		rr.NotDonePath = rr.DonePath // one status field, read both ways
	}
	return rr
}

// done parses a recover block's done or not_done: the path and values
// that say so, which are what.
func (p *parser) done(n *yaml.Node, field string, path *string, values *[]string, what string) bool {
	fields, ok := p.mapping(n, field, "a mapping with path and in")
	if !ok {
		return false
	}
	for _, kv := range fields {
		sub := field + "." + kv.key.Value
		v := resolve(kv.val)
		switch kv.key.Value {
		case "path":
			if !isString(v) {
				p.errorf(v, sub, "want a dot path in structuredContent such as status, not %s", describe(v))
				ok = false
			} else if err := checkDotPath(v.Value); err != "" {
				p.errorf(v, sub, "%q %s", v.Value, err)
				ok = false
			} else {
				*path = v.Value
			}
		case "in":
			if v.Kind != yaml.SequenceNode || len(v.Content) == 0 {
				p.errorf(v, sub, "want a non-empty list of the values that mean %s, not %s", what, describe(v))
				ok = false
				continue
			}
			if !p.spend(len(v.Content), v) {
				return false
			}
			var vals []string
			for i, e := range v.Content {
				e = resolve(e)
				esub := fmt.Sprintf("%s[%d]", sub, i)
				if e.Kind != yaml.ScalarNode {
					p.errorf(e, esub, "want a string, number, boolean or null, not %s", describe(e))
					ok = false
					continue
				}
				var b bytes.Buffer
				conv := &jsonConv{p: p, root: e, field: esub, budget: 1}
				if !conv.value(&b, e, esub, 0) {
					ok = false
					continue
				}
				vals = append(vals, b.String())
			}
			*values = vals
		default:
			p.unknownKey(kv.key, field, doneKeys)
		}
	}
	return ok
}

// mapping returns the fields of a mapping node, following aliases and
// expanding merge keys (<<), which the node API leaves to the caller. A
// null node is an empty mapping. It reports whether n is a mapping (want
// describes the mapping for that error); duplicate keys and keys that are
// not scalars are reported too, and left out of the fields, so the walk
// goes on to find every other error.
func (p *parser) mapping(n *yaml.Node, field, want string) ([]field, bool) {
	return p.mappingIn(n, field, want, nil)
}

func (p *parser) mappingIn(n *yaml.Node, fieldPath, want string, merging []*yaml.Node) ([]field, bool) {
	n = resolve(n)
	if isNull(n) {
		return nil, true
	}
	if n.Kind != yaml.MappingNode {
		p.errorf(n, fieldPath, "want %s, not %s", want, describe(n))
		return nil, false
	}
	if !p.spend(len(n.Content)/2, n) {
		return nil, false
	}
	for _, m := range merging {
		if m == n {
			p.errorf(n, fieldPath, "a merge (<<) includes the mapping it is in")
			return nil, false
		}
	}
	var own, merged []field
	seen := map[string]*yaml.Node{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if isMergeKey(k) {
			srcs := []*yaml.Node{resolve(v)}
			if srcs[0].Kind == yaml.SequenceNode {
				srcs = srcs[0].Content
			}
			for _, s := range srcs {
				fs, _ := p.mappingIn(s, fieldPath, "a mapping to merge (<<)", append(merging, n))
				merged = append(merged, fs...)
			}
			continue
		}
		k = resolve(k)
		if k.Kind != yaml.ScalarNode || isNull(k) {
			p.errorf(k, fieldPath, "want a name as key, not %s", describe(k))
			continue
		}
		if prev, dup := seen[k.Value]; dup {
			p.errorf(k, fieldPath, "%q appears twice (first at line %d)", k.Value, prev.Line)
			continue
		}
		seen[k.Value] = k
		own = append(own, field{k, v})
	}
	// Keys written in the mapping win over merged ones; among merged
	// mappings, the first to give a key wins (YAML merge key spec).
	for _, kv := range merged {
		if _, dup := seen[kv.key.Value]; !dup {
			seen[kv.key.Value] = kv.key
			own = append(own, kv)
		}
	}
	return own, true
}

// spend counts n values walked, and reports false once the file has cost
// more than maxWork: a walk stops there.
func (p *parser) spend(n int, at *yaml.Node) bool {
	p.work += n
	if p.work <= maxWork {
		return true
	}
	if !p.exhausted {
		p.exhausted = true
		p.errorf(at, "", "through aliases (*name) and merges (<<), the file holds more than %d values", maxWork)
	}
	return false
}

func (p *parser) unknownKey(k *yaml.Node, field string, valid []string) {
	p.errorf(k, field, "unknown key %q (valid: %s)", k.Value, strings.Join(valid, ", "))
}

func (p *parser) enum(n *yaml.Node, field, what string, valid []string) (string, bool) {
	n = resolve(n)
	if n.Kind != yaml.ScalarNode || !slices.Contains(valid, n.Value) || !isString(n) {
		p.errorf(n, field, "%s is not %s (use %s)", quoted(n), what, orList(valid))
		return "", false
	}
	return n.Value, true
}

func (p *parser) boolean(n *yaml.Node, field string) (bool, bool) {
	n = resolve(n)
	// YAML 1.2 reads yes, no, on and off as strings: require true or false.
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!bool" {
		p.errorf(n, field, "%s is not a boolean (use true or false)", quoted(n))
		return false, false
	}
	var b bool
	if err := n.Decode(&b); err != nil {
		p.errorf(n, field, "%s is not a boolean (use true or false)", quoted(n))
		return false, false
	}
	return b, true
}

// durationSyntax matches what time.ParseDuration reads, whatever the size.
var durationSyntax = regexp.MustCompile(`^(([0-9]+(\.[0-9]*)?|\.[0-9]+)(ns|us|µs|ms|s|m|h))+$`)

// duration parses a Go duration or a whole number of days ("7d"), > 0.
func (p *parser) duration(n *yaml.Node, field string) (time.Duration, bool) {
	n = resolve(n)
	const use = "(use 90s, 10m, 72h or 7d)"
	if n.Kind != yaml.ScalarNode || isNull(n) {
		p.errorf(n, field, "%s is not a duration %s", quoted(n), use)
		return 0, false
	}
	s := n.Value
	var d time.Duration
	if days, ok := strings.CutSuffix(s, "d"); ok && days != "" && strings.Trim(days, "0123456789") == "" {
		nd, err := strconv.ParseInt(days, 10, 64)
		if err != nil || nd > int64(math.MaxInt64/(24*time.Hour)) {
			p.errorf(n, field, "%q is too long", s)
			return 0, false
		}
		d = time.Duration(nd) * 24 * time.Hour
	} else {
		var err error
		if d, err = time.ParseDuration(s); err != nil {
			if durationSyntax.MatchString(s) {
				// Well formed, but more than a Duration holds.
				p.errorf(n, field, "%q is too long", s)
			} else {
				p.errorf(n, field, "%q is not a duration %s", s, use)
			}
			return 0, false
		}
	}
	if d <= 0 {
		p.errorf(n, field, "%q must be more than zero", s)
		return 0, false
	}
	return d, true
}

// resolve follows an alias to the node it names.
func resolve(n *yaml.Node) *yaml.Node {
	// An alias names an anchored node, never another alias, but a loop
	// bound costs nothing.
	for i := 0; n.Kind == yaml.AliasNode && n.Alias != nil && i < 100; i++ {
		n = n.Alias
	}
	return n
}

func isMergeKey(k *yaml.Node) bool {
	return k.Kind == yaml.ScalarNode && k.Value == "<<" && k.Style == 0 && k.ShortTag() == "!!merge"
}

func isNull(n *yaml.Node) bool { return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null" }

func isString(n *yaml.Node) bool { return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!str" }
