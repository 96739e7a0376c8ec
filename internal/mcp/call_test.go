package mcp

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/jsonrpc"
)

func TestClientKeyValidation(t *testing.T) {
	for _, tt := range []struct{ meta, key, err string }{
		{`{"mcp-idempotent/key":"k1"}`, "k1", ""},
		{`{"idempotencyKey":"k2"}`, "k2", ""},
		{`{"idempotencyKey":"common","mcp-idempotent/key":"ours"}`, "ours", ""},
		{`{"progressToken":1}`, "", ""},
		{`{"mcp-idempotent/key":7}`, "", "must be a string"},
		{`{"mcp-idempotent/key":""}`, "", "is empty"},
		{`{"mcp-idempotent/key":"a\nb"}`, "", "control character"},
		{`{"idempotencyKey":"` + strings.Repeat("k", 256) + `"}`, "", "256 bytes long; the limit is 255"},
	} {
		tc, err := ParseToolCall(json.RawMessage(`{"name":"t","_meta":` + tt.meta + `}`))
		switch {
		case tt.err == "" && err != nil:
			t.Errorf("_meta %s: %v", tt.meta, err)
		case tt.err == "" && tc.Key != tt.key:
			t.Errorf("_meta %s: key %q; want %q", tt.meta, tc.Key, tt.key)
		case tt.err != "" && (err == nil || err.Code != jsonrpc.CodeInvalidParams || !strings.Contains(err.Message, tt.err)):
			t.Errorf("_meta %s: error %v; want -32602 containing %q", tt.meta, err, tt.err)
		}
	}
}

func TestClientDeadlineValidation(t *testing.T) {
	for _, tt := range []struct {
		meta string
		want time.Duration
		err  string
	}{
		{`{"mcp-idempotent/deadline_ms":1500}`, 1500 * time.Millisecond, ""},
		{`{"mcp-idempotent/deadline_ms":1}`, time.Millisecond, ""},
		{`{"progressToken":1}`, 0, ""},
		{`{"mcp-idempotent/deadline_ms":0}`, 0, "must be a positive whole number of milliseconds, not 0"},
		{`{"mcp-idempotent/deadline_ms":-5}`, 0, "not -5"},
		{`{"mcp-idempotent/deadline_ms":1.5}`, 0, "not 1.5"},
		{`{"mcp-idempotent/deadline_ms":1e3}`, time.Second, ""},
		{`{"mcp-idempotent/deadline_ms":5000.0}`, 5 * time.Second, ""},
		{`{"mcp-idempotent/deadline_ms":1.5e1}`, 15 * time.Millisecond, ""},
		{`{"mcp-idempotent/deadline_ms":-0.0}`, 0, "not -0.0"},
		{`{"mcp-idempotent/deadline_ms":1e400}`, 0, "not 1e400"},
		{`{"mcp-idempotent/deadline_ms":"1000"}`, 0, `not "1000"`},
		{`{"mcp-idempotent/deadline_ms":null}`, 0, "not null"},
		{`{"mcp-idempotent/deadline_ms":true}`, 0, "not true"},
		// Longer than any wait: the tool's own deadline stands.
		{`{"mcp-idempotent/deadline_ms":99999999999999999999}`, 9223372036854 * time.Millisecond, ""},
		{`{"mcp-idempotent/deadline_ms":9007199254740993}`, 9223372036854 * time.Millisecond, ""},
		// Spelled in more than 64 bytes: refused before any work, which
		// would grow with the square of its digits.
		{`{"mcp-idempotent/deadline_ms":1` + strings.Repeat("0", 64) + `}`, 0, "not 1000"},
	} {
		tc, err := ParseToolCall(json.RawMessage(`{"name":"t","_meta":` + tt.meta + `}`))
		switch {
		case tt.err == "" && err != nil:
			t.Errorf("_meta %s: %v", tt.meta, err)
		case tt.err == "" && tc.Deadline != tt.want:
			t.Errorf("_meta %s: deadline %v; want %v", tt.meta, tc.Deadline, tt.want)
		case tt.err != "" && (err == nil || err.Code != jsonrpc.CodeInvalidParams || !strings.Contains(err.Message, tt.err) ||
			!strings.Contains(err.Message, `_meta["mcp-idempotent/deadline_ms"]`)):
			t.Errorf("_meta %s: error %v; want -32602 naming the member and containing %q", tt.meta, err, tt.err)
		}
	}
}

