package dispatcher_test

import (
	"context"
	"testing"
	"time"

	"github.com/pgoutbox/pgoutbox/dispatcher"
)

// The queue gauges read whole partial indexes. A relay that starts on a
// backlog reads them once it has caught up (its first claim that found
// nothing), not first thing in the middle of the drain; on an empty queue
// that is at once.
func TestQueueStats_FirstReadWaitsUntilTheBacklogIsClaimed(t *testing.T) {
	for _, tc := range []struct {
		name    string
		backlog int
	}{
		{"empty queue: read a second after the start", 0},
		{"backlog: read a second after it is claimed", 30},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := setup(t)
			if tc.backlog > 0 {
				b.enqueue(t, tc.backlog, "a", false)
			}
			release := make(chan struct{})
			pub := newRecorder(func(ctx context.Context, _ dispatcher.Message) error {
				select {
				case <-release:
					return nil
				case <-ctx.Done():
					return ctx.Err()
				}
			})
			// StatsInterval far beyond the test: only the first read can
			// happen here. Batch 5, one worker: the in-flight limit (10)
			// holds the claimer while the publisher is held, with 20 of
			// the backlog still pending. A lease long enough that no held
			// publish times out (a retry in its backoff would be pending
			// at the first idle round on a loaded machine).
			cfg := fast(dispatcher.Config{Concurrency: 1, Batch: 5, BatchMin: 5, StatsInterval: time.Hour, DisableListen: true,
				Lease: time.Minute})
			d, _ := b.start(t, pub, cfg)
			// The claim loop finds nothing to claim within milliseconds of
			// the start (empty queue) or of the release (backlog); the
			// first read waits a second more, so that a relay of a fleet
			// does not read while the others finalize their last claims.
			notYet := func(what string) {
				t.Helper()
				time.Sleep(300 * time.Millisecond)
				if at := d.Stats().Queue.At; !at.IsZero() {
					t.Fatalf("the queue gauges were read at %s, %s", at.Format(time.RFC3339Nano), what)
				}
			}
			if tc.backlog == 0 {
				notYet("less than a second after the start on an empty queue")
				waitFor(t, 10*time.Second, "the first read of the queue gauges", func() bool { return !d.Stats().Queue.At.IsZero() })
				close(release)
				return
			}
			waitFor(t, 10*time.Second, "the claimer at its in-flight limit", func() bool { return d.Stats().Claimed >= 10 })
			time.Sleep(300 * time.Millisecond)
			if at := d.Stats().Queue.At; !at.IsZero() {
				t.Fatalf("the queue gauges were read at %s, with %d of the backlog still pending", at.Format(time.RFC3339Nano),
					b.count(t, "status = 'pending'"))
			}
			close(release)
			notYet("less than a second after the backlog was claimed")
			waitFor(t, 10*time.Second, "the first read of the queue gauges", func() bool { return !d.Stats().Queue.At.IsZero() })
			if q := d.Stats().Queue; q.ByStatus["pending"] != 0 {
				t.Fatalf("first read found %d pending, want 0 (read before the backlog was claimed)", q.ByStatus["pending"])
			}
		})
	}
}
