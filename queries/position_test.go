package queries_test

// Positions (migration 00010): every ordered event carries its seq, the
// seq of its aggregate's previous event (prev_seq) and of the latest
// earlier event that was delivered (sent_seq), stamped at COMMIT and at the
// head hand-off, and returned by the claims.

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5"

	"github.com/pgoutbox/pgoutbox/db"
	"github.com/pgoutbox/pgoutbox/db/opsdb"
)

// pos is an ordered event's position as a claim returns it.
type pos struct {
	ID              int64
	Seq, Prev, Sent int64
}

// drainPositions decides the events committed and claims with
// OutboxClaimOrderedWindow (from a fresh cursor each time) and finalizes done until
// nothing is claimable, and returns per aggregate the positions in the
// order they were handed out; a claimed id in skip is sent to dead and
// skipped instead of done.
func drainPositions(t *testing.T, b *bundle, skip map[int64]bool) map[string][]pos {
	t.Helper()
	ctx := context.Background()
	out := map[string][]pos{}
	for {
		b.decide(t) // as the relay does before each ordered claim
		snap, err := b.q.OutboxClaimSnapshot(ctx)
		if err != nil {
			t.Fatal(err)
		}
		rows, err := b.q.OutboxClaimOrderedWindow(ctx, db.OutboxClaimOrderedWindowParams{
			Snapshot: "1:1:", Upper: snap.Snapshot, Batch: 50, Owner: "w", Lease: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if len(rows) == 0 {
			return out
		}
		for _, r := range rows {
			out[r.AggregateID] = append(out[r.AggregateID], pos{r.ID, r.Seq, r.PrevSeq, r.SentSeq})
			c := claimed{r.ID, r.LeaseVersion, r.Attempts, r.AggregateID, "w"}
			if !skip[r.ID] {
				b.markDone(t, c)
				continue
			}
			if got, err := finalizeOne(ctx, b.q, c, "dead", 0, "boom", 0); err != nil || got != "dead" {
				t.Fatalf("dead %d: %q %v", r.ID, got, err)
			}
			if n, err := b.ops.OutboxSkipDead(ctx, opsdb.OutboxSkipDeadParams{ID: r.ID}); err != nil || n != 1 {
				t.Fatalf("skip %d: %d %v", r.ID, n, err)
			}
		}
	}
}

// seqOf reads the seq of each id.
func seqOf(t *testing.T, b *bundle, ids ...int64) []int64 {
	t.Helper()
	b.decide(t)
	out := make([]int64, len(ids))
	for i, id := range ids {
		if err := b.pool.QueryRow(context.Background(), `SELECT seq FROM outbox WHERE id = $1`, id).Scan(&out[i]); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// chain is the positions of events delivered one after the other: each
// one's predecessor is the one before it, and it was delivered.
func chain(ids, seqs []int64) []pos {
	out := make([]pos, len(ids))
	var prev int64
	for i := range ids {
		out[i] = pos{ids[i], seqs[i], prev, prev}
		prev = seqs[i]
	}
	return out
}

// Commit order, not insert order, across transactions of one and of many
// rows: each event's predecessor is the event delivered before it.
func TestPosition_StampedAtCommitInCommitOrder(t *testing.T) {
	t.Parallel()
	b := setup(t)
	a0 := b.seedOrdered(t, 1, "A")
	t1 := begin(t, b)
	late := insertOrdered(t, t1, "A") // inserted first, committed last
	t2 := begin(t, b)
	mid := []int64{insertOrdered(t, t2, "A"), insertOrdered(t, t2, "B"), insertOrdered(t, t2, "A")}
	commit(t, t2)
	b1 := b.seedOrdered(t, 2, "B")
	commit(t, t1)
	wantA := []int64{a0[0], mid[0], mid[2], late}
	wantB := []int64{mid[1], b1[0], b1[1]}
	want := map[string][]pos{"A": chain(wantA, seqOf(t, b, wantA...)), "B": chain(wantB, seqOf(t, b, wantB...))}
	if diff := cmp.Diff(want, drainPositions(t, b, nil)); diff != "" {
		t.Fatalf("positions (-want +got):\n%s", diff)
	}
}

// A skipped event is resolved but not delivered: its successor names it as
// the predecessor and carries the latest delivered position, through a run
// of skipped events, and the event after a delivered one is back to normal.
func TestPosition_SkippedPredecessorCarriesTheLastDelivered(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := b.seedOrdered(t, 5, "A")
	s := seqOf(t, b, ids...)
	got := drainPositions(t, b, map[int64]bool{ids[1]: true, ids[2]: true})
	want := []pos{
		{ids[0], s[0], 0, 0},
		{ids[1], s[1], s[0], s[0]},
		{ids[2], s[2], s[1], s[0]}, // claimed, skipped: its own predecessor was skipped too
		{ids[3], s[3], s[2], s[0]}, // two skipped before it: the last delivered is ids[0]
		{ids[4], s[4], s[3], s[3]},
	}
	if diff := cmp.Diff(want, got["A"]); diff != "" {
		t.Fatalf("positions (-want +got):\n%s", diff)
	}
	// A new event after a skipped last one.
	b2 := b.seedOrdered(t, 1, "B")
	got = drainPositions(t, b, map[int64]bool{b2[0]: true})
	b3 := b.seedOrdered(t, 1, "B")
	got2 := drainPositions(t, b, nil)
	s2 := seqOf(t, b, b2[0], b3[0])
	if diff := cmp.Diff([]pos{{b2[0], s2[0], 0, 0}, {b3[0], s2[1], s2[0], 0}}, append(got["B"], got2["B"]...)); diff != "" {
		t.Fatalf("after a skipped last event (-want +got):\n%s", diff)
	}
}

// A REPEATABLE READ producer's rows take the same path as any: seq at
// COMMIT, the rest when the relay decides them (OutboxDecideCommitted).
func TestPosition_RepeatableReadProducersAreStampedWhenDecided(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	a0 := b.seedOrdered(t, 1, "A")
	tx, err := b.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(ctx) })
	rr := []int64{insertOrdered(t, tx, "A"), insertOrdered(t, tx, "A")}
	commit(t, tx)
	if n, err := decideFromStart(ctx, b.q, 100); err != nil || n != 3 {
		t.Fatalf("resolve heads: %d %v, want the 3 rows committed", n, err)
	}
	all := append(a0, rr...)
	if diff := cmp.Diff(map[string][]pos{"A": chain(all, seqOf(t, b, all...))}, drainPositions(t, b, nil)); diff != "" {
		t.Fatalf("positions (-want +got):\n%s", diff)
	}
}

// Rows that arrived with triggers off (a restore, a logical replication
// apply) are sequenced by the repair after the aggregate's rows, and
// stamped like any other: a restored delivered row counts as delivered.
func TestPosition_RepairedRowsAreStamped(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	a0 := b.seedOrdered(t, 1, "A")
	tx := begin(t, b)
	exec(t, tx, `SET LOCAL session_replication_role = replica`)
	var restored []int64
	for _, r := range []struct {
		agg, status string
	}{{"A", "pending"}, {"C", "done"}, {"C", "pending"}, {"C", "pending"}} {
		var id int64
		if err := tx.QueryRow(ctx, `INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload, ordered, status, done_at)
		    VALUES ('order', $1, 'E', '{}', true, $2, CASE WHEN $2 = 'done' THEN now() END) RETURNING id`, r.agg, r.status).Scan(&id); err != nil {
			t.Fatal(err)
		}
		restored = append(restored, id)
	}
	commit(t, tx)
	if n, err := b.q.OutboxRepairUnsequenced(ctx, 100); err != nil || n != 4 {
		t.Fatalf("repair: %d %v", n, err)
	}
	wantA := []int64{a0[0], restored[0]}
	sc := seqOf(t, b, restored[1:]...)
	want := map[string][]pos{
		"A": chain(wantA, seqOf(t, b, wantA...)),
		"C": {{restored[2], sc[1], sc[0], sc[0]}, {restored[3], sc[2], sc[1], sc[1]}},
	}
	if diff := cmp.Diff(want, drainPositions(t, b, nil)); diff != "" {
		t.Fatalf("positions (-want +got):\n%s", diff)
	}
}
