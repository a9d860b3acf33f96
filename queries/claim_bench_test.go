package queries_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/pgoutbox/pgoutbox/db"
	"github.com/pgoutbox/pgoutbox/internal/pgtest"
)

// BenchmarkClaim measures one claim of 50 with 10,000 pending rows and
// 0, 100k or 1M retained done rows. The goal: the 1M figure stays within
// 1.2x of the 0 figure (the partial indexes keep done rows out of the path).
// Each claim runs in a transaction that is rolled back, so every iteration
// sees the same queue. The claim is the relay's, OutboxClaimWindow, from the
// start of the queue (the window from the empty snapshot to now), which
// reads the most index of any claim the relay runs.
//
//	go test -run '^$' -bench Claim -benchtime 2000x ./queries/
func BenchmarkClaim(b *testing.B) {
	for _, retained := range []int{0, 100_000, 1_000_000} {
		b.Run(fmt.Sprintf("done=%d", retained), func(b *testing.B) {
			pool := pgtest.NewPool(b)
			ctx := context.Background()
			_, err := pool.Exec(ctx, `
				INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload, status, done_at, attempts, lease_version)
				SELECT 'order', 'a' || (g % 1000), 'OrderPaid', '{"n":1}', 'done', now(), 1, 1
				  FROM generate_series(1, $1) AS g`, retained)
			if err != nil {
				b.Fatal(err)
			}
			_, err = pool.Exec(ctx, `
				INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
				SELECT 'order', 'a' || (g % 1000), 'OrderPaid', '{"n":1}'
				  FROM generate_series(1, 10000) AS g`)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := pool.Exec(ctx, `VACUUM ANALYZE outbox`); err != nil {
				b.Fatal(err)
			}
			snap, err := db.New(pool).OutboxClaimSnapshot(ctx)
			if err != nil {
				b.Fatal(err)
			}
			params := db.OutboxClaimWindowParams{Snapshot: "1:1:", Upper: snap.Snapshot, Owner: "bench", Batch: 50, Lease: time.Minute}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				tx, err := pool.Begin(ctx)
				if err != nil {
					b.Fatal(err)
				}
				rows, err := db.New(tx).OutboxClaimWindow(ctx, params)
				if err != nil || len(rows) != 50 {
					b.Fatalf("claimed %d: %v", len(rows), err)
				}
				if err := tx.Rollback(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
