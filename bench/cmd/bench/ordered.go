package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/pgoutbox/pgoutbox/dispatcher"
)

// orderChecker verifies per-aggregate order: within an aggregate, outbox
// ids were enqueued in increasing order (one COPY per transaction, one
// transaction at a time), so every publish must carry a larger id than the
// aggregate's previous one.
type orderChecker struct {
	mu         sync.Mutex
	last       map[string]int64
	violations int
	n          int
}

func (o *orderChecker) Publish(_ context.Context, m dispatcher.Message) error {
	o.mu.Lock()
	if m.OutboxID <= o.last[m.AggregateID] {
		o.violations++
	}
	o.last[m.AggregateID] = m.OutboxID
	o.n++
	o.mu.Unlock()
	return nil
}

func orderedSetup() drainSetup {
	s := outboxSetup()
	s.cfg.Claim = dispatcher.ClaimOrderedOnly
	return s
}

func drainOrdered(ctx context.Context, e *env, n, aggregates int) (float64, *orderChecker, error) {
	if err := resetOutbox(ctx, e.outbox); err != nil {
		return 0, nil, err
	}
	if err := enqueueOutbox(ctx, e.outbox, n, true, aggregates); err != nil {
		return 0, nil, err
	}
	if err := settle(ctx, e.outbox, "outbox"); err != nil {
		return 0, nil, err
	}
	oc := &orderChecker{last: map[string]int64{}}
	rate, elapsed, err := drainOutbox(ctx, e.outboxURL, orderedSetup(), n, oc)
	if err != nil {
		return 0, nil, err
	}
	if oc.violations > 0 {
		return 0, nil, fmt.Errorf("ordered: %d order violations", oc.violations)
	}
	logf("ordered: %d messages over %d aggregate(s) in %s = %.0f msg/s, order verified", n, aggregates, elapsed.Round(time.Millisecond), rate)
	return rate, oc, nil
}

// runOrdered is item 4: 1,000 aggregates × 100 messages, and one hot
// aggregate (every message of one aggregate: strictly one at a time).
func runOrdered(ctx context.Context, e *env) error {
	e.res.OrderedAggregates = 1000
	e.res.OrderedN = 100_000
	rate, _, err := drainOrdered(ctx, e, e.res.OrderedN, e.res.OrderedAggregates)
	if err != nil {
		return err
	}
	e.res.OrderedRate = rate
	e.res.HotN = 2000
	if e.o.full {
		e.res.HotN = 10_000
	}
	if e.res.HotRate, _, err = drainOrdered(ctx, e, e.res.HotN, 1); err != nil {
		return err
	}
	e.res.OrderedVerified = "every publish carried a larger outbox id than the previous publish of its aggregate (0 violations)"
	e.res.OrderedConfig = orderedSetup().String()
	return nil
}
