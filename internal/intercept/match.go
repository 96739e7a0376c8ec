package intercept

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"

	"github.com/mcp-idempotent/mcp-idempotent/internal/jsonrpc"
	"github.com/mcp-idempotent/mcp-idempotent/internal/mcp"
	"github.com/mcp-idempotent/mcp-idempotent/internal/policy"
)

// firstMatch returns the first of matches that a tool result meets.
func firstMatch(result json.RawMessage, matches []policy.ResultMatch) (policy.ResultMatch, bool) {
	if len(matches) == 0 {
		return policy.ResultMatch{}, false
	}
	// No newline after the last: "$" matches only at the very end.
	text := strings.Join(mcp.Texts(result), "\n")
	for _, m := range matches {
		if m.Text != nil && m.Text.MatchString(text) {
			return m, true
		}
		if m.Path != "" && structuredIn(result, m.Path, m.In) {
			return m, true
		}
	}
	return policy.ResultMatch{}, false
}

// isError reports whether a tool result says it is an error (isError:
// true). result is a valid JSON object.
func isError(result json.RawMessage) bool {
	return string(jsonrpc.Member(result, "isError")) == "true"
}

// structuredValue returns structuredContent at a dot path, names matched
// exactly. result is a valid JSON object.
func structuredValue(result json.RawMessage, path string) (json.RawMessage, bool) {
	v := jsonrpc.Member(result, "structuredContent")
	for name := range strings.SplitSeq(path, ".") {
		if v = jsonrpc.Member(v, name); v == nil {
			return nil, false
		}
	}
	return v, v != nil
}

// structuredIn reports whether structuredContent at path is one of values
// (JSON text; a string also matches its unquoted form).
//
// Strings are compared as the text they hold, whatever the escapes that
// spell it: a policy's "R&D" is JSON "R\u0026D" as Go writes it, and a
// server may write either.
func structuredIn(result json.RawMessage, path string, values []string) bool {
	v, ok := structuredValue(result, path)
	if !ok {
		return false
	}
	text := string(bytes.TrimSpace(v))
	str, isString := jsonrpc.StringValue(v)
	num, isNumber := canonicalNumber(text)
	for _, want := range values {
		if text == want || isString && str == want {
			return true
		}
		if w, ok := jsonrpc.StringValue([]byte(want)); ok && isString && str == w {
			return true
		}
		if w, ok := canonicalNumber(want); ok && isNumber && num == w {
			return true
		}
	}
	return false
}

// canonicalNumber spells the JSON number s as its sign, its significant
// digits and a power of ten ("-0.0120" is "-12e-3", zero is "0"), so that
// one number however spelt (429, 429.0, 4.29e2: a policy's YAML and a
// server's JSON encoder may write any) has one spelling. False if s is no
// JSON number, or its exponent is too large to compare. It takes time
// linear in s: no number is computed.
func canonicalNumber(s string) (string, bool) {
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	mant, expText, hasExp := s, "", false
	if i := strings.IndexAny(s, "eE"); i >= 0 {
		mant, expText, hasExp = s[:i], s[i+1:], true
	}
	whole, frac, hasFrac := strings.Cut(mant, ".")
	var exp int64 // 64 bits where int has 32 too
	if hasExp {
		e, err := strconv.ParseInt(expText, 10, 64)
		// 1e15 is far below overflow once the digits' count is added.
		if err != nil || e > 1e15 || e < -1e15 {
			return "", false
		}
		exp = e
	}
	if !digits(whole) || hasFrac && !digits(frac) || len(whole) > 1 && whole[0] == '0' {
		return "", false
	}
	sig := strings.TrimLeft(whole+frac, "0")
	exp -= int64(len(frac))
	trimmed := strings.TrimRight(sig, "0")
	exp += int64(len(sig) - len(trimmed))
	if trimmed == "" {
		return "0", true
	}
	if neg {
		trimmed = "-" + trimmed
	}
	return trimmed + "e" + strconv.FormatInt(exp, 10), true
}

// digits reports whether s is one ASCII digit or more.
func digits(s string) bool {
	return s != "" && strings.Trim(s, "0123456789") == ""
}

func structuredNumber(result json.RawMessage, path string) (float64, bool) {
	v, ok := structuredValue(result, path)
	if !ok {
		return 0, false
	}
	var f float64
	return f, json.Unmarshal(v, &f) == nil
}
