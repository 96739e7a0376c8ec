package proxy

import (
	"encoding/json"
	"strings"

	"github.com/mcp-idempotent/mcp-idempotent/internal/jsonrpc"
	"github.com/mcp-idempotent/mcp-idempotent/internal/mcp"
)

// knownHandshake returns msg, the client's initialize, asking for a
// protocol version the proxy knows. A client asks for the latest it
// supports, and a server that does not support it answers with one it
// does (spec, basic/lifecycle, "Version Negotiation"). The proxy is that
// server to the client: passed on as asked, a version it does not know
// could be agreed on between the client and the upstream, and the proxy
// would relay a protocol whose rules it does not have (its HTTP front
// refuses every request that names it, and so does unsupportedVersion
// for the stdio front). So an unknown version is asked
// down to mcp.HandshakeVersion; asked is the client's, "" when msg is
// left as it came.
func knownHandshake(msg *jsonrpc.Message) (out *jsonrpc.Message, asked string) {
	v := jsonrpc.Member(msg.Params, "protocolVersion")
	asked, ok := jsonrpc.StringValue(v)
	if !ok || mcp.Negotiable(asked) {
		return msg, ""
	}
	m, err := jsonrpc.Decode(jsonrpc.Replace(msg.Raw, v, []byte(`"`+mcp.HandshakeVersion+`"`)))
	if err != nil {
		return msg, "" // cannot happen: a string was put for a string
	}
	return m, asked
}

// unknownAgreed returns the error the client's initialize is answered
// with, under id, when the upstream's result names a protocol version the
// proxy does not know, though it was asked for one it does: the client
// would start a session that the proxy cannot serve. The data is the
// spec's for an unsupported version (basic/lifecycle, "Error Handling"),
// but for the version refused, which is the server's, not the client's.
func unknownAgreed(id json.RawMessage, version string) []byte {
	data, _ := json.Marshal(struct {
		Supported []string `json:"supported"`
		Agreed    string   `json:"agreed"`
	}{mcp.Versions, version})
	e := jsonrpc.Errorf(jsonrpc.CodeInvalidParams,
		"mcp-idempotent: the MCP server agreed on protocol version %q, which the proxy does not know; it knows %s", version, strings.Join(mcp.Versions, ", "))
	e.Data = data
	return jsonrpc.NewErrorResponse(id, e)
}

// unsupportedVersion is the answer, under id, to a request whose _meta
// declares a protocol version the proxy does not know (a 2026-07-28
// request carries its version so, with no initialize): passed on, an
// upstream that knows that version would serve it through a proxy that
// has not its rules. It is the 2026-07-28 protocol's
// UnsupportedProtocolVersionError, whose data lists the versions the
// proxy knows, for the client to pick one and ask again; the HTTP front
// refuses such a request with it too.
func unsupportedVersion(id json.RawMessage, version string) []byte {
	data, _ := json.Marshal(struct {
		Supported []string `json:"supported"`
		Requested string   `json:"requested"`
	}{mcp.Versions, version})
	e := jsonrpc.Errorf(codeUnsupportedVersion,
		"mcp-idempotent: unsupported protocol version %q: the proxy speaks %s", version, strings.Join(mcp.Versions, ", "))
	e.Data = data
	return jsonrpc.NewErrorResponse(id, e)
}

// codeUnsupportedVersion is the JSON-RPC error code of
// UnsupportedProtocolVersionError (spec 2026-07-28, SEP-2575).
const codeUnsupportedVersion = -32022

// declaredVersion returns the protocol version m's params' _meta
// declares; "" when it declares none, and an error when an upstream could
// read it otherwise (mcp.DeclaredVersion). A request alone has it read as
// its frame is (mcp.ParamsReader.DeclaredVersion); one in a batch, here.
func declaredVersion(m *jsonrpc.Message) (string, error) {
	return mcp.DeclaredVersion(m.Params)
}
