package dispatcher_test

import (
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pgoutbox/pgoutbox/dispatcher"
	"github.com/pgoutbox/pgoutbox/publisher/webhook"
)

// receiver is a real HTTP receiver whose answer the test sets (an HTTP
// status; 204 delivers).
type receiver struct {
	srv      *httptest.Server
	status   atomic.Int64
	requests atomic.Int64
	answer   func(r *http.Request) int // when set, decides per request
}

func newReceiver(t *testing.T, status int) *receiver {
	t.Helper()
	rc := &receiver{}
	rc.status.Store(int64(status))
	rc.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc.requests.Add(1)
		code := int(rc.status.Load())
		if rc.answer != nil {
			code = rc.answer(r)
		}
		w.WriteHeader(code)
	}))
	t.Cleanup(rc.srv.Close)
	return rc
}

// publisher returns a webhook publisher posting to the receiver.
func (rc *receiver) publisher(t *testing.T) *webhook.Publisher {
	t.Helper()
	p, err := webhook.New(webhook.Config{URL: rc.srv.URL, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

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
