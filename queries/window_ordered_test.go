package queries_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgoutbox/pgoutbox/db"
	"github.com/pgoutbox/pgoutbox/db/opsdb"
)

// claimOrdered is windowClaimer.claim for heads (OutboxClaimOrderedWindow).
func (w *windowClaimer) claimOrdered(t *testing.T, batch int) []*db.OutboxClaimOrderedWindowRow {
	t.Helper()
	ctx := context.Background()
	// As the relay does before each ordered claim.
	if _, err := decideFromStart(ctx, w.q, 1000); err != nil {
		t.Fatal(err)
	}
	pre, err := w.q.OutboxClaimSnapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	w.begin(pre)
	rows, err := w.q.OutboxClaimOrderedWindow(ctx, db.OutboxClaimOrderedWindowParams{
		Snapshot: w.snapshot, Upper: w.upper, AfterTxid: w.afterTxid, AfterID: w.afterID, DueAfter: w.dueAfter,
		Owner: w.owner, Batch: int32(batch), Lease: time.Minute,
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) < batch {
		w.exhausted(pre)
	} else {
		for _, r := range rows {
			if r.Lane == "fresh" {
				w.afterTxid, w.afterID = r.Txid, r.ID
			}
		}
	}
	return rows
}

func insertOrderedRows(t *testing.T, b *bundle, aggregates, perAggregate int) {
	t.Helper()
	ctx := context.Background()
	for k := 0; k < perAggregate; k++ {
		if _, err := b.pool.Exec(ctx, `INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload, ordered)
			SELECT 'order', 'agg-' || g, 'E', '{}', true FROM generate_series(1, $1) AS g`, aggregates); err != nil {
			t.Fatal(err)
		}
	}
}

// The ordered half of issue 14: with a snapshot held, OutboxClaimOrdered's
// loose index scan starts every aggregate at its delivered rows, so its
// work grows with the rows delivered; OutboxClaimOrderedWindow claims flagged
// heads from its cursor and its work stays that of the heads it claims.
func TestClaimOrderedWindow_WorkDoesNotGrowWithRowsProcessedUnderAHeldSnapshot(t *testing.T) {
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
	if _, err := tx.Exec(ctx, `SELECT count(*) FROM outbox`); err != nil {
		t.Fatal(err)
	}
	worker, err := b.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer worker.Release()
	wq := db.New(worker)
	w := newWindowClaimer(wq, "w")

	const aggregates = 100
	type work struct{ processed, window, legacy int64 }
	var series []work
	processed := int64(0)
	drain := func() {
		for {
			rows := w.claimOrdered(t, 500)
			if len(rows) == 0 {
				var left int
				if err := b.pool.QueryRow(ctx, `SELECT count(*) FROM outbox WHERE status <> 'done'`).Scan(&left); err != nil {
					t.Fatal(err)
				}
				if left == 0 {
					return
				}
				continue
			}
			kv := make([]*db.OutboxClaimWindowRow, len(rows))
			for i, r := range rows {
				kv[i] = &db.OutboxClaimWindowRow{ID: r.ID, LeaseVersion: r.LeaseVersion}
			}
			b.doneAll(t, w.owner, kv)
			processed += int64(len(rows))
		}
	}
	for round := 0; round < 4; round++ {
		if round > 0 {
			insertOrderedRows(t, b, aggregates, 20) // 2,000 rows, 20 per aggregate
			drain()
		}
		// Probe: one new event in each of 20 aggregates, claimed by each query.
		insertOrderedRows(t, b, 20, 1)
		if _, err := decideFromStart(ctx, wq, 1000); err != nil {
			t.Fatal(err)
		}
		pre, err := wq.OutboxClaimSnapshot(ctx)
		if err != nil {
			t.Fatal(err)
		}
		w.begin(pre)
		we := claimWorkWithoutSort(t, worker.Conn(), func(q *db.Queries) {
			_, _ = q.OutboxClaimOrderedWindow(ctx, db.OutboxClaimOrderedWindowParams{
				Snapshot: w.snapshot, Upper: w.upper, AfterTxid: w.afterTxid, AfterID: w.afterID, DueAfter: w.dueAfter,
				Owner: "probe", Batch: 20, Lease: time.Minute,
			})
		})
		if got := b.finishProbe(t, "probe"); len(got) != 20 {
			t.Fatalf("round %d: OutboxClaimOrderedWindow took %d heads, want 20", round, len(got))
		} else {
			w.afterTxid, w.afterID = got[len(got)-1][0], got[len(got)-1][1]
		}
		insertOrderedRows(t, b, 20, 1)
		le := statementWork(t, worker.Conn(), strings.NewReplacer("'naive'", "'legacy'", "LIMIT 50", "LIMIT 20").Replace(naiveOrderedClaimSQL))
		if got := b.finishProbe(t, "legacy"); len(got) != 20 {
			t.Fatalf("round %d: the seed's ordered claim took %d heads, want 20", round, len(got))
		}
		// finishProbe marks done without the hand-off having anything to
		// pass (each probe row is its aggregate's last), so the cursor stays
		// exact.
		processed += 40
		series = append(series, work{processed, we, le})
		t.Logf("after %5d ordered rows delivered under the held snapshot: one claim of 20 heads touches %4d buffers with OutboxClaimOrderedWindow, %5d with the seed's NOT EXISTS claim",
			processed, we, le)
	}
	first, last := series[1], series[len(series)-1]
	if last.legacy-first.legacy < (last.processed-first.processed)/100 {
		t.Fatalf("the seed's claim's work did not grow under the held snapshot (%d -> %d buffers): the test does not hold a horizon", first.legacy, last.legacy)
	}
	if last.window > first.window+first.window/4 {
		t.Fatalf("OutboxClaimOrderedWindow's work grew with the rows delivered: %d buffers, then %d after %d rows",
			first.window, last.window, last.processed)
	}
}

// Heads under fire: producers in read committed and repeatable read commit
// ordered events into a few aggregates while a worker claims heads from
// the cursor and finalizes them with every outcome (done, retry, dead then
// redrive or skip). Each aggregate's events must be resolved (done or
// skipped) in seq order, each once, and at every check at most one undelivered row per
// aggregate is flagged head.
func TestClaimOrderedWindow_HeadsUnderConcurrentProducersAndEveryOutcome(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	const producers, perProducer, aggs = 4, 150, 6
	var wg sync.WaitGroup
	errs := make(chan error, producers)
	for p := 0; p < producers; p++ {
		wg.Add(1)
		go func(p int) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(p), 7))
			iso := pgx.ReadCommitted
			if p%2 == 1 {
				iso = pgx.RepeatableRead
			}
			for i := 0; i < perProducer; {
				n := 1 + rng.IntN(3)
				err := pgx.BeginTxFunc(ctx, b.pool, pgx.TxOptions{IsoLevel: iso}, func(tx pgx.Tx) error {
					for k := 0; k < n; k++ {
						if _, err := tx.Exec(ctx, `INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload, ordered)
							VALUES ('order', $1, 'E', '{}', true)`, fmt.Sprintf("agg-%d", rng.IntN(aggs))); err != nil {
							return err
						}
					}
					return nil
				})
				if err != nil {
					errs <- err
					return
				}
				i += n
			}
		}(p)
	}
	producing := make(chan struct{})
	go func() { wg.Wait(); close(producing) }()

	w := newWindowClaimer(b.q, "w")
	rng := rand.New(rand.NewPCG(42, 42))
	skipReason := "skipped"
	checkHeads := func() {
		t.Helper()
		var bad []string
		rows, err := b.pool.Query(ctx, `SELECT aggregate_id FROM outbox WHERE ordered AND head AND status NOT IN ('done', 'skipped')
			GROUP BY aggregate_id HAVING count(*) > 1`)
		if err != nil {
			t.Fatal(err)
		}
		bad, err = pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		if len(bad) > 0 {
			t.Fatalf("aggregates with two undelivered heads: %v", bad)
		}
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		if time.Now().After(deadline) {
			rows, _ := b.pool.Query(ctx, `SELECT id, aggregate_id, seq, head, status, txid::text, available_at > created_at, attempts,
				pg_visible_in_snapshot(txid, $1::text::pg_snapshot), xmin::text
				FROM outbox WHERE status NOT IN ('done', 'skipped') ORDER BY aggregate_id, seq LIMIT 5`, w.snapshot)
			for rows.Next() {
				vals, _ := rows.Values()
				t.Log(vals...)
			}
			rows.Close()
			t.Fatalf("not drained within 60s; cursor %s after (%d,%d) due after %s", w.snapshot, w.afterTxid, w.afterID, w.dueAfter)
		}
		if _, err := decideFromStart(ctx, b.q, 1000); err != nil {
			t.Fatal(err)
		}
		rows := w.claimOrdered(t, 4)
		for _, r := range rows {
			switch x := rng.IntN(10); {
			case x < 6:
				if _, err := markDoneOne(ctx, b.q, claimed{ID: r.ID, LeaseVersion: r.LeaseVersion, Owner: w.owner}); err != nil {
					t.Fatal(err)
				}
			case x < 8:
				if _, err := finalizeOne(ctx, b.q, claimed{ID: r.ID, LeaseVersion: r.LeaseVersion, Owner: w.owner}, "retry", time.Millisecond, "retry", 0); err != nil {
					t.Fatal(err)
				}
			default:
				if _, err := finalizeOne(ctx, b.q, claimed{ID: r.ID, LeaseVersion: r.LeaseVersion, Owner: w.owner}, "dead", 0, "dead", 0); err != nil {
					t.Fatal(err)
				}
				if x == 8 {
					if _, err := b.ops.OutboxRedriveDead(ctx, r.ID); err != nil {
						t.Fatal(err)
					}
				} else if _, err := b.ops.OutboxSkipDead(ctx, opsdb.OutboxSkipDeadParams{ID: r.ID, Reason: &skipReason}); err != nil {
					t.Fatal(err)
				}
			}
		}
		checkHeads()
		if len(rows) > 0 {
			continue
		}
		select {
		case err := <-errs:
			t.Fatal(err)
		default:
		}
		select {
		case <-producing:
		default:
			continue
		}
		var left int
		if err := b.pool.QueryRow(ctx, `SELECT count(*) FROM outbox WHERE status NOT IN ('done', 'skipped')`).Scan(&left); err != nil {
			t.Fatal(err)
		}
		if left == 0 {
			break
		}
		time.Sleep(2 * time.Millisecond) // a retry's backoff
	}
	// Delivered in seq order per aggregate: done_at follows seq.
	var violations int
	if err := b.pool.QueryRow(ctx, `SELECT count(*) FROM (
			SELECT seq, done_at, lag(done_at) OVER (PARTITION BY aggregate_id ORDER BY seq) AS prev_done
			  FROM outbox WHERE ordered) AS x
		 WHERE prev_done > done_at`).Scan(&violations); err != nil {
		t.Fatal(err)
	}
	if violations != 0 {
		t.Fatalf("%d events were finished before an earlier event of their aggregate", violations)
	}
	var total, done int
	if err := b.pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE status IN ('done', 'skipped')) FROM outbox WHERE ordered`).Scan(&total, &done); err != nil {
		t.Fatal(err)
	}
	if total < producers*perProducer || done != total {
		t.Fatalf("%d of %d done, want all of at least %d", done, total, producers*perProducer)
	}
}

// Producers lock the aggregates of their COMMIT in key order; a finalize
// batch that makes several heads done hands each off under its aggregate's
// lock. Taken row by row in the batch's order, those locks deadlocked with
// a producer writing two of the batch's aggregates (seen in the horizon
// bench: "deadlock detected" on mark done and on a producer's COMMIT);
// OutboxMarkDoneMany now takes them all first, in key order.
func TestClaimOrderedWindow_FinalizeBatchesDoNotDeadlockWithProducers(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	const aggs = 8
	stop := make(chan struct{})
	errs := make(chan error, 4)
	var wg sync.WaitGroup
	for p := 0; p < 3; p++ {
		wg.Add(1)
		go func(p int) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(p), 3))
			for {
				select {
				case <-stop:
					return
				default:
				}
				perm := rng.Perm(aggs)
				err := pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
					for _, a := range perm[:4] {
						if _, err := tx.Exec(ctx, `INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload, ordered)
							VALUES ('order', $1, 'E', '{}', true)`, fmt.Sprintf("agg-%d", a)); err != nil {
							return err
						}
					}
					return nil
				})
				if err != nil {
					errs <- fmt.Errorf("producer: %w", err)
					return
				}
			}
		}(p)
	}
	w := newWindowClaimer(b.q, "w")
	deadline := time.Now().Add(8 * time.Second)
	finalized := 0
	for time.Now().Before(deadline) {
		rows := w.claimOrdered(t, aggs)
		if len(rows) == 0 {
			continue
		}
		// Finalize in descending aggregate order: the opposite of the
		// producers' key order for about half of the pairs.
		kv := make([]*db.OutboxClaimWindowRow, 0, len(rows))
		for i := len(rows) - 1; i >= 0; i-- {
			kv = append(kv, &db.OutboxClaimWindowRow{ID: rows[i].ID, LeaseVersion: rows[i].LeaseVersion})
		}
		idv := make([]int64, len(kv))
		lv := make([]int64, len(kv))
		owners := make([]string, len(kv))
		for i, r := range kv {
			idv[i], lv[i], owners[i] = r.ID, r.LeaseVersion, w.owner
		}
		if _, err := b.q.OutboxMarkDoneMany(ctx, db.OutboxMarkDoneManyParams{Ids: idv, LeaseVersions: lv, LeaseOwners: owners}); err != nil {
			close(stop)
			wg.Wait()
			t.Fatalf("mark done: %v", err)
		}
		finalized += len(kv)
		select {
		case err := <-errs:
			close(stop)
			wg.Wait()
			t.Fatal(err)
		default:
		}
	}
	close(stop)
	wg.Wait()
	select {
	case err := <-errs:
		t.Fatal(err)
	default:
	}
	if finalized == 0 {
		t.Fatal("nothing finalized: the test exercised nothing")
	}
	t.Logf("%d heads finalized in batches against 3 producers", finalized)
}
