//go:build !(linux || darwin || dragonfly || freebsd || netbsd || openbsd)

package pgstore

import "net"

// pending cannot look into a socket here without reading from it: a
// connection is pinged only by pgxpool's own rule.
func pending(net.Conn) bool { return false }
