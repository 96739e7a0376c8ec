package policy

import (
	"encoding/json"
	"path"
	"slices"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/mcp"
)

// A rule is one layer of a policy: the file's defaults or one tool entry.
// A zero field is not set by the rule.
type rule struct {
	name         string // tool name or glob pattern; empty for the defaults
	glob         bool
	class        Class
	scope        Scope
	retention    time.Duration
	replay       Replay
	attachWindow time.Duration
	ignore       []string
	ignoreSet    bool
	defaults     *bool
	onUnknown    OnUnknown
	recover      *RecoverRule
	forwardKey   *bool
	retry        *RetryRule
	alreadyDone  []ResultMatch
	journal      JournalRule // zero modes are not set
	approval     Approval
	approver     Approver
	approvalWait time.Duration
}

// Resolve returns the effective policy of the named tool. Layers apply in
// order: FromAnnotations(ann) (ann nil: the tool is not listed), the file's
// defaults, then the one rule for the tool: its exact name if the file has
// it, else the first glob in file order that matches. Rules do not merge:
// an exact rule replaces every glob that would also match.
//
// When a rule changes the class and no layer of the file sets on_unknown,
// on_unknown follows the new class (retry for idempotent, block
// otherwise), so a tool annotated idempotent but written as side_effect
// is never re-sent blindly.
//
// A nil *File resolves to FromAnnotations(ann) alone. The returned policy
// shares no memory with the file.
func (f *File) Resolve(tool string, ann *mcp.Annotations) Policy {
	return f.ResolveScoped(tool, ann, "")
}

// ResolveScoped is Resolve with scope, unless it is empty, in place of
// the annotations' scope (session): a layer under the file's, so that a
// scope the file gives, in its defaults or the tool's rule, wins.
func (f *File) ResolveScoped(tool string, ann *mcp.Annotations, scope Scope) Policy {
	p := FromAnnotations(ann)
	if scope != "" {
		p.Scope = scope
	}
	if f == nil {
		return p
	}
	annotated := p.Class
	onUnknownSet := f.defaults.apply(&p)
	r, explicit := f.lookup(tool)
	if r != nil {
		if r.apply(&p) {
			onUnknownSet = true
		}
		p.Written, p.Explicit = true, explicit
		if r.class != "" {
			p.Source = "policy file (" + r.name + ")"
		}
	}
	if p.NeedsApproval() && p.Class == ReadOnly {
		// A read-only tool passes through unrecorded, where no approval
		// could be kept: the approval the file asks for wins over the
		// server's hint.
		p.Class, p.Source = SideEffect, "policy file ("+r.name+"): approval needs a record"
	}
	switch {
	case explicit && p.Class == ReadOnly:
		if keys := r.recordedKeys(); keys != nil {
			p.NoEffect = &NoEffect{File: f.path, Keys: keys, Class: ReadOnly}
		}
	case explicit && p.Class == Idempotent && r.replay != "":
		// A later identical call runs again, whatever replay says.
		p.NoEffect = &NoEffect{File: f.path, Keys: []string{"replay"}, Class: Idempotent}
	}
	if !onUnknownSet && p.Class != annotated {
		p.OnUnknown = classOnUnknown(p.Class)
	}
	return p
}

// classOnUnknown is the on_unknown a class implies, as FromAnnotations
// sets it: only an idempotent tool may be re-sent (DESIGN section 6).
func classOnUnknown(c Class) OnUnknown {
	if c == Idempotent {
		return Retry
	}
	return Block
}

// lookup returns the rule for tool, and whether it names tool exactly.
func (f *File) lookup(tool string) (*rule, bool) {
	if r, ok := f.exact[tool]; ok {
		return r, true
	}
	for _, r := range f.rules {
		if !r.glob {
			continue
		}
		// Patterns were checked by Parse: Match cannot fail.
		if ok, _ := path.Match(r.name, tool); ok {
			return r, false
		}
	}
	return nil, false
}

// recordedKeys returns the keys r sets whose effect needs a record, in
// the file's spelling: a read_only tool, never recorded, ignores them.
func (r *rule) recordedKeys() []string {
	var keys []string
	for _, k := range []struct {
		name string
		set  bool
	}{
		{"scope", r.scope != ""},
		{"retention", r.retention != 0},
		{"replay", r.replay != ""},
		{"attach_window", r.attachWindow != 0},
		{"on_unknown", r.onUnknown != ""},
		{"fingerprint.ignore", r.ignoreSet},
		{"fingerprint.defaults", r.defaults != nil},
		{"forward_key", r.forwardKey != nil},
		{"already_done", r.alreadyDone != nil},
		{"journal.arguments", r.journal.Arguments != ""},
		{"journal.result", r.journal.Result != ""},
	} {
		if k.set {
			keys = append(keys, k.name)
		}
	}
	return keys
}

// apply lays r over p and reports whether r sets on_unknown.
func (r *rule) apply(p *Policy) bool {
	if r.class != "" {
		p.Class = r.class
	}
	if r.scope != "" {
		p.Scope = r.scope
	}
	if r.retention != 0 {
		p.Retention = r.retention
	}
	if r.replay != "" {
		p.Replay = r.replay
	}
	if r.attachWindow != 0 {
		p.AttachWindow = r.attachWindow
	}
	if r.ignoreSet {
		// A rule's ignore list replaces the defaults' list.
		p.Ignore = append([]string(nil), r.ignore...)
	}
	if r.defaults != nil {
		p.Defaults = *r.defaults
	}
	if r.forwardKey != nil {
		p.ForwardKey = *r.forwardKey
	}
	if r.alreadyDone != nil {
		p.AlreadyDone = slices.Clone(r.alreadyDone)
	}
	if r.journal.Arguments != "" {
		p.Journal.Arguments = r.journal.Arguments
	}
	if r.journal.Result != "" {
		p.Journal.Result = r.journal.Result
	}
	if r.approval != "" {
		p.Approval = r.approval
	}
	if r.approver != "" {
		p.Approver = r.approver
	}
	if r.approvalWait != 0 {
		p.ApprovalTimeout = r.approvalWait
	}
	if r.retry != nil {
		rr := *r.retry
		rr.Transient = slices.Clone(r.retry.Transient)
		p.Retry = &rr
	}
	if r.onUnknown == "" {
		return false
	}
	p.OnUnknown = r.onUnknown
	p.Recover = nil
	if r.recover != nil {
		rr := *r.recover
		rr.Arguments = append(json.RawMessage(nil), rr.Arguments...)
		rr.DoneValues = append([]string(nil), rr.DoneValues...)
		p.Recover = &rr
	}
	return true
}
