package inboxnats_test

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/pgoutbox/pgoutbox/dispatcher"
	"github.com/pgoutbox/pgoutbox/inbox"
	"github.com/pgoutbox/pgoutbox/inbox/inboxnats"
	"github.com/pgoutbox/pgoutbox/internal/inboxtest"
	"github.com/pgoutbox/pgoutbox/internal/pgtest"
	"github.com/pgoutbox/pgoutbox/internal/testlog"
	"github.com/pgoutbox/pgoutbox/publisher/jetstream"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func natsURL() string { return cmp.Or(os.Getenv("NATS_URL"), "nats://127.0.0.1:4222") }

type bundle struct {
	js      natsjs.JetStream
	stream  string
	subject string
	pub     *jetstream.Publisher
}

// setup creates a stream of its own and a jetstream publisher writing to it.
func setup(t testing.TB) *bundle {
	t.Helper()
	nc, err := nats.Connect(natsURL(), nats.Timeout(3*time.Second))
	if err != nil {
		t.Fatalf("NATS with JetStream not reachable at %s: start nats-server -js or set NATS_URL: %v", natsURL(), err)
	}
	t.Cleanup(nc.Close)
	js, err := natsjs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	sfx := make([]byte, 6)
	_, _ = rand.Read(sfx)
	b := &bundle{js: js, stream: "INBOX_TEST_" + hex.EncodeToString(sfx), subject: "inbox.test." + hex.EncodeToString(sfx)}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, natsjs.StreamConfig{Name: b.stream, Subjects: []string{b.subject + ".>"}, Storage: natsjs.MemoryStorage}); err != nil {
		t.Fatalf("JetStream at %s: create stream: %v (start nats-server -js or set NATS_URL)", natsURL(), err)
	}
	t.Cleanup(func() { _ = js.DeleteStream(context.Background(), b.stream) })
	b.pub, err = jetstream.New(ctx, jetstream.Config{URL: natsURL(), SubjectTemplate: b.subject + ".{{.AggregateID}}", Logger: testlog.New(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.pub.Close() })
	return b
}

func (b *bundle) consumer(t testing.TB, ackWait time.Duration) natsjs.Consumer {
	t.Helper()
	c, err := b.js.CreateOrUpdateConsumer(context.Background(), b.stream, natsjs.ConsumerConfig{
		Durable: "inbox", AckPolicy: natsjs.AckExplicitPolicy, AckWait: ackWait, MaxAckPending: 1000})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// consume runs Consume until the test ends.
func consume(t *testing.T, cfg inboxnats.Config) {
	t.Helper()
	cfg.Logger = testlog.New(t)
	inboxtest.Go(t, func(ctx context.Context) error { return inboxnats.Consume(ctx, cfg) })
}

// An older event redelivered by JetStream (its first delivery failed and
// was negatively acknowledged) arrives after its successor: the successor
// is parked, acknowledged, and processed right after it.
func TestConsume_RedeliveredOlderEventIsParkedUntilItsPredecessor(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pool := inboxtest.NewPool(t)
	msgs := inboxtest.Chain("o-1", 1, 2)
	ib := inboxtest.NewInbox(t, inbox.Config{DB: pool, Handler: inboxtest.FailFirst("1")})
	inboxtest.Publish(t, b.pub, msgs)
	consume(t, inboxnats.Config{Inbox: ib, Consumer: b.consumer(t, 30*time.Second), NakDelay: 300 * time.Millisecond})
	inboxtest.WaitCount(t, pool, 2, time.Minute, `SELECT count(*) FROM effects`)
	inboxtest.CheckOnceInOrder(t, pool, msgs)
	// Event 2's effect is visible at its COMMIT, its release is counted
	// just after.
	if s := inboxtest.WaitStats(t, ib, time.Minute, "event 2 released", func(s inbox.Stats) bool { return s.Released >= 1 }); s.Parked != 1 || s.Released != 1 || s.HandlerErrors != 1 {
		t.Fatalf("stats %+v: want event 2 parked, then released", s)
	}
	if got := inboxtest.Effects(t, pool); !slices.Equal(got, []string{"1", "2"}) {
		t.Fatalf("effects %v", got)
	}
}

// Two consumer processes read one durable consumer (the subject's events
// are shared between them) with failures forcing redeliveries: each event
// is processed once, each aggregate in order.
func TestConsume_TwoConsumersOnOneSubjectProcessOnceInOrder(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pool := inboxtest.NewPool(t)
	var msgs []dispatcher.Message
	for i, agg := range []string{"o-1", "o-2", "o-3"} {
		msgs = append(msgs, inboxtest.Chain(agg, int64(100*(i+1)), 15)...)
	}
	msgs = append(msgs, inboxtest.Unordered(900, 10)...)
	fail := []string{"101", "105", "203", "210", "300", "312", "903"}
	cons := b.consumer(t, 30*time.Second)
	for range 2 {
		ib := inboxtest.NewInbox(t, inbox.Config{DB: pool, Handler: inboxtest.FailFirst(fail...)})
		consume(t, inboxnats.Config{Inbox: ib, Consumer: cons, Concurrency: 4, NakDelay: 50 * time.Millisecond})
	}
	inboxtest.Publish(t, b.pub, msgs)
	inboxtest.WaitCount(t, pool, int64(len(msgs)), time.Minute, `SELECT count(*) FROM effects`)
	inboxtest.WaitCount(t, pool, int64(len(msgs)), time.Minute, `SELECT count(*) FROM inbox WHERE status = 'processed'`)
	inboxtest.CheckOnceInOrder(t, pool, msgs)
}

// A consumer that processed a message and stopped before acknowledging it
// (a crash between the inbox commit and the ack): JetStream delivers it
// again after AckWait, and the inbox acknowledges it as a duplicate.
func TestConsume_CrashBetweenCommitAndAckRedeliversADuplicate(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pool := inboxtest.NewPool(t)
	msgs := inboxtest.Chain("o-1", 1, 1)
	inboxtest.Publish(t, b.pub, msgs)
	cons := b.consumer(t, time.Second)
	ib := inboxtest.NewInbox(t, inbox.Config{DB: pool, Handler: inboxtest.Effect})
	batch, err := cons.Fetch(1, natsjs.FetchMaxWait(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for msg := range batch.Messages() {
		m, err := inboxnats.Message(msg)
		if err != nil {
			t.Fatal(err)
		}
		if out, err := ib.Process(context.Background(), m); err != nil || out != inbox.Processed {
			t.Fatalf("Process = %v, %v", out, err)
		}
		// No Ack: the consumer "crashed" here.
	}
	consume(t, inboxnats.Config{Inbox: ib, Consumer: cons})
	inboxtest.WaitCount(t, pool, 2, time.Minute, `SELECT deliveries FROM inbox WHERE id = '1'`)
	// The second delivery is visible at its COMMIT, counted just after.
	if s := inboxtest.WaitStats(t, ib, time.Minute, "one duplicate", func(s inbox.Stats) bool { return s.Duplicates >= 1 }); s.Duplicates != 1 {
		t.Fatalf("stats %+v", s)
	}
	inboxtest.CheckOnceInOrder(t, pool, msgs)
	// And the duplicate was acknowledged: nothing is pending.
	deadline := time.Now().Add(30 * time.Second)
	for {
		info, err := cons.Info(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if info.NumAckPending == 0 && info.NumPending == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("consumer info %+v: the duplicate was not acknowledged", info)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
