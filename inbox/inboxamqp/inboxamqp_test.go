package inboxamqp_test

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"slices"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/pgoutbox/pgoutbox/dispatcher"
	"github.com/pgoutbox/pgoutbox/inbox"
	"github.com/pgoutbox/pgoutbox/inbox/inboxamqp"
	"github.com/pgoutbox/pgoutbox/internal/inboxtest"
	"github.com/pgoutbox/pgoutbox/internal/pgtest"
	"github.com/pgoutbox/pgoutbox/internal/tcpproxy"
	"github.com/pgoutbox/pgoutbox/internal/testlog"
	"github.com/pgoutbox/pgoutbox/publisher/rabbitmq"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func amqpURL() string { return cmp.Or(os.Getenv("AMQP_URL"), inboxamqp.URLDefault) }

type bundle struct {
	queue string
	pub   *rabbitmq.Publisher
}

// setup declares an exchange and a queue of the test's own and a rabbitmq
// publisher writing to them.
func setup(t *testing.T) *bundle {
	t.Helper()
	conn, err := amqp.DialConfig(amqpURL(), amqp.Config{Dial: amqp.DefaultDial(5 * time.Second)})
	if err != nil {
		t.Fatalf("RabbitMQ not reachable: start rabbitmq-server or set AMQP_URL: %v", err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	sfx := make([]byte, 6)
	_, _ = rand.Read(sfx)
	name := "pgoutbox.inbox.test." + hex.EncodeToString(sfx)
	if err := ch.ExchangeDeclare(name, "topic", false, true, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare(name, false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueBind(name, "#", name, false, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = ch.QueueDelete(name, false, false, false)
		_ = ch.ExchangeDelete(name, false, false)
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pub, err := rabbitmq.New(ctx, rabbitmq.Config{URL: amqpURL(), Exchange: name, Logger: testlog.New(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pub.Close() })
	return &bundle{queue: name, pub: pub}
}

func consume(t *testing.T, cfg inboxamqp.Config) {
	t.Helper()
	cfg.Logger = testlog.New(t)
	cfg.URL = cmp.Or(cfg.URL, amqpURL())
	inboxtest.Go(t, func(ctx context.Context) error { return inboxamqp.Consume(ctx, cfg) })
}

// A failed delivery is requeued and arrives after its successor: the
// successor is parked and processed right after it.
func TestConsume_RequeuedOlderEventIsParkedUntilItsPredecessor(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pool := inboxtest.NewPool(t)
	msgs := inboxtest.Chain("o-1", 1, 2)
	ib := inboxtest.NewInbox(t, inbox.Config{DB: pool, Handler: inboxtest.FailFirst("1")})
	inboxtest.Publish(t, b.pub, msgs)
	consume(t, inboxamqp.Config{Inbox: ib, Queue: b.queue, RequeueDelay: 100 * time.Millisecond})
	inboxtest.WaitCount(t, pool, 2, time.Minute, `SELECT count(*) FROM effects`)
	if got := inboxtest.Effects(t, pool); !slices.Equal(got, []string{"1", "2"}) {
		t.Fatalf("effects %v", got)
	}
	// Event 2's effect is visible at its COMMIT, its release is counted
	// just after.
	if s := inboxtest.WaitStats(t, ib, time.Minute, "event 2 released", func(s inbox.Stats) bool { return s.Released >= 1 }); s.Parked != 1 || s.Released != 1 {
		t.Fatalf("stats %+v: want event 2 parked, then released", s)
	}
}

// Two consumers on one queue whose connections are cut (through a proxy):
// they reconnect, unacknowledged deliveries come again, to either consumer;
// every event is processed once, each aggregate in order.
func TestConsume_TwoConsumersAndCutConnectionsProcessOnceInOrder(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pool := inboxtest.NewPool(t)
	u, err := url.Parse(amqpURL())
	if err != nil {
		t.Fatal(err)
	}
	proxy := tcpproxy.Start(t, u.Host)
	u.Host = proxy.Addr()
	var msgs []dispatcher.Message
	for i, agg := range []string{"o-1", "o-2", "o-3"} {
		msgs = append(msgs, inboxtest.Chain(agg, int64(100*(i+1)), 30)...)
	}
	msgs = append(msgs, inboxtest.Unordered(900, 20)...)
	for range 2 {
		ib := inboxtest.NewInbox(t, inbox.Config{DB: pool, Handler: inboxtest.FailFirst("102", "215", "903")})
		consume(t, inboxamqp.Config{Inbox: ib, URL: u.String(), Queue: b.queue, Concurrency: 4,
			RequeueDelay: 20 * time.Millisecond, ReconnectDelay: 50 * time.Millisecond})
	}
	// Half, then a cut while the consumers may be working, then the rest:
	// the consumers must have reconnected to get it.
	half := len(msgs) / 2
	inboxtest.Publish(t, b.pub, msgs[:half])
	inboxtest.WaitCount(t, pool, 20, time.Minute, `SELECT count(*) FROM effects`)
	proxy.Down()
	proxy.Up()
	inboxtest.Publish(t, b.pub, msgs[half:])
	inboxtest.WaitCount(t, pool, int64(len(msgs)), time.Minute, `SELECT count(*) FROM inbox WHERE status = 'processed'`)
	inboxtest.CheckOnceInOrder(t, pool, msgs)
}

// A delivery the inbox cannot record is rejected, not requeued forever.
func TestHandle_InvalidMessageIsRejected(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pool := inboxtest.NewPool(t)
	ib := inboxtest.NewInbox(t, inbox.Config{DB: pool, Handler: inboxtest.Effect})
	conn, err := amqp.Dial(amqpURL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.PublishWithContext(context.Background(), "", b.queue, false, false, amqp.Publishing{
		Headers: amqp.Table{"cloudEvents_id": "1", "cloudEvents_pgoutboxseq": "x"}, Body: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	d := get(t, ch, b.queue)
	if _, err := inboxamqp.Handle(context.Background(), ib, d, time.Millisecond, testlog.New(t)); err == nil {
		t.Fatal("want ErrInvalidMessage")
	}
	if q, err := ch.QueueDeclarePassive(b.queue, false, false, false, false, nil); err != nil || q.Messages != 0 {
		t.Fatalf("queue %+v, %v: the invalid delivery was requeued", q, err)
	}
}

func get(t *testing.T, ch *amqp.Channel, queue string) amqp.Delivery {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		d, ok, err := ch.Get(queue, false)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			return d
		}
		if time.Now().After(deadline) {
			t.Fatalf("no message in %s", queue)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
