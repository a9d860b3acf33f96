package console_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/pgoutbox/migrations"
)

// seedLarge fills the outbox with rows in the shape of a busy production
// table, with generate_series: 99% done (retained), the rest pending
// (unordered, and ordered behind dead heads), processing under four relays
// and dead scattered through the id range. Rows are created over the last
// 24 hours in id order; done rows were delivered 20-320 ms after creation,
// so the last hour holds about total/24 deliveries. Triggers are off while
// seeding (session_replication_role = replica, which needs a superuser), so
// ordered rows get their seq and their head flag here, and the delivery
// counters are recounted at the end (outbox_delivered_rebuild). Ends with
// VACUUM ANALYZE, as autovacuum would.
//
// With total = 10,000,000: 9,900,000 done, about 60,000 pending unordered,
// 20,000 pending ordered over 2,000 aggregates (all blocked: each has dead
// ordered messages with lower seq), 1,000 processing, 19,838 dead.
//
// drained > 0 seeds the table as after a backlog was drained: the newest
// drained ids below the undelivered ones (created over the hours before)
// were delivered in the last hour, evenly from 59 minutes ago to 1 minute
// ago, instead of 20-320 ms after their creation. With drained = 2,000,000
// the charted hour holds about 1,996,000 deliveries (the dead ones among
// those ids stay dead).
func seedLarge(tb testing.TB, pool *pgxpool.Pool, total, drained int) {
	tb.Helper()
	ctx := context.Background()
	undelivered := total / 100 * 81 / 100        // the newest 0.81%
	drainedFrom := total - undelivered - drained // ids above it and below the undelivered were drained
	const chunk = 1_000_000
	conn, err := pool.Acquire(ctx)
	if err != nil {
		tb.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, `SET session_replication_role = replica`); err != nil {
		tb.Fatal(err)
	}
	for from := 1; from <= total; from += chunk {
		to := min(from+chunk-1, total)
		_, err := conn.Exec(ctx, fmt.Sprintf(`
INSERT INTO outbox (id, aggregate_type, aggregate_id, event_type, payload, headers, created_at,
                    status, available_at, attempts, lease_owner, lease_until, lease_version,
                    last_error, done_at, ordered, seq)
OVERRIDING SYSTEM VALUE
SELECT g, 'order', a.agg, CASE WHEN g %% 97 = 0 THEN 'OrderRefunded' WHEN g %% 3 = 0 THEN 'OrderShipped' ELSE 'OrderPaid' END,
       jsonb_build_object('order_id', g, 'amount_cents', g %% 10000),
       '{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}',
       t.created_at, s.status,
       t.created_at, CASE s.status WHEN 'dead' THEN 8 WHEN 'done' THEN 1 WHEN 'processing' THEN 1 ELSE 0 END,
       CASE WHEN s.status = 'processing' THEN 'relay-' || (g %% 4) END,
       CASE WHEN s.status = 'processing' THEN now() + CASE WHEN g %% 50 = 0 THEN interval '-5 s' ELSE interval '30 s' END END,
       CASE WHEN s.status = 'pending' THEN 0 ELSE 1 END,
       CASE WHEN s.status = 'dead' THEN 'webhook: HTTP 422 Unprocessable Entity: {"error":"unknown customer"}' END,
       CASE WHEN s.status = 'done' AND g > %[5]d
            THEN now() - interval '59 minutes' + (g - %[5]d) * (interval '58 minutes' / greatest(%[6]d, 1))
            WHEN s.status = 'done' THEN t.created_at + (20 + g %% 300) * interval '1 ms' END,
       a.ordered, CASE WHEN a.ordered THEN g END
  FROM generate_series(%[1]d, %[2]d) AS g
 CROSS JOIN LATERAL (SELECT now() - (%[3]d - g) * (interval '24 hours' / %[3]d) - interval '1 s' AS created_at) AS t
 CROSS JOIN LATERAL (SELECT CASE WHEN g > %[3]d - 1000 THEN 'processing'
                                 WHEN g > %[3]d - %[4]d THEN 'pending'
                                 WHEN g %% 500 = 0 THEN 'dead'
                                 ELSE 'done' END AS status) AS s
 CROSS JOIN LATERAL (SELECT (s.status = 'pending' AND g %% 4 = 0) OR (s.status = 'dead' AND g %% 1000 = 0) AS ordered) AS o
 CROSS JOIN LATERAL (SELECT o.ordered,
                            CASE WHEN o.ordered AND s.status = 'dead' THEN 'agg-' || ((g / 1000) %% 2000)
                                 WHEN o.ordered THEN 'agg-' || ((g / 4) %% 2000)
                                 ELSE 'o-' || g END AS agg) AS a`, from, to, total, undelivered, drainedFrom, drained))
		if err != nil {
			tb.Fatalf("seed rows %d-%d: %v", from, to, err)
		}
	}
	// The heads (migration 00005's column head), as the commit trigger would
	// have flagged them: each aggregate's lowest-seq undelivered row (here
	// all dead, so every ordered aggregate is blocked).
	if _, err := conn.Exec(ctx, `
UPDATE outbox
   SET head = true
 WHERE id IN (SELECT DISTINCT ON (aggregate_id) id
                FROM outbox
               WHERE ordered AND seq IS NOT NULL AND status IN ('pending', 'processing', 'dead')
               ORDER BY aggregate_id, seq)`); err != nil {
		tb.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `RESET session_replication_role`); err != nil {
		tb.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `SELECT setval(pg_get_serial_sequence('outbox', 'id'), $1)`, total); err != nil {
		tb.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `SELECT setval('outbox_seq', $1)`, total); err != nil {
		tb.Fatal(err)
	}
	// The delivery counters (migration 00018) of rows inserted done, with
	// triggers off: recounted, as after a restore.
	if _, err := conn.Exec(ctx, `SELECT outbox_delivered_rebuild()`); err != nil {
		tb.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `VACUUM (ANALYZE) outbox`); err != nil {
		tb.Fatal(err)
	}
}

