package mcp

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"time"
	"unicode/utf8"

	"github.com/mcp-idempotent/mcp-idempotent/internal/jsonrpc"
)

// Versions are the protocol versions the proxy knows, oldest first. It
// speaks each one's rules and no other's: a version it does not know may
// change what it relies on (the shape of a tools/call, how a session
// starts), so it is never agreed on through the proxy.
var Versions = []string{"2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25", "2026-07-28"}

// HandshakeVersion is the latest known version that opens a session with
// initialize: 2026-07-28 removed the handshake (SEP-2575), so a server
// asked for it in an initialize answers with an earlier one.
const HandshakeVersion = "2025-11-25"

// KnownVersion reports whether the proxy knows the protocol version v.
func KnownVersion(v string) bool {
	return slices.Contains(Versions, v)
}

// Negotiable reports whether a session may be agreed on under v: a
// version the proxy knows, or a date between the first MCP version, the
// pre-release 2024-10-07 that SDKs still accept, and the latest version
// it knows, whose rules are those of the known versions around it. A
// later date, or a version that is not a date, may bring rules the proxy
// does not have.
func Negotiable(v string) bool {
	if KnownVersion(v) {
		return true
	}
	if _, err := time.Parse(time.DateOnly, v); err != nil {
		return false
	}
	return v >= firstVersion && v < Versions[len(Versions)-1]
}

// firstVersion is the first protocol version MCP had, a pre-release.
const firstVersion = "2024-10-07"

// DeclaredVersion returns the protocol version that params, a request's,
// declare in their _meta, as a 2026-07-28 request does; "" when they
// declare none. The proxy decides on it, so a _meta, or a version in it,
// that an upstream could read otherwise (given twice, or in another case)
// is an error naming the member (jsonrpc.ErrAmbiguous), not a guess: one
// reader would take the first, another the last (DESIGN section 10). So
// is a progress token so given (metaVersion).
func DeclaredVersion(params json.RawMessage) (string, error) {
	meta, err := jsonrpc.MemberOnce(params, "_meta")
	if err != nil {
		return "", fmt.Errorf("params: %w", err)
	}
	return metaVersion(meta)
}

// metaVersion returns the protocol version meta, a request's _meta,
// declares, as DeclaredVersion does. A progress token given twice, or in
// another case, is an error too: every request's, whatever its method.
// The upstream would send progress on one token and the proxy, which
// routes progress by the token it read, watch the other.
func metaVersion(meta json.RawMessage) (string, error) {
	if mayNameProgress(meta) {
		if _, err := jsonrpc.MemberOnce(meta, MetaProgressToken); err != nil {
			return "", fmt.Errorf("params._meta: %w", err)
		}
	}
	if !mayNameVersion(meta) {
		return "", nil // the common case, without a walk
	}
	raw, err := jsonrpc.MemberOnce(meta, MetaProtocolVersion)
	if err != nil {
		return "", fmt.Errorf("params._meta: %w", err)
	}
	v, _ := jsonrpc.StringValue(raw)
	return v, nil
}

// mayNameProgress reports whether meta may hold MetaProgressToken twice,
// or a name that differs from it only in case: it holds an escape, or a
// byte past ASCII (the Kelvin sign folds to k, the long s to s), or
// "progress" in any ASCII case.
func mayNameProgress(meta []byte) bool {
	const word = "progress"
	for i, b := range meta {
		switch {
		case b == '\\' || b >= utf8.RuneSelf:
			return true
		case b|0x20 == 'p' && i+len(word) <= len(meta) && bytes.EqualFold(meta[i:i+len(word)], []byte(word)):
			return true
		}
	}
	return false
}

// mayNameVersion reports whether meta may hold MetaProtocolVersion, or a
// name that differs from it only in case: it holds an escape, which may
// spell the name otherwise, or "modelcontextprotocol/" in any ASCII case.
// No letter of that word folds to a rune outside ASCII (as k and s do),
// so a name matching MetaProtocolVersion under case folding holds it so.
func mayNameVersion(meta []byte) bool {
	const word = "modelcontextprotocol"
	if bytes.IndexByte(meta, '\\') >= 0 {
		return true
	}
	for i := 0; ; i++ {
		j := bytes.IndexByte(meta[i:], '/')
		if j < 0 {
			return false
		}
		if i += j; i >= len(word) && bytes.EqualFold(meta[i-len(word):i], []byte(word)) {
			return true
		}
	}
}
