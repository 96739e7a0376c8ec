package proxy

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/mcp-idempotent/mcp-idempotent/internal/mcp"
)

// initializeAsking is the client's initialize asking for protocol v.
func initializeAsking(v string) string {
	return `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"` + v + `","capabilities":{},"clientInfo":{"name":"c","version":"1"}}}`
}

// TestInitializeOfAKnownVersionPasses: an initialize asking for a version
// the proxy knows reaches the upstream byte for byte.
func TestInitializeOfAKnownVersionPasses(t *testing.T) {
	for _, v := range []string{"2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25", "2026-07-28"} {
		t.Run(v, func(t *testing.T) {
			r := newRig(t, 0)
			r.client.send(t, initializeAsking(v))
			nextIs(t, r.upstream, "upstream", initializeAsking(v), "the initialize as it came")
		})
	}
}

// TestInitializeOfAnUnknownVersionAskedDown: a client asking for a
// version the proxy does not know is the proxy's to negotiate down, as a
// server that does not support it would: the upstream is asked for
// 2025-11-25, the latest known version with initialize, and its answer
// reaches the client, which goes on in a session both know.
func TestInitializeOfAnUnknownVersionAskedDown(t *testing.T) {
	r := newRig(t, 0)
	r.client.send(t, initializeAsking("2027-01-01"))
	nextIs(t, r.upstream, "upstream", initializeAsking("2025-11-25"), "the initialize asking for 2025-11-25")
	want := `{"jsonrpc":"2.0","id":0,` + gives("2025-11-25") + `}`
	r.upstream.send(t, want)
	nextIs(t, r.client, "client", want, "the upstream's result as it came")
	r.s.mu.Lock()
	protocol, handshake := r.s.protocol, string(r.s.handshake)
	r.s.mu.Unlock()
	if protocol != "2025-11-25" || !strings.Contains(handshake, `"protocolVersion":"2025-11-25"`) {
		t.Fatalf("the session speaks %q and replays %s; want 2025-11-25 in both", protocol, handshake)
	}
}

// TestInitializeAgreeingOnAnUnknownVersionRefused: an upstream that
// answers initialize with a version the proxy does not know (one that
// echoes what it is asked, or answers with its own latest) gives the
// client an error in the spec's shape for an unsupported version, not a
// session that the proxy cannot serve; and the version is not noted.
func TestInitializeAgreeingOnAnUnknownVersionRefused(t *testing.T) {
	for _, asked := range []string{"2027-01-01", "2025-06-18"} {
		t.Run(asked, func(t *testing.T) {
			r := newRig(t, 0)
			r.client.send(t, initializeAsking(asked))
			r.upstream.next(t, "upstream")
			r.upstream.send(t, `{"jsonrpc":"2.0","id":0,`+gives("2027-01-01")+`}`)
			got := r.client.next(t, "client")
			var answer struct {
				ID     json.RawMessage
				Result json.RawMessage
				Error  struct {
					Code    int
					Message string
					Data    struct {
						Supported []string
						Agreed    string
					}
				}
			}
			if err := json.Unmarshal([]byte(got), &answer); err != nil || string(answer.ID) != "0" || answer.Result != nil ||
				answer.Error.Code != -32602 || !strings.Contains(answer.Error.Message, `"2027-01-01", which the proxy does not know`) ||
				answer.Error.Data.Agreed != "2027-01-01" || len(answer.Error.Data.Supported) == 0 {
				t.Fatalf("the client got %s; want a -32602 error under id 0 naming 2027-01-01 and the versions the proxy knows", got)
			}
			r.s.mu.Lock()
			protocol, handshake := r.s.protocol, r.s.handshake
			r.s.mu.Unlock()
			if protocol != "" || handshake != nil {
				t.Fatalf("the session noted protocol %q and handshake %s; want neither", protocol, handshake)
			}
		})
	}
}

