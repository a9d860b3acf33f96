package main

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/url"
	"os"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/pgoutbox/pgoutbox/internal/tcpproxy"
)

// broker is one transport the events go through: how relays publish to it,
// how consumers read it, how its connections are cut, and how verify reads
// what it holds.
type broker struct {
	name        string   // nats, amqp, kafka
	relayArgs   []string // publisher flags of pgoutbox run
	consumeArgs []string // broker flags of `inbox consume`
	verifyArgs  []string // pgoutbox verify flags for the stream or topic; nil: none (a queue is consumed)
	cut         func()   // resets every connection to the broker; new ones work
	close       func()
}

// source is the CloudEvents source of the broker's outbox.
func (b *broker) source() string { return "urn:chaos-inbox:" + b.name }

// outboxTable and inboxTable are the broker's tables.
func (b *broker) outboxTable() string { return "outbox_" + b.name }
func (b *broker) inboxTable() string  { return b.name + "_inbox" }

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// proxied returns raw with its host replaced by a TCP proxy in front of it,
// and the proxy.
func proxied(raw string) (string, *tcpproxy.Proxy, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", nil, err
	}
	p, err := tcpproxy.New(u.Host, nil)
	if err != nil {
		return "", nil, err
	}
	u.Host = p.Addr()
	return u.String(), p, nil
}

// proxyCut resets every connection through p, refuses new ones for a
// moment, then lets them through again.
func proxyCut(p *tcpproxy.Proxy) func() {
	return func() {
		p.Down()
		time.Sleep(500 * time.Millisecond)
		p.Up()
	}
}

func natsBroker(ctx context.Context) (*broker, error) {
	direct := cmp.Or(os.Getenv("NATS_URL"), "nats://127.0.0.1:4222")
	nc, err := nats.Connect(direct, nats.Timeout(5*time.Second))
	if err != nil {
		return nil, fmt.Errorf("NATS with JetStream not reachable at %s (start nats-server -js or set NATS_URL): %w", direct, err)
	}
	js, err := natsjs.New(nc)
	if err != nil {
		nc.Close()
		return nil, err
	}
	sfx := randHex(4)
	stream, subject := "CHAOS_INBOX_"+sfx, "chaosinbox."+sfx
	if _, err := js.CreateStream(ctx, natsjs.StreamConfig{Name: stream, Subjects: []string{subject + ".>"},
		Storage: natsjs.MemoryStorage, Duplicates: 2 * time.Minute}); err != nil {
		nc.Close()
		return nil, fmt.Errorf("create stream: %w", err)
	}
	if _, err := js.CreateOrUpdateConsumer(ctx, stream, natsjs.ConsumerConfig{Durable: "inbox", AckPolicy: natsjs.AckExplicitPolicy,
		AckWait: 5 * time.Second, MaxAckPending: 1000}); err != nil {
		nc.Close()
		return nil, fmt.Errorf("create consumer: %w", err)
	}
	via, proxy, err := proxied(direct)
	if err != nil {
		nc.Close()
		return nil, err
	}
	return &broker{
		name:        "nats",
		relayArgs:   []string{"--publisher", "nats", "--nats-url", via, "--nats-subject", subject + ".{{.AggregateType}}"},
		consumeArgs: []string{"-nats-url", via, "-stream", stream},
		verifyArgs:  []string{"--nats-url", direct, "--stream", stream},
		cut:         proxyCut(proxy),
		close: func() {
			_ = js.DeleteStream(context.Background(), stream)
			nc.Close()
			proxy.Close()
		},
	}, nil
}

func amqpBroker() (*broker, error) {
	direct := cmp.Or(os.Getenv("AMQP_URL"), "amqp://guest:guest@127.0.0.1:5672/")
	conn, err := amqp.DialConfig(direct, amqp.Config{Dial: amqp.DefaultDial(5 * time.Second)})
	if err != nil {
		return nil, fmt.Errorf("RabbitMQ not reachable (start rabbitmq-server or set AMQP_URL): %w", err)
	}
	ch, err := conn.Channel()
	if err != nil {
		conn.Close()
		return nil, err
	}
	name := "chaos.inbox." + randHex(4)
	if err := ch.ExchangeDeclare(name, "topic", false, false, false, false, nil); err != nil {
		conn.Close()
		return nil, err
	}
	if _, err := ch.QueueDeclare(name, false, false, false, false, nil); err != nil {
		conn.Close()
		return nil, err
	}
	if err := ch.QueueBind(name, "#", name, false, nil); err != nil {
		conn.Close()
		return nil, err
	}
	via, proxy, err := proxied(direct)
	if err != nil {
		conn.Close()
		return nil, err
	}
	return &broker{
		name:        "amqp",
		relayArgs:   []string{"--publisher", "amqp", "--amqp-url", via, "--amqp-exchange", name},
		consumeArgs: []string{"-amqp-url", via, "-queue", name},
		cut:         proxyCut(proxy),
		close: func() {
			_, _ = ch.QueueDelete(name, false, false, false)
			_ = ch.ExchangeDelete(name, false, false)
			conn.Close()
			proxy.Close()
		},
	}, nil
}

// cutListener is kfake's listener: it remembers the connections it
// accepted, so that cut can reset them all.
type cutListener struct {
	net.Listener
	mu    sync.Mutex
	conns map[net.Conn]bool
}

func (l *cutListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.mu.Lock()
		l.conns[c] = true
		l.mu.Unlock()
	}
	return c, err
}

func (l *cutListener) cut() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for c := range l.conns {
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetLinger(0) // a reset, as a dropped connection looks
		}
		_ = c.Close()
	}
	clear(l.conns)
}

func kafkaBroker() (*broker, error) {
	var listeners []*cutListener
	var mu sync.Mutex
	const topic = "chaos-inbox"
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(4, topic),
		kfake.ListenFn(func(network, address string) (net.Listener, error) {
			ln, err := net.Listen(network, address)
			if err != nil {
				return nil, err
			}
			cl := &cutListener{Listener: ln, conns: map[net.Conn]bool{}}
			mu.Lock()
			listeners = append(listeners, cl)
			mu.Unlock()
			return cl, nil
		}))
	if err != nil {
		return nil, fmt.Errorf("kfake: %w", err)
	}
	addr := c.ListenAddrs()[0]
	return &broker{
		name:        "kafka",
		relayArgs:   []string{"--publisher", "kafka", "--kafka-brokers", addr, "--kafka-topic", topic},
		consumeArgs: []string{"-kafka-brokers", addr, "-topic", topic},
		verifyArgs:  []string{"--kafka-brokers", addr, "--topic", topic},
		cut: func() {
			mu.Lock()
			defer mu.Unlock()
			for _, l := range listeners {
				l.cut()
			}
		},
		close: c.Close,
	}, nil
}
