package streamhttp

import (
	"encoding/base64"
	"encoding/json"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/mcp-idempotent/mcp-idempotent/internal/jsonrpc"
	"github.com/mcp-idempotent/mcp-idempotent/internal/mcp"
)

// Request metadata headers of the 2026-07-28 transport (SEP-2243; spec
// 2026-07-28, basic/transports/streamable-http, "Standard Request
// Headers"): they mirror body fields so that intermediaries can route on
// them, and the server rejects a request whose headers and body disagree.
const (
	headerMcpMethod = "Mcp-Method"
	headerMcpName   = "Mcp-Name"
)

// statelessSince is the first protocol version without the initialize
// handshake and sessions. Versions are dates, so they compare as strings.
const statelessSince = "2026-07-28"

// methodDiscover asks a server which versions it speaks. Only a client of
// the stateless era sends it, as a probe that servers of either era answer
// (spec 2026-07-28, basic/versioning, "Backward Compatibility with
// Initialization-Based Versions").
const methodDiscover = "server/discover"

// The sentinel around a Base64-encoded header value (spec 2026-07-28,
// basic/transports/streamable-http, "Value Encoding"). Both are
// case-sensitive.
const (
	base64Prefix = "=?base64?"
	base64Suffix = "?="
)

// statelessVersion reports whether the message m follows the stateless
// (2026-07-28) rules, and the protocol version it declares in its _meta, ""
// if none. A message is stateless when it is server/discover or declares a
// version from statelessSince on: "a request carrying modern per-request
// _meta is served statelessly" (spec 2026-07-28, basic/versioning,
// "Backward Compatibility with Initialization-Based Versions"). A _meta,
// or a version in it, that a server could read otherwise is an error
// (mcp.DeclaredVersion): which lane and which headers the message gets
// are decided on it.
func statelessVersion(m *jsonrpc.Message) (version string, stateless bool, err error) {
	version, err = mcp.DeclaredVersion(m.Params)
	return version, version >= statelessSince || m.Method == methodDiscover, err
}

// setRequestMetadata sets the headers a stateless-era POST carries for m:
// MCP-Protocol-Version, equal to the version in the body's _meta (left out
// when the body declares none: the transport never invents one), Mcp-Method,
// and Mcp-Name for the methods that name a tool, a prompt or a resource.
func setRequestMetadata(h http.Header, m *jsonrpc.Message, version string) {
	if version != "" {
		h.Set(headerProtocolVersion, version)
	}
	h.Set(headerMcpMethod, m.Method)
	if name, ok := requestName(m); ok {
		h.Set(headerMcpName, encodeHeaderValue(name))
	}
}

// requestName returns what Mcp-Name mirrors: params.name of tools/call and
// prompts/get, params.uri of resources/read.
func requestName(m *jsonrpc.Message) (string, bool) {
	var key string
	switch m.Method {
	case "tools/call", "prompts/get":
		key = "name"
	case "resources/read":
		key = "uri"
	default:
		return "", false
	}
	return jsonrpc.StringValue(member(m.Params, key))
}

// encodeHeaderValue returns s as an Mcp-Name or Mcp-Param-* value: as it is
// when it is plain header-safe ASCII, or else Base64 of its UTF-8 bytes in
// the =?base64?...?= sentinel (spec 2026-07-28, "Value Encoding"; the
// go-sdk's encodeHeaderValue draws the same line).
//
// The go-sdk server up to v1.8.0 compares Mcp-Name with the body without
// decoding it, so it refuses the encoded form (go-sdk issue #1234, fixed by
// PR #1242). The spec's MUST wins: names that need encoding are rare, and
// sent raw they would be refused or mangled anyway (a line break cannot be
// sent at all, and servers trim outer whitespace).
func encodeHeaderValue(s string) string {
	if !needsBase64(s) {
		return s
	}
	return base64Prefix + base64.StdEncoding.EncodeToString([]byte(s)) + base64Suffix
}

// decodeHeaderValue reverses encodeHeaderValue; ok is false for a value
// in the sentinel that is not valid Base64.
func decodeHeaderValue(v string) (s string, ok bool) {
	enc, found := strings.CutPrefix(v, base64Prefix)
	if !found {
		return v, true
	}
	if enc, found = strings.CutSuffix(enc, base64Suffix); !found {
		return v, true
	}
	b, err := base64.StdEncoding.DecodeString(enc)
	return string(b), err == nil
}

// needsBase64 reports whether s cannot go in a header as it is: it has a
// byte outside printable ASCII, leading or trailing whitespace, or it looks
// like an encoded value itself, which would be decoded into something else.
func needsBase64(s string) bool {
	if s == "" {
		return false
	}
	if first, last := s[0], s[len(s)-1]; first == ' ' || first == '\t' || last == ' ' || last == '\t' {
		return true
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return true
		}
	}
	return strings.HasPrefix(s, base64Prefix) && strings.HasSuffix(s, base64Suffix)
}

// member returns the raw value of the member key of the JSON object obj, or
// nil. Of duplicate members it keeps the last, as JSON.parse and the
// upstream do, so that a header never disagrees with what the upstream
// reads from the body.
func member(obj []byte, key string) []byte { return jsonrpc.Member(obj, key) }

