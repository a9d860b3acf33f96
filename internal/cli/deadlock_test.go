package cli

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgoutbox/pgoutbox/dispatcher"
)

// `dead skip --all-matching` over thousands of dead heads, while producers
// commit ordered events to three of those aggregates per transaction: both
// take the aggregates' advisory locks (the skip through the head hand-off,
// the producers at COMMIT), in one key order, so neither side is ever rolled
// back with "deadlock detected".
func TestDeadSkip_NeverDeadlocksWithProducers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := newDB(t)
	const aggregates = 2000
	d.exec(t, `INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload, ordered)
		SELECT 'order', 'agg-' || g, 'Poison', '{}', true FROM generate_series(1, $1::int) AS g`, aggregates)
	d.exec(t, `SELECT outbox_resolve_heads($1)`, aggregates) // as a relay does before its ordered claims
	d.exec(t, `UPDATE outbox SET status = 'dead', last_error = 'permanent' WHERE ordered AND head`)

	var (
		stop      atomic.Bool
		commits   atomic.Int64
		wg        sync.WaitGroup
		mu        sync.Mutex
		producerE []error
	)
	for p := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(p), 1))
			for !stop.Load() {
				err := pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error {
					for range 3 {
						_, err := dispatcher.Enqueue(ctx, tx, dispatcher.Event{AggregateType: "order",
							AggregateID: fmt.Sprintf("agg-%d", 1+r.IntN(aggregates)), EventType: "E", Payload: []byte(`{}`), Ordered: true})
						if err != nil {
							return err
						}
					}
					return nil
				})
				if err != nil {
					mu.Lock()
					producerE = append(producerE, err)
					mu.Unlock()
					return
				}
				commits.Add(1)
			}
		}()
	}
	r := call(t, invocation{env: d.env()}, "dead", "skip", "--all-matching", "--yes", "--reason", "replayed by hand")
	stop.Store(true)
	wg.Wait()
	wantCode(t, r, ExitOK)
	mustContain(t, r, "stdout", fmt.Sprintf("skipped %d of %d", aggregates, aggregates))
	for _, err := range producerE {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "40P01" {
			t.Errorf("a producer's transaction was rolled back: %v", err)
		} else {
			t.Errorf("producer: %v", err)
		}
	}
	t.Logf("%d producer commits during the skip", commits.Load())
}
