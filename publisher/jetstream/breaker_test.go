package jetstream

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/pgoutbox/pgoutbox/internal/outagetest"
)

// natsServer is a nats-server process of the test's own, with JetStream
// and file storage, that the test stops and starts again on the same port
// (the shared server the other tests use is left alone).
type natsServer struct {
	bin, dir string
	port     int
	cmd      *exec.Cmd
}

func startNATS(t *testing.T) *natsServer {
	t.Helper()
	bin, err := exec.LookPath("nats-server")
	if err != nil {
		t.Fatalf("nats-server not found on PATH (the breaker test runs a server of its own): install nats-server: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	s := &natsServer{bin: bin, dir: t.TempDir(), port: port}
	s.start(t)
	t.Cleanup(func() { s.stop(t) })
	return s
}

func (s *natsServer) url() string { return fmt.Sprintf("nats://127.0.0.1:%d", s.port) }

func (s *natsServer) start(t *testing.T) {
	t.Helper()
	s.cmd = exec.Command(s.bin, "-a", "127.0.0.1", "-p", strconv.Itoa(s.port), "-js", "-sd", s.dir)
	if err := s.cmd.Start(); err != nil {
		t.Fatalf("start nats-server: %v", err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		nc, err := nats.Connect(s.url(), nats.MaxReconnects(0))
		if err == nil {
			nc.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("nats-server on %s did not come up: %v", s.url(), err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stop kills the server at once, as a crash or a lost host would.
func (s *natsServer) stop(t *testing.T) {
	t.Helper()
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
	s.cmd = nil
}

// JetStream stopped while a backlog waits, and started again: the relay's
// breaker opens and probes, no attempt is spent and nothing goes to dead;
// once the server is back every message is stored, each ordered aggregate
// in commit order.
func TestBreaker_JetStreamStoppedAndRestarted(t *testing.T) {
	t.Parallel()
	srv := startNATS(t)
	nc, err := nats.Connect(srv.url())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := natsjs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, natsjs.StreamConfig{Name: "OUTAGE", Subjects: []string{"outage.>"}, Storage: natsjs.FileStorage}); err != nil {
		t.Fatal(err)
	}
	p := newPublisher(t, Config{URL: srv.url(), SubjectTemplate: "outage.{{.AggregateType}}.{{.EventType}}", PublishTimeout: 500 * time.Millisecond,
		Options: []nats.Option{nats.ReconnectWait(20 * time.Millisecond), nats.ReconnectJitter(0, 0)}})
	outagetest.Run(t, outagetest.Outage{
		Publisher: p,
		Down:      srv.stop,
		Up:        srv.start,
		Delivered: func(t *testing.T) []outagetest.Delivered {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			stream, err := js.Stream(ctx, "OUTAGE")
			if err != nil {
				t.Fatal(err)
			}
			info, err := stream.Info(ctx)
			if err != nil {
				t.Fatal(err)
			}
			var out []outagetest.Delivered
			for seq := info.State.FirstSeq; seq <= info.State.LastSeq; seq++ {
				m, err := stream.GetMsg(ctx, seq)
				if err != nil {
					t.Fatalf("GetMsg %d: %v", seq, err)
				}
				id, _ := strconv.ParseInt(m.Header.Get("ce-id"), 10, 64)
				out = append(out, outagetest.Delivered{AggregateID: m.Header.Get("ce-subject"), OutboxID: id})
			}
			return out
		},
	}, 20)
}
