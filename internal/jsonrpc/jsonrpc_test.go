package jsonrpc

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// kind names what a decoded message is, for table tests.
func kind(m *Message) string {
	switch {
	case m.Batch:
		return "batch"
	case m.IsRequest():
		return "request"
	case m.IsNotification():
		return "notification"
	case m.IsResponse():
		return "response"
	}
	return "other"
}

func TestDecode(t *testing.T) {
	tests := []struct {
		name   string
		frame  string
		kind   string
		id     string // raw id; "" means nil
		method string
		params string
		result string
		errObj string
	}{
		{
			name:   "request",
			frame:  `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"charge_card","arguments":{"amount":5000}}}`,
			kind:   "request",
			id:     `1`,
			method: "tools/call",
			params: `{"name":"charge_card","arguments":{"amount":5000}}`,
		},
		{
			name:   "request without params",
			frame:  `{"jsonrpc":"2.0","id":7,"method":"tools/list"}`,
			kind:   "request",
			id:     `7`,
			method: "tools/list",
		},
		{
			name:   "notification",
			frame:  `{"jsonrpc":"2.0","method":"notifications/initialized"}`,
			kind:   "notification",
			method: "notifications/initialized",
		},
		{
			name:   "notification with params",
			frame:  `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":3,"reason":"timeout"}}`,
			kind:   "notification",
			method: "notifications/cancelled",
			params: `{"requestId":3,"reason":"timeout"}`,
		},
		{
			name:   "result response",
			frame:  `{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"ok"}]}}`,
			kind:   "response",
			id:     `1`,
			result: `{"content":[{"type":"text","text":"ok"}]}`,
		},
		{
			name:   "error response",
			frame:  `{"jsonrpc":"2.0","id":"abc","error":{"code":-32601,"message":"Method not found"}}`,
			kind:   "response",
			id:     `"abc"`,
			errObj: `{"code":-32601,"message":"Method not found"}`,
		},
		{
			name:   "error response with null id",
			frame:  `{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error"}}`,
			kind:   "response",
			id:     `null`,
			errObj: `{"code":-32700,"message":"Parse error"}`,
		},
		// Ids are kept byte for byte: these are four different ids.
		{name: "id 1", frame: `{"id":1,"method":"m"}`, kind: "request", id: `1`, method: "m"},
		{name: "id 1.0", frame: `{"id":1.0,"method":"m"}`, kind: "request", id: `1.0`, method: "m"},
		{name: `id "1"`, frame: `{"id":"1","method":"m"}`, kind: "request", id: `"1"`, method: "m"},
		{name: "id null", frame: `{"id":null,"method":"m"}`, kind: "request", id: `null`, method: "m"},
		{name: "id 1e0", frame: `{"id":1e0,"result":{}}`, kind: "response", id: `1e0`, result: `{}`},
		{name: "id with escapes", frame: `{"id":"\u0031","result":1}`, kind: "response", id: `"\u0031"`, result: `1`},
		{name: "big id", frame: `{"id":123456789012345678901234567890,"result":1}`, kind: "response", id: `123456789012345678901234567890`, result: `1`},
		{
			name:   "white space around and inside",
			frame:  " \t\r\n{ \"id\" : 2 , \"method\" : \"ping\" , \"params\" : { \"a\" : [ 1 , 2 ] } }\r\n ",
			kind:   "request",
			id:     `2`,
			method: "ping",
			params: `{ "a" : [ 1 , 2 ] }`,
		},
		{name: "batch", frame: `[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","method":"n"}]`, kind: "batch"},
		{name: "batch after white space", frame: "  \n[]", kind: "batch"},
		{name: "empty object", frame: `{}`, kind: "other"},
		{name: "method null", frame: `{"id":1,"method":null}`, kind: "response", id: `1`},
		{
			name:   "unknown members ignored",
			frame:  `{"jsonrpc":"2.0","id":1,"method":"m","_meta":{"x":1},"extra":[1]}`,
			kind:   "request",
			id:     `1`,
			method: "m",
		},
		{
			// A member whose name is no envelope member's under case
			// folding either is no concern of the envelope's.
			name:   "other names",
			frame:  `{"jsonrpc":"2.0","id":1,"method":"m","methods":"x","ids":2}`,
			kind:   "request",
			id:     `1`,
			method: "m",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := Decode([]byte(tt.frame))
			if err != nil {
				t.Fatalf("Decode(%s): %v", tt.frame, err)
			}
			if got := kind(m); got != tt.kind {
				t.Errorf("kind = %s, want %s", got, tt.kind)
			}
			if string(m.Raw) != tt.frame {
				t.Errorf("Raw = %q, want the frame %q", m.Raw, tt.frame)
			}
			checkRaw(t, "ID", m.ID, tt.id)
			if m.Method != tt.method {
				t.Errorf("Method = %q, want %q", m.Method, tt.method)
			}
			checkRaw(t, "Params", m.Params, tt.params)
			checkRaw(t, "Result", m.Result, tt.result)
			checkRaw(t, "Error", m.Error, tt.errObj)
		})
	}
}

