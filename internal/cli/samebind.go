package cli

import (
	"net"
	"net/url"
	"strings"
)

// sameBind reports whether listening on a and then on b, both host:port,
// would find b's port taken by a: the same port, not 0, on the same host,
// or with either on every address (no host, 0.0.0.0 or ::). A name and
// an address it resolves to (localhost and 127.0.0.1) are not told apart
// here; listening tells them.
func sameBind(a, b string) bool {
	if !samePort(a, b) {
		return false
	}
	hostA, _, _ := net.SplitHostPort(a)
	hostB, _, _ := net.SplitHostPort(b)
	if everyAddress(hostA) || everyAddress(hostB) || strings.EqualFold(hostA, hostB) {
		return true
	}
	ipA, ipB := net.ParseIP(hostA), net.ParseIP(hostB)
	return ipA != nil && ipA.Equal(ipB)
}

// everyAddress reports whether a listener on host listens on every
// address of the machine.
func everyAddress(host string) bool {
	ip := net.ParseIP(host)
	return host == "" || (ip != nil && ip.IsUnspecified())
}

// samePort reports whether a and b, both host:port, name the same port,
// not 0, by number or by a service's name.
func samePort(a, b string) bool {
	_, portA, errA := net.SplitHostPort(a)
	_, portB, errB := net.SplitHostPort(b)
	if errA != nil || errB != nil {
		return false
	}
	pa, errA := net.LookupPort("tcp", portA)
	pb, errB := net.LookupPort("tcp", portB)
	return errA == nil && errB == nil && pa != 0 && pa == pb
}

// servesItself reports whether upstream, serve's --upstream URL, is
// serve's own endpoint, at listen and path: each session would open
// another of serve's as its upstream, until --max-sessions is reached.
func servesItself(listen, path, upstream string) bool {
	u, err := url.Parse(upstream)
	if err != nil || u.Scheme != "http" || u.Path != path {
		return false
	}
	port := u.Port()
	if port == "" {
		port = "80"
	}
	if !samePort(listen, net.JoinHostPort(u.Hostname(), port)) {
		return false
	}
	host, _, _ := net.SplitHostPort(listen)
	ipL, ipU := net.ParseIP(host), net.ParseIP(u.Hostname())
	return strings.EqualFold(host, u.Hostname()) || (ipL != nil && ipL.Equal(ipU)) ||
		(everyAddress(host) && isLoopbackHost(u.Hostname()))
}
