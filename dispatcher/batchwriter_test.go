package dispatcher_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/pgoutbox/pgoutbox/dispatcher"
)

// Failures are written as successes are: in batches, one fenced statement
// per batch whatever the outcomes in it (retry, defer, dead, done), never a
// statement per message. A real receiver answers by payload: 204, 422
// (dead), 500 (retried, then dead at MaxAttempts 2) or 425 (deferred).
func TestFailures_OutcomesAreWrittenInBatches(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tr := newTraced(t)
	rc := newReceiver(t, 0)
	rc.answer = func(body []byte) int {
		var p struct{ N int }
		_ = json.Unmarshal(body, &p)
		return []int{http.StatusNoContent, http.StatusUnprocessableEntity, http.StatusInternalServerError, http.StatusTooEarly}[p.N%4]
	}
	const n = 400
	ids := b.enqueue(t, n, "a", false)
	// A long FinalizeDelay: a flush waits until everything in flight is in
	// its batch, so the batches do not depend on the machine's speed.
	b.start(t, rc.publisher(t), fast(dispatcher.Config{
		Batch: 50, BatchMin: 50, MaxAttempts: 2, FinalizeDelay: time.Second, TracerProvider: tr.tp,
	}))
	waitFor(t, 60*time.Second, "every outcome written", func() bool {
		return b.count(t, "status = 'processing' OR (status = 'pending' AND attempts > 0)") == 0 &&
			b.count(t, "status <> 'pending' OR last_error IS NOT NULL") == n
	})
	want := []string{"done", "dead", "dead", "pending"}
	for i, id := range ids {
		if s := b.state(t, id); s.Status != want[i%4] {
			t.Fatalf("event %d: %+v, want status %s", i, s, want[i%4])
		}
	}
	if s := b.state(t, ids[2]); !strings.HasPrefix(s.LastError, "retries exhausted after 2 attempts") {
		t.Errorf("event 2: last_error %q, want retries exhausted", s.LastError)
	}
	if s := b.state(t, ids[3]); s.Attempts != 0 || !strings.HasPrefix(s.LastError, "deferred: ") {
		t.Errorf("event 3: %+v, want deferred with the attempt refunded", s)
	}
	writes := 0
	for _, s := range tr.rec.Ended() {
		switch strings.TrimSuffix(s.Name(), " outbox") {
		case "OutboxFinalizeMany", "OutboxMarkDoneMany":
			writes++
		}
	}
	// 500 results (400 first attempts, 100 second ones) in claims of 50.
	if writes > n/5 {
		t.Errorf("%d write statements for %d results, want at most %d: failures are written one by one", writes, n+n/4, n/5)
	}
}