func checkRaw(t *testing.T, name string, got json.RawMessage, want string) {
	t.Helper()
	if want == "" {
		if got != nil {
			t.Errorf("%s = %q, want nil", name, got)
		}
		return
	}
	if string(got) != want {
		t.Errorf("%s = %q, want %q", name, got, want)
	}
}

func TestDecodeErrors(t *testing.T) {
	tests := []struct {
		name      string
		frame     string
		notObject bool // the error is ErrNotObject
		ambiguous bool // the error is ErrAmbiguous
	}{
		// Go's encoding/json reads "Method" as the method, and "ID" as
		// the id, the last of them winning: the proxy would route one
		// message and the upstream act on another.
		{name: "method in another case", frame: `{"jsonrpc":"2.0","id":1,"method":"ping","Method":"tools/call"}`, ambiguous: true},
		{name: "only upper-case names", frame: `{"ID":1,"METHOD":"tools/call"}`, ambiguous: true},
		{name: "params in another case", frame: `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{},"Params":{}}`, ambiguous: true},
		{name: "a long s folds to s", frame: `{"jsonrpc":"2.0","id":1,"method":"m","param\u017f":{}}`, ambiguous: true},
		{name: "an escaped name is the name", frame: `{"jsonrpc":"2.0","id":1,"result":{},"r\u0065sult":1}`, ambiguous: true},
		{name: "method twice", frame: `{"jsonrpc":"2.0","id":1,"method":"ping","method":"tools/call"}`, ambiguous: true},
		{name: "id twice", frame: `{"jsonrpc":"2.0","id":1,"id":2,"method":"ping"}`, ambiguous: true},
		{name: "result twice", frame: `{"jsonrpc":"2.0","id":1,"result":{},"result":{}}`, ambiguous: true},
		{name: "empty", frame: ``},
		{name: "only white space", frame: " \r\n\t "},
		{name: "truncated object", frame: `{"id":1,"method":"m"`},
		{name: "trailing comma", frame: `{"id":1,}`},
		{name: "garbage after object", frame: `{"id":1} x`},
		{name: "two objects", frame: `{"id":1}{"id":2}`},
		{name: "truncated batch", frame: `[{"id":1}`},
		{name: "invalid batch element", frame: `[{"id":1},]`},
		{name: "not JSON", frame: `hello`},
		{name: "single quotes", frame: `{'id':1}`},
		{name: "method not a string", frame: `{"id":1,"method":3}`},
		{name: "method an object", frame: `{"id":1,"method":{"a":1}}`},
		{name: "number", frame: `3`, notObject: true},
		{name: "string", frame: `"x"`, notObject: true},
		{name: "true", frame: `true`, notObject: true},
		{name: "null", frame: `null`, notObject: true},
		{name: "number with white space", frame: "  3\n", notObject: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := Decode([]byte(tt.frame))
			if err == nil {
				t.Fatalf("Decode(%q) = %+v, want an error", tt.frame, m)
			}
			if m != nil {
				t.Errorf("Decode(%q) returned a message with its error", tt.frame)
			}
			if got := errors.Is(err, ErrNotObject); got != tt.notObject {
				t.Errorf("Decode(%q) = %v; errors.Is(err, ErrNotObject) = %v, want %v", tt.frame, err, got, tt.notObject)
			}
			if got := errors.Is(err, ErrAmbiguous); got != tt.ambiguous {
				t.Errorf("Decode(%q) = %v; errors.Is(err, ErrAmbiguous) = %v, want %v", tt.frame, err, got, tt.ambiguous)
			}
		})
	}
}

