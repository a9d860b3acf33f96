package queries_test

// Ordered delivery in commit order (issue 11): per aggregate, events are
// handed out in the commit order of the transactions that wrote them, and
// nothing that is open elsewhere on the server delays a committed head.

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgoutbox/pgoutbox/db"
	"github.com/pgoutbox/pgoutbox/db/dbcopy"
	"github.com/pgoutbox/pgoutbox/db/opsdb"
	"github.com/pgoutbox/pgoutbox/internal/pgtest"
)

// claimOrderedN claims once and requires exactly want rows: with commit
// order there is no horizon to wait for, so a committed head is claimable
// on the first attempt whatever else runs on the server.
func claimOrderedN(t *testing.T, b *bundle, want int) []claimed {
	t.Helper()
	got := b.claimOrdered(t, "w", 50)
	if len(got) != want {
		t.Fatalf("claimed %d ordered rows %v, want %d", len(got), ids(got), want)
	}
	sort.Slice(got, func(i, j int) bool { return got[i].ID < got[j].ID })
	return got
}

// drainOrdered claims and finalizes until nothing is claimable and returns,
// per aggregate, the ids in the order they were handed out.
func drainOrdered(t *testing.T, b *bundle) map[string][]int64 {
	t.Helper()
	order := map[string][]int64{}
	for {
		got := b.claimOrdered(t, "w", 50)
		if len(got) == 0 {
			return order
		}
		for _, c := range got {
			order[c.AggregateID] = append(order[c.AggregateID], c.ID)
			b.markDone(t, c)
		}
	}
}

func insertOrdered(t *testing.T, tx pgx.Tx, agg string) int64 {
	t.Helper()
	return insertOrderedEvent(t, tx, agg, "E")
}

