package queries_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgoutbox/pgoutbox/db"
	"github.com/pgoutbox/pgoutbox/internal/pgtest"
)

// The insert trigger's NOTIFY arrives only at COMMIT, never for a rollback,
// and a burst of inserts in one transaction (row by row or COPY) wakes
// listeners once.
func TestNotify_OncePerCommittedTransactionNeverForRollback(t *testing.T) {
	t.Parallel()
	url := pgtest.NewURL(t)
	pool := pgtest.Pool(t, url)
	ctx := context.Background()
	count := listen(t, url)
	ev := db.OutboxEnqueueParams{AggregateType: "o", AggregateID: "a", EventType: "E", Payload: []byte(`{}`), Headers: []byte(`{}`)}

	tx, _ := pool.Begin(ctx)
	for i := 0; i < 100; i++ {
		if _, err := db.New(tx).OutboxEnqueue(ctx, ev); err != nil {
			t.Fatal(err)
		}
	}
	if n := count(); n != 0 {
		t.Fatalf("%d notifications before COMMIT", n)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if n := count(); n != 1 {
		t.Fatalf("100 inserts in one transaction: %d notifications, want 1", n)
	}

	tx, _ = pool.Begin(ctx)
	many := make([]db.OutboxEnqueueManyParams, 500)
	for i := range many {
		many[i] = db.OutboxEnqueueManyParams{AggregateType: "o", AggregateID: "a", EventType: "E", Payload: []byte(`{}`), Headers: []byte(`{}`)}
	}
	if _, err := db.New(tx).OutboxEnqueueMany(ctx, many); err != nil {
		t.Fatal(err)
	}
	_ = tx.Commit(ctx)
	if n := count(); n != 1 {
		t.Fatalf("COPY of 500: %d notifications, want 1", n)
	}

	tx, _ = pool.Begin(ctx)
	if _, err := db.New(tx).OutboxEnqueue(ctx, ev); err != nil {
		t.Fatal(err)
	}
	_ = tx.Rollback(ctx)
	if n := count(); n != 0 {
		t.Fatalf("rolled back: %d notifications, want 0", n)
	}

	// A savepoint rolled back takes its insert's wake-up with it; the next
	// insert of the transaction queues one again.
	tx, _ = pool.Begin(ctx)
	mustExec(t, tx, "SAVEPOINT s")
	if _, err := db.New(tx).OutboxEnqueue(ctx, ev); err != nil {
		t.Fatal(err)
	}
	mustExec(t, tx, "ROLLBACK TO SAVEPOINT s")
	if _, err := db.New(tx).OutboxEnqueue(ctx, ev); err != nil {
		t.Fatal(err)
	}
	_ = tx.Commit(ctx)
	if n := count(); n != 1 {
		t.Fatalf("insert after a rolled-back savepoint: %d notifications, want 1", n)
	}
}

// A session that commits many small transactions notifies at most once per
// 10 ms (the trigger's throttle): 50 transactions pipelined in one round
// trip send a handful of notifications, not 50.
func TestNotify_SessionThrottle(t *testing.T) {
	t.Parallel()
	url := pgtest.NewURL(t)
	ctx := context.Background()
	count := listen(t, url)
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	// Commits that do not wait for the WAL flush keep 50 of them well inside
	// a few 10 ms windows on any disk.
	mustExec(t, conn, "SET synchronous_commit = off")
	const txs = 50
	b := &pgx.Batch{}
	for i := 0; i < txs; i++ {
		b.Queue("BEGIN")
		b.Queue("INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload) VALUES ('o', 'a', 'E', '{}')")
		b.Queue("COMMIT")
	}
	start := time.Now()
	if err := conn.SendBatch(ctx, b).Close(); err != nil {
		t.Fatal(err)
	}
	elapsed := time.Since(start)
	n := count()
	var rows int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM outbox").Scan(&rows); err != nil || rows != txs {
		t.Fatalf("%d rows committed (%v), want %d", rows, err, txs)
	}
	// The throttle compares whole milliseconds, so two notifications are at
	// least 9 ms apart.
	most := int(elapsed/(9*time.Millisecond)) + 1
	t.Logf("%d transactions in %s: %d notifications (at most %d allowed)", txs, elapsed, n, most)
	if n < 1 || n > most {
		t.Fatalf("%d transactions in %s sent %d notifications, want 1..%d", txs, elapsed, n, most)
	}
}

