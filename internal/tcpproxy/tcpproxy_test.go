package tcpproxy

import (
	"bufio"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

// startEcho runs a line echo server for the test and returns its address.
func startEcho(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	return ln.Addr().String()
}

// roundTrip writes a line on c and reads it back.
func roundTrip(c net.Conn, line string) (string, error) {
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := io.WriteString(c, line+"\n"); err != nil {
		return "", err
	}
	got, err := bufio.NewReader(c).ReadString('\n')
	return strings.TrimSuffix(got, "\n"), err
}

func dialProxy(t *testing.T, p *Proxy) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", p.Addr(), 2*time.Second)
	if err != nil {
		t.Fatalf("dial proxy: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func TestProxy_ForwardsBytesBothWays(t *testing.T) {
	t.Parallel()
	p := Start(t, startEcho(t))
	got, err := roundTrip(dialProxy(t, p), "hello")
	if err != nil || got != "hello" {
		t.Fatalf("round trip = %q, %v; want hello", got, err)
	}
}

func TestProxy_DownResetsOpenConnectionsAndRefusesNewOnes(t *testing.T) {
	t.Parallel()
	p := Start(t, startEcho(t))
	open := dialProxy(t, p)
	if _, err := roundTrip(open, "before"); err != nil {
		t.Fatalf("round trip before Down: %v", err)
	}

	p.Down()

	_ = open.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := open.Read(make([]byte, 1)); err == nil || isTimeout(err) {
		t.Fatalf("read on a connection open before Down = %v; want reset/EOF", err)
	}
	if p.Conns() != 0 {
		t.Fatalf("Conns() = %d after Down; want 0", p.Conns())
	}
	// A new connection is reset: at dial time or at the first round trip.
	fresh, err := net.DialTimeout("tcp", p.Addr(), 2*time.Second)
	if err == nil {
		defer fresh.Close()
		if got, err := roundTrip(fresh, "during"); err == nil {
			t.Fatalf("round trip while down = %q, nil; want an error", got)
		}
	}
}

func TestProxy_UpForwardsAgain(t *testing.T) {
	t.Parallel()
	p := Start(t, startEcho(t))
	p.Down()
	p.Up()
	got, err := roundTrip(dialProxy(t, p), "again")
	if err != nil || got != "again" {
		t.Fatalf("round trip after Up = %q, %v; want again", got, err)
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// Blackhole freezes the connections open at that moment (no reply, no
// error: the read runs into its deadline) while new connections work.
func TestBlackhole_FreezesOpenConnectionsAndForwardsNewOnes(t *testing.T) {
	p := Start(t, startEcho(t))
	old := dialProxy(t, p)
	defer old.Close()
	if got, err := roundTrip(old, "before"); err != nil || got != "before" {
		t.Fatalf("before blackhole: %q, %v", got, err)
	}
	p.Blackhole()
	if p.Frozen() != 1 {
		t.Fatalf("Frozen = %d, want 1", p.Frozen())
	}
	_ = old.SetDeadline(time.Now().Add(300 * time.Millisecond))
	if _, err := io.WriteString(old, "lost\n"); err != nil {
		t.Fatalf("write on a frozen connection must succeed (the socket is open): %v", err)
	}
	buf := make([]byte, 16)
	_, err := old.Read(buf)
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("read on a frozen connection = %v, want a timeout (no reply, no reset)", err)
	}
	fresh := dialProxy(t, p)
	defer fresh.Close()
	if got, err := roundTrip(fresh, "after"); err != nil || got != "after" {
		t.Fatalf("new connection after blackhole: %q, %v", got, err)
	}
}
