package dispatcher_test

import (
	"context"
	"testing"
	"time"

	"github.com/pgoutbox/pgoutbox/dispatcher"
	"github.com/pgoutbox/pgoutbox/internal/pgtest"
)

// notificationCounter LISTENs on the outbox channel as a relay would and
// counts the notifications committed since its last call
// (pgtest.Notifications).
func notificationCounter(t *testing.T, b *bundle) func() int {
	t.Helper()
	_, count := pgtest.Notifications(t, b.url, "outbox")
	return count
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
	const backlog, during = 3000, 50
	seeded := 0
	b.enqueue(t, backlog, "a", false)
	seeded += backlog
	rec := newRecorder(func(ctx context.Context, _ dispatcher.Message) error {
		time.Sleep(time.Millisecond) // a backlog of about a second: the relay stays busy
		return nil
	})
	d, _ := b.start(t, rec, fast(dispatcher.Config{PollInterval: time.Hour, Batch: 20, Concurrency: 4}))

	// A relay that waits for room in flight longer than an instant takes the
	// idle lock again, by design (TestBusy_ARelayFullInFlightLetsProducersNotify):
	// on a loaded machine a publish stalls that long now and then. Commits
	// during such a wait may notify, so the batch of commits is judged only
	// when the relay claimed back to back throughout; otherwise it is tried
	// again on a fresh backlog.
	for attempt := 1; ; attempt++ {
		var before dispatcher.Stats // taken before the wish is read: a wait for room after it counts
		waitFor(t, 10*time.Second, "the relay to give the idle lock up", func() bool {
			before = d.Stats()
			busy, synced := dispatcher.BusyWish(d)
			return busy && synced && idleHolders(t, b) == 0
		})
		_ = notifications() // the seed's own, or an earlier attempt's
		for i := 0; i < during; i++ {
			b.enqueue(t, 1, "b", false)
		}
		seeded += during
		busyAfter := b.count(t, "status = 'pending' AND aggregate_id = 'a'") > 0
		n := notifications()
		after := d.Stats()
		roomWaits := after.RoomWaits - before.RoomWaits
		relistens := after.Listens - before.Listens // a listen connection taken again holds the idle lock until it syncs
		t.Logf("attempt %d: %d commits while the relay was busy: %d notifications (backlog left after them: %v; waits for room in flight: %d, listens: %d, idle: %d, in a wake window: %d; claimed %d)",
			attempt, during, n, busyAfter, roomWaits, relistens, after.IdleWaits-before.IdleWaits, after.WakePolls-before.WakePolls, after.Claimed-before.Claimed)
		if !busyAfter {
			t.Fatalf("the backlog ran out during the commits: %d notifications", n)
		}
		if roomWaits == 0 && relistens == 0 {
			if n != 0 {
				t.Errorf("%d commits while the relay claimed back to back: %d notifications, want 0", during, n)
			}
			break
		}
		if attempt == 5 {
			t.Fatalf("the relay waited for room in flight (or listened again) during each of %d attempts: the machine is too loaded to show a busy relay", attempt)
		}
		if b.count(t, "status = 'pending'") < backlog/2 {
			b.enqueue(t, backlog, "a", false)
			seeded += backlog
		}
	}

	waitFor(t, 60*time.Second, "every message delivered with the poll an hour away", func() bool {
		return b.count(t, "status = 'done'") == seeded
	})
	waitFor(t, 10*time.Second, "the relay to take the idle lock again", func() bool { return idleHolders(t, b) == 1 })
	for i := 1; i <= 3; i++ {
		if i > 1 {
			time.Sleep(300 * time.Millisecond)
		}
		start := time.Now()
		b.enqueue(t, 1, "c", false)
		waitFor(t, 10*time.Second, "the commit after the relay went idle delivered", func() bool {
			return b.count(t, "status = 'done'") == seeded+i
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
	// A fixed claim size of 100 keeps at most 200 in flight: the seed fills
	// it in two claims back to back (the relay gives the idle lock up), then
	// the relay waits for room.
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
	d, _ := b.start(t, rec, fast(dispatcher.Config{PollInterval: time.Hour, Lease: time.Minute, PublishTimeout: 30 * time.Second,
		Batch: 100, BatchMin: 100}))
	waitFor(t, 10*time.Second, "the relay full in flight, waiting for room", func() bool {
		s := d.Stats()
		return s.InFlight == seeded && s.RoomWaits > 0
	})
	waitFor(t, 10*time.Second, "the relay, full in flight, to hold the idle lock", func() bool {
		busy, synced := dispatcher.BusyWish(d)
		return !busy && synced && idleHolders(t, b) == 1
	})
	_ = notifications()

	for i := 0; i < during; i++ {
		b.enqueue(t, 1, "b", false)
	}
	if n := notifications(); n != during {
		t.Errorf("%d commits while the relay was full in flight: %d notifications, want %d", during, n, during)
	}
	if s := d.Stats(); s.InFlight != seeded || s.Claimed != seeded {
		t.Errorf("the relay claimed while full in flight: %d in flight, %d claimed, want %d and %d", s.InFlight, s.Claimed, seeded, seeded)
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