func TestParseToolCall(t *testing.T) {
	for _, tt := range []struct {
		params string
		err    string // substring of the error; "" for success
	}{
		{`{"name":"charge_card","arguments":{"a":1}}`, ""},
		{`{"name":"charge_card"}`, ""},
		{`{"name":"charge_card","arguments":null}`, ""},
		{`{"arguments":{}}`, "params.name must be a non-empty string"},
		{`{"name":""}`, "params.name must be a non-empty string"},
		{`{"name":7}`, "params.name must be a non-empty string"},
		{"{\"name\":\"charge\xff\"}", "params.name is not UTF-8"},
		{`{"name":"charge\ud800"}`, "params.name is not UTF-8"},
		{`{"name":"charge\ud83d\ude00"}`, ""}, // a pair: one character
		{`{"name":"charge\ufffd"}`, "params.name is not UTF-8"},
		{"{\"name\":\"charge\uFFFD\"}", "params.name is not UTF-8"}, // U+FFFD as it is
		{`{"name":"caf\u00e9"}`, ""},
		{"{\"name\":\"café\"}", ""},
		{`{"name":"x","arguments":[1]}`, "arguments must be an object, got an array"},
		{`{"name":"x","arguments":"a"}`, "arguments must be an object, got a string"},
		{`{"name":"x","_meta":[1,2]}`, "params._meta must be an object, got an array"},
		{`{"name":"x","_meta":"str"}`, "params._meta must be an object, got a string"},
		{`{"name":"x","task":{"ttl":60000}}`, ""},
		{`{"name":"x","task":{}}`, ""},
		{`{"name":"x","task":null}`, ""},
		{`{"name":"x","task":5}`, "params.task must be an object, got the number 5"},
		{`{"name":"x","task":"a"}`, "params.task must be an object, got a string"},
		{`{"name":"x","task":[{}]}`, "params.task must be an object, got an array"},
		{`{"name":"x","task":true}`, "params.task must be an object, got a boolean"},
		{`[1]`, "params must be an object"},
		{``, "params must be an object"},
	} {
		_, err := ParseToolCall(json.RawMessage(tt.params))
		switch {
		case tt.err == "" && err != nil:
			t.Errorf("ParseToolCall(%s) = %v; want success", tt.params, err)
		case tt.err != "" && (err == nil || !strings.Contains(err.Message, tt.err) || err.Code != jsonrpc.CodeInvalidParams):
			t.Errorf("ParseToolCall(%s) = %v; want -32602 containing %q", tt.params, err, tt.err)
		}
	}
}

// TestInsertMetaAsWithMeta checks that adding the execution id to params
// whose _meta ParseToolCall found gives what withMeta gives by reading
// them again, whatever _meta is.
func TestInsertMetaAsWithMeta(t *testing.T) {
	member := []byte(`"mcp-idempotent/execution-id":"exe_1"`)
	for _, params := range []string{
		`{"name":"t","arguments":{}}`,
		`{"name":"t","_meta":{}}`,
		`{"name":"t","_meta":{ }}`,
		`{"name":"t","_meta":{"progressToken":1},"arguments":{"a":"}"}}`,
		`{"name":"t","_meta":null}`,
		`{"name":"t","_meta":{"mcp-idempotent/execution-id":"exe_0","a":1}}`,
		`{ "name" : "t" , "_meta" : { "a" : 1 } }`,
	} {
		tc, err := ParseToolCall(json.RawMessage(params))
		if err != nil {
			t.Fatalf("ParseToolCall(%s): %v", params, err)
		}
		got := jsonrpc.InsertMeta(tc.Params, tc.MetaAsSent(), false, member)
		if want := jsonrpc.WithMeta(json.RawMessage(params), member); string(got) != string(want) {
			t.Errorf("params %s:\n got %s\nwant %s", params, got, want)
		}
	}
}