// TestInitializeAgreeingOnAnUnknownVersionInABatch: the upstream's result
// in an array is refused as one alone is.
func TestInitializeAgreeingOnAnUnknownVersionInABatch(t *testing.T) {
	r := newRig(t, 0)
	r.client.send(t, initializeAsking("2025-11-25"))
	r.upstream.next(t, "upstream")
	r.upstream.send(t, `[{"jsonrpc":"2.0","id":0,`+gives("2027-01-01")+`}]`)
	if got := r.client.next(t, "client"); !strings.HasPrefix(got, `[{"jsonrpc":"2.0","id":0,"error":{"code":-32602,`) {
		t.Fatalf("the client got %s; want an array of the -32602 error", got)
	}
}

// TestInitializeOfThePreReleaseVersionPasses: 2024-10-07, the first MCP
// version, a pre-release that SDKs still accept, is not one the proxy
// lists, but its rules are those of the versions after it: asked for, or
// agreed on, it passes as it came. So does an answer whose version is not
// a string, as it did before the proxy read it.
func TestInitializeOfThePreReleaseVersionPasses(t *testing.T) {
	r := newRig(t, 0)
	r.client.send(t, initializeAsking("2024-10-07"))
	if got := r.upstream.next(t, "upstream"); !strings.Contains(got, `"protocolVersion":"2024-10-07"`) {
		t.Fatalf("the upstream got %s; want the initialize as it came", got)
	}
	r.upstream.send(t, `{"jsonrpc":"2.0","id":0,`+gives("2024-10-07")+`}`)
	if got := r.client.next(t, "client"); !strings.Contains(got, `"result":{"protocolVersion":"2024-10-07"`) {
		t.Fatalf("the client got %s; want the result as it came", got)
	}

	r = newRig(t, 0)
	r.client.send(t, initializeAsking("2025-11-25"))
	r.upstream.next(t, "upstream")
	r.upstream.send(t, `{"jsonrpc":"2.0","id":0,"result":{"protocolVersion":null,"capabilities":{}}}`)
	if got := r.client.next(t, "client"); !strings.Contains(got, `"result":{"protocolVersion":null`) {
		t.Fatalf("the client got %s; want the result as it came", got)
	}
}

// TestRequestOfAnUnknownVersionRefused: a request whose _meta declares a
// protocol version the proxy does not know, as a 2026-07-28 request
// declares its own, is answered with the spec's UnsupportedProtocolVersionError
// listing the versions the proxy knows, and never reaches the upstream,
// which might know that version; a tools/call so too, and one spelled
// with an escape. A known version passes as it came.
func TestRequestOfAnUnknownVersionRefused(t *testing.T) {
	request := func(id int, method, version string) string {
		return fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":%q,"params":{"name":"echo","arguments":{},"_meta":{"io.modelcontextprotocol/protocolVersion":%q}}}`, id, method, version)
	}
	r := newRig(t, 0)
	for i, req := range []struct{ method, version, asked string }{
		{"tools/list", "2099-01-01", "2099-01-01"},
		{"server/discover", "draft", "draft"},
		{"tools/call", "2026-08-01", "2026-08-01"},
		{"tools/list", `2026-08-\u0030\u0031`, "2026-08-01"},
	} {
		r.client.send(t, strings.Replace(request(i+1, req.method, req.version), `\\u`, `\u`, -1))
		var answer struct {
			ID    json.RawMessage
			Error struct {
				Code    int
				Message string
				Data    struct {
					Supported []string
					Requested string
				}
			}
		}
		got := r.client.next(t, "client")
		if err := json.Unmarshal([]byte(got), &answer); err != nil || string(answer.ID) != strconv.Itoa(i+1) ||
			answer.Error.Code != -32022 || !strings.Contains(answer.Error.Message, strconv.Quote(req.asked)) ||
			answer.Error.Data.Requested != req.asked || !slices.Equal(answer.Error.Data.Supported, mcp.Versions) {
			t.Fatalf("%s of %s: the client got %s; want -32022 under id %d naming it, and the versions the proxy knows", req.method, req.version, got, i+1)
		}
	}
	known := request(9, "tools/list", "2026-07-28")
	r.client.send(t, known)
	nextIs(t, r.upstream, "upstream", known, "the request of a known version, and nothing before it")
}