// headerParamPrefix starts the headers that mirror the tool arguments the
// tool's inputSchema marks with x-mcp-header (spec 2026-07-28,
// basic/transports/streamable-http, "Custom Headers from Tool
// Parameters"). Clients MUST send them, and a server that annotates a tool
// refuses a call whose headers are missing or disagree with the arguments.
const headerParamPrefix = "Mcp-Param-"

// A paramHeader binds an argument, found by its path of property names, to
// the header that mirrors it.
type paramHeader struct {
	path   []string
	header string // the part after Mcp-Param-
}

// paramHeaders returns the x-mcp-header bindings of a tool's inputSchema.
// It reports false for a schema whose annotations break the spec's rules
// ("Schema Extension"): the tool is invalid then, for the client to drop,
// and nothing is mirrored for it. Only properties reached through
// "properties" alone are looked at, as the spec allows no others.
func paramHeaders(schema []byte) ([]paramHeader, bool) {
	var out []paramHeader
	seen := map[string]bool{}
	var walk func(schema []byte, prefix []string) bool
	walk = func(schema []byte, prefix []string) bool {
		props := member(schema, "properties")
		if len(props) == 0 || props[0] != '{' {
			return true
		}
		ok := true
		_ = jsonrpc.EachMember(props, func(name, prop []byte) bool {
			path := append(slices.Clone(prefix), string(name))
			if raw := member(prop, "x-mcp-header"); raw != nil {
				header, _ := jsonrpc.StringValue(raw)
				typ, _ := jsonrpc.StringValue(member(prop, "type"))
				key := strings.ToLower(header)
				if !isToken(header) || seen[key] || typ != "string" && typ != "integer" && typ != "boolean" {
					ok = false
					return false
				}
				seen[key] = true
				out = append(out, paramHeader{path, header})
			}
			ok = walk(prop, path)
			return ok
		})
		return ok
	}
	if !walk(schema, nil) {
		return nil, false
	}
	return out, true
}

// isToken reports whether s is an HTTP field name (RFC 9110 section 5.1,
// 1*tchar).
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' {
			continue
		}
		if !strings.ContainsRune("!#$%&'*+-.^_`|~", rune(c)) {
			return false
		}
	}
	return true
}

// setParamHeaders sets the Mcp-Param-* headers of a tools/call with params
// for the tool's bindings. An argument that is absent, null or not a
// primitive the spec allows gets no header.
func setParamHeaders(h http.Header, params []byte, bindings []paramHeader) {
	args := member(params, "arguments")
	for _, b := range bindings {
		v := args
		for _, name := range b.path {
			v = member(v, name)
		}
		if s, ok := headerArgument(v); ok {
			h.Set(headerParamPrefix+b.header, encodeHeaderValue(s))
		}
	}
}

// maxSafeInteger bounds the integers an x-mcp-header argument may hold: the
// ones a JavaScript number holds exactly.
const maxSafeInteger = 1<<53 - 1

// headerArgument returns the header form of a raw JSON argument: a string
// as it is, a boolean as true or false, an integer in decimal (the spec's
// "Value Encoding"); a number is an integer when it has no fraction, as the
// go-sdk reads 42.0.
func headerArgument(raw []byte) (string, bool) {
	switch {
	case len(raw) == 0:
		return "", false
	case raw[0] == '"':
		return jsonrpc.StringValue(raw)
	case string(raw) == "true" || string(raw) == "false":
		return string(raw), true
	case raw[0] == '-' || '0' <= raw[0] && raw[0] <= '9':
		f, err := strconv.ParseFloat(string(raw), 64)
		if err != nil || f != math.Trunc(f) || math.Abs(f) > maxSafeInteger {
			return "", false
		}
		return strconv.FormatInt(int64(f), 10), true
	}
	return "", false // null, an object or an array
}

// learnTools keeps the x-mcp-header bindings of the tools in a tools/list
// result, for the tools/call requests that follow.
func learnTools(known map[string][]paramHeader, result []byte) {
	tools := member(result, "tools")
	if len(tools) == 0 || tools[0] != '[' {
		return
	}
	var list []json.RawMessage
	if json.Unmarshal(tools, &list) != nil {
		return
	}
	for _, tool := range list {
		name, ok := jsonrpc.StringValue(member(tool, "name"))
		if !ok {
			continue
		}
		bindings, ok := paramHeaders(member(tool, "inputSchema"))
		if !ok || len(bindings) == 0 {
			delete(known, name)
			continue
		}
		known[name] = bindings
	}
}

// traceHeaders returns the W3C trace context headers of h. A traceparent
// given twice is none: the recipient cannot tell which one the sender
// meant. tracestate may be split over several lines, which join with
// commas (W3C Trace Context, section 3.3.1.1).
func traceHeaders(h http.Header) (traceparent, tracestate string) {
	if v := h.Values(headerTraceparent); len(v) == 1 {
		traceparent = v[0]
	}
	if traceparent != "" {
		tracestate = strings.Join(h.Values(headerTracestate), ",")
	}
	return traceparent, tracestate
}