func insertOrderedEvent(t *testing.T, tx pgx.Tx, agg, eventType string) int64 {
	t.Helper()
	id, err := db.New(tx).OutboxEnqueue(context.Background(), db.OutboxEnqueueParams{
		AggregateType: "order", AggregateID: agg, EventType: eventType, Payload: []byte(`{}`), Headers: []byte(`{}`), Ordered: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func begin(t *testing.T, b *bundle) pgx.Tx {
	t.Helper()
	tx, err := b.pool.Begin(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	return tx
}

func exec(t *testing.T, tx interface {
	Exec(context.Context, string, ...any) (pgconn.CommandTag, error)
}, sql string, args ...any) {
	t.Helper()
	if _, err := tx.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

func commit(t *testing.T, tx pgx.Tx) {
	t.Helper()
	if err := tx.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// Issue case 1: T1 writes something unrelated first (it holds an xid), T2
// pays the order and commits, then T1 (seeing "paid") cancels it and
// commits. The database's history is paid, then cancelled; so is delivery.
// Under (xid, id) order T1's OrderCancelled came first.
func TestOrderedClaim_HistoryComesOutInCommitOrderNotXidOrder(t *testing.T) {
	t.Parallel()
	b := setup(t)
	exec(t, b.pool, `CREATE TABLE orders (id text PRIMARY KEY, state text NOT NULL)`)
	exec(t, b.pool, `CREATE TABLE audit (x int)`)
	exec(t, b.pool, `INSERT INTO orders VALUES ('o1', 'new')`)

	t1 := begin(t, b)
	exec(t, t1, `INSERT INTO audit VALUES (1)`) // takes an xid
	t2 := begin(t, b)
	exec(t, t2, `UPDATE orders SET state = 'paid' WHERE id = 'o1'`)
	paid := insertOrderedEvent(t, t2, "o1", "OrderPaid")
	commit(t, t2)
	var seen string
	if err := t1.QueryRow(context.Background(),
		`UPDATE orders SET state = 'cancelled' WHERE id = 'o1' RETURNING (SELECT state FROM orders WHERE id = 'o1')`).Scan(&seen); err != nil {
		t.Fatal(err)
	}
	cancelled := insertOrderedEvent(t, t1, "o1", "OrderCancelled")
	commit(t, t1)
	if seen != "paid" {
		t.Fatalf("setup: T1 saw %q before cancelling, want paid", seen)
	}
	if diff := cmp.Diff(map[string][]int64{"o1": {paid, cancelled}}, drainOrdered(t, b)); diff != "" {
		t.Fatalf("delivery order (-want OrderPaid, OrderCancelled +got):\n%s", diff)
	}
}

// Issue case 2: T1 inserts an event for A; T2 inserts two events for A and
// commits before T1 commits. Commit order is T2, T2, T1; so is delivery,
// and T2's events are claimable while T1 is still open.
func TestOrderedClaim_CommitOrderNotInsertOrder(t *testing.T) {
	t.Parallel()
	b := setup(t)
	t1 := begin(t, b)
	first := insertOrdered(t, t1, "A")
	t2 := begin(t, b)
	second := insertOrdered(t, t2, "A")
	third := insertOrdered(t, t2, "A")
	commit(t, t2)

	got := claimOrderedN(t, b, 1) // at once, with T1 still open
	if got[0].ID != second {
		t.Fatalf("head while T1 is open = %d, want T2's first event %d", got[0].ID, second)
	}
	b.markDone(t, got[0])
	commit(t, t1)
	order := []int64{second}
	order = append(order, drainOrdered(t, b)["A"]...)
	if diff := cmp.Diff([]int64{second, third, first}, order); diff != "" {
		t.Fatalf("delivery order (-want T2, T2, T1 +got):\n%s", diff)
	}
}

// Issue case 4: nothing open elsewhere on the server delays a committed
// head: not a writer in another database, not a writer on an unrelated
// table, not an idle-in-transaction session that wrote an ordered event of
// another aggregate, not a long read-only snapshot. Each claim is a single
// attempt.
func TestOrderedClaim_OpenTransactionsElsewhereDelayNothing(t *testing.T) {
	t.Parallel()
	for name, open := range map[string]func(t *testing.T, b *bundle){
		"writer in another database": func(t *testing.T, _ *bundle) {
			other := pgtest.NewPool(t)
			tx, err := other.Begin(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
			exec(t, tx, `CREATE TABLE batch_job (x int)`)
			exec(t, tx, `INSERT INTO batch_job VALUES (1)`)
			insertOrdered(t, tx, "A") // same aggregate name, other database
		},
		"writer on an unrelated table": func(t *testing.T, b *bundle) {
			exec(t, b.pool, `CREATE TABLE unrelated (x int)`)
			tx := begin(t, b)
			exec(t, tx, `INSERT INTO unrelated VALUES (1)`)
		},
		"idle in transaction after an ordered event of another aggregate": func(t *testing.T, b *bundle) {
			tx := begin(t, b)
			insertOrdered(t, tx, "B")
		},
		"long repeatable-read snapshot": func(t *testing.T, b *bundle) {
			tx, err := b.pool.BeginTx(context.Background(), pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
			exec(t, tx, `SELECT count(*) FROM outbox`)
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			open(t, b) // opened first: it is older than every event below
			a := b.seedOrdered(t, 3, "A")
			c := b.seedOrdered(t, 2, "C")
			got := claimOrderedN(t, b, 2)
			if diff := cmp.Diff([]int64{a[0], c[0]}, ids(got)); diff != "" {
				t.Fatalf("heads (-want +got):\n%s", diff)
			}
			for _, r := range got {
				b.markDone(t, r)
			}
			if diff := cmp.Diff(map[string][]int64{"A": a[1:], "C": c[1:]}, drainOrdered(t, b)); diff != "" {
				t.Fatalf("rest (-want +got):\n%s", diff)
			}
		})
	}
}

// An open transaction that wrote an ordered event for A does not stop A's
// already committed events either; its own event follows them once it
// commits.
func TestOrderedClaim_OpenWriterOfTheAggregateDoesNotDelayItsCommittedEvents(t *testing.T) {
	t.Parallel()
	b := setup(t)
	before := b.seedOrdered(t, 2, "A")
	open := begin(t, b)
	late := insertOrdered(t, open, "A") // lower id than after[0], commits last
	after := b.seedOrdered(t, 2, "A")
	if diff := cmp.Diff(map[string][]int64{"A": append(before, after...)}, drainOrdered(t, b)); diff != "" {
		t.Fatalf("committed events with a writer of A open (-want +got):\n%s", diff)
	}
	commit(t, open)
	if diff := cmp.Diff(map[string][]int64{"A": {late}}, drainOrdered(t, b)); diff != "" {
		t.Fatalf("after it commits (-want +got):\n%s", diff)
	}
}

// Producers of one aggregate overlapping in time: each transaction bumps the
// aggregate's version (UPDATE ... RETURNING v), then inserts two ordered
// events carrying it; half write another table first; some roll back. Every
// aggregate's events must come out in version order, none lost, no
// rolled-back event delivered.
func TestOrderedClaim_OverlappingVersionedProducersComeOutInVersionOrder(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	exec(t, b.pool, `CREATE TABLE agg (id text PRIMARY KEY, v bigint NOT NULL)`)
	exec(t, b.pool, `CREATE TABLE side (x int)`)
	aggs := []string{"a1", "a2", "a3"}
	for _, a := range aggs {
		exec(t, b.pool, `INSERT INTO agg VALUES ($1, 0)`, a)
	}
	const producers, perProducer = 6, 15
	var wg sync.WaitGroup
	errs := make(chan error, producers)
	for p := 0; p < producers; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < perProducer; i++ {
				if err := versionedTx(ctx, b, aggs[(p+i)%len(aggs)], p%2 == 0, (p*perProducer+i)%7 == 3); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	type ev struct {
		v    int64
		part string
	}
	events := map[int64]ev{}
	rows, err := b.pool.Query(ctx, `SELECT id, (payload->>'v')::bigint, payload->>'part' FROM outbox`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id int64
		var e ev
		if err := rows.Scan(&id, &e.v, &e.part); err != nil {
			t.Fatal(err)
		}
		events[id] = e
	}
	if rows.Err() != nil {
		t.Fatal(rows.Err())
	}
	order := drainOrdered(t, b)
	total := 0
	for _, a := range aggs {
		var final int64
		if err := b.pool.QueryRow(ctx, `SELECT v FROM agg WHERE id = $1`, a).Scan(&final); err != nil {
			t.Fatal(err)
		}
		// Versions 1..final, two events each, in that order.
		var want, got []string
		for v := int64(1); v <= final; v++ {
			want = append(want, fmt.Sprintf("%d/1", v), fmt.Sprintf("%d/2", v))
		}
		for _, id := range order[a] {
			got = append(got, fmt.Sprintf("%d/%s", events[id].v, events[id].part))
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Fatalf("aggregate %s delivery by version/part (-want +got):\n%s", a, diff)
		}
		total += len(got)
	}
	if total != len(events) || total == 0 {
		t.Fatalf("delivered %d of %d committed events", total, len(events))
	}
}

// versionedTx is one producer transaction of the versioned workload; a
// rolled-back one leaves no version and no event behind.
func versionedTx(ctx context.Context, b *bundle, agg string, sideFirst, rollback bool) error {
	tx, err := b.pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	if sideFirst {
		if _, err := tx.Exec(ctx, `INSERT INTO side VALUES (1)`); err != nil {
			return err
		}
	}
	var v int64
	if err := tx.QueryRow(ctx, `UPDATE agg SET v = v + 1 WHERE id = $1 RETURNING v`, agg).Scan(&v); err != nil {
		return err
	}
	for part := 1; part <= 2; part++ {
		if _, err := db.New(tx).OutboxEnqueue(ctx, db.OutboxEnqueueParams{
			AggregateType: "agg", AggregateID: agg, EventType: "Versioned",
			Payload: fmt.Appendf(nil, `{"v":%d,"part":"%d"}`, v, part), Headers: []byte(`{}`), Ordered: true,
		}); err != nil {
			return err
		}
	}
	if rollback {
		return tx.Rollback(ctx)
	}
	return tx.Commit(ctx)
}

// COPY (OutboxEnqueueMany) gets commit order too: row triggers fire for
// COPY, so ordered rows are sequenced in insertion order at COMMIT, unordered
// rows are not sequenced, and nothing is sequenced before COMMIT.
func TestOrderedClaim_CopyIsSequencedAtCommitInInsertionOrder(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	var rows []dbcopy.OutboxEnqueueManyParams
	for i := 0; i < 6; i++ {
		rows = append(rows, dbcopy.OutboxEnqueueManyParams{
			AggregateType: "order", AggregateID: []string{"A", "B"}[i%2], EventType: "E",
			Payload: fmt.Appendf(nil, `{"n":%d}`, i), Headers: []byte(`{}`), Ordered: i != 4,
		})
	}
	tx := begin(t, b)
	if n, err := dbcopy.New(tx).OutboxEnqueueMany(ctx, rows); err != nil || n != 6 {
		t.Fatal(n, err)
	}
	var sequenced int
	if err := tx.QueryRow(ctx, `SELECT count(seq) FROM outbox`).Scan(&sequenced); err != nil || sequenced != 0 {
		t.Fatalf("sequenced before COMMIT: %d (%v), want 0", sequenced, err)
	}
	commit(t, tx)
	b.decide(t)
	type r struct {
		N       int
		Ordered bool
		HasSeq  bool
	}
	res, err := b.pool.Query(ctx, `SELECT (payload->>'n')::int, ordered, seq IS NOT NULL FROM outbox ORDER BY seq, id`)
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(res, pgx.RowToStructByPos[r])
	if err != nil {
		t.Fatal(err)
	}
	want := []r{{0, true, true}, {1, true, true}, {2, true, true}, {3, true, true}, {5, true, true}, {4, false, false}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("rows by seq (-want +got):\n%s", diff)
	}
	order := drainOrdered(t, b)
	if len(order["A"]) != 2 || len(order["B"]) != 3 || order["A"][0] > order["A"][1] || order["B"][0] > order["B"][1] || order["B"][1] > order["B"][2] {
		t.Fatalf("COPY delivery order %v", order)
	}
}

// waitCommitWaits waits until n producers' COMMITs (or IMMEDIATE inserts)
// wait for an aggregate's commit lock, as OutboxOrderedCommitWaits shows.
func waitCommitWaits(t *testing.T, b *bundle, n int64) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; {
		w, err := b.ops.OutboxOrderedCommitWaits(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if w.WaitingCommits >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiting commits = %d, want %d", w.WaitingCommits, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Opposite aggregate orders at COMMIT do not deadlock: T1 writes A then B,
// T2 writes B, D, A; a helper session holds D's lock so that both COMMITs
// are in flight at the same time, T2 holding A and B. Each COMMIT takes its
// locks in one pass sorted by key, so there is no cycle: once the helper
// ends, both commit, every event sequenced. (Taking them in first-write
// order, as a per-row trigger does, deadlocks here: T1 holds A, T2 holds B.)
func TestOrderedClaim_OppositeAggregateOrdersDoNotDeadlockAtCommit(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	// D: an aggregate whose lock key sorts after A's and B's, so that T2's
	// COMMIT takes A and B and then waits for D.
	var d string
	if err := b.pool.QueryRow(ctx, `SELECT 'D' || g FROM generate_series(1, 1000) AS g
	    WHERE (hashtext('D' || g)::bigint & 4294967295) > greatest(hashtext('A')::bigint & 4294967295, hashtext('B')::bigint & 4294967295)
	    ORDER BY g LIMIT 1`).Scan(&d); err != nil {
		t.Fatal(err)
	}
	holder := begin(t, b)
	// The documented key space: single bigint, upper half the table oid.
	exec(t, holder, `SELECT pg_advisory_xact_lock(('outbox'::regclass::oid::bigint << 32) | (hashtext($1)::bigint & 4294967295))`, d)

	t1, t2 := begin(t, b), begin(t, b)
	insertOrdered(t, t1, "A")
	insertOrdered(t, t1, "B")
	insertOrdered(t, t2, "B")
	insertOrdered(t, t2, d)
	insertOrdered(t, t2, "A")
	results := make(chan error, 2)
	go func() { results <- t2.Commit(ctx) }() // takes A and B, waits for D
	waitCommitWaits(t, b, 1)
	go func() { results <- t1.Commit(ctx) }() // waits for A
	waitCommitWaits(t, b, 2)
	commit(t, holder)
	for i := 0; i < 2; i++ {
		if err := <-results; err != nil {
			t.Fatalf("commit: %v", err)
		}
	}
	b.decide(t)
	var events, unsequenced int
	if err := b.pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE seq IS NULL) FROM outbox`).Scan(&events, &unsequenced); err != nil {
		t.Fatal(err)
	}
	if events != 5 || unsequenced != 0 {
		t.Fatalf("%d events, %d unsequenced; want 5, 0", events, unsequenced)
	}
}

// Under SET CONSTRAINTS ALL IMMEDIATE the trigger runs as each inserting
// statement ends, so an aggregate's lock is held from the insert to COMMIT:
// T1 holds A and waits for B, T2 holds B and asks for A. PostgreSQL detects
// the cycle and aborts one with 40P01; its business change and its events
// roll back together. The other commits, in order.
func TestOrderedClaim_ImmediateModeDeadlockAbortsOneTransactionWhole(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	exec(t, b.pool, `CREATE TABLE business (tx text PRIMARY KEY)`)
	t1, t2 := begin(t, b), begin(t, b)
	for i, tx := range []pgx.Tx{t1, t2} {
		exec(t, tx, `SET CONSTRAINTS ALL IMMEDIATE`)
		exec(t, tx, `INSERT INTO business VALUES ($1)`, fmt.Sprintf("t%d", i+1))
	}
	insertOrdered(t, t1, "A") // T1 holds A from here
	insertOrdered(t, t2, "B") // T2 holds B
	second := func(tx pgx.Tx, agg string) error {
		_, err := db.New(tx).OutboxEnqueue(ctx, db.OutboxEnqueueParams{
			AggregateType: "order", AggregateID: agg, EventType: "E", Payload: []byte(`{}`), Headers: []byte(`{}`), Ordered: true,
		})
		if err == nil {
			err = tx.Commit(ctx)
		}
		return err
	}
	results := make(chan error, 2)
	go func() { results <- second(t1, "B") }()
	waitCommitWaits(t, b, 1)
	go func() { results <- second(t2, "A") }()
	var deadlocks, ok int
	for i := 0; i < 2; i++ {
		err := <-results
		var pgErr *pgconn.PgError
		switch {
		case err == nil:
			ok++
		case errors.As(err, &pgErr) && pgErr.Code == "40P01":
			deadlocks++
		default:
			t.Fatalf("second insert or commit: %v", err)
		}
	}
	if deadlocks != 1 || ok != 1 {
		t.Fatalf("deadlocks %d, commits %d; want one of each", deadlocks, ok)
	}
	b.decide(t)
	var survivor string
	var events, unsequenced int
	if err := b.pool.QueryRow(ctx, `SELECT (SELECT string_agg(tx, ',') FROM business),
	       (SELECT count(*) FROM outbox), (SELECT count(*) FROM outbox WHERE seq IS NULL)`).Scan(&survivor, &events, &unsequenced); err != nil {
		t.Fatal(err)
	}
	if (survivor != "t1" && survivor != "t2") || events != 2 || unsequenced != 0 {
		t.Fatalf("after the deadlock: business %q, %d events (%d unsequenced); want one transaction's change with its 2 events", survivor, events, unsequenced)
	}
}

// IMMEDIATE mode still sequences every ordered row, also those inserted
// after the trigger has run once in the transaction, and holds the
// aggregate's lock until COMMIT: another producer's COMMIT of the aggregate
// waits, and its event comes after.
func TestOrderedClaim_ImmediateModeSequencesEveryStatementAndHoldsTheLock(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	t1 := begin(t, b)
	exec(t, t1, `SET CONSTRAINTS ALL IMMEDIATE`)
	a1 := insertOrdered(t, t1, "A")
	var seq1 *int64
	if err := t1.QueryRow(ctx, `SELECT seq FROM outbox_sequenced WHERE message_id = $1`, a1).Scan(&seq1); err != nil || seq1 == nil {
		t.Fatalf("not sequenced at the end of its statement: %v %v", seq1, err)
	}
	t2 := begin(t, b)
	other := insertOrdered(t, t2, "A")
	committed := make(chan error, 1)
	go func() { committed <- t2.Commit(ctx) }()
	waitCommitWaits(t, b, 1) // T2's COMMIT waits for T1's lock on A
	a2 := insertOrdered(t, t1, "A")
	commit(t, t1)
	if err := <-committed; err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string][]int64{"A": {a1, a2, other}}, drainOrdered(t, b)); diff != "" {
		t.Fatalf("delivery (-want +got):\n%s", diff)
	}
}

// Savepoints: an ordered row inserted in a rolled-back savepoint never
// exists; rows before and after it are sequenced, also when the first
// ordered row of the transaction was the rolled-back one.
func TestOrderedClaim_SavepointsKeepSequencing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	tx := begin(t, b)
	sp, err := tx.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	insertOrdered(t, sp, "A") // the transaction's first ordered row, rolled back
	if err := sp.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	a1 := insertOrdered(t, tx, "A")
	sp, err = tx.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	insertOrdered(t, sp, "A")
	if err := sp.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	sp, err = tx.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	a2 := insertOrdered(t, sp, "A")
	if err := sp.Commit(ctx); err != nil { // RELEASE
		t.Fatal(err)
	}
	commit(t, tx)
	if diff := cmp.Diff(map[string][]int64{"A": {a1, a2}}, drainOrdered(t, b)); diff != "" {
		t.Fatalf("delivery (-want +got):\n%s", diff)
	}
}

// A large transaction over many aggregates: seq follows insertion (id)
// order exactly.
func TestOrderedClaim_LargeTransactionIsSequencedInInsertionOrder(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	exec(t, b.pool, `INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload, ordered)
	    SELECT 'order', 'a' || (g * 7919 % 97), 'E', '{}', g % 5 <> 0 FROM generate_series(1, 5000) AS g`)
	var ordered, inOrder int
	if err := b.pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE seq > prev OR prev IS NULL)
	    FROM (SELECT seq, lag(seq) OVER (ORDER BY id) AS prev FROM outbox WHERE ordered) AS s`).Scan(&ordered, &inOrder); err != nil {
		t.Fatal(err)
	}
	if ordered != 4000 || inOrder != ordered {
		t.Fatalf("%d ordered rows, %d in id order by seq", ordered, inOrder)
	}
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
			if got, err := finalizeOne(ctx, b.q, c, "dead", 0, "422", 0); err != nil || got != "dead" {
				t.Fatal(got, err)
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
	b.decide(t)
	if _, err := b.pool.Exec(ctx, `UPDATE outbox SET created_at = now() - interval '2 hours' WHERE aggregate_id = 'slow'`); err != nil {
		t.Fatal(err)
	}
	rows, _ = b.q.OutboxBlockedAggregates(ctx, db.OutboxBlockedAggregatesParams{StalledAfter: time.Hour, MaxRows: 10})
	if len(rows) != 2 || rows[0].AggregateID != "slow" || rows[0].HeadStatus != "pending" {
		t.Fatalf("with a stalled aggregate = %+v", rows)
	}
	// Skipping the dead head unblocks the aggregate.
	reason := "bad data, skipped by ops"
	if n, err := b.ops.OutboxSkipDead(ctx, opsdb.OutboxSkipDeadParams{ID: blocked[0], Reason: &reason}); err != nil || n != 1 {
		t.Fatal(n, err)
	}
	got := claimOrderedN(t, b, 2)
	if len(got) != 2 || got[0].ID != blocked[1] {
		t.Fatalf("after skip: %+v, want blocked's next head and slow's head", got)
	}
}

// Rows inserted with explicit ids in descending order (OVERRIDING SYSTEM
// VALUE) are all sequenced: the transaction's span runs from its lowest to
// its highest id. (With the span from the first to the last id inserted, the
// lower row stayed unsequenced — never claimable.)
func TestOrderedClaim_ExplicitIdsOutOfOrderAreAllSequenced(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	tx := begin(t, b)
	for _, id := range []int64{9000, 8000, 8500} {
		if _, err := tx.Exec(ctx, `INSERT INTO outbox (id, aggregate_type, aggregate_id, event_type, payload, ordered)
			OVERRIDING SYSTEM VALUE VALUES ($1, 'order', 'A', 'E', '{}', true)`, id); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	b.decide(t)
	var unsequenced int
	if err := b.pool.QueryRow(ctx, `SELECT count(*) FROM outbox WHERE ordered AND seq IS NULL`).Scan(&unsequenced); err != nil || unsequenced != 0 {
		t.Fatalf("%d ordered rows left unsequenced (%v), want 0", unsequenced, err)
	}
}