// TestWithoutProgressToken: a call sent again goes without its progress
// token, the rest of its _meta as it came, and its new _meta is where
// insertMeta can add to it.
func TestWithoutProgressToken(t *testing.T) {
	member := []byte(`"mcp-idempotent/execution-id":"exe_1"`)
	for _, tt := range []struct{ params, want string }{
		{`{"name":"t","_meta":{"progressToken":7, "a" : 1},"arguments":{}}`, `{"name":"t","_meta":{"a" : 1,"mcp-idempotent/execution-id":"exe_1"},"arguments":{}}`},
		{`{"name":"t","_meta":{"progressToken":"p"}}`, `{"name":"t","_meta":{"mcp-idempotent/execution-id":"exe_1"}}`},
		{`{"name":"t","_meta":{"progress\u0054oken":"p","b":2}}`, `{"name":"t","_meta":{"b":2,"mcp-idempotent/execution-id":"exe_1"}}`},
		{`{"name":"t","_meta":{"a":1}}`, `{"name":"t","_meta":{"a":1,"mcp-idempotent/execution-id":"exe_1"}}`},
		{`{"name":"t"}`, `{"name":"t","_meta":{"mcp-idempotent/execution-id":"exe_1"}}`},
	} {
		tc, err := ParseToolCall(json.RawMessage(tt.params))
		if err != nil {
			t.Fatal(err)
		}
		params, meta := jsonrpc.WithoutMetaMember(tc.Params, tc.MetaAsSent(), MetaProgressToken)
		if got := string(jsonrpc.InsertMeta(params, meta, false, member)); got != tt.want {
			t.Errorf("params %s:\n got %s\nwant %s", tt.params, got, tt.want)
		}
		if string(tc.Params) != tt.params {
			t.Errorf("withoutProgressToken changed its input to %s", tc.Params)
		}
	}
}

