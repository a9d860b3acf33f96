package dispatcher_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/pgoutbox/pgoutbox/dispatcher"
)

// Retries that keep coming due never starve events committed later: a
// receiver failing every message (500, a retryable failure) with a
// backoff short enough that the first transaction's retries fill every
// claim, and three more transactions committed once the relay is cycling
// them. Each of those must get its first attempt from the claims, not
// from the sweep (an hour away here).
func TestFailures_RetriesDoNotStarveLaterTransactions(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rc := newReceiver(t, http.StatusInternalServerError)
	b.enqueue(t, 500, "first", false)
	b.start(t, rc.publisher(t), fast(dispatcher.Config{
		Batch: 50, BatchMin: 50, MaxAttempts: 1 << 20, SweepInterval: time.Hour,
		BackoffBase: time.Millisecond, BackoffCap: 2 * time.Millisecond,
	}))
	waitFor(t, 30*time.Second, "the first transaction's events retried", func() bool {
		return b.count(t, "attempts >= 2") > 100
	})
	for _, agg := range []string{"second", "third", "fourth"} {
		b.enqueue(t, 500, agg, false)
	}
	waitFor(t, 60*time.Second, "every event tried at least once", func() bool {
		return b.count(t, "attempts = 0") == 0
	})
}
