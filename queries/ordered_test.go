package queries_test

// Ordered delivery under concurrent producers (issue: ordered delivery that
// holds without producers locking anything).

import (
	"context"
	"sort"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5"

	"github.com/pgoutbox/pgoutbox/db"
)

// naiveOrderedClaimSQL is the seed's ordered claim: a head is a row with no
// earlier (by id) undelivered row of its aggregate. It trusts that id order
// equals commit order, which concurrent producers break.
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

type claimFn func(t *testing.T, b *bundle) []int64

func naiveClaim(t *testing.T, b *bundle) []int64 {
	t.Helper()
	rows, err := b.pool.Query(context.Background(), naiveOrderedClaimSQL)
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func fixedClaim(t *testing.T, b *bundle) []int64 {
	t.Helper()
	return ids(b.claimOrdered(t, "w", 50))
}

// claimOrderedN claims until want rows are collected. The xid horizon is
// cluster-wide: a transaction that other tests (in any database of the
// server) hold open delays ordered heads for a moment, so a claim that
// expects rows retries briefly instead of asserting on one attempt.
func claimOrderedN(t *testing.T, b *bundle, want int) []claimed {
	t.Helper()
	var got []claimed
	deadline := time.Now().Add(10 * time.Second)
	for len(got) < want {
		got = append(got, b.claimOrdered(t, "w", 50)...)
		if time.Now().After(deadline) {
			t.Fatalf("claimed %d ordered rows in 10s, want %d", len(got), want)
		}
		if len(got) < want {
			time.Sleep(20 * time.Millisecond)
		}
	}
	sort.Slice(got, func(i, j int) bool { return got[i].ID < got[j].ID })
	return got
}

func insertOrdered(t *testing.T, tx pgx.Tx, agg string) int64 {
	t.Helper()
	id, err := db.New(tx).OutboxEnqueue(context.Background(), db.OutboxEnqueueParams{
		AggregateType: "order", AggregateID: agg, EventType: "E", Payload: []byte(`{}`), Headers: []byte(`{}`), Ordered: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// The gap: T1 inserts aggregate A's event (id 10) and has not committed; T2
// inserts A's next event (id 11) and commits. The naive claim hands out 11
// while 10 is still coming; the fixed claim waits for T1.
func TestOrderedClaim_UncommittedEarlierRowIsNotOvertaken(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name         string
		claim        claimFn
		wantOvertake bool
	}{
		{"naive NOT EXISTS claim reproduces the gap", naiveClaim, true},
		{"OutboxClaimOrdered holds order", fixedClaim, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			ctx := context.Background()
			t1, err := b.pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer t1.Rollback(ctx)             //nolint:errcheck
			first := insertOrdered(t, t1, "A") // id 10, uncommitted
			t2, err := b.pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			second := insertOrdered(t, t2, "A") // id 11
			if err := t2.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			got := c.claim(t, b)
			overtook := len(got) == 1 && got[0] == second
			if overtook != c.wantOvertake {
				t.Fatalf("claim with %d uncommitted = %v; overtook = %v, want %v", first, got, overtook, c.wantOvertake)
			}
			if c.wantOvertake {
				return
			}
			if len(got) != 0 {
				t.Fatalf("claimed %v while an earlier row of A is uncommitted", got)
			}
			if err := t1.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff([]int64{first}, ids(claimOrderedN(t, b, 1))); diff != "" {
				t.Fatalf("after T1 commits the head is its row (-want +got):\n%s", diff)
			}
		})
	}
}

// The trap: a transaction that took its xid earlier inserts a later id.
// T0 takes an xid, T1 takes a later xid and inserts id 10 (uncommitted), T0
// inserts id 11 and commits. Checking the horizon but ordering by id alone
// would hand out 11 and then 10 — out of its own order. In (xid, id) order 11
// comes first, and nothing can appear before a row once it is handed out.
func TestOrderedClaim_OrderIsXidThenIDSoNothingAppearsBeforeAHandedOutRow(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	t0, err := b.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer t0.Rollback(ctx)                                                 //nolint:errcheck
	if _, err := t0.Exec(ctx, "SELECT pg_current_xact_id()"); err != nil { // T0's xid is assigned first
		t.Fatal(err)
	}
	t1, err := b.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer t1.Rollback(ctx) //nolint:errcheck
	id10 := insertOrdered(t, t1, "A")
	id11 := insertOrdered(t, t0, "A")
	if id10 >= id11 {
		t.Fatalf("setup: ids %d, %d", id10, id11)
	}
	if err := t0.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	// T0's row is below the horizon and first in (xid, id) order.
	got := ids(claimOrderedN(t, b, 1))
	if diff := cmp.Diff([]int64{id11}, got); diff != "" {
		t.Fatalf("claim (-want +got):\n%s", diff)
	}
	b.markDone(t, claimed{ID: id11, LeaseVersion: 1})
	if got := fixedClaim(t, b); len(got) != 0 {
		t.Fatalf("claimed %v before T1 committed", got)
	}
	if err := t1.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]int64{id10}, ids(claimOrderedN(t, b, 1))); diff != "" {
		t.Fatalf("after T1 commits (-want +got):\n%s", diff)
	}
	// The delivery order equals the table's (xid, id) order.
	rows, _ := b.pool.Query(ctx, `SELECT id FROM outbox WHERE aggregate_id = 'A' ORDER BY xid, id`)
	order, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]int64{id11, id10}, order); diff != "" {
		t.Fatalf("(xid, id) order (-want +got):\n%s", diff)
	}
}