// FuzzParseRead checks that a call read from the members a ParamsReader
// was handed, as jsonrpc.DecodeParamsInto hands them, parses as Parse
// parses its params: the same call, or the same error.
func FuzzParseRead(f *testing.F) {
	for _, s := range []string{
		`{"name":"charge_card","arguments":{"amount":5000,"card":"4242"},"_meta":{"mcp-idempotent/key":"k1"}}`,
		`{"name":"t","Name":"u"}`,
		`{"name":"t","arguments":null,"_meta":null,"task":{"ttl":1}}`,
		`{"name":"t","arguments":[1]}`,
		`{"name":"t","_meta":{"mcp-idempotent/deadline_ms":1.5e3}}`,
		`{"name":"\ud800"}`,
		`{"name":""}`,
		`{}`,
	} {
		f.Add([]byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":` + s + `}`))
	}
	f.Fuzz(func(t *testing.T, frame []byte) {
		var m jsonrpc.Message
		var r ParamsReader
		if jsonrpc.DecodeParamsInto(&m, frame, r.Member) != nil {
			return
		}
		var got, want ToolCall
		gotErr, wantErr := got.ParseRead(m.Params, &r), want.Parse(m.Params)
		if !reflect.DeepEqual(gotErr, wantErr) {
			t.Fatalf("ParseRead(%q) = %v; Parse says %v", m.Params, gotErr, wantErr)
		}
		if wantErr == nil && !reflect.DeepEqual(got, want) {
			t.Fatalf("ParseRead(%q) = %+v; Parse says %+v", m.Params, got, want)
		}
	})
}

// TestClientKeyNotUTF8: two client keys are never read as one. Invalid
// UTF-8 and lone surrogates decode to U+FFFD, as U+FFFD itself does, so
// a key holding any is refused, as params.name is.
func TestClientKeyNotUTF8(t *testing.T) {
	for _, k := range []string{`"\ud800"`, `"\udbff"`, "\"\xff\"", `"\ufffd"`, `"a\ud800b"`} {
		_, err := ParseToolCall(json.RawMessage(`{"name":"t","_meta":{"mcp-idempotent/key":` + k + `}}`))
		if err == nil || err.Code != jsonrpc.CodeInvalidParams || !strings.Contains(err.Message, "UTF-8") {
			t.Errorf("client key %s: error %v; want -32602", k, err)
		}
	}
}

// TestStatelessEscaped: the protocol version member spelled with an
// escape is the same member to every JSON reader.
func TestStatelessEscaped(t *testing.T) {
	for _, meta := range []string{
		`{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}`,
		`{"io.modelcontextprotocol/protocol\u0056ersion":"2026-07-28"}`,
		`{"io.modelcontextprotocol\/protocolVersio\u006e":"2026-07-28"}`,
	} {
		tc, err := ParseToolCall(json.RawMessage(`{"name":"t","_meta":` + meta + `}`))
		if err != nil {
			t.Fatalf("_meta %s: %v", meta, err)
		}
		if !tc.Stateless {
			t.Errorf("_meta %s: Stateless = false; want true", meta)
		}
	}
}

// TestCapabilitiesAmbiguous: DESIGN section 10, "members that
// repeat, or match one name under case folding, in the parts the proxy
// reads are refused, not guessed at." The proxy reads
// _meta.clientCapabilities.extensions["io.modelcontextprotocol/tasks"]
// (it changes the fingerprint) and clientCapabilities.elicitation.
func TestCapabilitiesAmbiguous(t *testing.T) {
	const tasks = `"io.modelcontextprotocol/tasks":{}`
	for _, caps := range []string{
		`{"extensions":{` + tasks + `},"extensions":{}}`,
		`{"extensions":{},"Extensions":{` + tasks + `}}`,
		`{"extensions":{` + tasks + `,"io.modelcontextprotocol/tasks":null}}`,
		`{"elicitation":{"form":{}},"elicitation":null}`,
	} {
		params := `{"name":"t","_meta":{"io.modelcontextprotocol/clientCapabilities":` + caps + `}}`
		tc, err := ParseToolCall(json.RawMessage(params))
		if err == nil {
			t.Errorf("ParseToolCall(%s): accepted (TasksExtension=%v, Elicits=%v); want -32602 naming the repeated member", params, tc.TasksExtension, tc.Elicits)
		}
	}
}

// TestTasksExtensionSettings: an extension is declared with its settings,
// an object (MCP 2026-07-28, SEP-2133); null is taken for absent. Another
// value is refused as params.task's is: the fingerprint keeps only
// whether the extension is declared, and a server may read false either
// way.
func TestTasksExtensionSettings(t *testing.T) {
	for value, declared := range map[string]bool{`{}`: true, `{"x":1}`: true, `null`: false} {
		var tc ToolCall
		err := tc.Parse(json.RawMessage(tasksCall(value)))
		if err != nil || tc.TasksExtension != declared {
			t.Errorf("settings %s: TasksExtension = %v, error %v; want %v, no error", value, tc.TasksExtension, err, declared)
		}
	}
	for _, value := range []string{`false`, `true`, `0`, `""`, `[]`} {
		var tc ToolCall
		err := tc.Parse(json.RawMessage(tasksCall(value)))
		if err == nil || err.Code != jsonrpc.CodeInvalidParams || !tc.Malformed || !strings.Contains(err.Message, "must be an object") {
			t.Errorf("settings %s: error %v (Malformed=%v, TasksExtension=%v); want -32602, malformed", value, err, tc.Malformed, tc.TasksExtension)
		}
	}
}

func tasksCall(settings string) string {
	return `{"name":"t","_meta":{"io.modelcontextprotocol/clientCapabilities":{"extensions":{"io.modelcontextprotocol/tasks":` + settings + `}}}}`
}

// TestCapabilitiesNotObjects: a 2026-07-28 call's client capabilities,
// and the extensions among them, are objects; null is taken for absent.
// Another value is refused as tasks extension settings that are not an
// object are: a server may read "extensions": false as declaring none,
// or as declaring them, so the proxy could not tell which action the
// call is.
func TestCapabilitiesNotObjects(t *testing.T) {
	for _, meta := range []string{
		`{"io.modelcontextprotocol/clientCapabilities":null}`,
		`{"io.modelcontextprotocol/clientCapabilities":{"extensions":null}}`,
		`{"io.modelcontextprotocol/clientCapabilities":{}}`,
	} {
		var tc ToolCall
		if err := tc.Parse(json.RawMessage(`{"name":"t","_meta":` + meta + `}`)); err != nil || tc.TasksExtension {
			t.Errorf("_meta %s: error %v, TasksExtension %v; want neither", meta, err, tc.TasksExtension)
		}
	}
	for _, value := range []string{`false`, `true`, `0`, `"tasks"`, `[]`} {
		for _, meta := range []string{
			`{"io.modelcontextprotocol/clientCapabilities":` + value + `}`,
			`{"io.modelcontextprotocol/clientCapabilities":{"extensions":` + value + `}}`,
		} {
			var tc ToolCall
			err := tc.Parse(json.RawMessage(`{"name":"t","_meta":` + meta + `}`))
			if err == nil || err.Code != jsonrpc.CodeInvalidParams || !tc.Malformed || !strings.Contains(err.Message, "must be an object") {
				t.Errorf("_meta %s: error %v (Malformed=%v); want -32602, malformed", meta, err, tc.Malformed)
			}
		}
	}
}

// TestToolCallRare: the members few calls have are read into the call's
// rare part, which a call without them goes without, and a copy of a
// call given another task leaves the original's alone.
func TestToolCallRare(t *testing.T) {
	plain, err := ParseToolCall(json.RawMessage(`{"name":"x","arguments":{},"_meta":{"progressToken":1}}`))
	if err != nil {
		t.Fatal(err)
	}
	if plain.rare != nil || plain.HasRare() {
		t.Errorf("a call without a task, continuation, null _meta or _meta error has a rare part: %+v", plain.rare)
	}
	params := `{"name":"x","task":{"ttl":1},"inputResponses":{"a":1},"requestState":"s","_meta":null}`
	tc, err := ParseToolCall(json.RawMessage(params))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []struct{ name, got, want string }{
		{"task", string(tc.Task()), `{"ttl":1}`},
		{"inputResponses", string(tc.InputResponses()), `{"a":1}`},
		{"requestState", string(tc.RequestState()), `"s"`},
		{"_meta as sent", string(tc.MetaAsSent()), `null`},
	} {
		if m.got != m.want {
			t.Errorf("%s = %s; want %s", m.name, m.got, m.want)
		}
	}
	if tc.Meta != nil {
		t.Errorf("Meta = %s for a null _meta; want nil", tc.Meta)
	}
	c := *tc
	c.SetTask(nil)
	if c.Task() != nil || string(tc.Task()) != `{"ttl":1}` || string(c.RequestState()) != `"s"` {
		t.Errorf("after SetTask(nil) on a copy: copy's task %s, requestState %s; original's task %s", c.Task(), c.RequestState(), tc.Task())
	}
	var bad ToolCall
	bad.Parse(json.RawMessage(`{"name":"x","_meta":{"mcp-idempotent/key":7,"mcp-idempotent/deadline_ms":"soon","MCP-idempotent/execution-id":"e"}}`))
	if bad.KeyErr() == nil || bad.DeadlineErr() == nil || bad.ExecutionIDErr() == nil || bad.MetaErr() != bad.KeyErr() {
		t.Errorf("errors of a bad _meta: key %v, deadline %v, execution id %v, MetaErr %v", bad.KeyErr(), bad.DeadlineErr(), bad.ExecutionIDErr(), bad.MetaErr())
	}
}
