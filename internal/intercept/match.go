package intercept

import (
	"bytes"
	"encoding/json"
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
	text := ""
	if texts := mcp.Texts(result); len(texts) > 0 {
		text = strings.Join(texts, "\n") + "\n"
	}
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
	for _, want := range values {
		if text == want || isString && str == want {
			return true
		}
		if w, ok := jsonrpc.StringValue([]byte(want)); ok && isString && str == w {
			return true
		}
	}
	return false
}

func structuredNumber(result json.RawMessage, path string) (float64, bool) {
	v, ok := structuredValue(result, path)
	if !ok {
		return 0, false
	}
	var f float64
	return f, json.Unmarshal(v, &f) == nil
}
