package policy

import "math"

// A validator builds a File from a decoded file, checking what the
// decoder cannot see one value at a time: where a value is written (a
// global scope in the defaults, on a glob) and whether values fit
// together (on_unknown and its recover block, a retry account the file
// defines). A value the decoder could not read is left out, and not
// reported again.
type validator struct{ *problems }

func (v *validator) errorf(p place, field, format string, args ...any) {
	v.add(p.at, p.step, field, format, args...)
}

func (v *validator) file(s *fileSpec) *File {
	f := &File{path: v.name, exact: map[string]*rule{}}
	if s.defaults != nil {
		v.rule(s.defaults, &f.defaults, true)
	}
	for _, t := range s.tools {
		r := &rule{name: t.name, glob: t.glob}
		v.rule(t.rule, r, false)
		f.rules = append(f.rules, r)
		if !r.glob {
			f.exact[r.name] = r
		}
	}
	v.approvalScopes(s, f)
	v.globStatusTools(s, f)
	f.accounts = v.accounts(s.accounts)
	// An account written wrong is defined all the same: its own error
	// says what is wrong, and a second at each rule naming it would not.
	defined := make(map[string]bool, len(s.accounts))
	for _, a := range s.accounts {
		defined[a.name] = true
	}
	// A retry rule may only name an account the file defines.
	for i, r := range f.rules {
		if r.retry == nil || r.retry.Account == "" {
			continue
		}
		if !defined[r.retry.Account] {
			// Found after every other problem, as at the end of the walk.
			at := place{at: s.tools[i].rule.retry.account.at, step: math.MaxInt}
			v.errorf(at, "tools."+fieldName(r.name)+".retry.account", "%q is not an account defined under accounts", r.retry.Account)
		}
	}
	return f
}

// rule validates s into r: the defaults, or the rule of the tool that r
// names.
func (v *validator) rule(s *ruleSpec, r *rule, inDefaults bool) {
	r.class = s.class.v
	r.retention = s.retention.v
	r.replay = s.replay.v
	r.attachWindow = s.attachWindow.v
	r.ignore, r.ignoreSet = s.ignore.or(nil), s.ignore.ok
	r.defaults = pointer(s.defaults)
	r.forwardKey = pointer(s.forwardKey)
	r.alreadyDone = v.alreadyDone(s.alreadyDone)
	r.journal = JournalRule{Arguments: s.journalArgs.v, Result: s.journalResult.v}
	r.approval, r.approver, r.approvalWait = s.approval.v, s.approver.v, s.approvalWait.v
	if (r.approval == ApprovalEach || r.approval == ApprovalSession) && r.class == ReadOnly {
		v.errorf(s.approval.place, s.field+".approval", "a read_only tool passes through unrecorded, so it cannot wait for an approval: drop the class, or the approval")
		r.approval = ""
	}
	if s.retry != nil {
		r.retry = v.retry(s.retry)
	}
	if s.scope.ok {
		switch {
		case s.scope.v == ScopeGlobal && inDefaults:
			v.errorf(s.scope.place, s.field+".scope", "global is not allowed in defaults: only a tool named exactly may match calls across actors")
		case s.scope.v == ScopeGlobal && r.glob:
			v.errorf(s.scope.place, s.field+".scope", "global is not allowed on a glob pattern: only a tool named exactly may match calls across actors")
		default:
			r.scope = s.scope.v
		}
	}
	if s.onUnknown.ok {
		if s.onUnknown.v == Recover && inDefaults {
			v.errorf(s.onUnknown.place, s.field+".on_unknown", "recover is not allowed in defaults: it needs a status tool, set per tool under tools")
		} else {
			r.onUnknown = s.onUnknown.v
		}
	}
	if s.recover != nil {
		r.recover = v.recover(s.recover, r.name)
	}
	v.recoverBlock(s, r)
	v.readOnlyKeys(s, r)
	v.idempotentKeys(s, r)
	if !inDefaults {
		v.approvalKeys(s)
	}
}

