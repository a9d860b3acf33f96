package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/pgoutbox/dispatcher"
)

// producers write events in business transactions as the producer role:
// an order row and its events in one transaction. Some transactions roll
// back, some roll back a savepoint holding an event; those events must
// never be delivered. A transaction whose COMMIT fails (PostgreSQL restart)
// is recorded as uncertain: the checker requires all or none of its events.
type producers struct {
	pool      *pgxpool.Pool
	seed      uint64
	target    int
	window    time.Duration
	orderedNs int // ordered aggregates

	committed atomic.Int64
	errors    atomic.Int64

	mu         sync.Mutex
	txs        map[string]int // committed tag -> events
	rolledBack []string
	uncertain  map[string]int
	rbEvents   int
}

func newProducers(pool *pgxpool.Pool, seed uint64, target int, window time.Duration) *producers {
	return &producers{pool: pool, seed: seed, target: target, window: window, orderedNs: max(50, target/125),
		txs: map[string]int{}, uncertain: map[string]int{}}
}

func (p *producers) run(ctx context.Context, workers int) {
	start := time.Now()
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(p.seed, uint64(1000+w)))
			for n := 0; ctx.Err() == nil; n++ {
				// Pace: spread the events over the window.
				for ctx.Err() == nil {
					done := p.committed.Load()
					if done >= int64(p.target) {
						return
					}
					due := start.Add(time.Duration(float64(p.window) * float64(done) / float64(p.target)))
					d := time.Until(due)
					if d <= 0 {
						break
					}
					time.Sleep(min(d, 50*time.Millisecond))
				}
				if err := p.oneTx(ctx, rng, fmt.Sprintf("w%d-%d", w, n)); err != nil {
					p.errors.Add(1)
					time.Sleep(time.Duration(50+rng.IntN(200)) * time.Millisecond)
				}
			}
		}()
	}
	wg.Wait()
}

func unorderedFate(rng *rand.Rand) string {
	switch v := rng.IntN(10000); {
	case v < 40:
		return FatePerm
	case v < 60:
		return FateExhaust
	case v < 360:
		return Fate503
	case v < 460:
		return Fate503x2
	case v < 660:
		return Fate429
	case v < 860:
		return FateDefer
	case v < 910:
		return FateSlow
	}
	return FateOK
}

// orderedFate never dooms an event: a dead head would block its aggregate
// until an operator acts.
func orderedFate(rng *rand.Rand) string {
	switch v := rng.IntN(10000); {
	case v < 200:
		return Fate503
	case v < 250:
		return Fate503x2
	case v < 350:
		return Fate429
	case v < 500:
		return FateDefer
	case v < 530:
		return FateSlow
	}
	return FateOK
}

// versionedAggregates is how many rows chaos_versions holds (ver-00..ver-19).
const versionedAggregates = 20

func (p *producers) oneTx(ctx context.Context, rng *rand.Rand, tag string) (err error) {
	if rng.IntN(100) < 15 {
		return p.versionedTx(ctx, rng, tag)
	}
	rollback := rng.IntN(100) < 5
	ordered := rng.IntN(100) < 40
	var evs []dispatcher.Event
	agg := "u-" + tag
	n := 1 + rng.IntN(8)
	if ordered {
		agg = fmt.Sprintf("ord-%04d", rng.IntN(p.orderedNs))
		n = 1 + rng.IntN(4)
	}
	for i := 0; i < n; i++ {
		fate, typ := unorderedFate(rng), "ThingHappened"
		if ordered {
			fate, typ = orderedFate(rng), "OrderStep"
		}
		if rollback {
			typ = "WillRollBack"
		}
		evs = append(evs, dispatcher.Event{
			AggregateType: "order", AggregateID: agg, EventType: typ, Ordered: ordered,
			Payload: []byte(fmt.Sprintf(`{"tx":%q,"i":%d,"fate":%q}`, tag, i, fate)),
			Headers: map[string]string{"x-chaos-tx": tag, "x-chaos-fate": fate},
		})
	}
	useMany := !ordered && rng.IntN(4) == 0
	savepoint := !rollback && rng.IntN(100) < 3

	tx, err := p.pool.Begin(ctx)
	if err != nil {
		return err
	}
	committing := false
	defer func() {
		if err != nil && !committing {
			// Never committed: these events must never exist.
			_ = tx.Rollback(context.WithoutCancel(ctx))
			p.mu.Lock()
			p.rolledBack = append(p.rolledBack, tag)
			p.rbEvents += len(evs)
			p.mu.Unlock()
		}
	}()
	if _, err = tx.Exec(ctx, "INSERT INTO chaos_orders (tx, amount) VALUES ($1, $2)", tag, rng.IntN(10000)); err != nil {
		return err
	}
	if useMany {
		if _, err = dispatcher.EnqueueMany(ctx, tx, evs); err != nil {
			return err
		}
	} else {
		for _, ev := range evs {
			if _, err = dispatcher.Enqueue(ctx, tx, ev); err != nil {
				return err
			}
		}
	}
	if savepoint {
		sp, err := tx.Begin(ctx)
		if err != nil {
			return err
		}
		p.mu.Lock()
		p.rolledBack = append(p.rolledBack, tag+"/sp")
		p.rbEvents++
		p.mu.Unlock()
		_, err = dispatcher.Enqueue(ctx, sp, dispatcher.Event{
			AggregateType: "order", AggregateID: agg, EventType: "WillRollBack", Ordered: ordered,
			Payload: []byte(`{"savepoint":true}`), Headers: map[string]string{"x-chaos-tx": tag + "/sp", "x-chaos-fate": FateOK},
		})
		if err != nil {
			return err
		}
		if err = sp.Rollback(ctx); err != nil {
			return err
		}
	}
	if rollback {
		if err = tx.Rollback(ctx); err != nil {
			return err
		}
		p.mu.Lock()
		p.rolledBack = append(p.rolledBack, tag)
		p.rbEvents += len(evs)
		p.mu.Unlock()
		return nil
	}
	committing = true
	if err = tx.Commit(ctx); err != nil {
		p.mu.Lock()
		p.uncertain[tag] = len(evs)
		p.mu.Unlock()
		return err
	}
	p.mu.Lock()
	p.txs[tag] = len(evs)
	p.mu.Unlock()
	p.committed.Add(int64(len(evs)))
	return nil
}

