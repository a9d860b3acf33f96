package dispatcher_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/pgoutbox/pgoutbox/dispatcher"
)

// A publish that overruns PublishTimeout is cancelled at its deadline and
// retried (it may have been delivered: the receiver deduplicates), whether
// the publisher returns the context's error or that of a context it derived
// from it; the worker's next publish starts with a live context and a
// deadline of its own.
func TestPublishTimeout_OverrunIsRetriedAndTheNextPublishIsLive(t *testing.T) {
	const timeout = 500 * time.Millisecond
	for _, tc := range []struct {
		name string
		hang func(ctx context.Context) error
	}{
		{"returns ctx.Err()", func(ctx context.Context) error {
			<-ctx.Done()
			return ctx.Err()
		}},
		{"returns a derived context's error", func(ctx context.Context) error {
			child, cancel := context.WithTimeout(ctx, time.Hour)
			defer cancel()
			<-child.Done()
			return fmt.Errorf("send: %w", child.Err())
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := setup(t)
			ids := b.enqueue(t, 3, "a", false)
			var (
				mu       sync.Mutex
				attempts = map[int64]int{}
				problems []string
			)
			pub := newRecorder(func(ctx context.Context, m dispatcher.Message) error {
				mu.Lock()
				attempts[m.OutboxID]++
				n := attempts[m.OutboxID]
				mu.Unlock()
				d, ok := ctx.Deadline()
				if err := ctx.Err(); err != nil || !ok || time.Until(d) > timeout || time.Until(d) <= 0 {
					mu.Lock()
					problems = append(problems, fmt.Sprintf("id %d attempt %d starts with Err %v, deadline in %s (%v)", m.OutboxID, n, err, time.Until(d), ok))
					mu.Unlock()
				}
				if n == 1 {
					err := tc.hang(ctx)
					if !errors.Is(context.Cause(ctx), context.DeadlineExceeded) {
						mu.Lock()
						problems = append(problems, fmt.Sprintf("id %d: cause %v after the deadline", m.OutboxID, context.Cause(ctx)))
						mu.Unlock()
					}
					return err
				}
				return nil
			})
			d, _ := b.start(t, pub, fast(dispatcher.Config{Concurrency: 1, Lease: 5 * time.Second, PublishTimeout: timeout}))
			waitFor(t, 20*time.Second, "every message done", func() bool { return b.count(t, "status = 'done'") == len(ids) })
			mu.Lock()
			defer mu.Unlock()
			for _, p := range problems {
				t.Error(p)
			}
			for _, id := range ids {
				if attempts[id] != 2 {
					t.Errorf("id %d published %d times, want 2 (timed out, then delivered)", id, attempts[id])
				}
			}
			// A timeout says the receiver is unavailable: refunded while no
			// publish got through since it started, retried otherwise.
			if s := d.Stats(); s.Retried+s.Unavailable != int64(len(ids)) || s.Unclassified != 0 {
				t.Errorf("Stats: %d retried, %d unavailable, %d unclassified; want %d timeouts retried or refunded, 0 unclassified",
					s.Retried, s.Unavailable, s.Unclassified, len(ids))
			}
		})
	}
}
