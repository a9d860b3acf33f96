package dispatcher_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/pgoutbox/dispatcher"
	"github.com/pgoutbox/pgoutbox/internal/pgtest"
	"github.com/pgoutbox/pgoutbox/publisher/webhook"
)

// The attempt history's cost. Success: a backlog drained by a relay whose
// publisher always succeeds (done per second: the success path, which writes
// no history). Failure: a backlog whose every publish fails, the receiver
// answering 500 twice, then 422 (three attempts a message: retry, retry,
// dead): WAL bytes, and history rows, per failed attempt. Run with
// -benchtime 1x; each iteration is a fresh database.
//
//	go test -run '^$' -bench AttemptHistoryCost -benchtime 1x -count 3 ./dispatcher/

const costN = 20000

var discard = slog.New(slog.NewTextHandler(io.Discard, nil))

func costDrain(b *testing.B, pool *pgxpool.Pool, pub dispatcher.Publisher, cfg dispatcher.Config, until string, want int, seeded func()) time.Duration {
	b.Helper()
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
		SELECT 'order', 'o-' || g, 'OrderPaid', jsonb_build_object('n', g) FROM generate_series(1, $1) AS g`, costN); err != nil {
		b.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `VACUUM ANALYZE outbox`); err != nil {
		b.Fatal(err)
	}
	seeded()
	d, err := dispatcher.New(pool, pub, cfg)
	if err != nil {
		b.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- d.Run(rctx) }()
	for {
		var n int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM outbox WHERE `+until).Scan(&n); err != nil {
			b.Fatal(err)
		}
		if n >= want {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	took := time.Since(start)
	cancel()
	<-done
	return took
}

func BenchmarkAttemptHistoryCost(b *testing.B) {
	b.Run("success", func(b *testing.B) {
		for range b.N {
			pool := pgtest.NewPool(b)
			ctx := context.Background()
			var before string
			seeded := func() {
				if err := pool.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&before); err != nil {
					b.Fatal(err)
				}
			}
			took := costDrain(b, pool, dispatcher.PublisherFunc(func(context.Context, dispatcher.Message) error { return nil }),
				dispatcher.Config{Claim: dispatcher.ClaimUnorderedOnly, Batch: 2000, Concurrency: 16, FinalizeBatch: 4000,
					FinalizeDelay: 2 * time.Millisecond, StatsInterval: -1, Logger: discard}, "status = 'done'", costN, seeded)
			var wal int64
			if err := pool.QueryRow(ctx, `SELECT pg_current_wal_lsn() - $1::pg_lsn`, before).Scan(&wal); err != nil {
				b.Fatal(err)
			}
			var hist int64
			_ = pool.QueryRow(ctx, `SELECT count(*) FROM outbox_attempts`).Scan(&hist) // absent before migration 00011
			b.ReportMetric(float64(costN)/took.Seconds(), "done/s")
			b.ReportMetric(float64(wal)/costN, "wal-B/done")
			b.ReportMetric(float64(hist)/costN, "history-rows/done")
		}
	})
	b.Run("failure", func(b *testing.B) {
		for range b.N {
			pool := pgtest.NewPool(b)
			ctx := context.Background()
			var before string
			seeded := func() {
				if err := pool.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&before); err != nil {
					b.Fatal(err)
				}
			}
			// Attempts 1 and 2 answer 500 (retry), attempt 3 answers 422 (dead).
			pub := dispatcher.PublisherFunc(func(_ context.Context, m dispatcher.Message) error {
				if m.Attempt < 3 {
					return dispatcher.Retryable(&webhook.StatusError{StatusCode: 500, Body: "boom: the receiver's database is locked"})
				}
				return dispatcher.Permanent(&webhook.StatusError{StatusCode: 422, Body: `{"error":"amount must be positive"}`})
			})
			took := costDrain(b, pool, pub, dispatcher.Config{Claim: dispatcher.ClaimUnorderedOnly, Batch: 2000, Concurrency: 16,
				FinalizeBatch: 4000, FinalizeDelay: 2 * time.Millisecond, StatsInterval: -1, Logger: discard,
				MaxAttempts: 3, BackoffBase: time.Millisecond, BackoffCap: 2 * time.Millisecond}, "status = 'dead'", costN, seeded)
			var wal int64
			if err := pool.QueryRow(ctx, `SELECT pg_current_wal_lsn() - $1::pg_lsn`, before).Scan(&wal); err != nil {
				b.Fatal(err)
			}
			var attempts int64
			if err := pool.QueryRow(ctx, `SELECT sum(attempts) FROM outbox`).Scan(&attempts); err != nil {
				b.Fatal(err)
			}
			var hist int64
			_ = pool.QueryRow(ctx, `SELECT count(*) FROM outbox_attempts`).Scan(&hist) // absent before migration 00011
			// From the seeded backlog to the last message dead: the claims
			// and the outcomes (and, with migration 00011, the history).
			b.ReportMetric(float64(wal)/float64(attempts), "wal-B/attempt")
			b.ReportMetric(float64(hist)/float64(attempts), "history-rows/attempt")
			b.ReportMetric(float64(attempts)/took.Seconds(), "attempts/s")
		}
	})
}