// approvalKeys refuses the approver and approval_timeout of a tool's
// rule that asks for no approval: no one is asked, and the keys, set
// without approval by mistake, would read as a promise kept.
func (v *validator) approvalKeys(s *ruleSpec) {
	if s.approval.bad() || s.approval.v == ApprovalEach || s.approval.v == ApprovalSession {
		return
	}
	for _, k := range []struct {
		name string
		at   place
	}{
		{"approver", s.approver.place},
		{"approval_timeout", s.approvalWait.place},
	} {
		if k.at.at != nil {
			v.errorf(k.at, s.field+"."+k.name, "the rule's approval is none, so no one is asked and %s has no effect: set approval: each or session, or drop the key", k.name)
		}
	}
}

// readOnlyKeys refuses the keys of a rule that sets class read_only
// whose effect needs a record, which such a tool never has: set by
// mistake, they would read as a promise kept.
func (v *validator) readOnlyKeys(s *ruleSpec, r *rule) {
	if r.class != ReadOnly {
		return
	}
	for _, k := range []struct {
		name string
		at   place
	}{
		{"scope", s.scope.place},
		{"retention", s.retention.place},
		{"replay", s.replay.place},
		{"attach_window", s.attachWindow.place},
		{"on_unknown", s.onUnknown.place},
	} {
		if k.at.at != nil {
			v.errorf(k.at, s.field+"."+k.name, "a read_only tool passes through unrecorded, so %s has no effect: drop the class, or the key", k.name)
		}
	}
}

// idempotentKeys refuses the replay of a rule that sets class
// idempotent: such a tool's later identical call runs again whatever
// replay says, only calls made while one runs sharing it. Set by
// mistake, replay: always would read as a promise of replays kept.
func (v *validator) idempotentKeys(s *ruleSpec, r *rule) {
	if r.class == Idempotent && s.replay.at != nil {
		v.errorf(s.replay.place, s.field+".replay", "an idempotent tool's later identical call runs again whatever replay says, so it has no effect: drop the key, or set class: side_effect to replay its calls")
	}
}

// recoverBlock checks that a rule has a recover block if, and only if,
// its on_unknown is recover.
func (v *validator) recoverBlock(s *ruleSpec, r *rule) {
	// Checked once the rule is read: at the rule's step.
	onUnknown := place{at: s.onUnknown.at, step: s.step}
	recover := place{step: s.step}
	if s.recover != nil {
		recover.at = s.recover.at
	}
	switch {
	case r.onUnknown == Recover && s.recover == nil:
		v.errorf(onUnknown, s.field+".on_unknown", "recover needs a recover block naming the status tool (recover: {tool: ...})")
	case r.onUnknown == Recover:
		// With or without errors of its own, the block is the one needed.
	case s.recover != nil && s.onUnknown.at == nil:
		v.errorf(recover, s.field+".recover", "a recover block is used only with on_unknown: recover, which this rule does not set")
	case s.recover != nil && r.onUnknown != "":
		v.errorf(recover, s.field+".recover", "a recover block is used only with on_unknown: recover, not %s", r.onUnknown)
	}
}

// globStatusTools refuses a glob rule whose status tool the rule itself
// governs, as recover refuses a tool named as its own: a call to it that
// ended unknown would be recovered by calling it again.
func (v *validator) globStatusTools(s *fileSpec, f *File) {
	for i, r := range f.rules {
		if !r.glob || r.recover == nil {
			continue
		}
		if own, _ := f.lookup(r.recover.Tool); own == r {
			at := s.tools[i].rule.recover.tool.place
			v.errorf(at, s.tools[i].rule.field+".recover.tool", "%q matches the pattern %q, whose rule it then follows: it would be its own status tool (give it a rule of its own, or name another)",
				r.recover.Tool, r.name)
		}
	}
}

// pointer returns a pointer to a copy of x's value; nil if x is not set.
func pointer[T any](x val[T]) *T {
	if !x.ok {
		return nil
	}
	v := x.v
	return &v
}

// approvalScopes checks that no tool that needs approval is matched only
// by a client's key: under scope key, a call without one runs
// unrecorded, where no approval could be kept.
func (v *validator) approvalScopes(s *fileSpec, f *File) {
	for i, r := range f.rules {
		scope := r.scope
		if scope == "" {
			scope = f.defaults.scope
		}
		if (r.approval == ApprovalEach || r.approval == ApprovalSession) && scope == ScopeKey {
			v.errorf(s.tools[i].rule.approval.place, s.tools[i].rule.field+".approval",
				"scope key runs a call without a client key unrecorded, where no approval could be kept: use scope session or actor")
		}
	}
}