// A long-running writing transaction anywhere holds the horizon back: the
// ordered claim waits, and OutboxXactHorizon shows why.
func TestOrderedClaim_LongTransactionDelaysHeadsAndIsVisible(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	long, err := b.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer long.Rollback(ctx) //nolint:errcheck
	if _, err := long.Exec(ctx, "SELECT pg_current_xact_id()"); err != nil {
		t.Fatal(err)
	}
	b.seedOrdered(t, 2, "A")
	if got := fixedClaim(t, b); len(got) != 0 {
		t.Fatalf("claimed %v while an older writing transaction is open", got)
	}
	h, err := b.q.OutboxXactHorizon(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if h.OrderedWaitingOnHorizon != 2 || h.OldestXactAgeSeconds <= 0 {
		t.Fatalf("horizon = %+v, want 2 ordered rows waiting and a positive age", h)
	}
	if err := long.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	claimOrderedN(t, b, 1) // the head, once the long transaction ends
}

// A dead head blocks only its own aggregate; every other aggregate keeps
// flowing. The blocked aggregate shows up in OutboxBlockedAggregates with its
// backlog, and a skip unblocks it.
func TestOrderedClaim_DeadHeadBlocksOnlyItsAggregate(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	blocked := b.seedOrdered(t, 50, "blocked")
	others := map[string][]int64{}
	for _, agg := range []string{"x", "y", "z"} {
		others[agg] = b.seedOrdered(t, 3, agg)
	}
	// The blocked aggregate's head dies.
	head := claimOrderedN(t, b, 4)
	for _, c := range head {
		if c.ID == blocked[0] {
			if n, err := b.q.OutboxMarkDead(ctx, db.OutboxMarkDeadParams{ID: c.ID, LeaseVersion: c.LeaseVersion, Error: "422"}); err != nil || n != 1 {
				t.Fatal(n, err)
			}
		} else {
			b.markDone(t, c)
		}
	}
	for round := 1; round < 3; round++ {
		got := claimOrderedN(t, b, 3)
		want := []int64{others["x"][round], others["y"][round], others["z"][round]}
		if diff := cmp.Diff(want, ids(got)); diff != "" {
			t.Fatalf("round %d (-want +got):\n%s", round, diff)
		}
		for _, c := range got {
			b.markDone(t, c)
		}
	}
	rows, err := b.q.OutboxBlockedAggregates(ctx, db.OutboxBlockedAggregatesParams{StalledAfter: time.Hour, MaxRows: 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 || rows[0].AggregateID != "blocked" || rows[0].HeadID != blocked[0] || rows[0].HeadStatus != "dead" || rows[0].Backlog != 50 {
		t.Fatalf("blocked aggregates = %+v", rows)
	}
	// A stalled (not dead) head is reported past the threshold too.
	b.seedOrdered(t, 1, "slow")
	if _, err := b.pool.Exec(ctx, `UPDATE outbox SET created_at = now() - interval '2 hours' WHERE aggregate_id = 'slow'`); err != nil {
		t.Fatal(err)
	}
	rows, _ = b.q.OutboxBlockedAggregates(ctx, db.OutboxBlockedAggregatesParams{StalledAfter: time.Hour, MaxRows: 10})
	if len(rows) != 2 || rows[0].AggregateID != "slow" || rows[0].HeadStatus != "pending" {
		t.Fatalf("with a stalled aggregate = %+v", rows)
	}
	// Skipping the dead head unblocks the aggregate.
	reason := "bad data, skipped by ops"
	if n, err := b.q.OutboxSkipDead(ctx, db.OutboxSkipDeadParams{ID: blocked[0], Reason: &reason}); err != nil || n != 1 {
		t.Fatal(n, err)
	}
	got := claimOrderedN(t, b, 2)
	if len(got) != 2 || got[0].ID != blocked[1] {
		t.Fatalf("after skip: %+v, want blocked's next head and slow's head", got)
	}
}

// Round-robin cursor: a claim starting after an aggregate serves the ones
// after it first, and every aggregate is reached.
func TestOrderedClaim_CursorServesAggregatesRoundRobin(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	for _, agg := range []string{"a", "b", "c", "d"} {
		b.seedOrdered(t, 1, agg)
	}
	var rows []db.OutboxClaimOrderedRow
	for deadline := time.Now().Add(10 * time.Second); len(rows) == 0 && time.Now().Before(deadline); {
		var err error
		rows, err = b.q.OutboxClaimOrdered(ctx, db.OutboxClaimOrderedParams{Owner: "w", Batch: 2, Lease: time.Minute, MaxAttempts: 12, AfterAggregateID: "b"})
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	var aggs []string
	for _, r := range rows {
		aggs = append(aggs, r.AggregateID)
	}
	if diff := cmp.Diff([]string{"c", "d"}, aggs); diff != "" {
		t.Fatalf("(-want +got):\n%s", diff)
	}
}