// While another transaction holds the notify gate (it is committing its
// own NOTIFY), a commit skips its notification instead of queueing behind
// it; once the gate is free, commits notify again.
func TestNotify_GateSkipsWhileAnotherCommitNotifies(t *testing.T) {
	t.Parallel()
	url := pgtest.NewURL(t)
	pool := pgtest.Pool(t, url)
	ctx := context.Background()
	count := listen(t, url)
	holder, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Rollback(ctx) //nolint:errcheck
	mustExec(t, holder, "SELECT pg_advisory_xact_lock('outbox'::regclass::oid::integer, 1869968482)")

	ev := db.OutboxEnqueueParams{AggregateType: "o", AggregateID: "a", EventType: "E", Payload: []byte(`{}`), Headers: []byte(`{}`)}
	if _, err := db.New(pool).OutboxEnqueue(ctx, ev); err != nil {
		t.Fatal(err)
	}
	if n := count(); n != 0 {
		t.Fatalf("commit while the gate was held: %d notifications, want 0", n)
	}
	if err := holder.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := db.New(pool).OutboxEnqueue(ctx, ev); err != nil {
		t.Fatal(err)
	}
	if n := count(); n != 1 {
		t.Fatalf("commit with the gate free: %d notifications, want 1", n)
	}
}

// A transaction that fails at COMMIT after the notify trigger ran (here a
// later deferred constraint) sends nothing and does not count as its
// session's last notification: the next commit, right after, notifies.
func TestNotify_FailedCommitDoesNotSilenceTheNext(t *testing.T) {
	t.Parallel()
	url := pgtest.NewURL(t)
	pool := pgtest.Pool(t, url)
	ctx := context.Background()
	// Fires after outbox_notify (deferred triggers of one event fire in name
	// order).
	mustExec(t, pool, `CREATE FUNCTION fail_at_commit() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.event_type = 'FailAtCommit' THEN
        RAISE EXCEPTION 'refused at commit (notified_at=%)', current_setting('outbox.notified_at', true);
    END IF;
    RETURN NULL;
END $$`)
	mustExec(t, pool, `CREATE CONSTRAINT TRIGGER zz_fail_at_commit AFTER INSERT ON outbox
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION fail_at_commit()`)
	count := listen(t, url)
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload) VALUES ('o', 'a', 'FailAtCommit', '{}')")
	if err == nil || !strings.Contains(err.Error(), "refused at commit (notified_at=1") {
		t.Fatalf("first commit: %v, want the deferred constraint's error, raised after outbox_notify set notified_at", err)
	}
	// The session's throttle clock was rolled back with the transaction ...
	var last *string
	if err := conn.QueryRow(ctx, "SELECT nullif(current_setting('outbox.notified_at', true), '')").Scan(&last); err != nil || last != nil {
		t.Fatalf("after the failed commit outbox.notified_at = %v (%v), want unset", last, err)
	}
	// ... so the next commit, right after, notifies.
	if _, err := conn.Exec(ctx, "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload) VALUES ('o', 'a', 'E', '{}')"); err != nil {
		t.Fatal(err)
	}
	if n := count(); n != 1 {
		t.Fatalf("commit right after a failed one: %d notifications, want 1", n)
	}
	var gate bool
	if err := pool.QueryRow(ctx, "SELECT pg_try_advisory_lock('outbox'::regclass::oid::integer, 1869968482)").Scan(&gate); err != nil || !gate {
		t.Fatalf("the failed transaction left the notify gate held: %v %v", gate, err)
	}
}

// listen returns a counter of the notifications on channel outbox received
// since its last call (it waits until 300 ms pass without one).
func listen(t *testing.T, url string) func() int {
	t.Helper()
	ctx := context.Background()
	listener, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { listener.Close(ctx) })
	if _, err := listener.Exec(ctx, "LISTEN outbox"); err != nil {
		t.Fatal(err)
	}
	return func() int {
		n := 0
		for {
			wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
			_, err := listener.WaitForNotification(wctx)
			cancel()
			if err != nil {
				return n
			}
			n++
		}
	}
}

func mustExec(t *testing.T, conn interface {
	Exec(context.Context, string, ...any) (pgconn.CommandTag, error)
}, sql string) {
	t.Helper()
	if _, err := conn.Exec(context.Background(), sql); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}
