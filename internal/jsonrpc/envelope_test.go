package jsonrpc

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

// TestEnvelopeOrder checks that the member constants index envelope by
// the names they stand for: walkMessage places each member by them.
func TestEnvelopeOrder(t *testing.T) {
	for i, name := range map[int]string{
		memberVersion: "jsonrpc", memberID: "id", memberMethod: "method",
		memberParams: "params", memberResult: "result", memberError: "error",
	} {
		if envelope[i] != name {
			t.Errorf("envelope[%d] = %q; want %q", i, envelope[i], name)
		}
	}
}

// decodeByMembers decodes frame, an object, as DecodeInto did before a
// message had a walk of its own: json.Valid for the grammar, EachMember
// for the members, and the same reading of each. The walk's shortcuts
// (names known by a word, the usual first seventeen bytes, short strings
// by a word) are checked against it.
func decodeByMembers(frame []byte) (Message, error) {
	m := Message{Raw: frame}
	if !json.Valid(frame) {
		return m, invalidJSON(frame, "invalid JSON")
	}
	var method, repeated []byte
	if err := EachMember(frame, func(name, value []byte) bool {
		var seen bool
		switch string(name) {
		case "jsonrpc":
			seen, m.Version = m.Version != nil, value
		case "id":
			seen, m.ID = m.ID != nil, value
		case "method":
			seen, method = method != nil, value
		case "params":
			seen, m.Params = m.Params != nil, value
		case "result":
			seen, m.Result = m.Result != nil, value
		case "error":
			seen, m.Error = m.Error != nil, value
		default:
			seen = FoldsTo(name, envelope)
		}
		if seen && repeated == nil {
			repeated = name
		}
		return true
	}); err != nil {
		return m, err
	}
	if repeated != nil {
		return m, Ambiguous(repeated, envelope)
	}
	if method != nil && string(method) != "null" {
		s, ok := StringValue(method)
		if !ok {
			return m, fmt.Errorf("invalid method: %s is not a string", truncate(string(method), 40))
		}
		m.Method = s
	}
	return m, nil
}

// envelopeCases are messages at the edges of the walk's shortcuts: the
// usual start and near misses of it, names that begin as the envelope's
// do, names and strings that end at, before and after the end of a
// word, escapes and control characters where a word is tested, and
// messages that end where a word would be read.
var envelopeCases = []string{
	`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","arguments":{}}}`,
	`{"jsonrpc":"2.0"}`, `{"jsonrpc":"2.0",}`, `{"jsonrpc":"2.0",`, `{"jsonrpc":"2.0",1}`, `{"jsonrpc":"2.0","`,
	`{"jsonrpc":"2.0" ,"id":1}`, `{"jsonrpc" : "2.0","id":1}`, `{"jsonrpc":"2.00","id":1}`, `{"jsonrpc":"2.0"x"id":1}`,
	`{"jsonrpc":"2.0","jsonrpc":"2.0","id":1}`, `{"jsonrpc":"2.0","Jsonrpc":"2.0","id":1}`,
	`{"id":1,"jsonrpc":"2.0"}`, `{"jsonrpc":"1.0","id":1}`, `{"jsonrpc":2.0,"id":1}`,
	`{"jsonrpc":"2.0","idx":1,"ids":2,"id":3}`, `{"jsonrpc":"2.0","id":1,"methods":"a","method":"b"}`,
	`{"jsonrpc2":"x","id":1}`, `{"jsonrpc":"2.0","errors":1,"error":{"code":1,"message":"m"},"id":1}`,
	`{"jsonrpc":"2.0","resulting":1,"result":2,"id":1}`, `{"jsonrpc":"2.0","paramsX":{},"params":{"a":1},"id":1,"method":"m"}`,
	`{"jsonrpc":"2.0","id":1,"result":{},"error":{}}`, `{"jsonrpc":"2.0","id":"a\"b","result":{}}`,
	`{"\u0069d":1,"method":"m"}`, `{"jsonrpc":"2.0","\u0069d":1,"id":2}`, `{"jsonrpc":"2.0","i\d":1}`,
	`{"id":1}`, `{"id":1,"method":"m"}`, `{"id"}`, `{"id":}`, `{"id" 1}`, `{"id":1`, `{"id":1,}`, `{"id":1,"`, `{"`, `{`,
	"{\"id\":1,\"method\":\"to\x01ls/call\"}", "{\"i\x01\":1}", "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"\xff\"}",
	`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"abcdefg":1,"abcdefgh":2,"a\u0062":3,"ab\"c":4}}`,
	`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"abcdefg":1,"abcdefg":2}}`,
	`{"jsonrpc":"2.0","id":1,"method":"tools/cal\u006c"}`, `{"jsonrpc":"2.0","id":1,"method":"tools/calls"}`,
	`{"jsonrpc":"2.0","id":1,"method":"Tools/call"}`, `{"jsonrpc":"2.0","id":1,"method":"tools/cal"}`,
	`{"jsonrpc":"2.0","id":1,"method":null}`, `{"jsonrpc":"2.0","id":1,"method":1}`,
	`{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"ok"}],"isError":false}}`,
	`{"jsonrpc":"2.0","id":1,"result":{"abcdefg" :1,"b": 2}}`, `{"jsonrpc":"2.0","id":1,"result":{"abcdefg":1,"b":[{"c\u0041":"\u00e9"}]}}`,
	`{"jsonrpc":"2.0","id":1,"result":{"a":1,}}`, `{"jsonrpc":"2.0","id":1,"result":{"a\\":1}}`, `{"jsonrpc":"2.0","id":1,"result":{"a\":1}}`,
	"{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"ab\tc\":1}}", "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"abcdefg\x1f\":1}}",
	`{"jsonrpc":"2.0","id":1,"result":{"abcdefg":"h","abcdefgh":"i"}}`, `{"jsonrpc":"2.0","id":1,"result":{"a":`,
	"{\n  \"jsonrpc\": \"2.0\",\n  \"id\": 1,\n  \"result\": {\n    \"a\": [1, 2],\n    \"b\" : \"c\"\n  }\n}",
}