func TestDecodeBatch(t *testing.T) {
	frame := `[{"jsonrpc":"2.0","id":1,"method":"ping"}, {"jsonrpc":"2.0","method":"notifications/initialized"}, {"jsonrpc":"2.0","id":"x","result":{}}]`
	msgs, err := DecodeBatch([]byte(frame))
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, m := range msgs {
		kinds = append(kinds, kind(m))
	}
	if got, want := strings.Join(kinds, ","), "request,notification,response"; got != want {
		t.Errorf("kinds = %s, want %s", got, want)
	}
	if string(msgs[2].ID) != `"x"` {
		t.Errorf("third id = %s, want \"x\"", msgs[2].ID)
	}

	for _, bad := range []string{`[1]`, `[{"id":1},"x"]`, `{"id":1}`, `[`} {
		if _, err := DecodeBatch([]byte(bad)); err == nil {
			t.Errorf("DecodeBatch(%s) succeeded, want an error", bad)
		}
	}
}

// roundTrip decodes b, failing the test if b is not one valid message.
func roundTrip(t *testing.T, b []byte) *Message {
	t.Helper()
	if !json.Valid(b) {
		t.Fatalf("not valid JSON: %s", b)
	}
	m, err := Decode(b)
	if err != nil {
		t.Fatalf("Decode(%s): %v", b, err)
	}
	var v struct {
		JSONRPC string `json:"jsonrpc"`
	}
	if err := json.Unmarshal(b, &v); err != nil || v.JSONRPC != "2.0" {
		t.Errorf("%s: jsonrpc member = %q, want \"2.0\"", b, v.JSONRPC)
	}
	return m
}

func TestNewResponse(t *testing.T) {
	tests := []struct {
		id, result     string
		wantID, wantRs string
	}{
		{id: `1`, result: `{"content":[]}`, wantID: `1`, wantRs: `{"content":[]}`},
		{id: `1.0`, result: `{}`, wantID: `1.0`, wantRs: `{}`},
		{id: `"1"`, result: `[1, 2]`, wantID: `"1"`, wantRs: `[1, 2]`},
		{id: `null`, result: `"s"`, wantID: `null`, wantRs: `"s"`},
		{id: "", result: `{}`, wantID: `null`, wantRs: `{}`},
		{id: `2`, result: "", wantID: `2`, wantRs: `null`},
	}
	for _, tt := range tests {
		b := NewResponse(raw(tt.id), raw(tt.result))
		m := roundTrip(t, b)
		if !m.IsResponse() || string(m.ID) != tt.wantID || string(m.Result) != tt.wantRs || m.Error != nil {
			t.Errorf("NewResponse(%q, %q) = %s; decoded id %s result %s", tt.id, tt.result, b, m.ID, m.Result)
		}
	}
}

// raw returns s as raw JSON, with "" meaning nil.
func raw(s string) json.RawMessage {
	if s == "" {
		return nil
	}
	return json.RawMessage(s)
}

func TestNewErrorResponse(t *testing.T) {
	tests := []struct {
		id     string
		err    *Error
		wantID string
	}{
		{id: `1`, err: Errorf(CodeInvalidParams, "tools/call %s: %v", "charge_card", "bad"), wantID: `1`},
		{id: "", err: Errorf(CodeParseError, "mcp-idempotent: %q", "quote\" and \\ and \n newline"), wantID: `null`},
		{id: `"a"`, err: &Error{Code: -32000, Message: "x", Data: json.RawMessage(`{"execution":"exe_1"}`)}, wantID: `"a"`},
		{id: `3`, err: &Error{Code: -32000, Message: "bad data", Data: json.RawMessage(`{`)}, wantID: `3`},
		{id: `4`, err: &Error{Code: CodeInternalError, Message: "\xff invalid utf-8 <>&"}, wantID: `4`},
	}
	for _, tt := range tests {
		b := NewErrorResponse(raw(tt.id), tt.err)
		m := roundTrip(t, b)
		if !m.IsResponse() || string(m.ID) != tt.wantID || m.Result != nil {
			t.Errorf("NewErrorResponse(%q) = %s; decoded id %s", tt.id, b, m.ID)
		}
		got := DecodeError(m.Error)
		if got.Code != tt.err.Code {
			t.Errorf("%s: code %d, want %d", b, got.Code, tt.err.Code)
		}
		if (tt.err.Data == nil || json.Valid(tt.err.Data)) && got.Message != strings.ToValidUTF8(tt.err.Message, "\uFFFD") {
			t.Errorf("%s: message %q, want %q", b, got.Message, tt.err.Message)
		}
	}
}

func TestNewRawErrorResponse(t *testing.T) {
	obj := `{"code":-32603,"message":"upstream said no","data":[1]}`
	b := NewRawErrorResponse(json.RawMessage(`"r"`), json.RawMessage(obj))
	m := roundTrip(t, b)
	if string(m.ID) != `"r"` || string(m.Error) != obj {
		t.Errorf("NewRawErrorResponse = %s", b)
	}
}

