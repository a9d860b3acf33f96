package main

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/pgoutbox/dispatcher"
)

// Item 4b: the producer-side cost of ordered events. Ordered rows get their
// commit position (seq) at COMMIT from the deferred trigger
// outbox_commit_order, under a per-aggregate advisory lock: one extra UPDATE
// per ordered row, and commits of one aggregate go one at a time. This item
// measures 8 concurrent producers, each transaction one or 10 separate
// Enqueue calls, with unordered events, ordered events of distinct
// aggregates (each producer its own), and ordered events of one hot
// aggregate shared by all producers.

const (
	producerClients = 8
)

// producerCase is one measured producer workload.
type producerCase struct {
	Name     string // unordered, ordered, ordered-hot
	PerTx    int    // events per transaction (separate Enqueue calls)
	Rounds   []float64
	TxPerSec float64 // median of Rounds
}

func (c producerCase) label() string { return fmt.Sprintf("%s/%d", c.Name, c.PerTx) }

// runProducers is item 4b. Rounds are interleaved (every case once per
// round, in the same order) so that load from elsewhere on the machine
// spreads over all cases; the median round is reported.
func runProducers(ctx context.Context, e *env) error {
	dur := 5 * time.Second
	if e.o.full {
		dur = 15 * time.Second
	}
	cases := []*producerCase{
		{Name: "unordered", PerTx: 1}, {Name: "ordered", PerTx: 1},
		{Name: "unordered", PerTx: 10}, {Name: "ordered", PerTx: 10},
		{Name: "ordered-hot", PerTx: 1}, {Name: "ordered-hot", PerTx: 10},
	}
	pool, err := newPool(ctx, e.outboxURL, producerClients)
	if err != nil {
		return err
	}
	defer pool.Close()
	for round := 0; round < e.o.rounds; round++ {
		for _, c := range cases {
			if err := resetOutbox(ctx, e.outbox); err != nil {
				return err
			}
			if err := settle(ctx, e.outbox, "outbox"); err != nil {
				return err
			}
			rate, err := produceFor(ctx, pool, c.Name, c.PerTx, dur)
			if err != nil {
				return fmt.Errorf("%s: %w", c.label(), err)
			}
			if err := checkSequenced(ctx, e.outbox, c.Name != "unordered"); err != nil {
				return fmt.Errorf("%s: %w", c.label(), err)
			}
			c.Rounds = append(c.Rounds, rate)
			logf("producers: round %d %-15s %4.0f tx/s (%5.0f events/s)", round+1, c.label(), rate, rate*float64(c.PerTx))
		}
	}
	for _, c := range cases {
		s := slices.Clone(c.Rounds)
		slices.Sort(s)
		c.TxPerSec = s[len(s)/2]
		e.res.Producers = append(e.res.Producers, *c)
	}
	e.res.ProducerClients = producerClients
	e.res.ProducerSeconds = dur.Seconds()
	return nil
}

// produceFor runs producerClients producers for dur and returns committed
// transactions per second.
func produceFor(ctx context.Context, pool *pgxpool.Pool, kind string, perTx int, dur time.Duration) (float64, error) {
	var committed atomic.Int64
	var firstErr error
	var errOnce sync.Once
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	start := time.Now()
	deadline := start.Add(dur)
	for p := 0; p < producerClients; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; time.Now().Before(deadline); i++ {
				agg := "p" + strconv.Itoa(p) + "-" + strconv.Itoa(i%100)
				if kind == "ordered-hot" {
					agg = "hot"
				}
				err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
					for j := 0; j < perTx; j++ {
						if _, err := dispatcher.Enqueue(ctx, tx, dispatcher.Event{
							AggregateType: "bench", AggregateID: agg, EventType: "benchmark",
							Payload: json.RawMessage(`{"num":` + strconv.Itoa(i) + `}`), Ordered: kind != "unordered",
						}); err != nil {
							return err
						}
					}
					return nil
				})
				if err != nil {
					errOnce.Do(func() { firstErr = err; cancel() })
					return
				}
				committed.Add(1)
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if firstErr != nil {
		return 0, firstErr
	}
	return float64(committed.Load()) / elapsed.Seconds(), nil
}

// checkSequenced verifies that ordered rows all got their commit position
// (and unordered rows none).
func checkSequenced(ctx context.Context, pool *pgxpool.Pool, ordered bool) error {
	var bad int64
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM outbox WHERE ordered <> $1 OR (seq IS NULL) = $1`, ordered).Scan(&bad); err != nil {
		return err
	}
	if bad > 0 {
		return fmt.Errorf("%d rows with the wrong ordered/seq state", bad)
	}
	return nil
}
