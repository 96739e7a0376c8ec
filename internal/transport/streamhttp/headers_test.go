package streamhttp

import (
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/mcp-idempotent/mcp-idempotent/internal/jsonrpc"
)

// TestEncodeHeaderValue checks the encoding table of the spec (2026-07-28,
// basic/transports/streamable-http, "Value Encoding") and its edges.
func TestEncodeHeaderValue(t *testing.T) {
	for _, tc := range []struct {
		in, want string
	}{
		{"us-west1", "us-west1"},
		{"Hello, 世界", "=?base64?SGVsbG8sIOS4lueVjA==?="},
		{" padded ", "=?base64?IHBhZGRlZCA=?="},
		{"line1\nline2", "=?base64?bGluZTEKbGluZTI=?="},
		{"=?base64?literal?=", "=?base64?PT9iYXNlNjQ/bGl0ZXJhbD89?="},
		{"", ""},
		{"inner space", "inner space"},
		{"tab\tinside", "=?base64?dGFiCWluc2lkZQ==?="},
		{"trailing\t", "=?base64?dHJhaWxpbmcJ?="},
		{"del\x7f", "=?base64?ZGVsfw==?="},
		{"=?base64?only-prefix", "=?base64?only-prefix"},
		{"file:///a%20b.txt?x=1", "file:///a%20b.txt?x=1"},
	} {
		if got := encodeHeaderValue(tc.in); got != tc.want {
			t.Errorf("encodeHeaderValue(%q) = %q; want %q", tc.in, got, tc.want)
		}
	}
}

// TestSetRequestMetadata checks the headers mirrored from one request,
// method by method.
func TestSetRequestMetadata(t *testing.T) {
	const meta = `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}`
	for _, tc := range []struct {
		name, frame string
		stateless   bool
		// want holds the expected value of each header; "" means absent.
		want map[string]string
	}{
		{"discover", `{"jsonrpc":"2.0","id":1,"method":"server/discover","params":{` + meta + `}}`, true,
			map[string]string{"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "server/discover", "Mcp-Name": ""}},
		{"discover without _meta", `{"jsonrpc":"2.0","id":1,"method":"server/discover"}`, true,
			map[string]string{"MCP-Protocol-Version": "", "Mcp-Method": "server/discover"}},
		{"tools/list", `{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{` + meta + `}}`, true,
			map[string]string{"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/list", "Mcp-Name": ""}},
		{"later version", `{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2027-03-01"}}}`, true,
			map[string]string{"MCP-Protocol-Version": "2027-03-01"}},
		{"tools/call", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"charge_card",` + meta + `}}`, true,
			map[string]string{"Mcp-Method": "tools/call", "Mcp-Name": "charge_card"}},
		{"tools/call non-ASCII", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"café",` + meta + `}}`, true,
			map[string]string{"Mcp-Name": "=?base64?Y2Fmw6k=?="}},
		{"tools/call escaped", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"caf\u00e9",` + meta + `}}`, true,
			map[string]string{"Mcp-Name": "=?base64?Y2Fmw6k=?="}},
		{"tools/call duplicate name", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"first","name":"second",` + meta + `}}`, true,
			map[string]string{"Mcp-Name": "second"}},
		{"prompts/get", `{"jsonrpc":"2.0","id":1,"method":"prompts/get","params":{"name":" padded ",` + meta + `}}`, true,
			map[string]string{"Mcp-Method": "prompts/get", "Mcp-Name": "=?base64?IHBhZGRlZCA=?="}},
		{"resources/read", `{"jsonrpc":"2.0","id":1,"method":"resources/read","params":{"uri":"file:///projects/config.json",` + meta + `}}`, true,
			map[string]string{"Mcp-Method": "resources/read", "Mcp-Name": "file:///projects/config.json"}},
		{"resources/read non-ASCII", `{"jsonrpc":"2.0","id":1,"method":"resources/read","params":{"uri":"file:///notes/日本.txt",` + meta + `}}`, true,
			map[string]string{"Mcp-Name": "=?base64?ZmlsZTovLy9ub3Rlcy/ml6XmnKwudHh0?="}},
		{"legacy version", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","_meta":{"io.modelcontextprotocol/protocolVersion":"2025-11-25"}}}`, false, nil},
		{"no _meta", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x"}}`, false, nil},
		{"version not a string", `{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":20260728}}}`, false, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := jsonrpc.Decode([]byte(tc.frame))
			if err != nil {
				t.Fatal(err)
			}
			version, stateless, err := statelessVersion(m)
			if err != nil {
				t.Fatal(err)
			}
			if stateless != tc.stateless {
				t.Fatalf("stateless = %v; want %v", stateless, tc.stateless)
			}
			if !stateless {
				return
			}
			h := http.Header{}
			setRequestMetadata(h, m, version)
			for name, want := range tc.want {
				if got := h.Get(name); got != want {
					t.Errorf("%s = %q; want %q", name, got, want)
				}
			}
		})
	}
}

