package webhook

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
)

// Ping reports whether the receiver's host resolves and accepts TCP
// connections, dialing it (or the HTTP proxy the client's transport would
// use for the URL) and hanging up. It sends no HTTP request: webhooks
// rarely answer HEAD or OPTIONS meaningfully, and a request would reach the
// receiver's business code. The dial is bounded by ctx and Config.Timeout.
// Errors say whether the name did not resolve or the connection failed; they
// name the host, never the URL.
func (p *Publisher) Ping(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.Timeout)
	defer cancel()

	target := p.url
	if proxy := p.proxyFor(); proxy != nil {
		target = proxy
	}
	addr := hostPort(target)
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		var dnsErr *net.DNSError
		if errors.As(err, &dnsErr) {
			return fmt.Errorf("webhook: ping: host %q does not resolve: %w", target.Hostname(), err)
		}
		return fmt.Errorf("webhook: ping: cannot connect to %s: %w", addr, err)
	}
	return conn.Close()
}

// proxyFor returns the proxy the transport would use for the URL, if any.
func (p *Publisher) proxyFor() *url.URL {
	t, ok := p.client.Transport.(*http.Transport)
	if p.client.Transport == nil {
		t, ok = http.DefaultTransport.(*http.Transport)
	}
	if !ok || t.Proxy == nil {
		return nil
	}
	proxy, err := t.Proxy(&http.Request{Method: http.MethodPost, URL: p.url, Header: http.Header{}})
	if err != nil || proxy == nil || proxy.Hostname() == "" {
		return nil
	}
	return proxy
}

func hostPort(u *url.URL) string {
	port := u.Port()
	if port == "" {
		switch u.Scheme {
		case "https":
			port = "443"
		case "socks5", "socks5h":
			port = "1080"
		default:
			port = "80"
		}
	}
	return net.JoinHostPort(u.Hostname(), port)
}
