package dispatcher_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/pgoutbox/pgoutbox/dispatcher"
)

// A claim inside a backlog's window that runs out of ClaimTimeout waiting
// for a lock on the table (DDL, LOCK TABLE) goes on from where it was once
// the lock is gone: every message is delivered by the claims, none waits
// for the sweep (an hour here), and none goes through the one-at-a-time
// isolation path.
func TestLockWait_TimedOutClaimResumesWhereItWas(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	const n = 3000
	b.enqueue(t, n, "a", false)

	var (
		once     sync.Once
		locked   = make(chan struct{})
		release  = make(chan struct{})
		released = make(chan struct{})
	)
	// The first publish takes a SHARE lock on the table (as CREATE INDEX
	// does) and holds it until a claim has timed out waiting for it.
	lockTable := func() {
		defer close(released)
		tx, err := b.pool.Begin(ctx)
		if err != nil {
			t.Error(err)
			close(locked)
			return
		}
		defer tx.Rollback(ctx) //nolint:errcheck
		if _, err := tx.Exec(ctx, "LOCK TABLE outbox IN SHARE MODE"); err != nil {
			t.Error(err)
		}
		close(locked)
		<-release
	}
	rec := newRecorder(func(ctx context.Context, m dispatcher.Message) error {
		once.Do(func() {
			go lockTable()
			<-locked
		})
		return nil
	})
	// ClaimTimeout is long enough that only the lock makes a claim run out
	// of it, even on a loaded machine (300 ms once timed a cold first claim
	// out under the whole suite's load, and it went, rightly, through the
	// isolation path), and short enough for a quick test.
	// Concurrency n: room in flight for every message (max(2×200,
	// 200+n)+200 > n), so the claimer always has room for a claim that
	// meets the lock. (With the default 16, a loaded machine could fill the
	// relay's 600 before the first publish took the lock; its finalizes
	// then waited behind the lock, no claim ran into it, and the test hung
	// in its cleanup on the lock's connection.)
	d, _ := b.start(t, rec, fast(dispatcher.Config{Claim: dispatcher.ClaimUnorderedOnly, Batch: 200, BatchMin: 200,
		Concurrency: n, ClaimTimeout: 2 * time.Second, SweepInterval: time.Hour, StatsInterval: -1}))
	var releaseOnce sync.Once
	unlock := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(unlock) // runs before the relay is stopped: a failed test does not hold the lock
	waitFor(t, 30*time.Second, "a claim timed out on the lock", func() bool {
		s := d.Stats()
		return s.LockWaits > 0 || s.Isolations > 0
	})
	unlock()
	<-released
	waitFor(t, 30*time.Second, "every message delivered and done", func() bool {
		return rec.published() >= n && b.count(t, "status = 'done'") == n
	})
	if s := d.Stats(); s.Isolations != 0 || s.Requeued != 0 || s.LockWaits == 0 {
		t.Errorf("Isolations %d, Requeued %d, LockWaits %d: messages went through the isolation path or the sweep", s.Isolations, s.Requeued, s.LockWaits)
	}
}