// TestParamHeaders checks which x-mcp-header annotations of an inputSchema
// are kept, and which make the tool invalid (spec 2026-07-28, "Schema
// Extension").
func TestParamHeaders(t *testing.T) {
	for _, tc := range []struct {
		name, schema string
		want         string // the bindings as path=header, space-separated
		valid        bool
	}{
		{"none", `{"type":"object","properties":{"q":{"type":"string"}}}`, "", true},
		{"no properties", `{"type":"object"}`, "", true},
		{"top level", `{"type":"object","properties":{"region":{"type":"string","x-mcp-header":"Region"},"q":{"type":"string"}}}`, "region=Region", true},
		{"nested", `{"type":"object","properties":{"opts":{"type":"object","properties":{"shard":{"type":"integer","x-mcp-header":"Shard"}}}}}`, "opts.shard=Shard", true},
		{"boolean", `{"properties":{"dry":{"type":"boolean","x-mcp-header":"Dry-Run"}}}`, "dry=Dry-Run", true},
		{"number type", `{"properties":{"n":{"type":"number","x-mcp-header":"N"}}}`, "", false},
		{"object type", `{"properties":{"o":{"type":"object","x-mcp-header":"O"}}}`, "", false},
		{"empty name", `{"properties":{"a":{"type":"string","x-mcp-header":""}}}`, "", false},
		{"not a token", `{"properties":{"a":{"type":"string","x-mcp-header":"Bad Name"}}}`, "", false},
		{"not a string", `{"properties":{"a":{"type":"string","x-mcp-header":7}}}`, "", false},
		{"duplicate, any case", `{"properties":{"a":{"type":"string","x-mcp-header":"Region"},"b":{"type":"string","x-mcp-header":"region"}}}`, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bindings, valid := paramHeaders([]byte(tc.schema))
			var got []string
			for _, b := range bindings {
				got = append(got, strings.Join(b.path, ".")+"="+b.header)
			}
			if valid != tc.valid || strings.Join(got, " ") != tc.want {
				t.Errorf("paramHeaders = %q, %v; want %q, %v", got, valid, tc.want, tc.valid)
			}
		})
	}
}

// TestHeaderArgument checks the header form of each kind of argument.
func TestHeaderArgument(t *testing.T) {
	for _, tc := range []struct {
		raw, want string
		ok        bool
	}{
		{`"us-west1"`, "us-west1", true},
		{`"Z\u00fcrich"`, "Zürich", true},
		{`42`, "42", true},
		{`-7`, "-7", true},
		{`42.0`, "42", true},
		{`1.5`, "", false},
		{`9007199254740992`, "", false},
		{`true`, "true", true},
		{`false`, "false", true},
		{`null`, "", false},
		{`{"a":1}`, "", false},
		{`[1]`, "", false},
		{``, "", false},
	} {
		got, ok := headerArgument([]byte(tc.raw))
		if got != tc.want || ok != tc.ok {
			t.Errorf("headerArgument(%s) = %q, %v; want %q, %v", tc.raw, got, ok, tc.want, tc.ok)
		}
	}
}

