package console

import (
	"net"
	"strconv"
	"strings"
)

// hostAllowed reports whether a request's Host header (host or host:port)
// names this console: an IP address (DNS rebinding needs a name the
// attacker controls; an address literal is never one), a loopback name, or
// one of Config.Hosts.
func (c *Console) hostAllowed(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.Trim(host, "[]"), ".")
	if host == "" {
		return false
	}
	if LoopbackHost(host) || net.ParseIP(host) != nil {
		return true
	}
	for _, h := range c.cfg.Hosts {
		if h == "*" || strings.EqualFold(strings.TrimSuffix(h, "."), host) {
			return true
		}
	}
	return false
}

// LoopbackHost reports whether host names only this machine: localhost (or
// a name under .localhost), or a loopback IP (127.0.0.0/8, ::1). An empty
// host is not loopback.
func LoopbackHost(host string) bool {
	host = strings.TrimSuffix(strings.Trim(host, "[]"), ".")
	if strings.EqualFold(host, "localhost") || strings.HasSuffix(strings.ToLower(host), ".localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// strconvQuote quotes a Host header for an error page (text/plain).
func strconvQuote(s string) string {
	if len(s) > 100 {
		s = s[:100]
	}
	return strconv.Quote(s)
}
