package queries_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgoutbox/pgoutbox/db"
	"github.com/pgoutbox/pgoutbox/internal/pgtest"
)

// Producers notify only while a relay holds the idle lock (OutboxWakeIdle);
// while no relay waits, or the one that did claims back to back
// (OutboxWakeBusy), their transactions queue no wake-up.
func TestWake_ProducersNotifyOnlyWhileARelayWaitsIdle(t *testing.T) {
	t.Parallel()
	url := pgtest.NewURL(t)
	pool := pgtest.Pool(t, url)
	ctx := context.Background()
	relay, count := listenOnly(t, url)
	rq := db.New(relay)
	if err := rq.OutboxWakeSession(ctx, "200ms"); err != nil {
		t.Fatal(err)
	}
	ev := db.OutboxEnqueueParams{AggregateType: "o", AggregateID: "a", EventType: "E", Payload: []byte(`{}`), Headers: []byte(`{}`)}

	for _, tt := range []struct {
		name  string
		relay string // "", idle, busy: what the relay says before the commit
		want  int
	}{
		{"no relay waits: no notification", "", 0},
		{"a relay waits idle: the commit notifies", "idle", 1},
		{"the relay claims back to back: no notification", "busy", 0},
		{"the relay idle again: the commit notifies", "idle", 1},
	} {
		switch tt.relay {
		case "idle":
			if r, err := rq.OutboxWakeIdle(ctx); err != nil || !r.Held || r.OtherRelay {
				t.Fatalf("%s: OutboxWakeIdle = %+v, %v; want held", tt.name, r, err)
			}
		case "busy":
			if ok, err := rq.OutboxWakeBusy(ctx); err != nil || !ok {
				t.Fatalf("%s: OutboxWakeBusy = %v, %v; want true", tt.name, ok, err)
			}
		}
		if _, err := db.New(pool).OutboxEnqueue(ctx, ev); err != nil {
			t.Fatal(err)
		}
		if n := count(); n != tt.want {
			t.Errorf("%s: %d notifications, want %d", tt.name, n, tt.want)
		}
	}

	// A second relay finds the lock held by the first: it waits for the
	// same notifications.
	other, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close(ctx)
	if r, err := db.New(other).OutboxWakeIdle(ctx); err != nil || r.Held || !r.OtherRelay {
		t.Fatalf("second relay: OutboxWakeIdle = %+v, %v; want held by another relay", r, err)
	}
	if ok, err := rq.OutboxWakeBusy(ctx); err != nil || !ok {
		t.Fatalf("OutboxWakeBusy = %v, %v", ok, err)
	}
	if r, err := db.New(other).OutboxWakeIdle(ctx); err != nil || !r.Held {
		t.Fatalf("second relay after the first went busy: OutboxWakeIdle = %+v, %v; want held", r, err)
	}
	if _, err := db.New(other).OutboxWakeBusy(ctx); err != nil {
		t.Fatal(err)
	}
}

// A producer transaction that began while no relay waited holds the idle
// lock shared until it ends and will not notify, so a relay cannot take the
// lock, and must not wait for a notification, before it has committed:
// OutboxWakeIdle finds it neither free nor another relay's, and
// OutboxWakeAwaitIdle waits for it (lock_timeout). While the relay waits,
// producers that insert notify; once the open transaction commits the relay
// holds the lock and sees the row that did not notify.
func TestWake_ARelayWaitsForProducersThatWillNotNotify(t *testing.T) {
	t.Parallel()
	url := pgtest.NewURL(t)
	pool := pgtest.Pool(t, url)
	ctx := context.Background()
	_, count := listenOnly(t, url)
	relay, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer relay.Close(ctx)
	rq := db.New(relay)
	if err := rq.OutboxWakeSession(ctx, "200ms"); err != nil {
		t.Fatal(err)
	}
	ev := db.OutboxEnqueueParams{AggregateType: "o", AggregateID: "a", EventType: "E", Payload: []byte(`{}`)}
	enqueue := func(q db.DBTX) {
		t.Helper()
		if _, err := db.New(q).OutboxEnqueue(ctx, ev); err != nil {
			t.Fatal(err)
		}
	}

	producer, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer producer.Rollback(ctx) //nolint:errcheck
	enqueue(producer)
	if r, err := rq.OutboxWakeIdle(ctx); err != nil || r.Held || r.OtherRelay {
		t.Fatalf("with a producer in flight: OutboxWakeIdle = %+v, %v; want neither held nor another relay's", r, err)
	}
	err = rq.OutboxWakeAwaitIdle(ctx)
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "55P03" {
		t.Fatalf("OutboxWakeAwaitIdle with a producer in flight: %v, want lock_timeout (55P03)", err)
	}

	if err := rq.OutboxWakeSession(ctx, "10s"); err != nil {
		t.Fatal(err)
	}
	awaited := make(chan error, 1)
	go func() { awaited <- rq.OutboxWakeAwaitIdle(ctx) }()
	deadline := time.Now().Add(5 * time.Second)
	for {
		var waiting bool
		if err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_locks
		    WHERE locktype = 'advisory' AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
		      AND objid = 1869968485 AND objsubid = 2 AND mode = 'ExclusiveLock' AND NOT granted)`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the relay's OutboxWakeAwaitIdle never waited")
		}
		time.Sleep(10 * time.Millisecond)
	}
	enqueue(pool) // a producer while the relay waits for the lock
	if n := count(); n != 1 {
		t.Errorf("a commit while a relay waits for the idle lock: %d notifications, want 1", n)
	}
	select {
	case err := <-awaited:
		t.Fatalf("OutboxWakeAwaitIdle returned (%v) with the first producer still open", err)
	default:
	}
	if err := producer.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-awaited; err != nil {
		t.Fatalf("OutboxWakeAwaitIdle after the producer committed: %v", err)
	}
	if n := count(); n != 0 {
		t.Errorf("the producer that began while no relay waited: %d notifications, want 0", n)
	}
	var rows int
	if err := relay.QueryRow(ctx, "SELECT count(*) FROM outbox").Scan(&rows); err != nil || rows != 2 {
		t.Errorf("rows the relay sees once it holds the lock: %d (%v), want 2", rows, err)
	}
}
