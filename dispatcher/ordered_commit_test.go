package dispatcher_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/pgoutbox/pgoutbox/dispatcher"
)

// Issue 11 case 3, the versioned-producer property: concurrent producers,
// each transaction bumps its aggregate's version (UPDATE agg SET v = v + 1
// ... RETURNING v) and enqueues two ordered events carrying it; half write
// another table first (so they hold an older xid), some roll back. Several
// dispatchers claim ordered only, and some first publishes fail (retry). No
// event may be first delivered before an event with a lower version (or the
// same version, earlier part) of its aggregate; none lost; no rolled-back
// event delivered.
func TestOrdered_VersionedProducersAreDeliveredInVersionOrder(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	for _, sql := range []string{
		`CREATE TABLE agg (id text PRIMARY KEY, v bigint NOT NULL)`,
		`CREATE TABLE side (x int)`,
		`INSERT INTO agg SELECT 'agg-' || g, 0 FROM generate_series(1, 5) AS g`,
	} {
		if _, err := b.pool.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}

	type key struct {
		agg  string
		v    int64
		part int
	}
	var mu sync.Mutex
	first := map[key]bool{}        // first deliveries seen
	last := map[string]key{}       // per aggregate, the latest first delivery
	var violations []string        // out-of-order first deliveries
	failedOnce := map[int64]bool{} // ids whose first publish failed
	rec := newRecorder(func(_ context.Context, m dispatcher.Message) error {
		var p struct {
			V    int64 `json:"v"`
			Part int   `json:"part"`
		}
		if err := json.Unmarshal(m.Payload, &p); err != nil {
			return dispatcher.Permanent(err)
		}
		k := key{m.AggregateID, p.V, p.Part}
		mu.Lock()
		defer mu.Unlock()
		if !first[k] {
			first[k] = true
			if prev, ok := last[k.agg]; ok && (k.v < prev.v || k.v == prev.v && k.part < prev.part) {
				violations = append(violations, fmt.Sprintf("%s: v%d/%d first delivered after v%d/%d", k.agg, k.v, k.part, prev.v, prev.part))
			}
			last[k.agg] = k
		}
		if m.OutboxID%7 == 0 && !failedOnce[m.OutboxID] {
			failedOnce[m.OutboxID] = true
			return dispatcher.Retryable(errors.New("first attempt fails"))
		}
		return nil
	})
	for i := 0; i < 3; i++ {
		b.start(t, rec, fast(dispatcher.Config{Claim: dispatcher.ClaimOrderedOnly, Owner: fmt.Sprintf("relay-%d", i)}))
	}

	const producers, perProducer = 8, 25
	var committedMu sync.Mutex
	committed := map[key]bool{}
	rolledBack := map[key]bool{}
	var wg sync.WaitGroup
	errs := make(chan error, producers)
	for p := 0; p < producers; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < perProducer; i++ {
				agg := fmt.Sprintf("agg-%d", 1+(p*perProducer+i)%5)
				rollback := (p*perProducer+i)%11 == 5
				v, err := versionedProducerTx(ctx, b, agg, p%2 == 0, rollback)
				if err != nil {
					errs <- err
					return
				}
				committedMu.Lock()
				for part := 1; part <= 2; part++ {
					if rollback {
						rolledBack[key{agg, v, part}] = true
					} else {
						committed[key{agg, v, part}] = true
					}
				}
				committedMu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	waitFor(t, 2*time.Minute, "every committed event done", func() bool {
		return b.count(t, "status = 'done'") == len(committed)
	})

	mu.Lock()
	defer mu.Unlock()
	if len(violations) > 0 {
		t.Fatalf("%d order violations by version, e.g. %v", len(violations), violations[:min(5, len(violations))])
	}
	for k := range committed {
		if !first[k] {
			t.Errorf("committed event %v never delivered", k)
		}
	}
	// A rolled-back version number is reused by the next commit of the
	// aggregate, so "not delivered" means: delivered only as committed.
	for k := range first {
		if !committed[k] {
			t.Errorf("delivered %v, which no committed transaction wrote", k)
		}
	}
	if len(rolledBack) == 0 || len(failedOnce) == 0 {
		t.Fatalf("setup: %d rolled back, %d failed first publishes; want some of each", len(rolledBack), len(failedOnce))
	}
	t.Logf("%d events in version order across 5 aggregates, 3 dispatchers, %d retried; %d rolled back", len(committed), len(failedOnce), len(rolledBack))
}

// versionedProducerTx is one producer transaction of the versioned workload.
func versionedProducerTx(ctx context.Context, b *bundle, agg string, sideFirst, rollback bool) (int64, error) {
	tx, err := b.pool.Begin(ctx)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	if sideFirst {
		if _, err := tx.Exec(ctx, `INSERT INTO side VALUES (1)`); err != nil {
			return 0, err
		}
	}
	var v int64
	if err := tx.QueryRow(ctx, `UPDATE agg SET v = v + 1 WHERE id = $1 RETURNING v`, agg).Scan(&v); err != nil {
		return 0, err
	}
	for part := 1; part <= 2; part++ {
		if _, err := dispatcher.Enqueue(ctx, tx, dispatcher.Event{
			AggregateType: "agg", AggregateID: agg, EventType: "Versioned",
			Payload: fmt.Appendf(nil, `{"v":%d,"part":%d}`, v, part), Ordered: true,
		}); err != nil {
			return 0, err
		}
	}
	if rollback {
		return v, tx.Rollback(ctx)
	}
	return v, tx.Commit(ctx)
}
