package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pgoutbox/pgoutbox/inbox"
	"github.com/pgoutbox/pgoutbox/inbox/inboxamqp"
	"github.com/pgoutbox/pgoutbox/inbox/inboxkafka"
	"github.com/pgoutbox/pgoutbox/inbox/inboxnats"
)

// consumeMain is one consumer process (`inbox consume -broker NAME ...`):
// the broker's adapter into its inbox tables, with a handler that writes
// one side-effect row per event in the inbox transaction.
func consumeMain(args []string) int {
	fs := flag.NewFlagSet("consume", flag.ExitOnError)
	brokerName := fs.String("broker", "", "nats, amqp or kafka")
	outboxURL := fs.String("outbox-url", "", "the outbox database (positions)")
	consumerURL := fs.String("consumer-url", "", "the consumer's database (inbox, side effects)")
	natsURL := fs.String("nats-url", "", "")
	stream := fs.String("stream", "", "")
	amqpURL := fs.String("amqp-url", "", "")
	queue := fs.String("queue", "", "")
	kafkaBrokers := fs.String("kafka-brokers", "", "")
	topic := fs.String("topic", "", "")
	_ = fs.Parse(args)
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := consume(ctx, log, *brokerName, *outboxURL, *consumerURL, func(ib *inbox.Inbox) error {
		switch *brokerName {
		case "nats":
			nc, err := nats.Connect(*natsURL, nats.MaxReconnects(-1), nats.ReconnectWait(200*time.Millisecond))
			if err != nil {
				return err
			}
			defer nc.Close()
			js, err := natsjs.New(nc)
			if err != nil {
				return err
			}
			cons, err := js.Consumer(ctx, *stream, "inbox")
			if err != nil {
				return err
			}
			return inboxnats.Consume(ctx, inboxnats.Config{Inbox: ib, Consumer: cons, Concurrency: 4, NakDelay: 200 * time.Millisecond, Logger: log})
		case "amqp":
			return inboxamqp.Consume(ctx, inboxamqp.Config{Inbox: ib, URL: *amqpURL, Queue: *queue, Concurrency: 4,
				RequeueDelay: 200 * time.Millisecond, ReconnectDelay: 200 * time.Millisecond, Logger: log})
		case "kafka":
			cl, err := kgo.NewClient(kgo.SeedBrokers(*kafkaBrokers), kgo.ConsumerGroup("inbox"), kgo.ConsumeTopics(*topic),
				kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit(), kgo.BlockRebalanceOnPoll(),
				kgo.SessionTimeout(6*time.Second))
			if err != nil {
				return err
			}
			defer cl.Close()
			return inboxkafka.Consume(ctx, inboxkafka.Config{Inbox: ib, Client: cl, RetryDelay: 200 * time.Millisecond, Logger: log})
		}
		return fmt.Errorf("unknown broker %q", *brokerName)
	}); err != nil {
		log.Error("consumer failed", slog.Any("error", err))
		return 1
	}
	return 0
}

// consume builds the broker's Inbox and runs it with read until ctx ends.
func consume(ctx context.Context, log *slog.Logger, name, outboxURL, consumerURL string, read func(*inbox.Inbox) error) error {
	outbox, err := pgxpool.New(ctx, outboxURL)
	if err != nil {
		return err
	}
	defer outbox.Close()
	consumer, err := pgxpool.New(ctx, consumerURL)
	if err != nil {
		return err
	}
	defer consumer.Close()
	b := &broker{name: name}
	// The position of an event, computed from the outbox's rows rather
	// than read from the columns the relay sends (prev_seq, sent_seq): its
	// seq, the seq of the previous ordered event of its aggregate and of
	// the latest earlier one that was delivered (index TABLE_ordered_seq).
	// The event is claimed only once every earlier one is resolved, so
	// their statuses are final here. What arrived must agree.
	lookup := fmt.Sprintf(`SELECT o.ordered, coalesce(o.seq, 0),
	       coalesce((SELECT p.seq FROM %[1]s AS p
	                  WHERE p.aggregate_id = o.aggregate_id AND p.ordered AND p.seq < o.seq
	                  ORDER BY p.seq DESC LIMIT 1), 0),
	       coalesce((SELECT p.seq FROM %[1]s AS p
	                  WHERE p.aggregate_id = o.aggregate_id AND p.ordered AND p.seq < o.seq AND p.status = 'done'
	                  ORDER BY p.seq DESC LIMIT 1), 0)
	  FROM %[1]s AS o WHERE o.id = $1`, b.outboxTable())
	prepare := func(ctx context.Context, m *inbox.Message) error {
		id, err := strconv.ParseInt(m.ID, 10, 64)
		if err != nil {
			return fmt.Errorf("id %q: %w", m.ID, err)
		}
		var ordered bool
		var want inbox.Position
		var sent int64
		if err := outbox.QueryRow(ctx, lookup, id).Scan(&ordered, &want.Seq, &want.Prev, &sent); err != nil {
			return fmt.Errorf("position of %d: %w", id, err)
		}
		if sent != want.Prev {
			want.Skipped, want.Sent = true, sent
		}
		if !ordered {
			want = inbox.Position{}
		}
		if m.Position != want {
			if _, err := consumer.Exec(ctx, `INSERT INTO position_mismatches (broker, id, wire, outbox) VALUES ($1, $2, $3, $4)`,
				name, m.ID, fmt.Sprint(m.Position), fmt.Sprint(want)); err != nil {
				return err
			}
		}
		m.Position = want
		return nil
	}
	handler := func(ctx context.Context, tx pgx.Tx, d inbox.Delivery) error {
		_, err := tx.Exec(ctx, `INSERT INTO `+name+`_effects (id, aggregate_id, seq, parked) VALUES ($1, $2, $3, $4)`,
			d.ID, d.Subject, d.Position.Seq, d.Parked)
		return err
	}
	ib, err := inbox.New(inbox.Config{DB: consumer, Table: b.inboxTable(), Handler: handler, Prepare: prepare,
		MaxParkedAge: 2 * time.Minute, SweepInterval: 500 * time.Millisecond, Logger: log})
	if err != nil {
		return err
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- ib.Run(runCtx) }()
	err = read(ib)
	cancel()
	<-done
	switch {
	case ctx.Err() != nil:
		return nil
	case err == nil:
		return errors.New("the consumer stopped reading")
	}
	return err
}
