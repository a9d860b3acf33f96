package dispatcher_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgoutbox/pgoutbox/dispatcher"
)

// notificationCounter LISTENs on the outbox channel as a relay would; each
// call counts the notifications that arrived since the last one (it returns
// after 200 ms without any).
func notificationCounter(t *testing.T, b *bundle) func() int {
	t.Helper()
	ctx := context.Background()
	listener, err := pgx.Connect(ctx, b.url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { listener.Close(context.Background()) })
	if _, err := listener.Exec(ctx, "LISTEN outbox"); err != nil {
		t.Fatal(err)
	}
	return func() int {
		n := 0
		for {
			wctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
			_, err := listener.WaitForNotification(wctx)
			cancel()
			if err != nil {
				return n
			}
			n++
		}
	}
}

// idleHolders counts the sessions holding the idle lock (queries/wake.sql).
func idleHolders(t *testing.T, b *bundle) int {
	t.Helper()
	var n int
	if err := b.pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_locks
	    WHERE locktype = 'advisory' AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
	      AND classid = 'outbox'::regclass::oid AND objid = 1869968485 AND objsubid = 2 AND mode = 'ExclusiveLock' AND granted`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// While a relay is busy (it claims again as soon as it has room) it gives
// the idle lock up and producers' transactions queue no NOTIFY. When it
// runs out of work it takes the lock again, after the producers that began
// meanwhile have ended, and claims once more, so with a poll interval of an
// hour every message committed while it was busy is still delivered; after
// that, a commit notifies and is delivered at once.
func TestBusy_NoNotifyWhileTheRelayIsBusyAndNothingLeftBehind(t *testing.T) {
	t.Parallel()
	b := setup(t)
	notifications := notificationCounter(t, b)
	const seeded, during = 3000, 50
	b.enqueue(t, seeded, "a", false)
	rec := newRecorder(func(ctx context.Context, _ dispatcher.Message) error {
		time.Sleep(time.Millisecond) // a backlog of about a second: the relay stays busy
		return nil
	})
	b.start(t, rec, fast(dispatcher.Config{PollInterval: time.Hour, Batch: 20, Concurrency: 4}))
	waitFor(t, 10*time.Second, "the relay to give the idle lock up", func() bool { return idleHolders(t, b) == 0 })
	_ = notifications() // the seed's own, before the relay started

	for i := 0; i < during; i++ {
		b.enqueue(t, 1, "b", false)
	}
	busyAfter := b.count(t, "status <> 'done'") > 0
	// A machine stall with the relay full in flight lets a few notify (the
	// relay then waits idle, by design: 7 of 50 with two CPU hogs beside
	// the test); every commit notified before migration 00013.
	n := notifications()
	if n > during/2 || !busyAfter {
		t.Errorf("%d commits while the relay was busy (backlog left after them: %v): %d notifications, want 0 (at most %d)", during, busyAfter, n, during/2)
	}
	t.Logf("%d commits while the relay was busy: %d notifications", during, n)

	waitFor(t, 60*time.Second, "every message delivered with the poll an hour away", func() bool {
		return b.count(t, "status = 'done'") == seeded+during
	})
	waitFor(t, 10*time.Second, "the relay to take the idle lock again", func() bool { return idleHolders(t, b) == 1 })
	for i := 1; i <= 3; i++ {
		if i > 1 {
			time.Sleep(300 * time.Millisecond)
		}
		start := time.Now()
		b.enqueue(t, 1, "c", false)
		waitFor(t, 10*time.Second, "the commit after the relay went idle delivered", func() bool {
			return b.count(t, "status = 'done'") == seeded+during+i
		})
		t.Logf("delivered %s after its commit, the relay idle", time.Since(start))
	}
	if n := notifications(); n != 3 {
		t.Errorf("3 commits while the relay is idle: %d notifications, want 3", n)
	}
}

// A relay whose every slot in flight waits on a slow publish does not
// claim, so it takes the idle lock again: producers notify, and would wake
// the other relays. Once its publishes finish it claims what was
// committed meanwhile without a notification of its own.
func TestBusy_ARelayFullInFlightLetsProducersNotify(t *testing.T) {
	t.Parallel()
	b := setup(t)
	notifications := notificationCounter(t, b)
	const seeded, during = 200, 20
	b.enqueue(t, seeded, "a", false)
	release := make(chan struct{})
	rec := newRecorder(func(ctx context.Context, _ dispatcher.Message) error {
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	b.start(t, rec, fast(dispatcher.Config{PollInterval: time.Hour, Lease: time.Minute, PublishTimeout: 30 * time.Second}))
	waitFor(t, 10*time.Second, "the relay to claim", func() bool { return b.count(t, "status = 'processing'") > 0 })
	waitFor(t, 10*time.Second, "the relay, full in flight, to hold the idle lock", func() bool { return idleHolders(t, b) == 1 })
	_ = notifications()

	for i := 0; i < during; i++ {
		b.enqueue(t, 1, "b", false)
	}
	if n := notifications(); n != during {
		t.Errorf("%d commits while the relay was full in flight: %d notifications, want %d", during, n, during)
	}
	close(release)
	waitFor(t, 30*time.Second, "every message delivered", func() bool {
		return b.count(t, "status = 'done'") == seeded+during
	})
}

// A relay that claims one kind of message only never gives the idle lock
// up: the producers of the other kind must still wake the relays that
// claim it.
func TestBusy_ARelayOfOneKindNeverGivesTheIdleLockUp(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.enqueue(t, 2000, "a", false)
	rec := newRecorder(func(ctx context.Context, _ dispatcher.Message) error {
		time.Sleep(time.Millisecond)
		return nil
	})
	d, _ := b.start(t, rec, fast(dispatcher.Config{Claim: dispatcher.ClaimUnorderedOnly, Batch: 20, Concurrency: 4}))
	waitFor(t, 10*time.Second, "LISTEN registered", func() bool { return d.Stats().Listens > 0 })
	waitFor(t, 10*time.Second, "the idle lock taken", func() bool { return idleHolders(t, b) == 1 })
	released := 0
	for b.count(t, "status = 'done'") < 2000 {
		if idleHolders(t, b) == 0 {
			released++
		}
		time.Sleep(5 * time.Millisecond)
	}
	if released != 0 {
		t.Errorf("a relay claiming unordered messages only gave the idle lock up (%d of its samples while it drained)", released)
	}
}