func TestNewRequest(t *testing.T) {
	tests := []struct {
		id, method, params string
		kind               string
	}{
		{id: `"mcp-idempotent:1"`, method: "tools/call", params: `{"name":"x","arguments":{}}`, kind: "request"},
		{id: `1`, method: "tools/list", kind: "request"},
		{id: `1.0`, method: "a \"quoted\" <method>\n", params: `[]`, kind: "request"},
		{id: `null`, method: "ping", kind: "request"},
		{id: "", method: "notifications/initialized", kind: "notification"},
	}
	for _, tt := range tests {
		b := NewRequest(raw(tt.id), tt.method, raw(tt.params))
		m := roundTrip(t, b)
		if kind(m) != tt.kind {
			t.Errorf("NewRequest(%q, %q) = %s: a %s, want a %s", tt.id, tt.method, b, kind(m), tt.kind)
		}
		if m.Method != tt.method {
			t.Errorf("NewRequest: method %q, want %q", m.Method, tt.method)
		}
		checkRaw(t, "ID", m.ID, tt.id)
		checkRaw(t, "Params", m.Params, tt.params)
	}
}

func TestDecodeError(t *testing.T) {
	tests := []struct {
		raw     string
		code    int
		message string // the whole message, or its prefix when prefix is set
		prefix  bool
		data    string
		// rewritten: not passed on as it came, but as its fields say
		rewritten bool
	}{
		{raw: `{"code":-32602,"message":"Invalid params"}`, code: -32602, message: "Invalid params"},
		{raw: `{"code":-32000,"message":"boom","data":{"retryAfter":3}}`, code: -32000, message: "boom", data: `{"retryAfter":3}`},
		{raw: `{"code":5}`, code: 5, message: "", rewritten: true},
		{raw: `{"message":"no code"}`, code: 0, message: "no code", rewritten: true},
		{raw: `{}`, code: CodeInternalError, message: "malformed error: {}"},
		{raw: `"a string"`, code: CodeInternalError, message: `malformed error: "a string"`},
		{raw: `null`, code: CodeInternalError, message: "malformed error: null"},
		{raw: `{"code":"x","message":"m"}`, code: CodeInternalError, message: "malformed error: ", prefix: true},
		{raw: `{"code":1.5,"message":"m"}`, code: CodeInternalError, message: "malformed error: ", prefix: true},
		{raw: `{ "code" : -32000.0 , "message" : "caf\u00e9", "extra": true }`, code: -32000, message: "café"},
		// Not whole error objects: rewritten, or the stand-in.
		{raw: `{"code":"-32000","message":"m"}`, code: CodeInternalError, message: "malformed error: ", prefix: true},
		{raw: `{"code":"1e2"}`, code: CodeInternalError, message: "malformed error: ", prefix: true},
		{raw: `{"code":-32000,"message":null}`, code: -32000, message: "", rewritten: true},
		{raw: `{"code":null,"message":"m"}`, code: 0, message: "m", rewritten: true},
		{raw: `{"code":1e300,"message":"m"}`, code: CodeInternalError, message: "malformed error: ", prefix: true},
		{raw: `{"code":1`, code: CodeInternalError, message: `malformed error: {"code":1`},
		{raw: ``, code: CodeInternalError, message: "malformed error: "},
		{
			raw:  `"` + strings.Repeat("x", 1000) + `"`,
			code: CodeInternalError, message: `malformed error: "` + strings.Repeat("x", 199) + "...",
		},
	}
	for _, tt := range tests {
		e := DecodeError(json.RawMessage(tt.raw))
		if e == nil {
			t.Fatalf("DecodeError(%s) = nil", tt.raw)
		}
		if e.Code != tt.code {
			t.Errorf("DecodeError(%.40s).Code = %d, want %d", tt.raw, e.Code, tt.code)
		}
		if tt.prefix && !strings.HasPrefix(e.Message, tt.message) || !tt.prefix && e.Message != tt.message {
			t.Errorf("DecodeError(%.40s).Message = %q, want %q", tt.raw, e.Message, tt.message)
		}
		if string(e.Data) != tt.data {
			t.Errorf("DecodeError(%.40s).Data = %s, want %s", tt.raw, e.Data, tt.data)
		}
		if e.Error() == "" {
			t.Errorf("DecodeError(%.40s).Error() is empty", tt.raw)
		}
		// What goes on: the object as it came, or, for one that is no
		// error object, the stand-in.
		want := tt.raw
		if tt.rewritten || strings.HasPrefix(e.Message, "malformed error: ") {
			b, _ := json.Marshal(e)
			want = string(b)
		}
		if got := string(e.Object()); got != want {
			t.Errorf("DecodeError(%.40s).Object() = %s, want %s", tt.raw, got, want)
		}
		// ErrorObject tells the stand-in apart: the proxy takes the
		// upstream's answer with one for a malformed answer.
		standIn := strings.HasPrefix(tt.message, "malformed error: ")
		if _, ok := ErrorObject(json.RawMessage(tt.raw)); ok == standIn {
			t.Errorf("ErrorObject(%.40s) reports %t; want %t", tt.raw, ok, !standIn)
		}
	}
}

