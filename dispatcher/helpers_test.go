package dispatcher_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/pgoutbox/dispatcher"
	"github.com/pgoutbox/pgoutbox/internal/pgtest"
)

type bundle struct {
	url  string
	pool *pgxpool.Pool
}

func setup(t *testing.T) *bundle {
	t.Helper()
	url := pgtest.NewURL(t)
	return &bundle{url: url, pool: pgtest.Pool(t, url)}
}

// quietLogger drops logs unless the test is verbose about failures.
func quietLogger(t *testing.T) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) { w.t.Log(string(p)); return len(p), nil }

// enqueue writes n events for aggregate agg in one business transaction.
func (b *bundle) enqueue(t *testing.T, n int, agg string, ordered bool) []int64 {
	t.Helper()
	ctx := context.Background()
	tx, err := b.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	ids := make([]int64, 0, n)
	for i := 0; i < n; i++ {
		id, err := dispatcher.Enqueue(ctx, tx, dispatcher.Event{
			AggregateType: "order", AggregateID: agg, EventType: "OrderEvent",
			Payload: []byte(fmt.Sprintf(`{"n":%d}`, i)), Ordered: ordered,
		})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	return ids
}

// start runs a dispatcher until the test ends (or stop is called) and
// returns it with a stop function that waits for Run to return.
func (b *bundle) start(t *testing.T, pub dispatcher.Publisher, cfg dispatcher.Config) (*dispatcher.Dispatcher, func()) {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = quietLogger(t)
	}
	// The dispatcher gets a pool of its own: a connection whose statement
	// the dispatcher cancelled (a timeout on a busy machine) can come back
	// unusable ("i/o timeout"), which the dispatcher retries but a test
	// helper reading through the same pool would take for a failure.
	pool := pgtest.Pool(t, b.url)
	d, err := dispatcher.New(pool, pub, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Run: %v", err)
				}
			case <-time.After(30 * time.Second):
				t.Error("Run did not return within 30s of cancel")
			}
		})
	}
	t.Cleanup(stop)
	return d, stop
}

// waitFor polls cond until it holds or the timeout passes.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitIdleAndListening waits until d's LISTEN is registered and its claimer
// has since begun an idle wait of a full PollInterval (outside the wake
// window that every LISTEN connect opens): from then on only a
// notification, or the poll interval, makes it claim again.
func waitIdleAndListening(t *testing.T, d *dispatcher.Dispatcher) {
	t.Helper()
	waitFor(t, 30*time.Second, "LISTEN registered", func() bool { return d.Stats().Listens > 0 })
	waitFor(t, 30*time.Second, "the claimer idle after the wake window", func() bool { return dispatcher.IdleListening(d) })
}

func (b *bundle) count(t *testing.T, where string, args ...any) int {
	t.Helper()
	var n int
	if err := b.pool.QueryRow(context.Background(), "SELECT count(*) FROM outbox WHERE "+where, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

type state struct {
	Status    string
	Attempts  int
	Available bool
	LastError string
}

func (b *bundle) state(t *testing.T, id int64) state {
	t.Helper()
	var s state
	err := b.pool.QueryRow(context.Background(),
		`SELECT status, attempts, available_at <= now(), coalesce(last_error, '') FROM outbox WHERE id = $1`, id).
		Scan(&s.Status, &s.Attempts, &s.Available, &s.LastError)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// recorder is a publisher that records every publish.
type recorder struct {
	mu     sync.Mutex
	counts map[int64]int
	order  map[string][]int64 // per aggregate, in publish order
	total  int
	fn     func(ctx context.Context, m dispatcher.Message) error
}

func newRecorder(fn func(ctx context.Context, m dispatcher.Message) error) *recorder {
	return &recorder{counts: map[int64]int{}, order: map[string][]int64{}, fn: fn}
}

func (r *recorder) Publish(ctx context.Context, m dispatcher.Message) error {
	if r.fn != nil {
		if err := r.fn(ctx, m); err != nil {
			return err
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.counts[m.OutboxID]++
	r.order[m.AggregateID] = append(r.order[m.AggregateID], m.OutboxID)
	r.total++
	return nil
}

func (r *recorder) count(id int64) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.counts[id]
}

func (r *recorder) published() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.total
}

// fast is a test configuration with short timings.
func fast(cfg dispatcher.Config) dispatcher.Config {
	if cfg.Lease == 0 {
		cfg.Lease = 5 * time.Second
	}
	if cfg.PublishTimeout == 0 {
		cfg.PublishTimeout = cfg.Lease / 2
	}
	if cfg.PollInterval == 0 {
		cfg.PollInterval = 50 * time.Millisecond
	}
	if cfg.BackoffBase == 0 {
		cfg.BackoffBase = time.Millisecond
		cfg.BackoffCap = 10 * time.Millisecond
	}
	if cfg.ReapInterval == 0 {
		cfg.ReapInterval = 10 * time.Millisecond
	}
	if cfg.ReapGrace == 0 {
		cfg.ReapGrace = 10 * time.Millisecond
	}
	if cfg.ShutdownTimeout == 0 {
		cfg.ShutdownTimeout = 5 * time.Second
	}
	return cfg
}

// pgPool is a second pool on the test database (for killing connections).
func pgPool(t *testing.T, b *bundle) *pgxpool.Pool {
	return pgtest.Pool(t, b.url)
}
