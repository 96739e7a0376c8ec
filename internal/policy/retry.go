package policy

import (
	"fmt"
	"regexp"
	"time"

	"go.yaml.in/yaml/v3"
)

// Bounds and defaults of a retry rule.
const (
	maxRetryAttempts     = 20
	defaultRetryAttempts = 3
	defaultRetryBase     = 200 * time.Millisecond
	defaultRetryCap      = 30 * time.Second
)

// A retrySpec is a tool's retry block as written.
type retrySpec struct {
	block
	maxAttempts         val[int]
	base, cap, deadline val[time.Duration]
	transient           val[[]*matchSpec] // ok: it is a list
	retryAfter          block             // at is nil when not written
	retryAfterPath      val[string]
	account             val[string]
}

// A matchSpec is one result match as written: an entry of a retry
// block's transient list, or of a rule's already_done.
type matchSpec struct {
	block
	text         val[*regexp.Regexp]
	structured   *statusSpec // nil when not written
	safeToResend val[bool]
}

func (d *decoder) retry(n *yaml.Node, field string) *retrySpec {
	s := &retrySpec{}
	s.block = d.fields(n, field, "a mapping with max_attempts, base, cap, deadline, transient, retry_after and account", []key{
		{name: "max_attempts", read: into(d, &s.maxAttempts, parseAttempts)},
		{name: "base", read: into(d, &s.base, parseDuration)},
		{name: "cap", read: into(d, &s.cap, parseDuration)},
		{name: "deadline", read: into(d, &s.deadline, parseDuration)},
		{name: "transient", read: func(v *yaml.Node, f string) { s.transient = d.transient(v, f) }},
		{name: "retry_after", read: func(v *yaml.Node, f string) {
			s.retryAfter = d.fields(v, f, "a mapping with structured: PATH", []key{
				{name: "structured", read: into(d, &s.retryAfterPath, parseRetryAfter)},
			})
		}},
		{name: "account", read: into(d, &s.account, parseAccountName)},
	})
	return s
}

func (d *decoder) transient(n *yaml.Node, field string) val[[]*matchSpec] {
	if n.Kind != yaml.SequenceNode {
		d.errorf(n, field, "want a list of result matches, not %s", describe(n))
		return failed[[]*matchSpec](d.place(n))
	}
	if !d.spend(len(n.Content), n) {
		return failed[[]*matchSpec](d.place(n))
	}
	var matches []*matchSpec
	for i, e := range n.Content {
		matches = append(matches, d.match(e, indexField(field, i), transientValues))
	}
	return good(d.place(n), matches)
}

// alreadyDone reads an already_done block: one result match, or a list.
func (d *decoder) alreadyDone(n *yaml.Node, field string) []*matchSpec {
	if n.Kind != yaml.SequenceNode {
		return []*matchSpec{d.match(n, field, doneValues)}
	}
	// Counted as it is walked, as every list is: an entry that is no
	// mapping costs an error, and one list that a thousand rules alias
	// would otherwise cost a thousand times its length in errors.
	if !d.spend(len(n.Content), n) {
		return nil
	}
	var matches []*matchSpec
	for i, e := range n.Content {
		matches = append(matches, d.match(e, indexField(field, i), doneValues))
	}
	return matches
}

// What the values of a transient and of an already_done match mean, for
// the error that they are missing.
const (
	transientValues = "transient, such as [rate_limited]"
	doneValues      = "already done, such as [already_exists]"
)

// match reads a result match; what says what its values mean.
func (d *decoder) match(n *yaml.Node, field, what string) *matchSpec {
	s := &matchSpec{}
	s.block = d.fields(n, field, "a mapping with result_text or structured, and safe_to_resend", []key{
		{name: "result_text", read: into(d, &s.text, parseResultText)},
		{name: "structured", read: func(v *yaml.Node, f string) {
			s.structured = d.status(v, f, what)
		}},
		{name: "safe_to_resend", read: into(d, &s.safeToResend, parseBool)},
	})
	return s
}

func parseAttempts(n *yaml.Node) (int, string) {
	if a, ok := wholeNumber(n, 1, maxRetryAttempts); ok {
		return a, ""
	}
	return 0, fmt.Sprintf("want a whole number of attempts from 1 to %d, the first included", maxRetryAttempts)
}

