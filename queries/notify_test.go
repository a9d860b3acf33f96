package queries_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgoutbox/pgoutbox/db"
	"github.com/pgoutbox/pgoutbox/db/dbcopy"
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
	many := make([]dbcopy.OutboxEnqueueManyParams, 500)
	for i := range many {
		many[i] = dbcopy.OutboxEnqueueManyParams{AggregateType: "o", AggregateID: "a", EventType: "E", Payload: []byte(`{}`), Headers: []byte(`{}`)}
	}
	if _, err := dbcopy.New(tx).OutboxEnqueueMany(ctx, many); err != nil {
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

// Concurrent producers do not each send a NOTIFY: a transaction that
// commits while another is notifying skips its own (the gate), and every
// row is committed. One commit is held inside its notify (a later deferred
// trigger waits for a lock of the test's own) until 8 sessions have
// committed 100 of their 400 one-row transactions: those commits overlap a
// notifier for certain, however the machine schedules the sessions, so the
// 401 transactions send at most 301 notifications. The rest commit freely
// (239 notifications for 400 in one run).
func TestNotify_ConcurrentCommitsShareNotifications(t *testing.T) {
	t.Parallel()
	url := pgtest.NewURL(t)
	pool := pgtest.Pool(t, url)
	ctx := context.Background()
	const lockHeld = 4242 // the held commit waits for this advisory lock
	// Fires after outbox_notify (deferred triggers of one event fire in name
	// order), so the held transaction holds the gate while it waits.
	mustExec(t, pool, `CREATE FUNCTION hold_at_commit() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.event_type = 'HoldAtCommit' THEN
        PERFORM pg_advisory_xact_lock(4242);
    END IF;
    RETURN NULL;
END $$`)
	mustExec(t, pool, `CREATE CONSTRAINT TRIGGER zz_hold_at_commit AFTER INSERT ON outbox
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION hold_at_commit()`)
	count := listen(t, url)
	blocker, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer blocker.Close(ctx)
	mustExec(t, blocker, "SELECT pg_advisory_lock(4242)")
	held := make(chan error, 1)
	go func() {
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			held <- err
			return
		}
		defer conn.Close(ctx)
		_, err = conn.Exec(ctx, "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload) VALUES ('o', 'h', 'HoldAtCommit', '{}')")
		held <- err
	}()
	// The held commit has taken the gate and waits for the test's lock.
	waitUntil(t, "the held commit waiting inside its notify, holding the gate", func() bool {
		var ok bool
		err := pool.QueryRow(ctx, `SELECT
			EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted
			         AND classid = 'outbox'::regclass::oid AND objid = 1869968482 AND objsubid = 2)
			AND EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND NOT granted
			         AND objid = $1 AND objsubid = 1)`, lockHeld).Scan(&ok)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	})

	const sessions, each, whileHeld = 8, 50, 100
	var wg, connected sync.WaitGroup
	errs := make(chan error, sessions)
	start := make(chan struct{}) // every session connected first: their commits overlap
	for s := 0; s < sessions; s++ {
		wg.Add(1)
		connected.Add(1)
		go func() {
			defer wg.Done()
			conn, err := pgx.Connect(ctx, url)
			connected.Done()
			if err != nil {
				errs <- err
				return
			}
			defer conn.Close(ctx)
			<-start
			for i := 0; i < each; i++ {
				if _, err := conn.Exec(ctx, "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload) VALUES ('o', 'a', 'E', '{}')"); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	connected.Wait()
	close(start)
	waitUntil(t, fmt.Sprintf("%d commits while the gate is held", whileHeld), func() bool {
		var rows int
		if err := pool.QueryRow(ctx, "SELECT count(*) FROM outbox WHERE event_type = 'E'").Scan(&rows); err != nil {
			t.Fatal(err)
		}
		return rows >= whileHeld || len(errs) > 0
	})
	mustExec(t, blocker, "SELECT pg_advisory_unlock(4242)")
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if err := <-held; err != nil {
		t.Fatalf("held commit: %v", err)
	}
	n := count()
	const total = sessions*each + 1
	var rows int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM outbox").Scan(&rows); err != nil || rows != total {
		t.Fatalf("%d rows committed (%v), want %d", rows, err, total)
	}
	t.Logf("%d concurrent one-row transactions: %d notifications", total, n)
	if n < 1 || n > total-whileHeld {
		t.Fatalf("%d concurrent transactions, %d of them committed while another held the gate, sent %d notifications; want at least 1 and at most %d",
			total, whileHeld, n, total-whileHeld)
	}
}

// waitUntil polls cond until it holds, failing after a minute.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
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
// later deferred constraint) sends nothing and leaves the gate free: the
// next commit, right after, notifies.
func TestNotify_FailedCommitSendsNothingAndFreesTheGate(t *testing.T) {
	t.Parallel()
	url := pgtest.NewURL(t)
	pool := pgtest.Pool(t, url)
	ctx := context.Background()
	// Fires after outbox_notify (deferred triggers of one event fire in name
	// order) and reports whether this transaction holds the gate by then.
	mustExec(t, pool, `CREATE FUNCTION fail_at_commit() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.event_type = 'FailAtCommit' THEN
        RAISE EXCEPTION 'refused at commit (gate held: %)', EXISTS (
            SELECT 1 FROM pg_locks
             WHERE locktype = 'advisory' AND pid = pg_backend_pid()
               AND classid = 'outbox'::regclass::oid AND objid = 1869968482 AND objsubid = 2);
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
	if err == nil || !strings.Contains(err.Error(), "refused at commit (gate held: t)") {
		t.Fatalf("first commit: %v, want the deferred constraint's error, raised after outbox_notify took the gate", err)
	}
	if n := count(); n != 0 {
		t.Fatalf("failed commit: %d notifications, want 0", n)
	}
	var free bool
	if err := pool.QueryRow(ctx, "SELECT pg_try_advisory_lock('outbox'::regclass::oid::integer, 1869968482)").Scan(&free); err != nil || !free {
		t.Fatalf("the failed transaction left the notify gate held: %v %v", free, err)
	}
	mustExec(t, pool, "SELECT pg_advisory_unlock_all()")
	if _, err := conn.Exec(ctx, "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload) VALUES ('o', 'a', 'E', '{}')"); err != nil {
		t.Fatal(err)
	}
	if n := count(); n != 1 {
		t.Fatalf("commit right after a failed one: %d notifications, want 1", n)
	}
}

// listen LISTENs on channel outbox as an idle relay does: holding the idle
// lock (OutboxWakeIdle), so producers notify. It returns a counter of the
// notifications committed since its last call.
func listen(t *testing.T, url string) func() int {
	t.Helper()
	listener, count := listenOnly(t, url)
	if r, err := db.New(listener).OutboxWakeIdle(context.Background()); err != nil || !r.Held {
		t.Fatalf("OutboxWakeIdle = %+v, %v; want the idle lock held", r, err)
	}
	return count
}

// listenOnly LISTENs on channel outbox without the idle lock, and returns
// its connection and the counter listen returns (pgtest.Notifications).
func listenOnly(t *testing.T, url string) (*pgx.Conn, func() int) {
	t.Helper()
	return pgtest.Notifications(t, url, "outbox")
}

func mustExec(t *testing.T, conn interface {
	Exec(context.Context, string, ...any) (pgconn.CommandTag, error)
}, sql string) {
	t.Helper()
	if _, err := conn.Exec(context.Background(), sql); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// PostgreSQL refuses to PREPARE a transaction that sent a NOTIFY, so a
// two-phase-commit producer sets outbox.wake_queued for its transaction
// before inserting: the trigger's WHEN clause then queues no wake-up (no
// NOTIFY, no gate), PREPARE TRANSACTION and COMMIT PREPARED work, and the
// committed row is claimed like any other (dispatchers find it by polling or
// the next notification).
func TestNotify_TwoPhaseCommitProducerSkipsTheWakeUpAndTheRowIsClaimed(t *testing.T) {
	t.Parallel()
	url := pgtest.NewURL(t)
	pool := pgtest.Pool(t, url)
	ctx := context.Background()
	var maxPrepared int
	if err := pool.QueryRow(ctx, "SELECT current_setting('max_prepared_transactions')::int").Scan(&maxPrepared); err != nil {
		t.Fatal(err)
	}
	if maxPrepared == 0 {
		t.Fatal("the test server has max_prepared_transactions = 0: set it above 0 (the throwaway cluster does) or unset TEST_DATABASE_URL")
	}
	count := listen(t, url)
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	gid := "pgoutbox-test-" + strings.ReplaceAll(t.Name(), "/", "-")
	t.Cleanup(func() {
		// Never leave a prepared transaction behind: it would hold the xid
		// horizon of the whole test cluster.
		_, _ = pool.Exec(context.Background(), "ROLLBACK PREPARED '"+gid+"'")
	})
	insert := "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload) VALUES ('o', 'a', 'E', '{}')"

	// Without the setting, PREPARE fails: the trigger has sent a NOTIFY.
	mustExec(t, conn, "BEGIN")
	mustExec(t, conn, insert)
	_, err = conn.Exec(ctx, "PREPARE TRANSACTION '"+gid+"'")
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || !strings.Contains(pgErr.Message, "NOTIFY") {
		t.Fatalf("PREPARE after a plain insert: %v, want PostgreSQL's refusal to prepare a transaction that sent NOTIFY", err)
	}
	mustExec(t, conn, "ROLLBACK")

	// With it, two-phase commit works and nothing is notified.
	mustExec(t, conn, "BEGIN")
	mustExec(t, conn, "SET LOCAL outbox.wake_queued = on")
	mustExec(t, conn, insert)
	mustExec(t, conn, "PREPARE TRANSACTION '"+gid+"'")
	mustExec(t, conn, "COMMIT PREPARED '"+gid+"'")
	if n := count(); n != 0 {
		t.Fatalf("two-phase commit with outbox.wake_queued = on: %d notifications, want 0", n)
	}
	rows, err := db.New(pool).OutboxClaim(ctx, db.OutboxClaimParams{Owner: "t", Batch: 10, Lease: time.Minute, MaxAttempts: 3, RecoverExpired: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 {
		t.Fatalf("claimed %d rows after COMMIT PREPARED, want the one row (the failed PREPARE rolled its row back)", len(rows))
	}

	// The setting is transaction-local: the next ordinary insert notifies.
	mustExec(t, conn, insert)
	if n := count(); n != 1 {
		t.Fatalf("ordinary insert after the two-phase one: %d notifications, want 1", n)
	}
}

// Under SET CONSTRAINTS ALL IMMEDIATE the notify trigger runs at insert time
// and takes the gate then, holding it until COMMIT: meanwhile other
// producers' commits skip their NOTIFY (dispatchers fall back to the wake
// window and polling). SET CONSTRAINTS outbox_notify DEFERRED after ALL
// IMMEDIATE restores the deferral for the wake-up alone.
func TestNotify_ConstraintsAllImmediateHoldsTheGateUntilCommitUnlessNotifyIsDeferred(t *testing.T) {
	t.Parallel()
	url := pgtest.NewURL(t)
	pool := pgtest.Pool(t, url)
	ctx := context.Background()
	count := listen(t, url)
	insert := "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload) VALUES ('o', 'a', 'E', '{}')"
	for _, tt := range []struct {
		name            string
		set             []string
		othersNotifying bool
	}{
		{"all immediate", []string{"SET CONSTRAINTS ALL IMMEDIATE"}, false},
		{"all immediate, notify deferred", []string{"SET CONSTRAINTS ALL IMMEDIATE", "SET CONSTRAINTS outbox_notify DEFERRED"}, true},
	} {
		long, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range tt.set {
			mustExec(t, long, s)
		}
		mustExec(t, long, insert)
		mustExec(t, pool, insert) // another producer commits meanwhile
		got := count()
		if err := long.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		after := count()
		if tt.othersNotifying && (got != 1 || after != 1) {
			t.Errorf("%s: other commit sent %d notifications, long transaction's commit %d; want 1 and 1", tt.name, got, after)
		}
		if !tt.othersNotifying && (got != 0 || after != 1) {
			t.Errorf("%s: other commit sent %d notifications, long transaction's commit %d; want 0 (gate held since the insert) and 1", tt.name, got, after)
		}
	}
}