func FuzzDecode(f *testing.F) {
	for _, s := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"c","version":"1"}}}`,
		`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
		`{"jsonrpc":"2.0","id":2,"method":"tools/list"}`,
		`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"charge_card","arguments":{"amount":5000,"card":"4242"},"_meta":{"mcp-idempotent/key":"k1"}}}`,
		`{"jsonrpc":"2.0","id":"3","result":{"content":[{"type":"text","text":"charged"}],"isError":false}}`,
		`{"jsonrpc":"2.0","id":1.0,"error":{"code":-32602,"message":"Invalid params"}}`,
		`{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error"}}`,
		`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":3,"reason":"timeout"}}`,
		`[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","method":"n"}]`,
		`{"id":1,"method":"tools/call","Method":"x"}`,
		` {"id" : 1 } `,
		`3`, `"x"`, `null`, `[`, `{`, ``, "\xff",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, frame []byte) {
		in := bytes.Clone(frame)
		m, err := Decode(frame)
		if !bytes.Equal(in, frame) {
			t.Fatalf("Decode modified its input")
		}
		if err != nil {
			if m != nil {
				t.Fatalf("Decode returned a message and the error %v", err)
			}
			if json.Valid(frame) && !errors.Is(err, ErrNotObject) && !errors.Is(err, ErrAmbiguous) {
				// A valid object or array may only be refused for a
				// method that is not a string, or a member that readers
				// would take for different ones.
				var members map[string]json.RawMessage
				_ = json.Unmarshal(frame, &members)
				if _, ok := members["method"]; !ok {
					t.Fatalf("Decode(%q) refused valid JSON: %v", frame, err)
				}
			}
			return
		}
		if !json.Valid(frame) {
			t.Fatalf("Decode accepted invalid JSON %q", frame)
		}
		if !bytes.Equal(m.Raw, frame) {
			t.Fatalf("Raw = %q, want the input %q", m.Raw, frame)
		}
		if m.Batch {
			if m.ID != nil || m.Method != "" || m.Params != nil || m.Result != nil || m.Error != nil {
				t.Fatalf("batch %q has decoded members", frame)
			}
			if m.IsRequest() || m.IsNotification() || m.IsResponse() {
				t.Fatalf("batch %q reported as a single message", frame)
			}
			return
		}
		// Each decoded member is valid JSON and is the member of the
		// frame with exactly that name.
		var members map[string]json.RawMessage
		if err := json.Unmarshal(frame, &members); err != nil {
			t.Fatalf("Decode accepted %q, which is not an object: %v", frame, err)
		}
		for name, got := range map[string]json.RawMessage{"id": m.ID, "params": m.Params, "result": m.Result, "error": m.Error} {
			want, ok := members[name]
			if !ok {
				if got != nil {
					t.Fatalf("%s = %q, but the frame has no %s member", name, got, name)
				}
				continue
			}
			if !json.Valid(got) {
				t.Fatalf("%s = %q is not valid JSON", name, got)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("%s = %q, want %q", name, got, want)
			}
		}
		// The messages built from the decoded parts are valid and decode
		// to the same parts.
		if m.IsRequest() || m.IsNotification() {
			b := NewRequest(m.ID, m.Method, m.Params)
			m2, err := Decode(b)
			if err != nil {
				t.Fatalf("NewRequest(%q, %q, %q) = %q: %v", m.ID, m.Method, m.Params, b, err)
			}
			if !bytes.Equal(m2.ID, m.ID) || m2.Method != m.Method || !bytes.Equal(m2.Params, m.Params) {
				t.Fatalf("NewRequest round trip: %q became %q", frame, b)
			}
		}
		if m.IsResponse() {
			b := NewResponse(m.ID, m.Result)
			if !json.Valid(b) {
				t.Fatalf("NewResponse(%q, %q) = %q, not valid JSON", m.ID, m.Result, b)
			}
			if m.Error != nil {
				b := NewRawErrorResponse(m.ID, m.Error)
				m2, err := Decode(b)
				if err != nil || !bytes.Equal(m2.Error, m.Error) || !bytes.Equal(m2.ID, m.ID) {
					t.Fatalf("NewRawErrorResponse round trip: %q became %q (%v)", frame, b, err)
				}
				e := DecodeError(m.Error)
				if !json.Valid(NewErrorResponse(m.ID, e)) {
					t.Fatalf("NewErrorResponse of %q is not valid JSON", m.Error)
				}
			}
		}
	})
}

