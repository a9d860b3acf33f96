package fleet_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/pgoutbox/dispatcher"
	"github.com/pgoutbox/pgoutbox/fleet"
	"github.com/pgoutbox/pgoutbox/internal/pgtest"
	"github.com/pgoutbox/pgoutbox/internal/testlog"
)

// quietLogger is the test's log with -v, else nothing.
func quietLogger(t *testing.T) *slog.Logger {
	if testing.Verbose() {
		return testlog.New(t)
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// migrated creates n migrated databases and returns them, named d00, d01, …
// (the Database names; the server's names are pgtest's).
func migrated(t *testing.T, n int) []fleet.Database {
	t.Helper()
	out := make([]fleet.Database, n)
	for i := range out {
		out[i] = fleet.Database{Name: fmt.Sprintf("d%02d", i), URL: pgtest.NewURL(t)}
	}
	return out
}

// enqueue commits n events (aggregate agg, ordered or not) into the database at u.
func enqueue(t *testing.T, u string, n int, agg string, ordered bool) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	for i := range n {
		if _, err := dispatcher.Enqueue(ctx, tx, dispatcher.Event{AggregateType: "order", AggregateID: agg,
			EventType: "E", Payload: []byte(fmt.Sprintf(`{"n":%d}`, i)), Ordered: ordered}); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
}

// count runs SELECT count(*) FROM outbox WHERE where in the database at u.
func count(t *testing.T, u, where string) int {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var n int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM outbox WHERE "+where).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// admin runs sql on the test server's admin database.
func admin(t *testing.T, sql string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, pgtest.AdminURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, sql); err != nil {
		t.Fatal(err)
	}
}

// dbName is the server's name of the database at u.
func dbName(t *testing.T, u string) string {
	t.Helper()
	p, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimPrefix(p.Path, "/")
}

// recorder is a publisher that records every publish by (source, outbox id)
// and, per source and aggregate, the order of ordered publishes.
type recorder struct {
	mu     sync.Mutex
	counts map[string]int     // source|id
	order  map[string][]int64 // source|aggregate, ordered messages
	by     map[string]int     // per source
	fn     func(m dispatcher.Message) error
}

func newRecorder() *recorder {
	return &recorder{counts: map[string]int{}, order: map[string][]int64{}, by: map[string]int{}}
}

func (r *recorder) Publish(_ context.Context, m dispatcher.Message) error {
	if r.fn != nil {
		if err := r.fn(m); err != nil {
			return err
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	k := fmt.Sprintf("%s|%d", m.Source, m.OutboxID)
	r.counts[k]++
	if r.counts[k] == 1 {
		r.by[m.Source]++
	}
	if m.Ordered {
		a := m.Source + "|" + m.AggregateID
		r.order[a] = append(r.order[a], m.OutboxID)
	}
	return nil
}

// distinct is the number of distinct messages published.
func (r *recorder) distinct() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.counts)
}

func (r *recorder) sources() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]int{}
	for k, v := range r.by {
		out[k] = v
	}
	return out
}

// checkOrder fails the test when an ordered aggregate's first deliveries
// are not in id order.
func (r *recorder) checkOrder(t *testing.T) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	for agg, ids := range r.order {
		seen := map[int64]bool{}
		var last int64
		for _, id := range ids {
			if seen[id] {
				continue // a re-delivery
			}
			seen[id] = true
			if id < last {
				t.Errorf("%s: %d delivered after %d", agg, id, last)
			}
			last = id
		}
	}
}

// start runs a fleet until the test ends (or stop is called).
func start(t *testing.T, pub dispatcher.Publisher, dbs []fleet.Database, cfg fleet.Config) (*fleet.Fleet, func()) {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = quietLogger(t)
	}
	if cfg.Dispatcher.Lease == 0 {
		cfg.Dispatcher.Lease = 5 * time.Second
		cfg.Dispatcher.PublishTimeout = 2 * time.Second
	}
	if cfg.RetryMin == 0 {
		cfg.RetryMin, cfg.RetryMax = 50*time.Millisecond, 500*time.Millisecond
	}
	if cfg.WatchInterval == 0 {
		cfg.WatchInterval = 200 * time.Millisecond
	}
	cfg.Dispatcher.ShutdownTimeout = 5 * time.Second
	f, err := fleet.New(pub, dbs, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.Run(ctx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Run: %v", err)
				}
			case <-time.After(60 * time.Second):
				t.Error("Run did not return within 60s of cancel")
			}
		})
	}
	t.Cleanup(stop)
	return f, stop
}

// waitFor polls cond until it holds or the timeout passes.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// status is the status of database name in f.
func status(f *fleet.Fleet, name string) (fleet.Status, bool) {
	for _, s := range f.Status() {
		if s.Name == name {
			return s, true
		}
	}
	return fleet.Status{}, false
}

// pool opens a pool on u for the test.
func pool(t *testing.T, u string) *pgxpool.Pool {
	t.Helper()
	return pgtest.Pool(t, u)
}
