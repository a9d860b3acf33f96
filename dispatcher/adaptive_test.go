package dispatcher_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgoutbox/pgoutbox/dispatcher"
)

// enqueueMany writes n unordered events in one transaction (COPY).
func (b *bundle) enqueueMany(t *testing.T, n int) {
	t.Helper()
	events := make([]dispatcher.Event, n)
	for i := range events {
		events[i] = dispatcher.Event{AggregateType: "order", AggregateID: "a" + strconv.Itoa(i%100), EventType: "OrderEvent",
			Payload: json.RawMessage(`{"n":` + strconv.Itoa(i) + `}`)}
	}
	err := pgx.BeginFunc(context.Background(), b.pool, func(tx pgx.Tx) error {
		_, err := dispatcher.EnqueueMany(context.Background(), tx, events)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// maxGauge keeps the largest value it has seen.
type maxGauge struct{ v atomic.Int64 }

func (g *maxGauge) see(x int64) {
	for {
		cur := g.v.Load()
		if x <= cur || g.v.CompareAndSwap(cur, x) {
			return
		}
	}
}

// The zero Config's claim size starts at BatchMin, goes straight to Batch
// once a claim comes back full on a backlog (no climb through 100, 200, …),
// and falls back to BatchMin once the queue is empty; a single event is
// still delivered afterwards.
func TestAdaptive_ClaimSizeGrowsOnBacklogAndReturnsToMinWhenIdle(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const n = 12000
	b.enqueueMany(t, n)

	var d *dispatcher.Dispatcher
	var biggest, smallest maxGauge
	smallest.v.Store(-1 << 62)
	var seen atomic.Int64
	var (
		mu    sync.Mutex
		sizes []int64 // the claim sizes publishes saw, each change once
	)
	pub := dispatcher.PublisherFunc(func(context.Context, dispatcher.Message) error {
		s := d.Stats().ClaimSize
		biggest.see(s)
		smallest.see(-s)
		seen.Add(1)
		mu.Lock()
		if len(sizes) == 0 || sizes[len(sizes)-1] != s {
			sizes = append(sizes, s)
		}
		mu.Unlock()
		return nil
	})
	// BatchWork and Lease of an hour: the rate cap (BatchWork, cut to half
	// of what the lease leaves after PublishTimeout) never binds once the
	// first publishes finished, so the size is the full/short rule alone
	// (the rate cap has a test of its own).
	cfg := fast(dispatcher.Config{BatchWork: time.Hour, Lease: time.Hour, PublishTimeout: 10 * time.Second, StatsInterval: -1})
	d, err := dispatcher.New(b.pool, pub, withLogger(t, cfg))
	if err != nil {
		t.Fatal(err)
	}
	defer b.run(t, d)()

	waitFor(t, time.Minute, "the backlog to drain", func() bool { return d.Stats().Published == n })
	if got := biggest.v.Load(); got != dispatcher.BatchDefault {
		t.Errorf("largest claim size during the backlog = %d, want Batch (%d)", got, dispatcher.BatchDefault)
	}
	if got := -smallest.v.Load(); got != dispatcher.BatchMinDefault {
		t.Errorf("first claim size = %d, want BatchMin (%d)", got, dispatcher.BatchMinDefault)
	}
	// Every size a publish saw before the first Batch: BatchMin only (the
	// first claim's publishes may already see Batch, so none is fine too).
	mu.Lock()
	climb := sizes[:max(slices.Index(sizes, dispatcher.BatchDefault), 0)] // never Batch: reported above
	mu.Unlock()
	for _, s := range climb {
		if s != dispatcher.BatchMinDefault {
			t.Errorf("claim sizes seen before the first Batch-size claim = %v, want only BatchMin (%d): a full claim makes the next one Batch", climb, dispatcher.BatchMinDefault)
			break
		}
	}
	waitFor(t, 30*time.Second, "the claim size to return to BatchMin on an empty queue", func() bool {
		return d.Stats().ClaimSize == dispatcher.BatchMinDefault
	})
	if got := b.count(t, "status = 'done'"); got != n {
		t.Fatalf("%d done, want %d", got, n)
	}
	b.enqueue(t, 1, "single", false)
	waitFor(t, 30*time.Second, "a single event after the backlog", func() bool { return d.Stats().Published == n+1 })
}

// A slow publisher bounds the claim size through BatchWork: with at most
// Concurrency publishes of at least 2 ms each the dispatcher finishes at
// most 2,000 messages a second, so a BatchWork of 50 ms allows claims of
// about 100 and at most 300 messages in flight (two claims, one more being
// finalized), where the same backlog with the cap out of the way (Batch
// 2000 reached) holds 4,000 and more.
func TestAdaptive_SlowPublisherKeepsClaimsToBatchWork(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const n = 3000
	b.enqueueMany(t, n)

	var d *dispatcher.Dispatcher
	var inFlight, size maxGauge
	pub := dispatcher.PublisherFunc(func(ctx context.Context, _ dispatcher.Message) error {
		s := d.Stats()
		inFlight.see(s.InFlight)
		size.see(s.ClaimSize)
		select { // a broker that takes 2 ms per message
		case <-time.After(2 * time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
		return nil
	})
	const concurrency = 4
	cfg := fast(dispatcher.Config{Concurrency: concurrency, BatchWork: 50 * time.Millisecond, StatsInterval: -1})
	var err error
	d, err = dispatcher.New(b.pool, pub, withLogger(t, cfg))
	if err != nil {
		t.Fatal(err)
	}
	defer b.run(t, d)()
	waitFor(t, 2*time.Minute, "the backlog to drain", func() bool { return d.Stats().Published == n })

	// Rate at most concurrency / 2ms = 2,000/s; × 50 ms = 100 per claim.
	capSize := int64(2000 * 50 / 1000)
	if got := size.v.Load(); got > capSize {
		t.Errorf("largest claim size = %d, want at most %d (BatchWork at the publisher's rate)", got, capSize)
	}
	// claimRoom's bound: two claims not yet published (the limit), and one
	// claim more whose finalize is being written. A busy machine (-race, CI)
	// reached it: 224 in flight once, against the 200 of the limit alone.
	if limit := max(2*capSize, capSize+concurrency) + capSize; inFlight.v.Load() > limit {
		t.Errorf("most in flight = %d, want at most %d (two claims at the rate cap, one more being finalized)", inFlight.v.Load(), limit)
	}
	if got := b.count(t, "status = 'done'"); got != n {
		t.Fatalf("%d done, want %d", got, n)
	}
}

// BatchMin = Batch keeps the claim size fixed, as before the adaptation.
func TestAdaptive_BatchMinEqualToBatchIsFixed(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const n = 2000
	b.enqueueMany(t, n)
	var d *dispatcher.Dispatcher
	var size maxGauge
	pub := dispatcher.PublisherFunc(func(context.Context, dispatcher.Message) error {
		size.see(d.Stats().ClaimSize)
		return nil
	})
	var err error
	d, err = dispatcher.New(b.pool, pub, withLogger(t, fast(dispatcher.Config{Batch: 100, BatchMin: 100, StatsInterval: -1})))
	if err != nil {
		t.Fatal(err)
	}
	defer b.run(t, d)()
	waitFor(t, time.Minute, "the backlog to drain", func() bool { return d.Stats().Published == n })
	if got := size.v.Load(); got != 100 {
		t.Errorf("claim size = %d, want the fixed 100", got)
	}
}

func withLogger(t *testing.T, cfg dispatcher.Config) dispatcher.Config {
	if cfg.Logger == nil {
		cfg.Logger = quietLogger(t)
	}
	return cfg
}

// run runs an existing dispatcher until the test ends (or stop is called).
func (b *bundle) run(t *testing.T, d *dispatcher.Dispatcher) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	var stopped atomic.Bool
	stop = func() {
		if !stopped.CompareAndSwap(false, true) {
			return
		}
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("Run did not return within 30s of cancel")
		}
	}
	t.Cleanup(stop)
	return stop
}

// lockedBuffer is a log sink shared by the dispatcher's goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// A crashed owner's batch (claimed, never finalized) waits out its lease and
// is then recovered by another dispatcher, which says so: a warning when it
// starts recovering and one with the count when the pass ends.
func TestAdaptive_CrashedOwnersBatchIsRecoveredAndCounted(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const n = 200
	b.enqueueMany(t, n)
	// The "crashed" owner: one claim of everything under a short lease, then
	// nothing (as after SIGKILL).
	// (The same row changes as the relay's claims, in plain SQL.)
	tag, err := b.pool.Exec(context.Background(), `
		UPDATE outbox SET status = 'processing', lease_owner = 'crashed', lease_until = now() + interval '300 milliseconds',
		       lease_version = lease_version + 1, attempts = attempts + 1
		 WHERE status = 'pending'`)
	if err != nil || tag.RowsAffected() != n {
		t.Fatalf("claim: %v, %v", tag, err)
	}
	var logs lockedBuffer
	cfg := fast(dispatcher.Config{StatsInterval: -1,
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	rec := newRecorder(nil)
	d, _ := b.start(t, rec, cfg)
	waitFor(t, 2*time.Minute, "the crashed owner's batch to be recovered", func() bool { return d.Stats().Published == n })
	if s := d.Stats(); s.Recovered != n {
		t.Errorf("Recovered = %d, want %d", s.Recovered, n)
	}
	if got := b.count(t, "status = 'done'"); got != n {
		t.Fatalf("%d done, want %d", got, n)
	}
	waitFor(t, 30*time.Second, "the recovery pass to log its count", func() bool {
		return strings.Contains(logs.String(), "recovered messages whose lease had expired")
	})
	out := logs.String()
	if !strings.Contains(out, "recovering messages whose lease expired") {
		t.Errorf("no warning when recovery started; logs:\n%s", out)
	}
	total := 0
	for _, line := range strings.Split(out, "\n") {
		if !strings.Contains(line, "recovered messages whose lease had expired") {
			continue
		}
		_, rest, _ := strings.Cut(line, "count=")
		c, _ := strconv.Atoi(strings.Fields(rest)[0])
		total += c
	}
	if total != n {
		t.Errorf("logged recovered counts add up to %d, want %d; logs:\n%s", total, n, out)
	}
}
