package queries_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgoutbox/pgoutbox/db"
	"github.com/pgoutbox/pgoutbox/db/dbcopy"
	"github.com/pgoutbox/pgoutbox/internal/pgtest"
)

// The enqueue statement's NOTIFY arrives only at COMMIT, never for a
// rollback, and a burst of inserts in one transaction (row by row, or COPY
// and OutboxWake) wakes listeners once.
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
	if err := db.New(tx).OutboxWake(ctx); err != nil {
		t.Fatal(err)
	}
	_ = tx.Commit(ctx)
	if n := count(); n != 1 {
		t.Fatalf("COPY of 500 and OutboxWake: %d notifications, want 1", n)
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

// While a relay waits, one producer transaction at a time notifies: the
// first enqueue takes the notify gate and holds it until its transaction
// ends; meanwhile other producers' commits (8 sessions, 20 transactions
// each) queue no NOTIFY, so they never wait for PostgreSQL's notify lock.
// The holder's COMMIT notifies; with the gate free, the next commit
// notifies again. A holder that rolls back notifies nothing and frees the
// gate.
func TestNotify_OneProducerTransactionAtATimeHoldsTheNotifyGate(t *testing.T) {
	t.Parallel()
	url := pgtest.NewURL(t)
	pool := pgtest.Pool(t, url)
	ctx := context.Background()
	count := listen(t, url)
	ev := db.OutboxEnqueueParams{AggregateType: "o", AggregateID: "a", EventType: "E", Payload: []byte(`{}`)}
	gateHeld := func() bool {
		var held bool
		// pg_locks lists every database's locks, and the parallel tests'
		// databases are copies of one template: the same table oid.
		if err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_locks WHERE locktype = 'advisory' AND granted
			AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
			AND classid = 'outbox'::regclass::oid AND objid = 1869968482 AND objsubid = 2)`).Scan(&held); err != nil {
			t.Fatal(err)
		}
		return held
	}

	for _, end := range []string{"commit", "rollback"} {
		holder, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer holder.Rollback(ctx) //nolint:errcheck // a failed check must not leave it open
		if _, err := db.New(holder).OutboxEnqueue(ctx, ev); err != nil {
			t.Fatal(err)
		}
		if !gateHeld() {
			t.Fatalf("%s: the first enqueue while a relay waits did not take the notify gate", end)
		}
		const sessions, each = 8, 20
		errs := make(chan error, sessions)
		for range sessions {
			go func() {
				for range each {
					if _, err := db.New(pool).OutboxEnqueue(ctx, ev); err != nil {
						errs <- err
						return
					}
				}
				errs <- nil
			}()
		}
		for range sessions {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
		if n := count(); n != 0 {
			t.Fatalf("%s: %d commits while another transaction held the gate sent %d notifications, want 0", end, sessions*each, n)
		}
		want := 1
		if end == "commit" {
			err = holder.Commit(ctx)
		} else {
			err = holder.Rollback(ctx)
			want = 0
		}
		if err != nil {
			t.Fatal(err)
		}
		if n := count(); n != want {
			t.Fatalf("the gate holder's %s: %d notifications, want %d", end, n, want)
		}
		if gateHeld() {
			t.Fatalf("the gate is still held after the holder's %s", end)
		}
		if _, err := db.New(pool).OutboxEnqueue(ctx, ev); err != nil {
			t.Fatal(err)
		}
		if n := count(); n != 1 {
			t.Fatalf("after the holder's %s, with the gate free: %d notifications, want 1", end, n)
		}
	}
	var rows int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM outbox").Scan(&rows); err != nil || rows != 2*(1+8*20+1)-1 {
		t.Fatalf("%d rows committed (%v), want %d", rows, err, 2*(1+8*20+1)-1)
	}
}

// A transaction that fails at COMMIT after its enqueue queued the wake-up
// (here a later deferred constraint) sends nothing; the next commit, right
// after, notifies.
func TestNotify_FailedCommitSendsNothing(t *testing.T) {
	t.Parallel()
	url := pgtest.NewURL(t)
	pool := pgtest.Pool(t, url)
	ctx := context.Background()
	mustExec(t, pool, `CREATE FUNCTION fail_at_commit() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.event_type = 'FailAtCommit' THEN
        RAISE EXCEPTION 'refused at commit';
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
	ev := db.OutboxEnqueueParams{AggregateType: "o", AggregateID: "a", EventType: "FailAtCommit", Payload: []byte(`{}`)}
	_, err = db.New(conn).OutboxEnqueue(ctx, ev)
	if err == nil || !strings.Contains(err.Error(), "refused at commit") {
		t.Fatalf("first commit: %v, want the deferred constraint's error", err)
	}
	if n := count(); n != 0 {
		t.Fatalf("failed commit: %d notifications, want 0", n)
	}
	ev.EventType = "E"
	if _, err := db.New(conn).OutboxEnqueue(ctx, ev); err != nil {
		t.Fatal(err)
	}
	if n := count(); n != 1 {
		t.Fatalf("commit right after a failed one: %d notifications, want 1", n)
	}
}

// Rows inserted without the enqueue statement (an INSERT or COPY of the
// application's own) queue no wake-up: an idle relay finds them at its next
// poll. OutboxWake, run once in the transaction, wakes it at COMMIT like
// OutboxEnqueue does.
func TestNotify_OwnInsertsWakeThroughOutboxWake(t *testing.T) {
	t.Parallel()
	url := pgtest.NewURL(t)
	pool := pgtest.Pool(t, url)
	ctx := context.Background()
	count := listen(t, url)
	insert := "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload) VALUES ('o', 'a', 'E', '{}')"
	for _, tt := range []struct {
		name string
		wake bool
		want int
	}{
		{"plain insert", false, 0},
		{"plain insert and OutboxWake", true, 1},
	} {
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			for range 3 {
				if _, err := tx.Exec(ctx, insert); err != nil {
					return err
				}
			}
			if tt.wake {
				return db.New(tx).OutboxWake(ctx)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if n := count(); n != tt.want {
			t.Errorf("%s: %d notifications, want %d", tt.name, n, tt.want)
		}
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
// before enqueueing: the statement then queues no wake-up (no NOTIFY, no
// lock), PREPARE TRANSACTION and COMMIT PREPARED work, and the
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
	ev := db.OutboxEnqueueParams{AggregateType: "o", AggregateID: "a", EventType: "E", Payload: []byte(`{}`)}
	enqueue := func() {
		t.Helper()
		if _, err := db.New(conn).OutboxEnqueue(ctx, ev); err != nil {
			t.Fatal(err)
		}
	}

	// Without the setting, PREPARE fails: the enqueue has queued a NOTIFY.
	mustExec(t, conn, "BEGIN")
	enqueue()
	_, err = conn.Exec(ctx, "PREPARE TRANSACTION '"+gid+"'")
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || !strings.Contains(pgErr.Message, "NOTIFY") {
		t.Fatalf("PREPARE after a plain insert: %v, want PostgreSQL's refusal to prepare a transaction that sent NOTIFY", err)
	}
	mustExec(t, conn, "ROLLBACK")

	// With it, two-phase commit works and nothing is notified.
	mustExec(t, conn, "BEGIN")
	mustExec(t, conn, "SET LOCAL outbox.wake_queued = on")
	enqueue()
	mustExec(t, conn, "PREPARE TRANSACTION '"+gid+"'")
	mustExec(t, conn, "COMMIT PREPARED '"+gid+"'")
	if n := count(); n != 0 {
		t.Fatalf("two-phase commit with outbox.wake_queued = on: %d notifications, want 0", n)
	}
	rows, err := claimPendingWith(ctx, db.New(pool), "t", 10, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 {
		t.Fatalf("claimed %d rows after COMMIT PREPARED, want the one row (the failed PREPARE rolled its row back)", len(rows))
	}

	// The setting is transaction-local: the next ordinary enqueue notifies.
	enqueue()
	if n := count(); n != 1 {
		t.Fatalf("ordinary insert after the two-phase one: %d notifications, want 1", n)
	}
}
