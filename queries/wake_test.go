package queries_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgoutbox/pgoutbox/db"
	"github.com/pgoutbox/pgoutbox/internal/pgtest"
)

// While a relay holds the busy lock (OutboxWakeBusy), producers' COMMITs
// send no NOTIFY; once it gives the lock up (OutboxWakeIdle) they notify
// again. A producer whose wake-up ran (here at INSERT, under SET
// CONSTRAINTS ALL IMMEDIATE) holds the in-flight lock until its COMMIT has
// finished, so the relay's barrier (OutboxWakeBarrier) cannot pass while a
// commit that skipped its NOTIFY is still invisible.
func TestWake_BusyRelaySkipsNotifyAndTheBarrierWaitsForThoseCommits(t *testing.T) {
	t.Parallel()
	url := pgtest.NewURL(t)
	pool := pgtest.Pool(t, url)
	ctx := context.Background()
	count := listen(t, url)
	relay, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer relay.Close(ctx)
	rq := db.New(relay)
	if err := rq.OutboxWakeSession(ctx, "200ms"); err != nil {
		t.Fatal(err)
	}
	ev := db.OutboxEnqueueParams{AggregateType: "o", AggregateID: "a", EventType: "E", Payload: []byte(`{}`), Headers: []byte(`{}`)}
	insert := "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload) VALUES ('o', 'a', 'E', '{}')"

	for _, tt := range []struct {
		name string
		busy bool
		want int
	}{
		{"no relay busy: the commit notifies", false, 1},
		{"a relay busy: no notification", true, 0},
		{"the relay idle again: the commit notifies", false, 1},
	} {
		if tt.busy {
			if ok, err := rq.OutboxWakeBusy(ctx); err != nil || !ok {
				t.Fatalf("%s: OutboxWakeBusy = %v, %v; want true", tt.name, ok, err)
			}
		} else if tt.name != "no relay busy: the commit notifies" {
			if ok, err := rq.OutboxWakeIdle(ctx); err != nil || !ok {
				t.Fatalf("%s: OutboxWakeIdle = %v, %v; want true", tt.name, ok, err)
			}
		}
		if _, err := db.New(pool).OutboxEnqueue(ctx, ev); err != nil {
			t.Fatal(err)
		}
		if n := count(); n != tt.want {
			t.Errorf("%s: %d notifications, want %d", tt.name, n, tt.want)
		}
	}

	// Two relays busy: both must give the lock up before commits notify.
	other, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close(ctx)
	for _, q := range []*db.Queries{rq, db.New(other)} {
		if ok, err := q.OutboxWakeBusy(ctx); err != nil || !ok {
			t.Fatalf("two relays: OutboxWakeBusy = %v, %v; want true", ok, err)
		}
	}
	if _, err := rq.OutboxWakeIdle(ctx); err != nil {
		t.Fatal(err)
	}
	mustExec(t, pool, insert)
	if n := count(); n != 0 {
		t.Errorf("one of two relays still busy: %d notifications, want 0", n)
	}

	// The barrier: a producer that skipped its NOTIFY is still committing
	// (its wake-up ran at INSERT time and the transaction is open).
	producer, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer producer.Rollback(ctx) //nolint:errcheck
	mustExec(t, producer, "SET CONSTRAINTS ALL IMMEDIATE")
	mustExec(t, producer, insert)
	if _, err := db.New(other).OutboxWakeIdle(ctx); err != nil {
		t.Fatal(err)
	}
	err = rq.OutboxWakeBarrier(ctx)
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "55P03" {
		t.Fatalf("barrier with a skipping producer's commit in flight: %v, want lock_timeout (55P03)", err)
	}
	if err := producer.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := rq.OutboxWakeBarrier(ctx); err != nil {
		t.Fatalf("barrier after that commit finished: %v", err)
	}
	if n := count(); n != 0 {
		t.Errorf("the skipping producer: %d notifications, want 0", n)
	}
	// Every relay idle: commits notify again.
	mustExec(t, pool, insert)
	if n := count(); n != 1 {
		t.Errorf("every relay idle: %d notifications, want 1", n)
	}
}