func TestHeadID(t *testing.T) {
	for _, tt := range []struct {
		head     string
		id       string
		response bool
	}{
		{`{"jsonrpc":"2.0","id":12,"result":{"content":[{"text":"xxxx`, "12", true},
		{`{"jsonrpc":"2.0","id":"a\"b","result":`, `"a\"b"`, true},
		{`{"id":12`, "", false},               // the id may go on past the head
		{`{"id":1234,`, "1234", true},         // ... unless something follows it
		{`{"result":{"text":"xxx`, "", false}, // the id comes after the result
		{`{"jsonrpc":"2.0","method":"sampling/createMessage","id":3,`, "", false},
		{`{"jsonrpc":"2.0","id":3,"method":"x",`, "3", false},
		{`not json`, "", false},
		{``, "", false},
		// A stray bracket does not end a member early: the id nested
		// after it is not the message's.
		{`{"jsonrpc":"2.0","result":{"contents":],"id":"x"},"id":3}`, "", false},
		{`{"jsonrpc":"2.0","id":3,"result":{"contents":]}}`, "3", true},
	} {
		id, response := HeadID([]byte(tt.head))
		if string(id) != tt.id || (id != nil && response != tt.response) {
			t.Errorf("HeadID(%s) = %s, %v; want %s, %v", tt.head, id, response, tt.id, tt.response)
		}
	}
}

func TestMember(t *testing.T) {
	for _, tt := range []struct {
		obj, name, want string
	}{
		{`{"a":1,"b":{"c":2}}`, "b", `{"c":2}`},
		{` {"a":1,"a":2}`, "a", `2`}, // the last, as JSON.parse
		{`{"A":1}`, "a", ""},         // names are exact
		{`{"\u0061":1}`, "a", "1"},   // an escape is the same name
		{`[1]`, "a", ""},
		{``, "a", ""},
	} {
		if got := string(Member([]byte(tt.obj), tt.name)); got != tt.want {
			t.Errorf("Member(%s, %q) = %q; want %q", tt.obj, tt.name, got, tt.want)
		}
	}
}

func TestHeadRequest(t *testing.T) {
	for _, tt := range []struct {
		head, id, method string
	}{
		{`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"x":"xxx`, "7", "tools/call"},
		{`{"jsonrpc":"2.0","method":"ping","params":{"x":"xxx`, "", "ping"},
		{`{"jsonrpc":"2.0","method":"ping","id":12`, "", "ping"}, // the id may go on
		{`{"jsonrpc":"2.0","id":4,"result":{"x":"xxx`, "4", ""},
		{`{"params":{"id":5,"method":"x"},"id":6,"method":"y","p":"`, "6", "y"},
		{`{"params":{"a":],"id":5,"method":"x"}`, "", ""}, // nothing after a broken member
		{`xx`, "", ""},
	} {
		id, method := HeadRequest([]byte(tt.head))
		if string(id) != tt.id || method != tt.method {
			t.Errorf("HeadRequest(%s) = %s, %q; want %s, %q", tt.head, id, method, tt.id, tt.method)
		}
	}
}

func TestHeadIDs(t *testing.T) {
	for _, tt := range []struct {
		head     string
		ids      []string
		response bool
	}{
		{`{"jsonrpc":"2.0","id":1,"id":"zz","result":{}}`, []string{"1", `"zz"`}, true},
		{`{"id":1,"result":{"text":"xx`, []string{"1"}, true},
		{`{"id":1,"id":2`, []string{"1"}, true}, // the second may go on past the head
		{`{"result":{},"id":3}`, []string{"3"}, true},
		{`{"id":1,"method":"x","id":2}`, []string{"1"}, false},
	} {
		ids, response := HeadIDs([]byte(tt.head))
		var got []string
		for _, id := range ids {
			got = append(got, string(id))
		}
		if !slices.Equal(got, tt.ids) || response != tt.response {
			t.Errorf("HeadIDs(%s) = %q, %v; want %q, %v", tt.head, got, response, tt.ids, tt.response)
		}
	}
}

