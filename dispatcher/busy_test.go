package dispatcher_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgoutbox/pgoutbox/dispatcher"
)

// While a relay is busy (it has messages in flight and claims again as soon
// as it has room) producers' COMMITs send no NOTIFY. When it runs out of
// work it gives the busy lock up, waits for the commits that skipped their
// NOTIFY and claims once more, so with a poll interval of an hour every
// message committed while it was busy is still delivered; after that, a
// commit notifies and is delivered at once.
func TestBusy_NoNotifyWhileTheRelayIsBusyAndNothingLeftBehind(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	listener, err := pgx.Connect(ctx, b.url)
	if err != nil {
		t.Fatal(err)
	}
	defer listener.Close(ctx)
	if _, err := listener.Exec(ctx, "LISTEN outbox"); err != nil {
		t.Fatal(err)
	}
	notifications := func() int {
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
	busyHolders := func() int {
		var n int
		if err := b.pool.QueryRow(ctx, `SELECT count(*) FROM pg_locks
		    WHERE locktype = 'advisory' AND classid = 'outbox'::regclass::oid AND objid = 1869968483 AND objsubid = 2 AND granted`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	const seeded, during = 200, 50
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
	waitFor(t, 10*time.Second, "the relay to hold the busy lock", func() bool { return busyHolders() == 1 })
	_ = notifications() // the seed's own, before the relay started

	for i := 0; i < during; i++ {
		b.enqueue(t, 1, "b", false)
	}
	if n := notifications(); n != 0 {
		t.Errorf("%d commits while the relay was busy: %d notifications, want 0", during, n)
	}

	close(release)
	waitFor(t, 30*time.Second, "every message delivered with the poll an hour away", func() bool {
		return b.count(t, "status = 'done'") == seeded+during
	})
	waitFor(t, 10*time.Second, "the relay to give the busy lock up", func() bool { return busyHolders() == 0 })

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
