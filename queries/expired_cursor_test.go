package queries_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgoutbox/pgoutbox/db"
)

// While a long snapshot is held, every claim leaves an entry in
// outbox_leased (at its lease_until) that stays after the row is done: dead,
// but not removable. Read from the start, the recovery lane's
// OutboxClaimExpired and OutboxReap step over all of them on every pass
// (every second), and more with every row processed; from the lane's
// cursor (@expired_after) they read only the leases that expired since.
func TestClaimExpired_WorkDoesNotGrowWithLeasesEndedUnderAHeldSnapshot(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()

	holder, err := b.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Release()
	tx, err := holder.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	var n int
	if err := tx.QueryRow(ctx, `SELECT count(*) FROM outbox`).Scan(&n); err != nil {
		t.Fatal(err)
	}

	worker, err := b.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer worker.Release()

	type work struct{ processed, cursor, start, reapCursor, reapStart int64 }
	var series []work
	processed := int64(0)
	for round := 0; round < 4; round++ {
		if round > 0 {
			// 4,000 rows claimed (leases that ended ten minutes ago, as the
			// claims of a long hold) and done, under the held snapshot.
			insertMany(t, b.pool, 4000, 200)
			if _, err := b.pool.Exec(ctx, `UPDATE outbox SET status = 'processing', lease_owner = 'w', lease_version = lease_version + 1,
				attempts = attempts + 1, lease_until = now() - interval '10 minutes' WHERE status = 'pending'`); err != nil {
				t.Fatal(err)
			}
			if _, err := b.pool.Exec(ctx, `UPDATE outbox SET status = 'done', done_at = now(), lease_owner = NULL, lease_until = NULL
				WHERE status = 'processing'`); err != nil {
				t.Fatal(err)
			}
			processed += 4000
		}
		var now time.Time
		if err := b.pool.QueryRow(ctx, `SELECT now()`).Scan(&now); err != nil {
			t.Fatal(err)
		}
		cursor := now.Add(-5 * time.Second) // where the dispatcher's next pass starts
		claim := func(after time.Time) int64 {
			return claimWork(t, worker.Conn(), func(q *db.Queries) {
				_, _ = q.OutboxClaimExpired(ctx, db.OutboxClaimExpiredParams{Owner: "r", Lease: time.Minute, MaxAttempts: 10,
					Unordered: true, Ordered: true, ExpiredAfter: after})
			})
		}
		reap := func(after time.Time) int64 {
			return claimWork(t, worker.Conn(), func(q *db.Queries) {
				_, _ = q.OutboxReap(ctx, db.OutboxReapParams{Grace: 30 * time.Second, MaxAttempts: 10, ExpiredAfter: after})
			})
		}
		w := work{processed, claim(cursor), claim(time.Time{}), reap(cursor), reap(time.Time{})}
		series = append(series, w)
		t.Logf("after %5d leases ended under the held snapshot: OutboxClaimExpired touches %4d buffers from the cursor, %5d from the start; OutboxReap %4d, %5d",
			w.processed, w.cursor, w.start, w.reapCursor, w.reapStart)
	}
	first, last := series[0], series[len(series)-1]
	// The control: from the start, the work grows with the leases ended (one
	// dead entry each; about 100 row versions a heap page).
	if last.start-first.start < (last.processed-first.processed)/100 || last.reapStart-first.reapStart < (last.processed-first.processed)/100 {
		t.Fatalf("reading from the start did not grow under the held snapshot (claim %d -> %d, reap %d -> %d buffers): the test does not hold a horizon",
			first.start, last.start, first.reapStart, last.reapStart)
	}
	if last.cursor > first.cursor+10 || last.reapCursor > first.reapCursor+10 {
		t.Fatalf("from the cursor the work grew with the leases ended: claim %d -> %d, reap %d -> %d buffers after %d",
			first.cursor, last.cursor, first.reapCursor, last.reapCursor, last.processed)
	}
}
