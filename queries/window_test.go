package queries_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/pgoutbox/db"
)

// windowClaimer keeps an OutboxClaimWindow cursor the way the dispatcher
// does (dispatcher/window.go): the snapshot read just before the claim
// becomes the cursor when the claim comes back short; a full claim moves
// the fresh keyset only.
type windowClaimer struct {
	q         *db.Queries
	owner     string
	snapshot  string // lower
	lowerXmax int64
	upper     string
	upperXmax int64
	afterTxid int64
	afterID   int64
	dueAfter  time.Time
}

// begin opens a window at pre unless one is open.
func (w *windowClaimer) begin(pre *db.OutboxClaimSnapshotRow) {
	if w.upper == "" {
		w.upper, w.upperXmax = pre.Snapshot, pre.Xmax
		w.afterTxid, w.afterID = w.lowerXmax, 0
	}
}

// advance ends the window after a short claim.
func (w *windowClaimer) exhausted(pre *db.OutboxClaimSnapshotRow) {
	w.snapshot, w.lowerXmax, w.upper, w.upperXmax = w.upper, w.upperXmax, "", 0
	w.afterTxid, w.afterID, w.dueAfter = 0, 0, pre.At
}

func newWindowClaimer(q *db.Queries, owner string) *windowClaimer {
	return &windowClaimer{q: q, owner: owner, snapshot: "1:1:"}
}