// TestBatchOfAnUnknownVersionRefused: a request in a batch whose _meta
// declares a protocol version the proxy does not know does not reach the
// upstream either: the batch is refused whole, as for its other checks,
// each request answered with an error naming the version. A batch of a
// known version passes as it came.
func TestBatchOfAnUnknownVersionRefused(t *testing.T) {
	r := newRig(t, 0)
	refusedWhole(t, r, `[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2099-01-01"}}}]`, `"2099-01-01"`, "version")
	known := `[{"jsonrpc":"2.0","id":3,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2025-03-26"}}}]`
	r.client.send(t, known)
	nextIs(t, r.upstream, "upstream", known, "the batch of a known version, and nothing before it")
}

// TestRequestOfAnAmbiguousVersionRefused: DESIGN section 10. A request
// whose _meta, or the version in it, an upstream could read otherwise
// (given twice, or in another case, which Go's encoding/json matches) is
// refused as invalid params naming the member, not passed on under the
// version the proxy took: one reader takes the first of two, another the
// last. A notification so written is passed on as it came: the proxy
// decides nothing on its version.
func TestRequestOfAnAmbiguousVersionRefused(t *testing.T) {
	const v = `"io.modelcontextprotocol/protocolVersion"`
	r := newRig(t, 0)
	for i, req := range []struct{ method, params, member string }{
		{"ping", `{"_meta":{` + v + `:"2099-01-01"},"_meta":{` + v + `:"2025-11-25"}}`, `\"_meta\"`},
		{"tools/list", `{"_META":{` + v + `:"2099-01-01"},"_meta":{` + v + `:"2026-07-28"}}`, `\"_META\"`},
		{"ping", `{"_meta":{` + v + `:"2099-01-01",` + v + `:"2025-11-25"}}`, `\"io.modelcontextprotocol/protocolVersion\"`},
		{"tools/list", `{"_meta":{"IO.modelcontextprotocol/protocolVersion":"2099-01-01",` + v + `:"2026-07-28"}}`, `\"IO.modelcontextprotocol/protocolVersion\"`},
		{"tools/call", `{"name":"echo","_meta":{` + v + `:"2099-01-01",` + v + `:"2026-07-28"}}`, `\"io.modelcontextprotocol/protocolVersion\"`},
	} {
		r.client.send(t, fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":%q,"params":%s}`, i+1, req.method, req.params))
		var answer struct {
			ID    json.RawMessage
			Error struct {
				Code    int
				Message string
			}
		}
		got := r.client.next(t, "client")
		if err := json.Unmarshal([]byte(got), &answer); err != nil || string(answer.ID) != strconv.Itoa(i+1) ||
			answer.Error.Code != -32602 || !strings.Contains(answer.Error.Message, "ambiguous") || !strings.Contains(got, req.member) {
			t.Fatalf("%s %s: the client got %s; want -32602 under id %d naming %s", req.method, req.params, got, i+1, req.member)
		}
	}
	note := `{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":1,"progress":1,"_meta":{},"_meta":{` + v + `:"2099-01-01"}}}`
	r.client.send(t, note)
	nextIs(t, r.upstream, "upstream", note, "the notification as it came, and no refused request before it")
	known := `{"jsonrpc":"2.0","id":9,"method":"ping","params":{"_meta":{` + v + `:"2025-11-25"}}}`
	r.client.send(t, known)
	nextIs(t, r.upstream, "upstream", known, "the request read one way")
}

// TestBatchOfAnAmbiguousVersionRefused: a request in a batch whose _meta
// an upstream could read otherwise does not reach it either: the batch is
// refused whole, each request answered with an error naming the member.
func TestBatchOfAnAmbiguousVersionRefused(t *testing.T) {
	r := newRig(t, 0)
	refusedWhole(t, r, `[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2099-01-01"},"_meta":{}}}]`, `ambiguous member: "_meta" is given twice`, "member")
	known := `[{"jsonrpc":"2.0","id":3,"method":"ping","params":{"_meta":{}}}]`
	r.client.send(t, known)
	nextIs(t, r.upstream, "upstream", known, "the batch read one way, and nothing before it")
}

// TestRequestOfAnAmbiguousProgressTokenRefused: a request of any method
// whose _meta gives the progress token twice, or in another case, is
// refused as invalid params naming the member, in either protocol era:
// the upstream would read one token and the proxy, which watches the
// progress of the calls it detaches, the other.
func TestRequestOfAnAmbiguousProgressTokenRefused(t *testing.T) {
	const v = `"io.modelcontextprotocol/protocolVersion":"2026-07-28",`
	r := newRig(t, 0)
	for i, req := range []struct{ method, params, member string }{
		{"resources/read", `{"uri":"file:///a","_meta":{"progressToken":"a","progressToken":"b"}}`, `\"progressToken\" is given twice`},
		{"prompts/get", `{"name":"p","_meta":{"progressToken":1,"ProgressToken":2}}`, `\"ProgressToken\"`},
		{"completion/complete", `{"ref":{"type":"ref/prompt","name":"p"},"argument":{"name":"a","value":""},"_meta":{"progresstoken":1,"progressToken":2}}`, `\"progresstoken\"`},
		{"tools/list", `{"_meta":{` + v + `"progressToken":"a","progressToken":"b"}}`, `\"progressToken\" is given twice`},
		// The Kelvin sign folds to k, as Go's encoding/json matches names.
		{"resources/read", `{"uri":"file:///a","_meta":{` + v + "\"progressTo\u212aen\":\"a\",\"progressToken\":\"b\"}}", "progressTo\u212aen"},
		{"ping", `{"_meta":{"progress\u0054oken":"a","progressToken":"b"}}`, `\"progressToken\" is given twice`},
		{"tools/call", `{"name":"echo","_meta":{"progressToken":"a","progressToken":"b"}}`, `\"progressToken\" is given twice`},
	} {
		r.client.send(t, fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":%q,"params":%s}`, i+1, req.method, req.params))
		var answer struct {
			ID    json.RawMessage
			Error struct {
				Code    int
				Message string
			}
		}
		got := r.client.next(t, "client")
		if err := json.Unmarshal([]byte(got), &answer); err != nil || string(answer.ID) != strconv.Itoa(i+1) ||
			answer.Error.Code != -32602 || !strings.Contains(answer.Error.Message, "ambiguous") ||
			!strings.Contains(answer.Error.Message, req.method) || !strings.Contains(got, req.member) {
			t.Fatalf("%s %s: the client got %s; want -32602 under id %d naming the method and %s", req.method, req.params, got, i+1, req.member)
		}
	}
	known := `{"jsonrpc":"2.0","id":9,"method":"resources/read","params":{"uri":"file:///a","_meta":{"progressToken":"a","progress":"b"}}}`
	r.client.send(t, known)
	nextIs(t, r.upstream, "upstream", known, "the request read one way, and no refused request before it")
}

// TestBatchOfAnAmbiguousProgressTokenRefused: a request in a batch whose
// _meta gives the progress token twice does not reach the upstream
// either: the batch is refused whole, as for an ambiguous version.
func TestBatchOfAnAmbiguousProgressTokenRefused(t *testing.T) {
	r := newRig(t, 0)
	refusedWhole(t, r, `[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","id":2,"method":"resources/read","params":{"uri":"file:///a","_meta":{"progressToken":"a","progressToken":"b"}}}]`, `ambiguous member: "progressToken" is given twice`, "member")
	known := `[{"jsonrpc":"2.0","id":3,"method":"resources/read","params":{"uri":"file:///a","_meta":{"progressToken":"a"}}}]`
	r.client.send(t, known)
	nextIs(t, r.upstream, "upstream", known, "the batch read one way, and nothing before it")
}

// refusedWhole sends the client's batch of two requests and checks that
// the client gets both refused, each error holding naming: that of the
// batch's own check, which what names.
func refusedWhole(t *testing.T, r *rig, batch, naming, what string) {
	t.Helper()
	r.client.send(t, batch)
	got := r.client.next(t, "client")
	var answers []struct {
		ID    json.RawMessage
		Error *struct{ Message string }
	}
	if err := json.Unmarshal([]byte(got), &answers); err != nil || len(answers) != 2 {
		t.Fatalf("the client got %s; want an array of two answers", got)
	}
	for _, a := range answers {
		if a.Error == nil || !strings.Contains(a.Error.Message, naming) {
			t.Fatalf("the client got %s; want each request refused, naming the %s", got, what)
		}
	}
}
