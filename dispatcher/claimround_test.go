package dispatcher_test

// How one claim round claims the two kinds of ClaimAll (claimRound in
// dispatcher.go): at once on an idle dispatcher with a pool to spare, one
// after the other on a small pool.

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/pgoutbox/dispatcher"
)

// windowClaims watches the two window claims (OutboxClaimWindow,
// OutboxClaimOrderedWindow) on a pool's connections. The first holdFirst
// window claims that start while the other kind's is not running wait (up
// to hold) for the other kind's to start, so that two claims meant to run at
// once are seen to overlap however the machine schedules them, and two
// claims meant to run in turn cannot be mistaken for concurrent ones.
type windowClaims struct {
	hold      time.Duration
	mu        sync.Mutex
	holdFirst int
	running   map[string]int
	started   chan struct{} // closed and replaced at every window claim start
	overlaps  int           // starts that found the other kind running
}

type windowKindKey struct{}

func newWindowClaims(holdFirst int, hold time.Duration) *windowClaims {
	return &windowClaims{hold: hold, holdFirst: holdFirst, running: map[string]int{}, started: make(chan struct{})}
}

func windowKind(sql string) string {
	switch {
	case strings.HasPrefix(sql, "-- name: OutboxClaimWindow "):
		return "unordered"
	case strings.HasPrefix(sql, "-- name: OutboxClaimOrderedWindow "):
		return "ordered"
	}
	return ""
}

func other(kind string) string {
	if kind == "ordered" {
		return "unordered"
	}
	return "ordered"
}

func (w *windowClaims) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	kind := windowKind(data.SQL)
	if kind == "" {
		return ctx
	}
	w.mu.Lock()
	w.running[kind]++
	close(w.started)
	w.started = make(chan struct{})
	if w.running[other(kind)] > 0 {
		w.overlaps++
		w.mu.Unlock()
		return context.WithValue(ctx, windowKindKey{}, kind)
	}
	wait := w.holdFirst > 0
	if wait {
		w.holdFirst--
	}
	w.mu.Unlock()
	deadline := time.After(w.hold)
	for wait {
		w.mu.Lock()
		if w.running[other(kind)] > 0 {
			w.mu.Unlock()
			break
		}
		started := w.started
		w.mu.Unlock()
		select {
		case <-started:
		case <-deadline:
			wait = false
		}
	}
	return context.WithValue(ctx, windowKindKey{}, kind)
}

func (w *windowClaims) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryEndData) {
	kind, _ := ctx.Value(windowKindKey{}).(string)
	if kind == "" {
		return
	}
	w.mu.Lock()
	w.running[kind]--
	w.mu.Unlock()
}

func (w *windowClaims) overlapped() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.overlaps
}

// tracedPool is a pool on the test database with maxConns connections and
// the tracer on each.
func tracedPool(t *testing.T, b *bundle, maxConns int32, tracer pgx.QueryTracer) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(b.url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = maxConns
	cfg.ConnConfig.Tracer = tracer
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// runOn runs a dispatcher on pool until the test ends.
func runOn(t *testing.T, pool *pgxpool.Pool, pub dispatcher.Publisher, cfg dispatcher.Config) *dispatcher.Dispatcher {
	t.Helper()
	cfg.Logger = quietLogger(t)
	d, err := dispatcher.New(pool, pub, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	t.Cleanup(func() {
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
	return d
}

// An idle dispatcher of ClaimAll on a pool of 8 (concurrentClaimConns)
// runs the unordered and the ordered claim of a round at the same time, so a
// message of either kind waits for one claim only; both kinds are delivered.
func TestClaimAll_IdleDispatcherClaimsBothKindsAtOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	claims := newWindowClaims(4, 10*time.Second)
	pool := tracedPool(t, b, 8, claims)
	rec := newRecorder(nil)
	d := runOn(t, pool, rec, fast(dispatcher.Config{}))
	waitFor(t, 60*time.Second, "an unordered and an ordered claim running at once", func() bool { return claims.overlapped() > 0 })

	waitIdleAndListening(t, d)
	ids := append(b.enqueue(t, 3, "u", false), b.enqueue(t, 3, "o", true)...)
	waitFor(t, 30*time.Second, "both kinds published", func() bool { return rec.published() == len(ids) })
	for _, id := range ids {
		if n := rec.count(id); n != 1 {
			t.Errorf("message %d published %d times, want 1", id, n)
		}
	}
}

// On a pool smaller than 4 the two claims of a round run one after the
// other (two at once would leave the finalizer and the recovery lane no
// connection to spare), and both kinds are still delivered.
func TestClaimAll_SmallPoolClaimsTheKindsInTurn(t *testing.T) {
	t.Parallel()
	b := setup(t)
	claims := newWindowClaims(2, 2*time.Second)
	pool := tracedPool(t, b, 7, claims)
	rec := newRecorder(nil)
	d := runOn(t, pool, rec, fast(dispatcher.Config{}))
	waitIdleAndListening(t, d)
	ids := append(b.enqueue(t, 3, "u", false), b.enqueue(t, 3, "o", true)...)
	waitFor(t, 30*time.Second, "both kinds published", func() bool { return rec.published() == len(ids) })
	if n := claims.overlapped(); n != 0 {
		t.Errorf("%d window claims started while the other kind's was running, want 0 on a pool of 7", n)
	}
}