// reuseLarge prepares a database named by PGOUTBOX_CONSOLE_BENCH_URL: applies
// the pending migrations, then seeds total rows with seedLarge when the
// outbox is empty. A table seeded before with another total is refused, since
// the benchmark's ids (the aggregate id, the older page) depend on it, and so
// is one seeded with another drained backlog (recorded in the table
// console_bench_seed, with the time of the seeding: the drained deliveries
// leave the charted hour an hour after it).
func reuseLarge(tb testing.TB, pool *pgxpool.Pool, total, drained int) {
	tb.Helper()
	ctx := context.Background()
	m, err := migrations.FromPool(pool)
	if err != nil {
		tb.Fatal(err)
	}
	_, err = m.Up(ctx)
	m.Close()
	if err != nil {
		tb.Fatal(err)
	}
	var high int64
	if err := pool.QueryRow(ctx, `SELECT coalesce(max(id), 0) FROM outbox`).Scan(&high); err != nil {
		tb.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS console_bench_seed (total bigint, drained bigint, seeded_at timestamptz)`); err != nil {
		tb.Fatal(err)
	}
	switch {
	case high == 0:
		start := time.Now()
		seedLarge(tb, pool, total, drained)
		if _, err := pool.Exec(ctx, `INSERT INTO console_bench_seed VALUES ($1, $2, now())`, total, drained); err != nil {
			tb.Fatal(err)
		}
		tb.Logf("seeded %d rows (%d drained in the last hour) in %s", total, drained, time.Since(start).Round(time.Second))
	case high != int64(total):
		tb.Fatalf("PGOUTBOX_CONSOLE_BENCH_URL: the outbox holds ids up to %d, not %d: set PGOUTBOX_CONSOLE_BENCH_ROWS=%d or reseed (drop and create the database)", high, total, high)
	default:
		var was int64
		var age time.Duration
		if err := pool.QueryRow(ctx, `SELECT coalesce(max(drained), 0), coalesce(max(now() - seeded_at), '0') FROM console_bench_seed`).Scan(&was, &age); err != nil {
			tb.Fatal(err)
		}
		if was != int64(drained) {
			tb.Fatalf("PGOUTBOX_CONSOLE_BENCH_URL: the outbox was seeded with %d drained deliveries, not %d: set PGOUTBOX_CONSOLE_BENCH_DRAINED=%d or reseed", was, drained, was)
		}
		tb.Logf("reusing %d rows (%d drained) seeded %s ago", total, drained, age.Round(time.Second))
	}
}
