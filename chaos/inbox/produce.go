package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/pgoutbox/db"
	"github.com/pgoutbox/pgoutbox/dispatcher"
)

const (
	producers  = 4
	aggregates = 200
)

// produce commits o.events transactions, spread over the run, each writing
// the same event into every broker's outbox (so each broker carries the
// same history); one in twenty rolls back instead. It returns the
// transactions committed.
func produce(ctx context.Context, pool *pgxpool.Pool, brokers []*broker, o options) (int64, error) {
	var committed atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, producers)
	per := (o.events + producers - 1) / producers
	interval := (o.duration - 5*time.Second) / time.Duration(per)
	for w := range producers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(o.seed, uint64(100+w)))
			next := time.Now()
			for i := range per {
				if w*per+i >= o.events {
					return
				}
				next = next.Add(interval)
				if d := time.Until(next); d > 0 {
					select {
					case <-ctx.Done():
						return
					case <-time.After(d):
					}
				}
				ordered := rng.IntN(10) < 7
				agg := fmt.Sprintf("agg-%d", rng.IntN(aggregates))
				if !ordered {
					agg = fmt.Sprintf("u-%d-%d", w, i)
				}
				payload, _ := json.Marshal(map[string]any{"producer": w, "n": i})
				rollback := rng.IntN(20) == 0
				if err := enqueueAll(ctx, pool, brokers, agg, ordered, payload, rollback); err != nil {
					if ctx.Err() != nil {
						return
					}
					errs <- err
					return
				}
				if !rollback {
					committed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	return committed.Load(), <-errs
}

// enqueueAll writes one event into every broker's outbox in one
// transaction, and rolls it back when rollback is set (nothing of it may
// ever be delivered).
func enqueueAll(ctx context.Context, pool *pgxpool.Pool, brokers []*broker, agg string, ordered bool, payload []byte, rollback bool) error {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // no-op after Commit
	for _, b := range brokers {
		dbtx, err := dispatcher.TableDBTX(tx, b.outboxTable(), "")
		if err != nil {
			return err
		}
		if _, err := db.New(dbtx).OutboxEnqueue(ctx, db.OutboxEnqueueParams{AggregateType: "order", AggregateID: agg,
			EventType: "OrderChanged", Payload: payload, Ordered: ordered}); err != nil {
			return err
		}
	}
	if rollback {
		return tx.Rollback(ctx)
	}
	return tx.Commit(ctx)
}