func parseRetryAfter(n *yaml.Node) (string, string) {
	if !isString(n) || checkDotPath(n.Value) != "" {
		return "", "want a dot path in structuredContent such as retry_after_seconds"
	}
	return n.Value, ""
}

// parseAccountName reads the account a retry rule names; whether the file
// defines it is for the validator.
func parseAccountName(n *yaml.Node) (string, string) {
	if !isString(n) || n.Value == "" {
		return "", "want the name of an account defined under accounts"
	}
	return n.Value, ""
}

// parseResultText reads a result match's regular expression, which may
// not be empty: an empty one matches every result.
func parseResultText(n *yaml.Node) (*regexp.Regexp, string) {
	if isString(n) && n.Value == "" {
		return nil, "an empty regular expression matches every result: give text that only this result holds"
	}
	return parseRegexp(n)
}

func parseRegexp(n *yaml.Node) (*regexp.Regexp, string) {
	if !isString(n) {
		return nil, fmt.Sprintf("want a regular expression (Go RE2 syntax) as a string, not %s; quote it", describe(n))
	}
	re, err := regexp.Compile(n.Value)
	if err != nil {
		return nil, fmt.Sprintf("not a regular expression (Go RE2 syntax): %v", err)
	}
	return re, ""
}

// retry validates a retry block: nil if it is not valid.
func (v *validator) retry(s *retrySpec) *RetryRule {
	if !s.read {
		return nil
	}
	rr := &RetryRule{
		MaxAttempts:    s.maxAttempts.or(defaultRetryAttempts),
		Base:           s.base.or(defaultRetryBase),
		Cap:            s.cap.or(defaultRetryCap),
		Deadline:       s.deadline.or(DefaultDeadline),
		RetryAfterPath: s.retryAfterPath.or(""),
		Account:        s.account.or(""),
	}
	ok := s.known && !s.maxAttempts.bad() && !s.base.bad() && !s.cap.bad() &&
		!s.deadline.bad() && !s.transient.bad() && !s.account.bad()
	for _, ms := range s.transient.v {
		m, mok := v.match(ms, false)
		if mok {
			rr.Transient = append(rr.Transient, m)
		}
		ok = ok && mok
	}
	if s.retryAfter.at != nil && (!s.retryAfter.read || !s.retryAfter.known || s.retryAfterPath.bad()) {
		ok = false
	}
	if rr.Cap < rr.Base {
		v.errorf(s.place, s.field, "cap (%v) is shorter than base (%v)", rr.Cap, rr.Base)
		ok = false
	}
	if !ok {
		return nil
	}
	return rr
}

// alreadyDone validates an already_done block: the matches that are
// valid, nil if none is.
func (v *validator) alreadyDone(specs []*matchSpec) []ResultMatch {
	var out []ResultMatch
	for _, s := range specs {
		if m, ok := v.match(s, true); ok {
			out = append(out, m)
		}
	}
	return out
}

// match validates one result match: of already_done if done, else of
// retry.transient.
func (v *validator) match(s *matchSpec, done bool) (ResultMatch, bool) {
	m := ResultMatch{Text: s.text.v, SafeToResend: s.safeToResend.v}
	if !s.read {
		return m, false
	}
	ok := s.known && !s.text.bad() && !s.safeToResend.bad()
	if st := s.structured; st != nil {
		// Unlike a recover block's, this status has no defaults.
		path, values := st.path.or(""), st.in.v
		// Only for a part left out: one written wrong has its own error.
		if path == "" && !st.path.bad() || len(values) == 0 && !st.in.bad() {
			v.errorf(st.place, st.field, "want {path: FIELD, in: [VALUES...]}")
		}
		if !st.ok() || path == "" || len(values) == 0 {
			ok = false
		} else {
			m.Path, m.In = path, values
		}
	}
	what := "a transient match"
	if done {
		what = "an already_done match"
	}
	switch {
	case !ok:
	case m.Text == nil && m.Path == "":
		v.errorf(s.place, s.field, "%s needs result_text or structured", what)
		ok = false
	case m.Text != nil && m.Path != "":
		v.errorf(s.place, s.field, "%s takes result_text or structured, not both: give one (a list takes one match per entry)", what)
		ok = false
	case done && s.safeToResend.at != nil:
		v.errorf(s.safeToResend.place, s.field+".safe_to_resend", "an already_done result means the action is done, so nothing is sent again: drop safe_to_resend")
		ok = false
	}
	return m, ok
}