func TestHeadMessage(t *testing.T) {
	for _, tt := range []struct {
		head string
		ids  []string
		kind HeadKind
	}{
		{`{"jsonrpc":"2.0","id":1,"result":{"text":"xx`, []string{"1"}, HeadOfAnswer},
		{`{"jsonrpc":"2.0","id":1,"error":{"code":-1,"message":"xx`, []string{"1"}, HeadOfAnswer},
		{`{"jsonrpc":"2.0","result":{"text":"xx`, nil, HeadOfAnswer}, // the id comes later
		{`{"jsonrpc":"2.0","id":9,"method":"roots/list","params":{"x":"xx`, []string{"9"}, HeadOfRequest},
		{`{"jsonrpc":"2.0","method":"x","id":9,"params":"xx`, []string{"9"}, HeadOfRequest},
		{`{"id":1,"method":"x","id":2}`, []string{"1", "2"}, HeadOfRequest},
		{`{"jsonrpc":"2.0","method":"x","params":"xx`, nil, HeadOfRequest}, // a notification, or an id later
		{`{"\u006dethod":"x","id":3,"p":1`, []string{"3"}, HeadOfRequest},
		{`{"id":1,"result":{},"method":"x"}`, []string{"1"}, HeadOfRequest},
		// Neither a method nor a result or an error: a request's method
		// may come later.
		{`{"jsonrpc":"2.0","id":7,"params":{"x":"xx`, []string{"7"}, HeadUndecided},
		{`{"id":7,"result"`, []string{"7"}, HeadUndecided}, // no colon: a string, maybe
		{`{"id":7,"resu`, []string{"7"}, HeadUndecided},
		{`{"id":7`, nil, HeadUndecided}, // the id may go on past the head
		{`{"params":{"method":"x","result":1,"id":2},"id":`, nil, HeadUndecided},
		// A stray bracket ends the walk: nothing nested passes for the
		// message's own.
		{`{"x":{"a":],"method":"x","id":3}`, nil, HeadUndecided},
		{`[{"id":1,"result":{}}]`, nil, HeadUndecided},
		{``, nil, HeadUndecided},
	} {
		ids, kind := HeadMessage([]byte(tt.head))
		var got []string
		for _, id := range ids {
			got = append(got, string(id))
		}
		if !slices.Equal(got, tt.ids) || kind != tt.kind {
			t.Errorf("HeadMessage(%s) = %q, %v; want %q, %v", tt.head, got, kind, tt.ids, tt.kind)
		}
	}
}

func FuzzHeadID(f *testing.F) {
	f.Add([]byte(`{"jsonrpc":"2.0","id":12,"result":{"content":[{"text":"xx`))
	f.Add([]byte(`{"id":"a\"b","method":"x"`))
	f.Add([]byte(`{"id":1,"\u0072esult" :{"x":"`))
	f.Fuzz(func(t *testing.T, head []byte) {
		id, _ := HeadID(head)
		if id != nil && !bytes.Contains(head, id) {
			t.Fatalf("HeadID(%q) = %q, not from head", head, id)
		}
		ids, _ := HeadMessage(head)
		for _, id := range ids {
			if !Valid(id) || !bytes.Contains(head, id) {
				t.Fatalf("HeadMessage(%q) gives id %q, not JSON from head", head, id)
			}
		}
	})
}

