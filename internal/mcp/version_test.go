package mcp

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/mcp-idempotent/mcp-idempotent/internal/jsonrpc"
)

// TestDeclaredVersion: DESIGN section 10, "members that repeat, or match
// one name under case folding, in the parts the proxy reads are refused,
// not guessed at." The proxy decides on the version a request's _meta
// declares (refusing an unknown one, choosing the stateless lane), so a
// _meta or a version that an upstream could read otherwise is an error
// naming the member, both when the params are read whole and when their
// members are handed over as the frame is validated (ParamsReader).
func TestDeclaredVersion(t *testing.T) {
	const v = `"io.modelcontextprotocol/protocolVersion"`
	for _, tt := range []struct {
		name, params string
		want         string // the version, or the member named in the error
		ambiguous    bool
	}{
		{"none", `{}`, "", false},
		{"no params", ``, "", false},
		{"params not an object", `[1]`, "", false},
		{"_meta not an object", `{"_meta":"x"}`, "", false},
		{"_meta without a version", `{"_meta":{"progressToken":1}}`, "", false},
		{"a version", `{"_meta":{` + v + `:"2026-07-28"}}`, "2026-07-28", false},
		{"a version spelled with an escape", `{"_meta":{"io.modelcontextprotocol/protocol\u0056ersion":"2026-07-28"}}`, "2026-07-28", false},
		{"a version not a string", `{"_meta":{` + v + `:20260728}}`, "", false},
		{"another member in another case", `{"_meta":{"io.modelcontextprotocol/clientInfo":{},` + v + `:"2025-11-25"}}`, "2025-11-25", false},
		{"_meta twice", `{"_meta":{` + v + `:"2099-01-01"},"_meta":{` + v + `:"2026-07-28"}}`, `"_meta"`, true},
		{"_meta twice, no version", `{"_meta":{},"_meta":{}}`, `"_meta"`, true},
		{"_meta in another case", `{"_META":{` + v + `:"2099-01-01"},"_meta":{` + v + `:"2026-07-28"}}`, `"_META"`, true},
		{"_meta in another case after", `{"_meta":{},"_Meta":{}}`, `"_Meta"`, true},
		{"the version twice", `{"_meta":{` + v + `:"2099-01-01",` + v + `:"2025-11-25"}}`, v, true},
		{"the version in another case", `{"_meta":{"IO.ModelContextProtocol/ProtocolVersion":"2099-01-01",` + v + `:"2025-11-25"}}`, `"IO.ModelContextProtocol/ProtocolVersion"`, true},
		{"the version in another case alone", `{"_meta":{"io.modelcontextprotocol/PROTOCOLVERSION":"2099-01-01"}}`, `"io.modelcontextprotocol/PROTOCOLVERSION"`, true},
		{"the version twice, once escaped", `{"_meta":{` + v + `:"2099-01-01","io.modelcontextprotocol/protocol\u0056ersion":"2025-11-25"}}`, v, true},
		{"the version with a long s", `{"_meta":{"io.modelcontextprotocol/protocolVer\u017fion":"2099-01-01"}}`, `ſ`, true},
		{"a progress token", `{"_meta":{"progressToken":"a","progress":1}}`, "", false},
		{"the progress token twice", `{"_meta":{"progressToken":"a","progressToken":"b"}}`, `"progressToken" is given twice`, true},
		{"the progress token twice beside a version", `{"_meta":{` + v + `:"2026-07-28","progressToken":1,"progressToken":2}}`, `"progressToken" is given twice`, true},
		{"the progress token in another case", `{"_meta":{"progressToken":"a","PROGRESSTOKEN":"b"}}`, `"PROGRESSTOKEN"`, true},
		{"the progress token twice, once escaped", `{"_meta":{"progressToken":"a","progress\u0054oken":"b"}}`, `"progressToken" is given twice`, true},
		{"the progress token with a Kelvin sign", `{"_meta":{"progressTo\u212aen":"a"}}`, "\u212a", true},
		{"the progress token with a long s", `{"_meta":{"progre\u017fsToken":"a","progressToken":"b"}}`, `ſ`, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			check := func(how string, got string, err error) {
				t.Helper()
				switch {
				case tt.ambiguous && (!errors.Is(err, jsonrpc.ErrAmbiguous) || !strings.Contains(err.Error(), tt.want)):
					t.Errorf("%s: version %q, err %v; want an ErrAmbiguous naming %s", how, got, err, tt.want)
				case !tt.ambiguous && (err != nil || got != tt.want):
					t.Errorf("%s: version %q, err %v; want %q", how, got, err, tt.want)
				}
			}
			got, err := DeclaredVersion(json.RawMessage(tt.params))
			check("DeclaredVersion", got, err)

			frame := `{"jsonrpc":"2.0","id":1,"method":"ping"}`
			if tt.params != "" {
				frame = `{"jsonrpc":"2.0","id":1,"method":"ping","params":` + tt.params + `}`
			}
			var r ParamsReader
			var m jsonrpc.Message
			if err := jsonrpc.DecodeParamsInto(&m, []byte(frame), r.Member); err != nil {
				t.Fatal(err)
			}
			got, err = r.DeclaredVersion()
			check("ParamsReader.DeclaredVersion", got, err)
		})
	}
}

// TestToolCallVersionAmbiguous: a tools/call whose _meta gives its
// protocol version twice, or in another case, is refused as invalid
// params: the proxy decides on it whether the call is stateless.
func TestToolCallVersionAmbiguous(t *testing.T) {
	for _, meta := range []string{
		`{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/protocolVersion":"2025-11-25"}`,
		`{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/protocolversion":"2025-11-25"}`,
	} {
		params := `{"name":"t","_meta":` + meta + `}`
		tc, err := ParseToolCall(json.RawMessage(params))
		if err == nil || err.Code != jsonrpc.CodeInvalidParams || !strings.Contains(err.Message, "protocolVersion") {
			t.Errorf("ParseToolCall(%s): err %v (Stateless=%v); want -32602 naming the version", params, err, tc.Stateless)
		}
	}
}
