package dispatcher

import (
	"context"
	"net"
	"syscall"
	"testing"
)

// Dialer and tuneConn set SO_KEEPALIVE and TCP_USER_TIMEOUT on the socket.
func TestDialer_SetsKeepAliveAndUserTimeout(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	check := func(what string, c net.Conn) {
		raw, err := c.(*net.TCPConn).SyscallConn()
		if err != nil {
			t.Fatal(err)
		}
		var keepalive, userTimeout int
		var kerr, uerr error
		_ = raw.Control(func(fd uintptr) {
			keepalive, kerr = syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_KEEPALIVE)
			userTimeout, uerr = syscall.GetsockoptInt(int(fd), syscall.IPPROTO_TCP, tcpUserTimeout)
		})
		if kerr != nil || uerr != nil || keepalive != 1 || userTimeout != int(TCPUserTimeoutDefault.Milliseconds()) {
			t.Errorf("%s: SO_KEEPALIVE = %d (%v), TCP_USER_TIMEOUT = %d ms (%v); want 1 and %d",
				what, keepalive, kerr, userTimeout, uerr, TCPUserTimeoutDefault.Milliseconds())
		}
	}
	c, err := Dialer()(context.Background(), "tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	check("Dialer", c)

	plain, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	tuneConn(plain)
	check("tuneConn", plain)
}
