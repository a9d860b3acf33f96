// Package tcpproxy is a test helper: a TCP proxy on the loopback interface
// that sits between a client under test and a shared broker, so a test can
// simulate "the broker went down" (Down) and "it came back" (Up) without
// stopping the broker that other test packages use at the same time.
//
// While down, the proxy keeps its listening socket (so the port cannot be
// taken by someone else) but resets every existing connection and every new
// one as soon as it is accepted: to the client this looks like a broker that
// refuses connections.
//
// Blackhole freezes the connections open at that moment: their sockets stay
// open, but no byte is forwarded any more in either direction (what the
// client sends is read and dropped), as when a NAT or firewall loses the
// flow's state or the peer host freezes. New connections are forwarded as
// usual: to the client this looks like a server that stopped answering on
// the connections it holds, while a fresh connection works.
package tcpproxy

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"
)

// Proxy forwards TCP connections from Addr to a target address. Its methods
// are safe for concurrent use.
type Proxy struct {
	logf   func(format string, args ...any)
	target string
	ln     net.Listener

	mu     sync.Mutex
	down   bool
	conns  map[net.Conn]struct{} // both sides of every live pair
	frozen map[net.Conn]bool     // sides of pairs frozen by Blackhole
	wg     sync.WaitGroup
}

// Start listens on 127.0.0.1 (a free port) and forwards every accepted
// connection to target. The proxy is up when Start returns, and it is closed
// with t.Cleanup.
func Start(t testing.TB, target string) *Proxy {
	t.Helper()
	p, err := New(target, t.Logf)
	if err != nil {
		t.Fatalf("tcpproxy: %v", err)
	}
	t.Cleanup(p.Close)
	return p
}

// New is Start outside a test (the chaos suite): logf receives dial errors
// (nil: dropped), and the caller calls Close.
func New(target string, logf func(format string, args ...any)) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listen: %w", err)
	}
	if logf == nil {
		logf = func(string, ...any) {}
	}
	p := &Proxy{logf: logf, target: target, ln: ln, conns: map[net.Conn]struct{}{}, frozen: map[net.Conn]bool{}}
	p.wg.Add(1)
	go p.acceptLoop()
	return p, nil
}

// Addr is the proxy's listen address, host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Retarget makes connections accepted from now on go to target (a server
// moved: a DNS name or virtual IP pointed elsewhere). Open connections
// stay with the old target; Down resets them.
func (p *Proxy) Retarget(target string) {
	p.mu.Lock()
	p.target = target
	p.mu.Unlock()
}

// Down resets every open connection and refuses new ones until Up.
func (p *Proxy) Down() {
	p.mu.Lock()
	p.down = true
	conns := p.conns
	p.conns = map[net.Conn]struct{}{}
	p.mu.Unlock()
	for c := range conns {
		reset(c)
	}
}

// Blackhole freezes every connection open now: it stays open and what
// either side sends is dropped, for as long as the pair lives. Connections
// accepted afterwards are forwarded normally.
func (p *Proxy) Blackhole() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		p.frozen[c] = true
	}
}

// Frozen is the number of client connections frozen by Blackhole and still
// open.
func (p *Proxy) Frozen() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.frozen) / 2
}

func (p *Proxy) isFrozen(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.frozen[c]
}

// pipe copies src to dst until src ends, dropping what arrives once src's
// pair is frozen (the socket stays open and keeps being read, so the sender
// never sees an error).
func (p *Proxy) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !p.isFrozen(src) {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// Up accepts and forwards connections again.
func (p *Proxy) Up() {
	p.mu.Lock()
	p.down = false
	p.mu.Unlock()
}

// Conns is the number of client connections currently forwarded.
func (p *Proxy) Conns() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns) / 2
}

// Close stops listening, resets every connection and waits for the
// forwarding goroutines.
func (p *Proxy) Close() {
	_ = p.ln.Close()
	p.Down()
	p.wg.Wait()
}

func (p *Proxy) acceptLoop() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		p.mu.Lock()
		down := p.down
		p.mu.Unlock()
		if down {
			reset(client)
			continue
		}
		p.wg.Add(1)
		go p.serve(client)
	}
}

func (p *Proxy) serve(client net.Conn) {
	defer p.wg.Done()
	p.mu.Lock()
	target := p.target
	p.mu.Unlock()
	server, err := net.DialTimeout("tcp", target, 5*time.Second)
	if err != nil {
		p.logf("tcpproxy: dial %s: %v", target, err)
		reset(client)
		return
	}
	p.mu.Lock()
	if p.down {
		p.mu.Unlock()
		reset(client)
		reset(server)
		return
	}
	p.conns[client] = struct{}{}
	p.conns[server] = struct{}{}
	p.mu.Unlock()

	var once sync.Once
	done := func() {
		once.Do(func() {
			p.mu.Lock()
			delete(p.conns, client)
			delete(p.conns, server)
			delete(p.frozen, client)
			delete(p.frozen, server)
			p.mu.Unlock()
			_ = client.Close()
			_ = server.Close()
		})
	}
	var copies sync.WaitGroup
	copies.Add(2)
	go func() { defer copies.Done(); p.pipe(server, client); done() }()
	go func() { defer copies.Done(); p.pipe(client, server); done() }()
	copies.Wait()
}

// reset closes c with SO_LINGER 0, so the peer sees a connection reset rather
// than an orderly end of stream.
func reset(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}