// FuzzEncodeHeaderValue checks that every value becomes a header-safe one
// that decodes back to it.
func FuzzEncodeHeaderValue(f *testing.F) {
	for _, s := range []string{"us-west1", "Hello, 世界", " padded ", "line1\nline2", "=?base64?literal?=", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		enc := encodeHeaderValue(s)
		if !headerSafe(enc) {
			t.Fatalf("encodeHeaderValue(%q) = %q: not header-safe", s, enc)
		}
		dec := enc
		if inner, ok := strings.CutPrefix(enc, base64Prefix); ok && strings.HasSuffix(inner, base64Suffix) {
			b, err := base64.StdEncoding.DecodeString(strings.TrimSuffix(inner, base64Suffix))
			if err != nil {
				t.Fatalf("encodeHeaderValue(%q) = %q: %v", s, enc, err)
			}
			dec = string(b)
		}
		if dec != s {
			t.Fatalf("encodeHeaderValue(%q) = %q, which decodes to %q", s, enc, dec)
		}
	})
}

// FuzzParamHeaders feeds arbitrary schemas and arguments to the
// x-mcp-header code, which must not panic and must set header-safe values
// only.
func FuzzParamHeaders(f *testing.F) {
	f.Add(`{"properties":{"region":{"type":"string","x-mcp-header":"Region"}}}`, `{"arguments":{"region":"us-west1"}}`)
	f.Add(`{"properties":{"o":{"properties":{"n":{"type":"integer","x-mcp-header":"N"}}}}}`, `{"arguments":{"o":{"n":4.0}}}`)
	f.Fuzz(func(t *testing.T, schema, params string) {
		if !json.Valid([]byte(schema)) || !json.Valid([]byte(params)) {
			return
		}
		bindings, _ := paramHeaders([]byte(schema))
		h := http.Header{}
		setParamHeaders(h, []byte(params), bindings)
		for name, vs := range h {
			for _, v := range vs {
				if !headerSafe(v) {
					t.Fatalf("%s: %q is not header-safe", name, v)
				}
			}
		}
	})
}

// headerSafe reports whether v is printable ASCII without outer whitespace.
func headerSafe(v string) bool {
	for i := 0; i < len(v); i++ {
		if v[i] < 0x20 || v[i] > 0x7e {
			return false
		}
	}
	return strings.TrimSpace(v) == v
}

// TestTraceHeaders: the trace context of a POST is its one traceparent
// header; two are none, since the sender's meaning cannot be told, and
// tracestate lines join.
func TestTraceHeaders(t *testing.T) {
	const p1 = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	const p2 = "00-ffffffffffffffffffffffffffffffff-00f067aa0ba902b7-01"
	for _, tt := range []struct {
		name          string
		header        http.Header
		parent, state string
	}{
		{"none", http.Header{}, "", ""},
		{"one", http.Header{"Traceparent": {p1}, "Tracestate": {"a=1", "b=2"}}, p1, "a=1,b=2"},
		{"two", http.Header{"Traceparent": {p1, p2}, "Tracestate": {"a=1"}}, "", ""},
		{"state alone", http.Header{"Tracestate": {"a=1"}}, "", ""},
	} {
		parent, state := traceHeaders(tt.header)
		if parent != tt.parent || state != tt.state {
			t.Errorf("%s: got %q, %q; want %q, %q", tt.name, parent, state, tt.parent, tt.state)
		}
	}
}

// TestTraceHeadersGoUpstream: a request whose _meta carries trace
// context is POSTed with it in the headers too; one whose _meta holds a
// value no header may carry, or one so long the server would refuse the
// POST for it, is POSTed without it.
func TestTraceHeadersGoUpstream(t *testing.T) {
	const p = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	long := strings.Repeat("x", 1<<20)
	for _, tt := range []struct {
		params        string
		parent, state string
	}{
		{`{"name":"x","_meta":{"traceparent":"` + p + `","tracestate":"a=1"}}`, p, "a=1"},
		{`{"name":"x","_meta":{"traceparent":"a\nb"}}`, "", ""},
		{`{"name":"x","traceparent":"not in _meta"}`, "", ""},
		{`{"name":"x","_meta":{"traceparent":"` + long + `"}}`, "", ""},
		{`{"name":"x","_meta":{"traceparent":"` + p + `","tracestate":"k=` + long + `"}}`, p, ""},
	} {
		h := http.Header{}
		setTraceHeaders(h, json.RawMessage(tt.params))
		if got, state := h.Get("traceparent"), h.Get("tracestate"); got != tt.parent || state != tt.state {
			t.Errorf("%.120s: headers traceparent %.60q, tracestate %.60q; want %q, %q", tt.params, got, state, tt.parent, tt.state)
		}
	}
}
