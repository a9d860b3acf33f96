package queries_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/pgoutbox/pgoutbox/db"
)

// The sequence check runs on every relay while producers commit: it must
// never take a sequence that is merely moving for one that is behind (it
// would set it, and could set it back under a concurrent nextval).
func TestRepairSequences_NeverBehindUnderConcurrentProducers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	var stop atomic.Bool
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; !stop.Load(); i++ {
				if _, err := b.q.OutboxEnqueue(ctx, db.OutboxEnqueueParams{AggregateType: "a", AggregateID: fmt.Sprintf("agg-%d-%d", w, i%5),
					EventType: "E", Payload: []byte(`{}`), Headers: []byte(`{}`), Ordered: true}); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	for range 300 {
		n, err := b.q.OutboxRepairSequences(ctx, db.OutboxRepairSequencesParams{CheckOnly: true})
		if err != nil {
			t.Fatal(err)
		}
		if n != 0 {
			t.Errorf("%d sequences reported behind while producers commit", n)
			break
		}
	}
	stop.Store(true)
	wg.Wait()
}
