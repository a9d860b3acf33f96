// Package outagetest is a test helper: it runs a dispatcher against a real
// publisher whose destination (a broker, a receiver) the calling test takes
// down and brings back, and checks what an outage must cost: no attempt,
// no dead message, claims stopped while the breaker is open, and, once the
// destination is back, every message delivered, each ordered aggregate in
// commit order.
package outagetest

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/pgoutbox/dispatcher"
	"github.com/pgoutbox/pgoutbox/internal/pgtest"
	"github.com/pgoutbox/pgoutbox/internal/testlog"
)

// Events enqueued by Run: Unordered unordered ones, then Aggregates ordered
// aggregates of PerAggregate events each (aggregate ids "agg-0", "agg-1", …).
const (
	Unordered    = 40
	Aggregates   = 4
	PerAggregate = 5
)

// Delivered is one message as the destination stored it, in the order it
// stored them.
type Delivered struct {
	AggregateID string
	OutboxID    int64
}

// Outage describes the destination of one test.
type Outage struct {
	// Publisher publishes to the destination; it is built while the
	// destination is up.
	Publisher dispatcher.Publisher
	// Down takes the destination down; Up brings it back.
	Down, Up func(t *testing.T)
	// Delivered returns what the destination holds, in its order, once
	// it is back (each message at least once).
	Delivered func(t *testing.T) []Delivered
}

// Run takes the destination down, enqueues the events into a fresh outbox
// and runs a dispatcher on them until its breaker has probed the
// destination Probes times, checking that no attempt was spent; then it
// brings the destination back and waits until every message is done,
// checking what the destination received.
func Run(t *testing.T, o Outage, probes int64) {
	t.Helper()
	pool := pgtest.NewPool(t)
	o.Down(t)
	enqueue(t, pool)
	d, err := dispatcher.New(pool, o.Publisher, dispatcher.Config{
		// A lease no busy machine outlasts: a takeover would count an attempt.
		Logger: testlog.New(t), PollInterval: 20 * time.Millisecond, MaxAttempts: 2, Lease: time.Minute,
		BackoffBase: time.Millisecond, BackoffCap: 10 * time.Millisecond,
		BreakerProbe: 20 * time.Millisecond, BreakerProbeMax: 50 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	waitFor(t, "the breaker open", func() bool { return d.Stats().BreakerOpen })
	open := d.Stats()
	waitFor(t, fmt.Sprintf("%d probes", probes), func() bool { return d.Stats().Probes-open.Probes >= probes })
	if n := count(t, pool, "status = 'dead' OR (status = 'pending' AND attempts > 0)"); n != 0 {
		t.Fatalf("%d messages dead or with an attempt spent while the destination was down", n)
	}
	during := d.Stats()
	if claims, probed := during.Claimed-open.Claimed, during.Probes-open.Probes; claims > probed+int64(dispatcher.BatchMinDefault) {
		t.Errorf("%d messages claimed during %d probes: claims did not stop", claims, probed)
	}

	o.Up(t)
	total := Unordered + Aggregates*PerAggregate
	waitFor(t, "every message delivered", func() bool { return count(t, pool, "status = 'done'") == total })
	if n := count(t, pool, "attempts <> 1"); n != 0 {
		t.Errorf("%d messages took more than their one counted attempt", n)
	}
	if s := d.Stats(); s.BreakerOpen || s.Dead != 0 {
		t.Errorf("after the outage: breaker open %v, %d dead; want closed, 0", s.BreakerOpen, s.Dead)
	}
	seen := map[int64]bool{}
	order := map[string][]int64{}
	for _, m := range o.Delivered(t) {
		if !seen[m.OutboxID] {
			seen[m.OutboxID] = true
			order[m.AggregateID] = append(order[m.AggregateID], m.OutboxID)
		}
	}
	if len(seen) != total {
		t.Errorf("the destination holds %d distinct messages, want %d", len(seen), total)
	}
	for i := range Aggregates {
		agg := fmt.Sprintf("agg-%d", i)
		if ids := order[agg]; len(ids) != PerAggregate || !slices.IsSorted(ids) {
			t.Errorf("aggregate %s stored %v, want its %d events in commit order", agg, ids, PerAggregate)
		}
	}
}

func enqueue(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	ctx := context.Background()
	var events []dispatcher.Event
	for i := range Unordered {
		events = append(events, dispatcher.Event{AggregateType: "order", AggregateID: fmt.Sprintf("u-%d", i), EventType: "OrderPaid", Payload: []byte(`{}`)})
	}
	if _, err := dispatcher.EnqueueMany(ctx, pool, events); err != nil {
		t.Fatal(err)
	}
	for i := range Aggregates {
		for range PerAggregate {
			// One transaction each: commit order is the order to keep.
			if _, err := dispatcher.Enqueue(ctx, pool, dispatcher.Event{AggregateType: "order", AggregateID: fmt.Sprintf("agg-%d", i),
				EventType: "OrderPaid", Payload: []byte(`{}`), Ordered: true}); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func count(t *testing.T, pool *pgxpool.Pool, where string) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), "SELECT count(*) FROM outbox WHERE "+where).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// waitFor polls cond until it holds; a minute bounds a hang, it is no
// speed goal.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after a minute waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
