package mcp

import (
	"slices"
	"time"
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