func (w *windowClaimer) claim(t *testing.T, batch int) []*db.OutboxClaimWindowRow {
	t.Helper()
	ctx := context.Background()
	pre, err := w.q.OutboxClaimSnapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	w.begin(pre)
	rows, err := w.q.OutboxClaimWindow(ctx, db.OutboxClaimWindowParams{
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

func windowIDs(rows []*db.OutboxClaimWindowRow) []int64 {
	out := make([]int64, len(rows))
	for i, r := range rows {
		out[i] = r.ID
	}
	return out
}

// doneAll finalizes rows claimed under owner.
func (b *bundle) doneAll(t *testing.T, owner string, rows []*db.OutboxClaimWindowRow) {
	t.Helper()
	idv := make([]int64, len(rows))
	lv := make([]int64, len(rows))
	owners := make([]string, len(rows))
	for i, r := range rows {
		idv[i], lv[i], owners[i] = r.ID, r.LeaseVersion, owner
	}
	done, err := b.q.OutboxMarkDoneMany(context.Background(), db.OutboxMarkDoneManyParams{Ids: idv, LeaseVersions: lv, LeaseOwners: owners})
	if err != nil {
		t.Fatal(err)
	}
	if len(done) != len(rows) {
		t.Fatalf("marked %d of %d done", len(done), len(rows))
	}
}

func insertMany(t *testing.T, pool *pgxpool.Pool, n, perTx int) {
	t.Helper()
	ctx := context.Background()
	for left := n; left > 0; left -= perTx {
		k := min(perTx, left)
		if _, err := pool.Exec(ctx, `INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
			SELECT 'order', 'a' || g, 'E', '{}' FROM generate_series(1, $1) AS g`, k); err != nil {
			t.Fatal(err)
		}
	}
}

// recordSQL is a db.DBTX that keeps the statement and arguments a generated
// query method would send, and sends nothing.
type recordSQL struct {
	sql  string
	args []any
}

var errRecorded = errors.New("recorded")

func (r *recordSQL) Exec(_ context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	r.sql, r.args = sql, args
	return pgconn.CommandTag{}, errRecorded
}

func (r *recordSQL) Query(_ context.Context, sql string, args ...any) (pgx.Rows, error) {
	r.sql, r.args = sql, args
	return nil, errRecorded
}

func (r *recordSQL) QueryRow(_ context.Context, sql string, args ...any) pgx.Row {
	r.sql, r.args = sql, args
	return errRow{}
}

type errRow struct{}

func (errRow) Scan(...any) error { return errRecorded }

// claimWork runs the statement that call sends (through recordSQL) under
// EXPLAIN (ANALYZE, BUFFERS) on conn — so it really claims — and returns the
// shared buffers it touched: the work of one claim, heap visits of dead
// row versions included.
func claimWork(t *testing.T, conn *pgx.Conn, call func(q *db.Queries)) int64 {
	t.Helper()
	rec := &recordSQL{}
	call(db.New(rec))
	if rec.sql == "" {
		t.Fatal("the query method sent nothing")
	}
	return statementWork(t, conn, rec.sql, rec.args...)
}

// statementWork runs sql under EXPLAIN (ANALYZE, BUFFERS) on conn and
// returns the buffers it touched.
func statementWork(t *testing.T, conn *pgx.Conn, sql string, args ...any) int64 {
	t.Helper()
	var plan []struct {
		Plan struct {
			SharedHit  int64 `json:"Shared Hit Blocks"`
			SharedRead int64 `json:"Shared Read Blocks"`
		} `json:"Plan"`
	}
	if err := conn.QueryRow(context.Background(), "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) "+sql, args...).Scan(&plan); err != nil {
		t.Fatal(err)
	}
	if os.Getenv("PGOUTBOX_TEST_PLANS") != "" {
		var text string
		rows, err := conn.Query(context.Background(), "EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) "+sql, args...)
		if err == nil {
			for rows.Next() {
				var line string
				_ = rows.Scan(&line)
				text += line + "\n"
			}
			rows.Close()
		}
		t.Log(text)
	}
	return plan[0].Plan.SharedHit + plan[0].Plan.SharedRead
}

// claimWorkWithoutSort is claimWork with enable_sort off for the call:
// plans that read an index in order to avoid a sort are then preferred, as
// the relay's claims got them with production statistics (the window
// claims' open lane once read the whole pending index that way, 17,000
// buffers a claim five minutes into a hold). A claim's work must stay flat
// whatever plan is chosen.
func claimWorkWithoutSort(t *testing.T, conn *pgx.Conn, call func(q *db.Queries)) int64 {
	t.Helper()
	ctx := context.Background()
	if _, err := conn.Exec(ctx, "SET enable_sort = off"); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if _, err := conn.Exec(ctx, "RESET enable_sort"); err != nil {
			t.Fatal(err)
		}
	}()
	return claimWork(t, conn, call)
}

// The issue-14 situation at the SQL level: a REPEATABLE READ transaction
// reads the outbox once and stays open (pg_dump's snapshot) while rows are
// claimed and finalized. Each row claimed leaves a dead index entry that the
// held snapshot keeps from being removed. A claim from the start of the
// queue (OutboxClaimWindow from the empty snapshot, as a cursor that has
// handed out nothing) reads from the first pending entry, so its work grows
// with the rows processed since the snapshot began; the claim from the
// dispatcher's cursor starts where the last claim ended, and its work stays
// that of the rows it claims.
func TestClaimWindow_WorkDoesNotGrowWithRowsProcessedUnderAHeldSnapshot(t *testing.T) {
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
	wq := db.New(worker)
	w := newWindowClaimer(wq, "w")

	const probe = 20
	type work struct{ processed, window, legacy int64 }
	var series []work
	processed := int64(0)
	for round := 0; round < 5; round++ {
		if round > 0 {
			// Process 4,000 more rows through the cursor while the snapshot
			// is held.
			insertMany(t, b.pool, 4000, 200)
			// Until all are done and a short claim closed the window.
			for left := 4000; ; {
				rows := w.claim(t, 500)
				if len(rows) > 0 {
					b.doneAll(t, w.owner, rows)
				}
				processed += int64(len(rows))
				left -= len(rows)
				if left <= 0 && len(rows) < 500 {
					break
				}
			}
		}
		insertMany(t, b.pool, probe, probe)
		pre, err := wq.OutboxClaimSnapshot(ctx)
		if err != nil {
			t.Fatal(err)
		}
		w.begin(pre)
		we := claimWorkWithoutSort(t, worker.Conn(), func(q *db.Queries) {
			_, _ = q.OutboxClaimWindow(ctx, db.OutboxClaimWindowParams{
				Snapshot: w.snapshot, Upper: w.upper, AfterTxid: w.afterTxid, AfterID: w.afterID, DueAfter: w.dueAfter,
				Owner: "probe", Batch: probe, Lease: time.Minute,
			})
		})
		probed := b.finishProbe(t, "probe")
		if len(probed) != probe {
			t.Fatalf("round %d: window claim took %d rows, want %d", round, len(probed), probe)
		}
		// The claim was full: the keyset moves past its last row.
		w.afterTxid, w.afterID = probed[len(probed)-1][0], probed[len(probed)-1][1]
		processed += probe

		insertMany(t, b.pool, probe, probe)
		now, err := wq.OutboxClaimSnapshot(ctx)
		if err != nil {
			t.Fatal(err)
		}
		le := claimWork(t, worker.Conn(), func(q *db.Queries) {
			_, _ = q.OutboxClaimWindow(ctx, db.OutboxClaimWindowParams{
				Snapshot: "1:1:", Upper: now.Snapshot, Owner: "legacy", Batch: probe, Lease: time.Minute})
		})
		if got := b.finishProbe(t, "legacy"); len(got) != probe {
			t.Fatalf("round %d: the claim from the start took %d rows, want %d", round, len(got), probe)
		}
		processed += probe
		series = append(series, work{processed, we, le})
		t.Logf("after %6d rows processed under the held snapshot: one claim of %d touches %5d buffers from the cursor, %6d from the start",
			processed, probe, we, le)
	}
	// series[0] is the first pass (it reads every row once); compare from
	// the first round on, after 4,000 rows.
	first, last := series[1], series[len(series)-1]
	// The control: the old claim's work grows with the rows processed (one
	// dead entry per row at least), or the test measures nothing.
	// Buffers count heap pages, about 100 dead row versions each.
	if last.legacy-first.legacy < (last.processed-first.processed)/100 {
		t.Fatalf("the claim from the start did not grow under the held snapshot (%d -> %d buffers): the test does not hold a horizon", first.legacy, last.legacy)
	}
	// The cursor claim reads what it claims plus a bounded tail (the dead
	// entries of the previous claim, the lanes' probes), whatever was
	// processed before.
	if last.window > first.window+first.window/4 {
		t.Fatalf("OutboxClaimWindow's work grew with the rows processed: %d buffers at the start, %d after %d rows",
			first.window, last.window, last.processed)
	}
}

func TestClaimWindow_Lanes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("a transaction open at the cursor is claimed when it commits, others are not held up", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		w := newWindowClaimer(b.q, "w")
		late, err := b.pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer late.Rollback(ctx) //nolint:errcheck
		var lateID int64
		if err := late.QueryRow(ctx, `INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
			VALUES ('order', 'late', 'E', '{}') RETURNING id`).Scan(&lateID); err != nil {
			t.Fatal(err)
		}
		after := b.seed(t, 3, "a") // larger txids, committed first
		rows := w.claim(t, 10)
		if got := windowIDs(rows); fmt.Sprint(got) != fmt.Sprint(after) {
			t.Fatalf("claimed %v, want %v (the open transaction's row must not hold them up)", got, after)
		}
		b.doneAll(t, w.owner, rows)
		more := b.seed(t, 2, "b")
		rows = w.claim(t, 10) // the cursor has moved past the late transaction's xid
		if fmt.Sprint(windowIDs(rows)) != fmt.Sprint(more) {
			t.Fatalf("claimed %v, want %v", windowIDs(rows), more)
		}
		if err := late.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		rows = w.claim(t, 10)
		if len(rows) != 1 || rows[0].ID != lateID || rows[0].Lane != "open" {
			t.Fatalf("after the late commit claimed %+v, want row %d from the open lane", rows, lateID)
		}
	})

	t.Run("a row that comes back to pending is claimed again: retry with backoff, defer, hand-back, redrive, by hand", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		w := newWindowClaimer(b.q, "w")
		seeded := b.seed(t, 5, "a")
		rows := w.claim(t, 10)
		if len(rows) != 5 {
			t.Fatalf("claimed %d, want 5", len(rows))
		}
		lv := map[int64]int64{}
		for _, r := range rows {
			lv[r.ID] = r.LeaseVersion
		}
		// Nothing new: the cursor is past all five.
		if rows := w.claim(t, 10); len(rows) != 0 {
			t.Fatalf("claimed %v again", windowIDs(rows))
		}
		mustRows := func(n int64, err error) {
			t.Helper()
			if err != nil {
				t.Fatal(err)
			}
			if n != 1 {
				t.Fatalf("%d rows affected, want 1", n)
			}
		}
		fin := func(i int, outcome string, delay time.Duration, errText string) {
			t.Helper()
			mustRows(wrote(finalizeOne(ctx, b.q, claimed{ID: seeded[i], LeaseVersion: lv[seeded[i]], Owner: w.owner}, outcome, delay, errText, time.Hour)))
		}
		fin(0, "retry", 300*time.Millisecond, "later")
		fin(1, "defer", 0, "busy")
		fin(2, "release", 0, "")
		fin(3, "dead", 0, "bad")
		mustRows(b.ops.OutboxRedriveDead(ctx, seeded[3]))
		fin(4, "dead", 0, "bad")
		if _, err := b.pool.Exec(ctx, `UPDATE outbox SET status = 'pending' WHERE id = $1`, seeded[4]); err != nil {
			t.Fatal(err)
		}
		got := map[int64]string{}
		for _, r := range w.claim(t, 10) {
			got[r.ID] = r.Lane
		}
		for _, id := range seeded[1:] {
			if _, ok := got[id]; !ok {
				t.Fatalf("row %d (back to pending) not claimed: got %v", id, got)
			}
		}
		if _, ok := got[seeded[0]]; ok {
			t.Fatalf("row %d claimed before its backoff ended", seeded[0])
		}
		deadline := time.Now().Add(10 * time.Second)
		for {
			rows := w.claim(t, 10)
			if len(rows) == 1 && rows[0].ID == seeded[0] {
				break
			}
			if len(rows) > 0 {
				t.Fatalf("claimed %v, want only the retried row %d", windowIDs(rows), seeded[0])
			}
			if time.Now().After(deadline) {
				t.Fatalf("the retried row %d was not claimed after its backoff", seeded[0])
			}
			time.Sleep(50 * time.Millisecond)
		}
	})

	t.Run("a row passed while a concurrent claim held it is recovered by OutboxClaimPassed when that claim rolls back", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		w := newWindowClaimer(b.q, "w")
		seeded := b.seed(t, 3, "a")
		other, err := b.pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer other.Rollback(ctx) //nolint:errcheck
		// Another dispatcher's claim, still open, holds the first row.
		var now string
		if err := other.QueryRow(ctx, `SELECT pg_current_snapshot()::text`).Scan(&now); err != nil {
			t.Fatal(err)
		}
		if _, err := db.New(other).OutboxClaimWindow(ctx, db.OutboxClaimWindowParams{
			Snapshot: "1:1:", Upper: now, DueAfter: time.Time{}, Owner: "other", Batch: 1, Lease: time.Minute,
		}); err != nil {
			t.Fatal(err)
		}
		rows := w.claim(t, 10)
		if fmt.Sprint(windowIDs(rows)) != fmt.Sprint(seeded[1:]) {
			t.Fatalf("claimed %v, want %v (the held row skipped)", windowIDs(rows), seeded[1:])
		}
		if err := other.Rollback(ctx); err != nil { // that dispatcher died inside its claim
			t.Fatal(err)
		}
		if rows := w.claim(t, 10); len(rows) != 0 {
			t.Fatalf("claimed %v: the cursor had passed the row, nothing new was expected before the sweep", windowIDs(rows))
		}
		passed, err := b.q.OutboxClaimPassed(ctx, db.OutboxClaimPassedParams{Snapshot: w.snapshot, DueAfter: w.dueAfter, MaxRows: 100, Owner: "sweep", Lease: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if len(passed) != 1 || passed[0].ID != seeded[0] || passed[0].Attempts != 1 {
			t.Fatalf("the sweep claimed %+v, want row %d with its first attempt", passed, seeded[0])
		}
		if again, err := b.q.OutboxClaimPassed(ctx, db.OutboxClaimPassedParams{Snapshot: w.snapshot, DueAfter: w.dueAfter, MaxRows: 100, Owner: "sweep", Lease: time.Minute}); err != nil || len(again) != 0 {
			t.Fatalf("second sweep claimed %d (%v), want 0", len(again), err)
		}
	})

	t.Run("first come: older transactions first, insertion order within one, across pages", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		w := newWindowClaimer(b.q, "w")
		insertMany(t, b.pool, 25, 5)
		var want []int64
		if err := pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
			rows, err := tx.Query(ctx, `SELECT id FROM outbox ORDER BY txid, id`)
			if err != nil {
				return err
			}
			want, err = pgx.CollectRows(rows, pgx.RowTo[int64])
			return err
		}); err != nil {
			t.Fatal(err)
		}
		var got []int64
		for {
			rows := w.claim(t, 7)
			got = append(got, windowIDs(rows)...)
			if len(rows) < 7 {
				break
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("claimed\n%v\nwant\n%v", got, want)
		}
	})
}

// finishProbe marks done the rows owner holds and returns their (txid, id)
// in (txid, id) order.
func (b *bundle) finishProbe(t *testing.T, owner string) [][2]int64 {
	t.Helper()
	rows, err := b.pool.Query(context.Background(), `UPDATE outbox SET status = 'done', done_at = now(), lease_owner = NULL, lease_until = NULL
		WHERE status = 'processing' AND lease_owner = $1 RETURNING (txid::text)::bigint, id`, owner)
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) ([2]int64, error) {
		var k [2]int64
		err := r.Scan(&k[0], &k[1])
		return k, err
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Slice(got, func(i, j int) bool { return got[i][0] < got[j][0] || got[i][0] == got[j][0] && got[i][1] < got[j][1] })
	return got
}
