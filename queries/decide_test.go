package queries_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/pgoutbox/pgoutbox/db"
)

// floor is the state a relay keeps between OutboxDecideCommitted calls.
type floor struct {
	after, seen int64
	holders     []string
	server      string
}

func (f *floor) decide(t *testing.T, q *db.Queries) int32 {
	t.Helper()
	holders := f.holders
	if holders == nil {
		holders = []string{}
	}
	r, err := q.OutboxDecideCommitted(context.Background(), db.OutboxDecideCommittedParams{
		MaxRows: 1000, AfterSeq: f.after, SeenSeq: f.seen, SeenHolders: holders, Server: f.server})
	if err != nil {
		t.Fatal(err)
	}
	f.after, f.seen, f.holders, f.server = r.AfterSeq, r.SeenSeq, r.SeenHolders, r.Server
	return r.Decided
}

// A producer that drew its seq and has not committed yet holds its
// aggregate's lock: while it runs, the floor stays below its seq, and its
// event is decided once it commits, although a later seq was decided first.
func TestDecideCommitted_FloorWaitsForATransactionThatDrewASeq(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	slow := begin(t, b)
	exec(t, slow, `SET CONSTRAINTS ALL IMMEDIATE`) // draws its seq now, commits later
	a := insertOrdered(t, slow, "A")
	var aSeq int64
	if err := slow.QueryRow(ctx, `SELECT seq FROM outbox_sequenced WHERE message_id = $1`, a).Scan(&aSeq); err != nil {
		t.Fatal(err)
	}
	bID := b.seedOrdered(t, 1, "B")[0]

	var f floor
	if n := f.decide(t, b.q); n != 1 {
		t.Fatalf("first call decided %d, want B's event", n)
	}
	if f.seen <= aSeq || len(f.holders) == 0 {
		t.Fatalf("first call saw seq %d and holders %v, want past %d and the open producer", f.seen, f.holders, aSeq)
	}
	if n := f.decide(t, b.q); n != 0 || f.after >= aSeq {
		t.Fatalf("while the producer runs: decided %d, floor %d; want 0 and a floor below its seq %d", n, f.after, aSeq)
	}
	commit(t, slow)
	if n := f.decide(t, b.q); n != 1 {
		t.Fatalf("after its commit decided %d, want A's event", n)
	}
	var seq int64
	var aHead, bHead bool
	if err := b.pool.QueryRow(ctx, `SELECT a.seq, a.head, b.head FROM outbox AS a, outbox AS b WHERE a.id = $1 AND b.id = $2`, a, bID).
		Scan(&seq, &aHead, &bHead); err != nil {
		t.Fatal(err)
	}
	if seq != aSeq || !aHead || !bHead {
		t.Fatalf("A's event: seq %d head %v, want %d and head; B's event head %v", seq, aHead, aSeq, bHead)
	}
	b.seedOrdered(t, 1, "C")
	f.decide(t, b.q)
	if f.after < aSeq {
		t.Fatalf("floor %d, want it past the seqs decided (%d)", f.after, aSeq)
	}
}

// Under a held snapshot every decided row leaves a dead entry in
// outbox_sequenced's index. A call from the relay's floor reads above
// them: with nothing to decide it reads a page or two however many rows
// were decided; a call from the start steps over all of them.
func TestDecideCommitted_WorkDoesNotGrowUnderAHeldSnapshot(t *testing.T) {
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
	if _, err := tx.Exec(ctx, `SELECT count(*) FROM outbox_sequenced`); err != nil {
		t.Fatal(err)
	}
	worker, err := b.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer worker.Release()
	wq := db.New(worker)
	const call = `SELECT * FROM outbox_decide_committed(1000, $1, $2, $3)`
	var f floor
	var first, fromFloor, fromStart int64
	for round := 0; round < 4; round++ {
		if round > 0 {
			insertOrderedRows(t, b, 20, 100) // 2,000 rows, decided
			for f.decide(t, wq) > 0 {
			}
		}
		f.decide(t, wq)
		// Nothing left to decide: what each call reads is the index.
		fromFloor = statementWork(t, worker.Conn(), call, f.after, f.seen, f.holders)
		fromStart = statementWork(t, worker.Conn(), call, 0, 0, []string{})
		if round == 0 {
			first = fromFloor
		}
		t.Logf("round %d: %d rows decided under the snapshot; from the floor %d buffers, from the start %d", round, round*2000, fromFloor, fromStart)
	}
	if fromFloor > first+5 {
		t.Fatalf("from the floor: %d buffers after 6,000 rows decided, %d at first: it grows", fromFloor, first)
	}
	if fromStart < 3*fromFloor {
		t.Fatalf("from the start %d buffers, from the floor %d: the test no longer shows the dead entries", fromStart, fromFloor)
	}
}

// seqs below the floor can be handed out again on another server (a
// restart, a failover, a restored copy) or once outbox_seq is set back: the
// floor starts over and they are decided.
func TestDecideCommitted_FloorStartsOverOnAnotherServerOrASequenceSetBack(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	b.seedOrdered(t, 3, "A")
	var f floor
	if n := f.decide(t, b.q); n != 3 {
		t.Fatalf("decided %d, want 3", n)
	}
	b.seedOrdered(t, 1, "A")
	if n := f.decide(t, b.q); n != 1 || f.after < 3 {
		t.Fatalf("decided %d, floor %d; want 1 and the floor past the 3 seqs decided before", n, f.after)
	}
	moved := f
	moved.server = "another server"
	moved.decide(t, b.q)
	if moved.after != 0 {
		t.Fatalf("on another server the floor is %d, want it started over", moved.after)
	}
	exec(t, b.pool, `SELECT setval('outbox_seq', 1)`)
	id := b.seedOrdered(t, 1, "B")[0]
	if n := f.decide(t, b.q); n != 1 {
		t.Fatalf("after outbox_seq was set back: decided %d, want B's event (seq 2, below the floor)", n)
	}
	var head bool
	if err := b.pool.QueryRow(ctx, `SELECT head FROM outbox WHERE id = $1`, id).Scan(&head); err != nil || !head {
		t.Fatalf("B's event head %v (%v)", head, err)
	}
}
