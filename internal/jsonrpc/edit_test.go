package jsonrpc

import (
	"encoding/json"
	"testing"
)

func TestWithMeta(t *testing.T) {
	const add = `"k":1`
	for _, tt := range []struct{ in, want string }{
		{`{"content":[]}`, `{"content":[],"_meta":{"k":1}}`},
		{`{}`, `{"_meta":{"k":1}}`},
		{` { } `, ` { "_meta":{"k":1}} `},
		{`{"_meta":{},"content":[]}`, `{"_meta":{"k":1},"content":[]}`},
		{`{"_meta":{ },"content":[]}`, `{"_meta":{ "k":1},"content":[]}`},
		{`{"_meta":{"vendor/x":"}"},"content":[]}`, `{"_meta":{"vendor/x":"}","k":1},"content":[]}`},
		{`{"content":[],"_meta":{"a":{"b":1}} }`, `{"content":[],"_meta":{"a":{"b":1},"k":1} }`},
		{`{"_meta":"odd"}`, `{"_meta":{"k":1}}`},
		{`{"_meta":null,"content":[]}`, `{"_meta":{"k":1},"content":[]}`},
		{`[1]`, `[1]`},
		{`"text"`, `"text"`},
	} {
		in := json.RawMessage(tt.in)
		got := string(WithMeta(in, []byte(add)))
		if got != tt.want {
			t.Errorf("WithMeta(%s) = %s; want %s", tt.in, got, tt.want)
		}
		if string(in) != tt.in {
			t.Errorf("WithMeta modified its input %s", tt.in)
		}
		if got != tt.in && !json.Valid([]byte(got)) {
			t.Errorf("WithMeta(%s) = %s, not valid JSON", tt.in, got)
		}
	}
}

// TestWithMetaReplacesOurs: a result that came through another
// mcp-idempotent carries the names this one adds; they are replaced, not
// written twice, which a strict JSON reader would refuse.
func TestWithMetaReplacesItsOwn(t *testing.T) {
	const add = `"mcp-idempotent/replayed":true,"mcp-idempotent/execution":{"id":"exe_2"}`
	for _, tt := range []struct{ in, want string }{
		{`{"content":[],"_meta":{"mcp-idempotent/replayed":true,"mcp-idempotent/execution":{"id":"exe_1"},"progressToken":"p"}}`,
			`{"content":[],"_meta":{"progressToken":"p",` + add + `}}`},
		{`{"_meta":{"mcp\u002didempotent/replayed":false}}`, `{"_meta":{` + add + `}}`},
		{`{"_meta":{"mcp-idempotent\/replayed":false, "a" : 1}}`, `{"_meta":{"a" : 1,` + add + `}}`},
		// Members kept are kept as they came, a name no string holds too.
		{`{"_meta":{"\ud800":1,"mcp-idempotent/replayed":true}}`, `{"_meta":{"\ud800":1,` + add + `}}`},
	} {
		got := string(WithMeta(json.RawMessage(tt.in), []byte(add)))
		if got != tt.want {
			t.Errorf("WithMeta(%s) =\n %s\nwant\n %s", tt.in, got, tt.want)
		}
	}
}

// TestWithMetaEveryMeta: a result giving _meta twice, or in another
// case, gets the members in each, so that no reader, whichever it takes
// (the first, the last, or, as Go's encoding/json, all merged in order),
// reads the upstream's own in their place; and a result without one
// named exactly gets one added, for the readers of that name alone.
func TestWithMetaEveryMeta(t *testing.T) {
	const add = `"mcp-idempotent/replayed":true`
	for _, tt := range []struct{ in, want string }{
		{`{"_meta":{"mcp-idempotent/replayed":false},"content":[],"_meta":{"a":1}}`,
			`{"_meta":{` + add + `},"content":[],"_meta":{"a":1,` + add + `}}`},
		{`{"_meta":{},"_META":{"mcp-idempotent/replayed":false}}`,
			`{"_meta":{` + add + `},"_META":{` + add + `}}`},
		{`{"content":[],"_Meta":{"mcp-idempotent/replayed":false}}`,
			`{"content":[],"_Meta":{` + add + `},"_meta":{` + add + `}}`},
		{`{"_META":null,"_meta":"odd"}`, `{"_META":{` + add + `},"_meta":{` + add + `}}`},
		{`{"\u005fmeta":{"b":2},"_meta":{}}`, `{"\u005fmeta":{"b":2,` + add + `},"_meta":{` + add + `}}`},
	} {
		got := string(WithMeta(json.RawMessage(tt.in), []byte(add)))
		if got != tt.want {
			t.Errorf("WithMeta(%s) =\n %s\nwant\n %s", tt.in, got, tt.want)
		}
		if !json.Valid([]byte(got)) {
			t.Errorf("WithMeta(%s) = %s, not valid JSON", tt.in, got)
		}
	}
}

// TestWithMetaNeverTwice: whatever the names of the members added, a
// _meta that holds one already gives it up, so the result never holds a
// name twice.
func TestWithMetaNeverTwice(t *testing.T) {
	for _, tt := range []struct{ in, add, want string }{
		{`{"_meta":{"x":0,"y":2}}`, `"x":1`, `{"_meta":{"y":2,"x":1}}`},
		{`{"_meta":{"y":2,"x":0}}`, `"x":1,"z":{"a":[1,"}"]}`, `{"_meta":{"y":2,"x":1,"z":{"a":[1,"}"]}}}`},
		{`{"_meta":{"z":0}}`, `"x":1, "z" : 2`, `{"_meta":{"x":1, "z" : 2}}`},
		{`{"_meta":{"xy":0}}`, `"x":1`, `{"_meta":{"xy":0,"x":1}}`},
	} {
		if got := string(WithMeta(json.RawMessage(tt.in), []byte(tt.add))); got != tt.want {
			t.Errorf("WithMeta(%s, %s) = %s; want %s", tt.in, tt.add, got, tt.want)
		}
	}
}
