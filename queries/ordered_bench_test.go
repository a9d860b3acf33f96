package queries_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/pgoutbox/db"
	"github.com/pgoutbox/pgoutbox/internal/pgtest"
)

// naiveOrderedClaimSQL is the seed's ordered claim, kept as the benchmark's
// baseline: a head is a row with no earlier (by id) undelivered row of its
// aggregate. (Its order is wrong under concurrent producers: id order is not
// commit order.)
const naiveOrderedClaimSQL = `
WITH picked AS (
    SELECT o.id
      FROM outbox AS o
     WHERE o.ordered
       AND ((o.status = 'pending' AND o.available_at <= now())
         OR (o.status = 'processing' AND o.lease_until < now() AND o.attempts < 12))
       AND NOT EXISTS (
            SELECT 1 FROM outbox AS prev
             WHERE prev.ordered
               AND prev.aggregate_id = o.aggregate_id
               AND prev.id < o.id
               AND prev.status IN ('pending', 'processing', 'dead'))
     ORDER BY o.id
     LIMIT 50
       FOR UPDATE SKIP LOCKED
)
UPDATE outbox AS o
   SET status = 'processing', lease_owner = 'naive', lease_until = now() + interval '1 minute',
       lease_version = o.lease_version + 1, attempts = o.attempts + 1
  FROM picked
 WHERE o.id = picked.id
RETURNING o.id`

// BenchmarkClaimOrdered measures one ordered claim of 50 (the relay's,
// OutboxClaimOrderedWindow, from a fresh cursor) over 1,000 healthy
// aggregates × 10 pending rows, with and without one aggregate blocked behind
// a dead head with 100,000 rows queued behind it (sorted first, so every scan
// meets it). The goal: the blocked backlog does not slow the others' claims.
// The seed's NOT EXISTS claim is measured on the same data for comparison.
// Each claim is rolled back, so every iteration sees the same queue.
//
//	go test -run '^$' -bench ClaimOrdered -benchtime 300x ./queries/
func BenchmarkClaimOrdered(b *testing.B) {
	for _, blocked := range []int{0, 100_000} {
		pool := orderedBenchData(b, blocked)
		b.Run(fmt.Sprintf("claim=OutboxClaimOrderedWindow/blocked_backlog=%d", blocked), func(b *testing.B) {
			benchRolledBack(b, pool, func(ctx context.Context, tx pgx.Tx) (int, error) {
				q := db.New(tx)
				snap, err := q.OutboxClaimSnapshot(ctx)
				if err != nil {
					return 0, err
				}
				// A cursor that has handed out nothing yet: the window from
				// the empty snapshot to now.
				rows, err := q.OutboxClaimOrderedWindow(ctx, db.OutboxClaimOrderedWindowParams{
					Snapshot: "1:1:", Upper: snap.Snapshot, Batch: 50, Owner: "bench", Lease: time.Minute})
				return len(rows), err
			})
		})
		b.Run(fmt.Sprintf("claim=seed_not_exists/blocked_backlog=%d", blocked), func(b *testing.B) {
			benchRolledBack(b, pool, func(ctx context.Context, tx pgx.Tx) (int, error) {
				tag, err := tx.Exec(ctx, naiveOrderedClaimSQL)
				return int(tag.RowsAffected()), err
			})
		})
	}
}

func orderedBenchData(b *testing.B, blocked int) *pgxpool.Pool {
	b.Helper()
	pool := pgtest.NewPool(b)
	ctx := context.Background()
	if blocked > 0 {
		_, err := pool.Exec(ctx, `
			INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload, ordered, status, last_error)
			VALUES ('order', 'aaa-blocked', 'E', '{}', true, 'dead', '422')`)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := pool.Exec(ctx, `
			INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload, ordered)
			SELECT 'order', 'aaa-blocked', 'E', '{}', true FROM generate_series(1, $1)`, blocked); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := pool.Exec(ctx, `
		INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload, ordered)
		SELECT 'order', 'agg-' || lpad((g % 1000)::text, 4, '0'), 'E', '{}', true FROM generate_series(1, 10000) AS g`); err != nil {
		b.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `VACUUM ANALYZE outbox`); err != nil {
		b.Fatal(err)
	}
	return pool
}

func benchRolledBack(b *testing.B, pool *pgxpool.Pool, claim func(context.Context, pgx.Tx) (int, error)) {
	ctx := context.Background()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		tx, err := pool.Begin(ctx)
		if err != nil {
			b.Fatal(err)
		}
		n, err := claim(ctx, tx)
		if err != nil {
			b.Fatal(err)
		}
		if n != 50 {
			b.Fatalf("claimed %d, want 50", n)
		}
		if err := tx.Rollback(ctx); err != nil {
			b.Fatal(err)
		}
	}
}
