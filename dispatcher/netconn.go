package dispatcher

import (
	"context"
	"crypto/tls"
	"net"
	"time"
)

// TCP settings for connections to PostgreSQL that must notice a dead peer
// (a crashed host, a NAT or firewall that dropped the flow) without waiting
// for the operating system's defaults (two hours of keepalive idle on Linux,
// and about 15 minutes of retransmissions).
const (
	KeepAliveIdleDefault     = 15 * time.Second
	KeepAliveIntervalDefault = 5 * time.Second
	KeepAliveCountDefault    = 3
	TCPUserTimeoutDefault    = 30 * time.Second
)

// Dialer returns a dial function for pgconn.Config.DialFunc
// (pgxpool.Config.ConnConfig.DialFunc) with TCP keepalive (probes after 15s
// idle, every 5s, 3 probes) and, on Linux, TCP_USER_TIMEOUT of
// TCPUserTimeoutDefault (a connection whose sent data stays unacknowledged
// that long is closed). The pgoutbox CLI uses it; library users who bring
// their own pool can set it the same way:
//
//	cfg, _ := pgxpool.ParseConfig(url)
//	cfg.ConnConfig.DialFunc = dispatcher.Dialer()
//
// Keepalive and the user timeout find a dead peer; they do not help against
// a peer (or a proxy) that acknowledges bytes and never answers: the
// dispatcher's per-operation timeouts (Config.ClaimTimeout, WriteTimeout,
// ListenPing) bound those.
func Dialer() func(ctx context.Context, network, addr string) (net.Conn, error) {
	d := &net.Dialer{
		Timeout: 30 * time.Second,
		KeepAliveConfig: net.KeepAliveConfig{
			Enable: true, Idle: KeepAliveIdleDefault, Interval: KeepAliveIntervalDefault, Count: KeepAliveCountDefault,
		},
		Control: setUserTimeout(TCPUserTimeoutDefault),
	}
	return d.DialContext
}

// tuneConn applies keepalive and TCP_USER_TIMEOUT to an open connection
// (the dispatcher's LISTEN connection, whatever dialer made it).
func tuneConn(c net.Conn) {
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return // a Unix socket, or a custom transport
	}
	_ = tc.SetKeepAliveConfig(net.KeepAliveConfig{
		Enable: true, Idle: KeepAliveIdleDefault, Interval: KeepAliveIntervalDefault, Count: KeepAliveCountDefault,
	})
	if raw, err := tc.SyscallConn(); err == nil {
		_ = setUserTimeout(TCPUserTimeoutDefault)("tcp", tc.RemoteAddr().String(), raw)
	}
}