// versionedTx is issue 11's case 3: UPDATE chaos_versions SET v = v + 1
// ... RETURNING v, then two ordered events carrying v (headers
// x-chaos-version, x-chaos-part); half write chaos_orders first (holding an
// older xid), 5% roll back. The checker requires every aggregate's events to
// be first delivered in (version, part) order.
func (p *producers) versionedTx(ctx context.Context, rng *rand.Rand, tag string) (err error) {
	rollback := rng.IntN(100) < 5
	sideFirst := rng.IntN(2) == 0
	agg := fmt.Sprintf("ver-%02d", rng.IntN(versionedAggregates))
	const n = 2
	tx, err := p.pool.Begin(ctx)
	if err != nil {
		return err
	}
	committing := false
	defer func() {
		if err != nil && !committing {
			_ = tx.Rollback(context.WithoutCancel(ctx))
			p.mu.Lock()
			p.rolledBack = append(p.rolledBack, tag)
			p.rbEvents += n
			p.mu.Unlock()
		}
	}()
	if sideFirst {
		if _, err = tx.Exec(ctx, "INSERT INTO chaos_orders (tx, amount) VALUES ($1, $2)", tag, rng.IntN(10000)); err != nil {
			return err
		}
	}
	var v int64
	if err = tx.QueryRow(ctx, "UPDATE chaos_versions SET v = v + 1 WHERE id = $1 RETURNING v", agg).Scan(&v); err != nil {
		return err
	}
	for part := 1; part <= n; part++ {
		fate, typ := orderedFate(rng), "Versioned"
		if rollback {
			typ = "WillRollBack"
		}
		if _, err = dispatcher.Enqueue(ctx, tx, dispatcher.Event{
			AggregateType: "versioned", AggregateID: agg, EventType: typ, Ordered: true,
			Payload: []byte(fmt.Sprintf(`{"tx":%q,"v":%d,"part":%d,"fate":%q}`, tag, v, part, fate)),
			Headers: map[string]string{"x-chaos-tx": tag, "x-chaos-fate": fate,
				"x-chaos-version": fmt.Sprint(v), "x-chaos-part": fmt.Sprint(part)},
		}); err != nil {
			return err
		}
	}
	if rollback {
		if err = tx.Rollback(ctx); err != nil {
			return err
		}
		p.mu.Lock()
		p.rolledBack = append(p.rolledBack, tag)
		p.rbEvents += n
		p.mu.Unlock()
		return nil
	}
	committing = true
	if err = tx.Commit(ctx); err != nil {
		p.mu.Lock()
		p.uncertain[tag] = n
		p.mu.Unlock()
		return err
	}
	p.mu.Lock()
	p.txs[tag] = n
	p.mu.Unlock()
	p.committed.Add(n)
	return nil
}

// enqueuePoison commits one poison event in its own transaction.
func (p *producers) enqueuePoison(ctx context.Context, i int) error {
	tag := fmt.Sprintf("poison-%d", i)
	for attempt := 0; attempt < 50 && ctx.Err() == nil; attempt++ {
		err := pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
			_, err := dispatcher.Enqueue(ctx, tx, dispatcher.Event{
				AggregateType: "order", AggregateID: tag, EventType: "Poison",
				Payload: []byte(`{"poison":true}`), Headers: map[string]string{"x-chaos-tx": tag, "x-chaos-fate": FatePoison},
			})
			return err
		})
		if err == nil {
			p.mu.Lock()
			p.txs[tag] = 1
			p.mu.Unlock()
			return nil
		}
		// BeginFunc's COMMIT may have failed after the server committed:
		// record it as uncertain under a fresh tag on retry.
		p.mu.Lock()
		p.uncertain[tag] = 1
		p.mu.Unlock()
		tag = fmt.Sprintf("poison-%d-retry%d", i, attempt+1)
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("poison %d could not be enqueued", i)
}
