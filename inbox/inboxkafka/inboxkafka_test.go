package inboxkafka_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pgoutbox/pgoutbox/dispatcher"
	"github.com/pgoutbox/pgoutbox/inbox"
	"github.com/pgoutbox/pgoutbox/inbox/inboxkafka"
	"github.com/pgoutbox/pgoutbox/internal/inboxtest"
	"github.com/pgoutbox/pgoutbox/internal/pgtest"
	"github.com/pgoutbox/pgoutbox/internal/testlog"
	"github.com/pgoutbox/pgoutbox/publisher/kafka"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

const topic = "orders"

// setup starts an in-process Kafka (kfake) with a 3-partition topic and
// publishes msgs with the kafka publisher.
func setup(t *testing.T, msgs []dispatcher.Message) *kfake.Cluster {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, topic))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	p, err := kafka.New(kafka.Config{Brokers: c.ListenAddrs(), Topic: topic, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	inboxtest.Publish(t, p, msgs)
	return c
}

func groupClient(t *testing.T, c *kfake.Cluster) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumerGroup("inbox"), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit(), kgo.BlockRebalanceOnPoll())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

func consume(t *testing.T, cfg inboxkafka.Config) {
	t.Helper()
	cfg.Logger = testlog.New(t)
	inboxtest.Go(t, func(ctx context.Context) error { return inboxkafka.Consume(ctx, cfg) })
}

// Two consumers of one group share the topic's partitions; handler
// failures are retried in place: every event once, each aggregate in order.
func TestConsume_TwoConsumersOfOneGroupProcessOnceInOrder(t *testing.T) {
	t.Parallel()
	var msgs []dispatcher.Message
	for i, agg := range []string{"o-1", "o-2", "o-3", "o-4"} {
		msgs = append(msgs, inboxtest.Chain(agg, int64(100*(i+1)), 20)...)
	}
	msgs = append(msgs, inboxtest.Unordered(900, 10)...)
	c := setup(t, msgs)
	pool := inboxtest.NewPool(t)
	for range 2 {
		ib := inboxtest.NewInbox(t, inbox.Config{DB: pool, Handler: inboxtest.FailFirst("103", "210", "905")})
		consume(t, inboxkafka.Config{Inbox: ib, Client: groupClient(t, c), RetryDelay: 20 * time.Millisecond})
	}
	inboxtest.WaitCount(t, pool, int64(len(msgs)), time.Minute, `SELECT count(*) FROM inbox WHERE status = 'processed'`)
	inboxtest.CheckOnceInOrder(t, pool, msgs)
}

// A consumer that processed records and stopped before committing their
// offsets (a crash between the inbox commit and the ack): the group hands
// them to the next consumer, and the inbox acknowledges them as
// duplicates.
func TestConsume_CrashBeforeCommitRedeliversDuplicates(t *testing.T) {
	t.Parallel()
	msgs := inboxtest.Chain("o-1", 1, 5)
	c := setup(t, msgs)
	pool := inboxtest.NewPool(t)
	ib := inboxtest.NewInbox(t, inbox.Config{DB: pool, Handler: inboxtest.Effect})

	crashed := groupClient(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	processed := 0
	for processed < len(msgs) {
		fetches := crashed.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("fetched %d records", processed)
		}
		for _, r := range fetches.Records() {
			m, err := inboxkafka.Message(r)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := ib.Process(ctx, m); err != nil {
				t.Fatal(err)
			}
			processed++
		}
	}
	crashed.AllowRebalance()
	crashed.Close() // no commit

	consume(t, inboxkafka.Config{Inbox: ib, Client: groupClient(t, c)})
	inboxtest.WaitCount(t, pool, int64(len(msgs)), time.Minute, `SELECT count(*) FROM inbox WHERE deliveries = 2`)
	// The second delivery's row is visible at its COMMIT, its count moves
	// just after: wait for the count.
	s := inboxtest.WaitStats(t, ib, time.Minute, "every event a duplicate", func(s inbox.Stats) bool { return s.Duplicates >= int64(len(msgs)) })
	if s.Duplicates != int64(len(msgs)) || s.Processed != int64(len(msgs)) {
		t.Fatalf("stats %+v", s)
	}
	inboxtest.CheckOnceInOrder(t, pool, msgs)
}
