package proxy

import (
	"bytes"
	"context"
	"testing"

	"github.com/mcp-idempotent/mcp-idempotent/internal/fingerprint"
	"github.com/mcp-idempotent/mcp-idempotent/internal/intercept"
	"github.com/mcp-idempotent/mcp-idempotent/internal/jsonrpc"
	"github.com/mcp-idempotent/mcp-idempotent/internal/mcp"
	"github.com/mcp-idempotent/mcp-idempotent/internal/policy"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record/memstore"
)

// TestDeclaredCaseTwins: an inputSchema that declares two properties
// differing only in case ("region" with a default and "Region" without;
// "note", which the policy ignores, and "Note") is one a server reads
// apart, so a call giving the other spelling is fingerprinted, not
// refused. A spelling the schema does not declare still is, at the top
// level and along an ignored path, as is a twin of a name the policy
// ignores but the schema does not declare.
func TestDeclaredCaseTwins(t *testing.T) {
	client, upstream := &sink{}, &sink{}
	in := intercept.New(intercept.Options{Store: memstore.New(memstore.Options{}), Hasher: fingerprint.NewRandom()})
	resolve := func(tool string, ann *mcp.Annotations) policy.Policy {
		p := policy.FromAnnotations(ann)
		p.Ignore, p.Defaults = []string{"note", "trace.id"}, true
		return p
	}
	s := New(client, upstream, Options{Interceptor: in, Actor: "a", Scope: "s", UpstreamID: "u", Resolve: resolve})
	ctx := context.Background()
	s.fromClient(ctx, []byte(`{"jsonrpc":"2.0","id":"l","method":"tools/list","params":{}}`))
	upstream.take()
	schema := `{"type":"object","properties":{"region":{"type":"string","default":"us"},"Region":{"type":"string"},` +
		`"note":{"type":"string"},"Note":{"type":"string"},` +
		`"trace":{"type":"object","properties":{"id":{"type":"string"},"ID":{"type":"string"}}}}}`
	s.fromUpstream(s.up, []byte(`{"jsonrpc":"2.0","id":"l","result":{"tools":[{"name":"charge_card","inputSchema":`+schema+`},`+
		`{"name":"memo","inputSchema":{"type":"object","properties":{"Note":{"type":"string"}}}}]}}`))
	client.take()
	call := func(tool, args string) (ran bool, answer *jsonrpc.Message) {
		t.Helper()
		s.fromClient(ctx, []byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"`+tool+`","arguments":`+args+`}}`))
		if sent := upstream.take(); sent != nil {
			ran = true
			id := sentID(sent)
			s.fromUpstream(s.up, append(append([]byte(`{"jsonrpc":"2.0","id":`), id...), `,"result":{"content":[]}}`...))
		}
		frame := client.take()
		m, err := jsonrpc.Decode(frame)
		if err != nil {
			t.Fatalf("arguments %s: answer %s: %v", args, frame, err)
		}
		return ran, m
	}
	for _, c := range []struct {
		args string
		ran  bool
	}{
		{`{"Region":"eu"}`, true},
		{`{"Region":"eu","region":"us"}`, false}, // the same action, the default spelled
		{`{"Region":"ap"}`, true},
		{`{"Note":"x"}`, true},
		{`{"Note":"x","note":"retry #2"}`, false}, // note is ignored
		{`{"Note":"y","note":"retry #2"}`, true},
		{`{"trace":{"ID":"a","id":"1"}}`, true},
		{`{"trace":{"ID":"a","id":"2"}}`, false}, // trace.id is ignored
		{`{"trace":{"ID":"b"}}`, true},
	} {
		ran, m := call("charge_card", c.args)
		if m.Error != nil {
			t.Fatalf("arguments %s refused: %s; want a result", c.args, m.Error)
		}
		if ran != c.ran {
			t.Errorf("arguments %s: sent upstream %v; want %v", c.args, ran, c.ran)
		}
	}
	// memo declares Note but not the note its policy ignores: a server
	// reads a note beside Note as Note, which the fingerprint would drop,
	// so a twin of note is still refused.
	for _, c := range []struct{ tool, args string }{
		{"charge_card", `{"REGION":"eu"}`},
		{"charge_card", `{"NOTE":"x"}`},
		{"charge_card", `{"trace":{"Id":"a"}}`},
		{"memo", `{"Note":"x"}`},
	} {
		args := c.args
		ran, m := call(c.tool, args)
		if m.Error == nil || ran || !bytes.Contains(m.Error, []byte("only in case")) {
			t.Errorf("arguments %s: sent upstream %v, error %s; want -32602 naming the twin", args, ran, m.Error)
		}
		if e := jsonrpc.DecodeError(m.Error); e.Code != jsonrpc.CodeInvalidParams {
			t.Errorf("arguments %s: error code %d; want %d", args, e.Code, jsonrpc.CodeInvalidParams)
		}
	}
}
