package policy

import (
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// A parse func reads one kind of value that the file writes as a scalar:
// it returns the value, or what is wrong with it in words for an error,
// which the decoder places at the node and field.
type parse[T any] func(n *yaml.Node) (T, string)

// scalar reads n with parse, reporting what parse finds wrong.
func scalar[T any](d *decoder, n *yaml.Node, field string, parse parse[T]) val[T] {
	if !d.readText(n.Value, n) {
		return failed[T](d.place(n))
	}
	v, problem := parse(n)
	if problem != "" {
		d.errorf(n, field, "%s", problem)
		return failed[T](d.place(n))
	}
	return good(d.place(n), v)
}

// into is a key's read func that parses the key's value into dst.
func into[T any](d *decoder, dst *val[T], parse parse[T]) func(n *yaml.Node, field string) {
	return func(n *yaml.Node, field string) { *dst = scalar(d, n, field, parse) }
}

// parseEnum reads one of the valid strings; what names the kind of value.
func parseEnum[E ~string](what string, valid []string) parse[E] {
	return func(n *yaml.Node) (E, string) {
		if n.Kind != yaml.ScalarNode || !slices.Contains(valid, n.Value) || !isString(n) {
			return "", fmt.Sprintf("%s is not %s (use %s)", quoted(n), what, orList(valid))
		}
		return E(n.Value), ""
	}
}

func parseBool(n *yaml.Node) (bool, string) {
	// YAML 1.2 reads yes, no, on and off as strings: require true or false.
	var b bool
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!bool" || n.Decode(&b) != nil {
		return false, fmt.Sprintf("%s is not a boolean (use true or false)", quoted(n))
	}
	return b, ""
}

// durationSyntax matches what time.ParseDuration reads, whatever the size.
var durationSyntax = regexp.MustCompile(`^(([0-9]+(\.[0-9]*)?|\.[0-9]+)(ns|us|µs|ms|s|m|h))+$`)

// parseDuration reads a Go duration or a whole number of days ("7d"):
// every span the file sets is more than zero.
func parseDuration(n *yaml.Node) (time.Duration, string) {
	const use = "(use 90s, 10m, 72h or 7d)"
	if n.Kind != yaml.ScalarNode || isNull(n) {
		return 0, fmt.Sprintf("%s is not a duration %s", quoted(n), use)
	}
	s := n.Value
	var d time.Duration
	if days, ok := strings.CutSuffix(s, "d"); ok && days != "" && strings.Trim(days, "0123456789") == "" {
		nd, err := strconv.ParseInt(days, 10, 64)
		if err != nil || nd > int64(math.MaxInt64/(24*time.Hour)) {
			return 0, fmt.Sprintf("%q is too long", s)
		}
		d = time.Duration(nd) * 24 * time.Hour
	} else {
		var err error
		if d, err = time.ParseDuration(s); err != nil {
			if durationSyntax.MatchString(s) {
				// Well formed, but more than a Duration holds.
				return 0, fmt.Sprintf("%q is too long", s)
			}
			return 0, fmt.Sprintf("%q is not a duration %s", s, use)
		}
	}
	if d <= 0 {
		return 0, fmt.Sprintf("%q must be more than zero", s)
	}
	return d, ""
}

// parseRetention reads a rule's retention, which MaxRetention bounds.
func parseRetention(n *yaml.Node) (time.Duration, string) {
	d, problem := parseDuration(n)
	if problem == "" && d > MaxRetention {
		return 0, fmt.Sprintf("%q is longer than the most allowed, 400d", n.Value)
	}
	return d, problem
}

// parseApprovalTimeout reads approval_timeout: a duration from
// MinApprovalTimeout to MaxApprovalTimeout.
func parseApprovalTimeout(n *yaml.Node) (time.Duration, string) {
	d, problem := parseDuration(n)
	switch {
	case problem != "":
		return 0, problem
	case d < MinApprovalTimeout:
		return 0, fmt.Sprintf("%q is shorter than the least allowed, 1s: no one could decide in time, and every call would be refused", n.Value)
	case d > MaxApprovalTimeout:
		return 0, fmt.Sprintf("%q is longer than the most allowed, 7d", n.Value)
	}
	return d, ""
}

// parsePath reads a dot path of object members, such as trace.id; want
// says what the path names, for the error that n is not a string.
func parsePath(want string) parse[string] {
	return func(n *yaml.Node) (string, string) {
		if !isString(n) {
			return "", fmt.Sprintf("want %s, not %s", want, describe(n))
		}
		if problem := checkDotPath(n.Value); problem != "" {
			return "", fmt.Sprintf("%q %s", n.Value, problem)
		}
		return n.Value, ""
	}
}

// checkDotPath returns what is wrong with a dot path of object members, or "".
//
// Spellings copied from JSONPath and its kin ($.a, a[0].b, a.*) are
// refused rather than read as member names: they would name no member, so
// an ignored trace id would still tell retries apart, silently. A member
// literally named $, *, or x[0] is far less likely than the mistake.
func checkDotPath(s string) string {
	switch {
	case s == "":
		return "is empty: want a dot path of argument members such as trace.id"
	case s == "$":
		return "is JSONPath's root: name a member, such as trace.id"
	case strings.HasPrefix(s, "$."):
		rest := s[2:]
		if problem := checkDotPath(rest); problem != "" {
			return problem
		}
		return fmt.Sprintf("is JSONPath: write %s", rest)
	case s[0] == '.' || s[len(s)-1] == '.' || strings.Contains(s, ".."):
		return "has an empty member name: want a dot path such as trace.id, without leading, trailing or doubled dots"
	}
	for m := range strings.SplitSeq(s, ".") {
		sub, ok := subscript(m)
		switch {
		case strings.Contains(m, "*"):
			return "has a wildcard: wildcards are not supported; name each member"
		case !ok:
		case strings.Trim(sub, "-0123456789") == "" && sub != "":
			return "names an array's member: paths reach into objects only"
		case len(sub) >= 2 && (sub[0] == '\'' || sub[0] == '"') && sub[len(sub)-1] == sub[0]:
			return "uses brackets: join member names with dots, such as trace.id"
		}
	}
	return ""
}

// subscript returns what the brackets that end member m hold: "0" of
// items[0]. A name such as filter[status], which some APIs use, is a
// member name, not a subscript: the caller decides by what it holds.
func subscript(m string) (string, bool) {
	i := strings.LastIndexByte(m, '[')
	if i < 0 || !strings.HasSuffix(m, "]") {
		return "", false
	}
	return m[i+1 : len(m)-1], true
}

// wholeNumber reads an integer from lo to hi; the caller words the error.
func wholeNumber(n *yaml.Node, lo, hi int) (int, bool) {
	i, err := strconv.Atoi(n.Value)
	return i, n.Kind == yaml.ScalarNode && err == nil && i >= lo && i <= hi
}
