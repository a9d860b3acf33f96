package inboxnats_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/pgoutbox/pgoutbox/dispatcher"
	"github.com/pgoutbox/pgoutbox/inbox"
	"github.com/pgoutbox/pgoutbox/inbox/inboxnats"
	"github.com/pgoutbox/pgoutbox/internal/inboxtest"
	"github.com/pgoutbox/pgoutbox/internal/testlog"
)

// BenchmarkConsume is the cost of the inbox for a consumer: b.N messages
// from one JetStream stream, each writing one side-effect row, through
//   - plain: a handler in its own transaction (begin, insert, commit), then
//     Ack, the loop a consumer writes without an inbox;
//   - inbox: inboxnats.Consume (begin, inbox record, the same insert,
//     commit, then Ack), unordered events;
//   - inbox-ordered: the same with positions (50 aggregates): the
//     aggregate's lock and position update on top.
//
// Figures are msgs/s, one consumer at the given concurrency, on one
// PostgreSQL and one NATS server:
//
//	go test -run '^$' -bench Consume -benchtime 3000x ./inbox/inboxnats/
func BenchmarkConsume(b *testing.B) {
	for _, conc := range []int{1, 4} {
		for _, mode := range []string{"plain", "inbox", "inbox-ordered"} {
			b.Run(fmt.Sprintf("%s/concurrency=%d", mode, conc), func(b *testing.B) {
				benchConsume(b, mode, conc)
			})
		}
	}
}

func benchConsume(b *testing.B, mode string, concurrency int) {
	bd := setup(b)
	pool := inboxtest.NewPool(b)
	var msgs []dispatcher.Message
	if mode == "inbox-ordered" {
		const aggregates = 50
		per := (b.N + aggregates - 1) / aggregates
		for a := range aggregates {
			msgs = append(msgs, inboxtest.Chain(fmt.Sprintf("o-%d", a), int64(1+a*per), per)...)
		}
		// Interleave the aggregates as a stream would carry them.
		inter := make([]dispatcher.Message, 0, len(msgs))
		for i := range per {
			for a := range aggregates {
				inter = append(inter, msgs[a*per+i])
			}
		}
		msgs = inter[:b.N]
	} else {
		msgs = inboxtest.Unordered(1, b.N)
	}
	inboxtest.Publish(b, bd.pub, msgs)
	cons := bd.consumer(b, 30*time.Second)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	b.ResetTimer()
	start := time.Now()
	switch mode {
	case "plain":
		go func() { done <- plainConsume(ctx, cons, pool, concurrency) }()
	default:
		ib, err := inbox.New(inbox.Config{DB: pool, Handler: inboxtest.Effect, Logger: testlog.New(b)})
		if err != nil {
			b.Fatal(err)
		}
		go func() {
			done <- inboxnats.Consume(ctx, inboxnats.Config{Inbox: ib, Consumer: cons, Concurrency: concurrency, Logger: testlog.New(b)})
		}()
	}
	for inboxtest.Count(b, pool, `SELECT count(*) FROM effects`) < int64(b.N) {
		time.Sleep(5 * time.Millisecond)
	}
	elapsed := time.Since(start)
	b.StopTimer()
	cancel()
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "msgs/s")
}

// plainConsume is the consumer without an inbox: the handler's write in a
// transaction of its own, then Ack.
func plainConsume(ctx context.Context, cons natsjs.Consumer, pool *pgxpool.Pool, concurrency int) error {
	it, err := cons.Messages(natsjs.PullMaxMessages(max(2*concurrency, 16)))
	if err != nil {
		return err
	}
	stop := context.AfterFunc(ctx, it.Stop)
	defer stop()
	msgs := make(chan natsjs.Msg)
	errs := make(chan error, concurrency)
	for range concurrency {
		go func() {
			for msg := range msgs {
				m, err := inboxnats.Message(msg)
				if err == nil {
					err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
						return inboxtest.Effect(ctx, tx, inbox.Delivery{Message: m})
					})
				}
				if err != nil {
					errs <- err
					return
				}
				_ = msg.Ack()
			}
			errs <- nil
		}()
	}
	for {
		msg, err := it.Next()
		if err != nil {
			close(msgs)
			for range concurrency {
				if e := <-errs; e != nil && ctx.Err() == nil {
					return e
				}
			}
			return nil
		}
		msgs <- msg
	}
}
