// Package clientaddr names the client behind a remote address, for the
// limits a server keeps per client.
package clientaddr

import (
	"net"
	"net/netip"
)

// Of names the client at addr (host:port): its IP address, or for an IPv6
// address its /64, which one host can hold whole. An addr that does not
// parse is its own name.
func Of(addr string) string {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return host
	}
	if ip = ip.Unmap(); ip.Is6() {
		p, _ := ip.Prefix(64)
		return p.String()
	}
	return ip.String()
}