// TestDecodeMatchesMembers checks DecodeInto against decodeByMembers on
// envelopeCases, and on each cut short at every byte.
func TestDecodeMatchesMembers(t *testing.T) {
	for _, c := range envelopeCases {
		for cut := 1; cut <= len(c); cut++ {
			frame := []byte(c[:cut])
			want, wantErr := decodeByMembers(frame)
			var got Message
			gotErr := DecodeInto(&got, frame)
			if fmt.Sprint(gotErr) != fmt.Sprint(wantErr) {
				t.Fatalf("DecodeInto(%q) = %v; want %v", frame, gotErr, wantErr)
			}
			if gotErr == nil && !reflect.DeepEqual(got, want) {
				t.Fatalf("DecodeInto(%q) = %+v; want %+v", frame, got, want)
			}
		}
	}
}

// TestKnownMethods checks that every method of MCP decodes to itself
// without a copy, and that another spelling of one, or a near miss,
// decodes as it reads.
func TestKnownMethods(t *testing.T) {
	n := 0
	for _, quoted := range knownMethods {
		for _, q := range quoted {
			n++
			frame := []byte(`{"jsonrpc":"2.0","id":1,"method":` + q + `}`)
			var m Message
			if err := DecodeInto(&m, frame); err != nil || m.Method != q[1:len(q)-1] {
				t.Errorf("DecodeInto(%s) = %q, %v", frame, m.Method, err)
			}
			if allocs := testing.AllocsPerRun(10, func() { DecodeInto(&m, frame) }); allocs != 0 {
				t.Errorf("DecodeInto(%s) allocates %v times, want none", frame, allocs)
			}
		}
	}
	if n != 30 {
		t.Errorf("knownMethods holds %d methods, want 30", n)
	}
	for raw, want := range map[string]string{
		`"tools\/call"`: "tools/call", `"tools/cal\u006c"`: "tools/call", `"tools/calk"`: "tools/calk",
		`"tools/call "`: "tools/call ", `"` + strings.Repeat("x", 60) + `"`: strings.Repeat("x", 60),
	} {
		m, err := Decode([]byte(`{"jsonrpc":"2.0","id":1,"method":` + raw + `}`))
		if err != nil || m.Method != want {
			t.Errorf("Decode of method %s = %+v, %v; want %q", raw, m, err, want)
		}
	}
}
