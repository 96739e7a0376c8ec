package intercept

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/mcp-idempotent/mcp-idempotent/internal/jsonrpc"
	"github.com/mcp-idempotent/mcp-idempotent/internal/mcp"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
	"github.com/mcp-idempotent/mcp-idempotent/internal/retry"
)

// outcome sets c to the change that settles the record from an
// upstream's answer. c is the caller's, not returned: a Change is 200
// bytes, copied on every return, and a new execution settles one.
func outcome(c *record.Change, result json.RawMessage, err error) {
	if err == nil && len(result) > 0 && result[0] == '{' {
		// The common case, decided before the error cases below, whose
		// targets cost an allocation each. Both questions below are put
		// to a result only if it may hold their words: a "_meta" and an
		// "input_required" are spelled with an underscore, or with an
		// escape (\u) for one of their letters.
		escaped := bytes.IndexByte(result, '\\') >= 0
		if !escaped && bytes.IndexByte(result, '_') < 0 {
			*c = record.Change{To: record.Completed, Result: result}
			return
		}
		if mayAsk(result, escaped) && asksInput(result) {
			*c = record.Change{To: record.Failed, Result: result, Note: "input_required: not a completion"}
			return
		}
		if o := upstreamOutcome(result, escaped); o == "unknown" || o == "in_progress" {
			// The upstream is another mcp-idempotent that does not know
			// the outcome yet: neither does this one. Its answer is kept,
			// for the caller it came for.
			*c = record.Change{To: record.Unknown, Result: result, Note: "the upstream, another mcp-idempotent, answered " + o}
			return
		}
		*c = record.Change{To: record.Completed, Result: result}
		return
	}
	var malformed *retry.MalformedError
	if err == nil {
		err = retry.Malformed("a tools/call result that is not an object", result)
	}
	switch {
	case errors.As(err, &malformed):
		// An answer came, so the call was received and may have run, but
		// it does not say how it went: the outcome is not known, and
		// calling again must not run it again. The note, which the
		// store and the journal keep, leaves out the answer's bytes, as
		// it leaves out an upstream error's message: what a tool answers
		// is kept only where the policy allows.
		*c = record.Change{To: record.Unknown, Note: malformed.Summary()}
		return
	case retry.IsNotSent(err):
		*c = record.Change{To: record.Failed, Note: err.Error()}
		return
	}
	if rpcErr, ok := rpcError(err); ok {
		b := rpcErr.Object() // the upstream's error, as it came
		*c = record.Change{To: record.Failed, Error: b, Note: fmt.Sprintf("upstream error %d", rpcErr.Code)}
		return
	}
	*c = record.Change{To: record.Unknown, Note: err.Error()}
}

// malformed reports whether an attempt's answer is one outcome reads as
// malformed: a bug upstream.
func malformed(result json.RawMessage, err error) bool {
	if err == nil {
		return len(result) == 0 || result[0] != '{'
	}
	return errors.As(err, new(*retry.MalformedError))
}

// upstreamOutcome returns the outcome an mcp-idempotent upstream put in a
// result's _meta (mcp.MetaOutcome: "unknown", "in_progress", "already_done"),
// or "" for a result that has none, which is most. escaped says whether
// result holds a backslash, which may spell the member's name otherwise.
func upstreamOutcome(result json.RawMessage, escaped bool) string {
	if !escaped && !bytes.Contains(result, []byte(mcp.MetaOutcome)) {
		return ""
	}
	o, _ := jsonrpc.StringValue(jsonrpc.Member(jsonrpc.Member(result, "_meta"), mcp.MetaOutcome))
	return o
}

// inputRequired reports whether result, a valid JSON object, asks the
// client for more input (MCP 2026-07-28 multi-round requests) rather than
// completing. The member's name is matched exactly: a completion must not
// be taken for a question, and run again, because of a "ResultType".
func inputRequired(result json.RawMessage) bool {
	return mayAsk(result, bytes.IndexByte(result, '\\') >= 0) && asksInput(result)
}

// mayAsk reports whether result may be one inputRequired holds true:
// whether it holds the words, or, as escaped says, a backslash. Only an
// escape (\u) may spell them otherwise; any backslash sends the result
// to the exact test (asksInput), as a byte is looked for faster than two.
func mayAsk(result json.RawMessage, escaped bool) bool {
	return escaped || bytes.Contains(result, []byte("input_required"))
}

// asksInput is inputRequired's exact test.
func asksInput(result json.RawMessage) bool {
	resultType, _ := jsonrpc.StringValue(jsonrpc.Member(result, "resultType"))
	return resultType == "input_required"
}
