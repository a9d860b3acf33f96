package dispatcher_test

import (
	"testing"
	"time"

	"github.com/pgoutbox/pgoutbox/dispatcher"
)

// Finalizing an ordered message makes the next message of its aggregate the
// head without any INSERT (so without NOTIFY). With a 5 s poll interval the
// 30 messages would need 150 s if each waited for the poll; they drain in
// time only if the finalize itself wakes the claimer.
func TestOrdered_HotAggregateDrainsWithoutWaitingForThePoll(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const n = 30
	ids := b.enqueue(t, n, "hot", true)
	rec := newRecorder(nil)
	b.start(t, rec, fast(dispatcher.Config{PollInterval: 5 * time.Second, Claim: dispatcher.ClaimOrderedOnly}))
	start := time.Now()
	waitFor(t, 60*time.Second, "the hot aggregate drained", func() bool { return b.count(t, "status = 'done'") == n })
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for i, id := range rec.order["hot"] {
		if id != ids[i] {
			t.Fatalf("publish %d was id %d, want %d (order %v)", i, id, ids[i], rec.order["hot"])
		}
	}
	t.Logf("%d ordered messages of one aggregate in %s", n, time.Since(start))
}