func TestCheckRequest(t *testing.T) {
	for _, tt := range []struct {
		frame string
		want  string // a part of the reason; "" for a valid message
	}{
		{`{"jsonrpc":"2.0","id":1,"method":"ping"}`, ""},
		{`{"jsonrpc":"2.0","id":"a","method":"ping"}`, ""},
		{`{"jsonrpc":"2.0","id":-7,"method":"ping"}`, ""},
		{`{"jsonrpc":"2.0","id":1.0,"method":"ping"}`, ""},
		{`{"jsonrpc":"2.0","id":1e2,"method":"ping"}`, ""},
		{`{"jsonrpc":"2\u002e0","id":1,"method":"ping"}`, ""},
		{`{"jsonrpc":"2.0","method":"notifications/initialized"}`, ""},
		{`{"jsonrpc":"2.0","method":"tools/call","params":{"name":"x"}}`, "tools/call is a request and needs an id"},
		{`{"id":1,"method":"ping"}`, `"jsonrpc" must be "2.0"`},
		{`{"jsonrpc":"1.0","id":1,"method":"ping"}`, `"jsonrpc" must be "2.0"`},
		{`{"jsonrpc":2.0,"id":1,"method":"ping"}`, `"jsonrpc" must be "2.0"`},
		{`{"jsonrpc":"2.0","id":null,"method":"ping"}`, "not a string or an integer"},
		{`{"jsonrpc":"2.0","id":true,"method":"ping"}`, "not a string or an integer"},
		{`{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}`, "not a string or an integer"},
		{`{"jsonrpc":"2.0","id":1.5,"method":"ping"}`, "1.5 is not a string or an integer"},
		{"{\"jsonrpc\":\"2.0\",\"id\":\"\xff\",\"method\":\"ping\"}", "a string that is not UTF-8"},
		{`{"jsonrpc":"2.0","id":"\ud800","method":"ping"}`, ""}, // an escape: the server reads what it wrote
	} {
		m, err := Decode([]byte(tt.frame))
		if err != nil {
			t.Fatalf("Decode(%s): %v", tt.frame, err)
		}
		got := CheckRequest(m)
		if tt.want == "" && got != "" || tt.want != "" && !strings.Contains(got, tt.want) {
			t.Errorf("CheckRequest(%s) = %q; want %q", tt.frame, got, tt.want)
		}
	}
}

// FuzzDecodeParams checks DecodeParamsInto against DecodeInto and
// EachMember: the same message or the same error, and, for a message
// whose params are an object, exactly the members EachMember finds in
// them, in order. An object is checked against decodeByMembers too.
func FuzzDecodeParams(f *testing.F) {
	for _, s := range []string{
		`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"charge_card","arguments":{"amount":5000,"card":"4242"},"_meta":{"mcp-idempotent/key":"k1"}}}`,
		`{"params":{"a":1,"a":2,"\u0062":[{}]},"method":"tools/call","id":1,"jsonrpc":"2.0"}`,
		`{"jsonrpc":"2.0","id":1,"method":"x","params":{"a":[1,2,{"b":"\ud800"}],"c":"\xff"}}`,
		`{"jsonrpc":"2.0","id":1,"method":"x","params":{}}`,
		`{"jsonrpc":"2.0","id":1,"method":"x","params":[1]}`,
		`{"jsonrpc":"2.0","id":1,"method":"x","params":{"a":1,}}`,
		`{"jsonrpc":"2.0","id":1,"method":"x","params":{"a":1},"params":{"b":2}}`,
		`{"jsonrpc":"2.0","id":1,"method":"x","params" : { "a" : 1 } } `,
		`{"jsonrpc":"2.0","id":1,"method":"x","params":{"a":1}`,
		`[{"params":{"a":1}}]`,
	} {
		f.Add([]byte(s))
	}
	for _, s := range envelopeCases {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, frame []byte) {
		var want, got Message
		wantErr := DecodeInto(&want, frame)
		if i := skipSpace(frame, 0); i < len(frame) && frame[i] == '{' {
			members, err := decodeByMembers(frame)
			if fmt.Sprint(wantErr) != fmt.Sprint(err) || err == nil && !reflect.DeepEqual(want, members) {
				t.Fatalf("DecodeInto(%q) = %+v, %v; decodeByMembers says %+v, %v", frame, want, wantErr, members, err)
			}
		}
		type member struct{ name, value string }
		var members []member
		gotErr := DecodeParamsInto(&got, frame, func(name, value []byte) bool {
			members = append(members, member{string(name), string(value)})
			return true
		})
		if fmt.Sprint(gotErr) != fmt.Sprint(wantErr) {
			t.Fatalf("DecodeParamsInto(%q) = %v; DecodeInto says %v", frame, gotErr, wantErr)
		}
		if wantErr != nil {
			return
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("DecodeParamsInto(%q) = %+v; DecodeInto says %+v", frame, got, want)
		}
		var each []member
		if len(want.Params) > 0 && want.Params[0] == '{' {
			if err := EachMember(want.Params, func(name, value []byte) bool {
				each = append(each, member{string(name), string(value)})
				return true
			}); err != nil {
				t.Fatalf("EachMember(%q): %v", want.Params, err)
			}
		}
		if !reflect.DeepEqual(members, each) {
			t.Fatalf("DecodeParamsInto(%q) handed %q; EachMember finds %q", frame, members, each)
		}
	})
}
