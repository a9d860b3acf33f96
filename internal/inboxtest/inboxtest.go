// Package inboxtest gives the inbox's tests (the package's own, the
// adapters', the CLI's) a consumer database and a handler that records what
// it committed, so each test can check "once, in order" from the database.
package inboxtest

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/pgoutbox/inbox"
	inboxmigrations "github.com/pgoutbox/pgoutbox/inbox/migrations"
	"github.com/pgoutbox/pgoutbox/internal/pgtest"
	"github.com/pgoutbox/pgoutbox/internal/testlog"
)

// NewPool returns a pool on a fresh database (the package's TestMain must
// call pgtest.Main) with the inbox migrations applied and the table
// effects, which Effect writes.
func NewPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	pool := pgtest.NewPool(t)
	m, err := inboxmigrations.FromPool(pool)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if _, err := m.Up(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(context.Background(), `CREATE TABLE effects (
		n bigint GENERATED ALWAYS AS IDENTITY, source text, id text, aggregate_id text, seq bigint, gap text)`); err != nil {
		t.Fatal(err)
	}
	return pool
}

// Effect is a handler's side effect: one row in effects, in the inbox's
// transaction.
func Effect(ctx context.Context, tx pgx.Tx, d inbox.Delivery) error {
	gap := ""
	if d.Gap != nil {
		gap = string(d.Gap.Reason)
	}
	_, err := tx.Exec(ctx, `INSERT INTO effects (source, id, aggregate_id, seq, gap) VALUES ($1, $2, $3, $4, $5)`,
		d.Source, d.ID, d.Subject, d.Position.Seq, gap)
	return err
}

// Effects returns the ids of the committed side effects, in commit order
// (per aggregate, the inbox's lock makes insertion order commit order).
func Effects(t testing.TB, pool *pgxpool.Pool) []string {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT id FROM effects ORDER BY n`)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

// Count runs a count query.
func Count(t testing.TB, pool *pgxpool.Pool, sql string, args ...any) int64 {
	t.Helper()
	var n int64
	if err := pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// FailFirst returns a handler that writes Effect but fails the first run of
// each event whose id is in ids (a consumer-side failure: the message is
// delivered again, after its successors may have arrived).
func FailFirst(ids ...string) inbox.Handler {
	var mu sync.Mutex
	failed := map[string]bool{}
	for _, id := range ids {
		failed[id] = false
	}
	return func(ctx context.Context, tx pgx.Tx, d inbox.Delivery) error {
		mu.Lock()
		done, listed := failed[d.ID]
		if listed && !done {
			failed[d.ID] = true
			mu.Unlock()
			return errors.New("inboxtest: first run fails")
		}
		mu.Unlock()
		return Effect(ctx, tx, d)
	}
}

// NewInbox returns an Inbox over cfg (logging to the test, sweeping every
// 50ms) whose Run goes on until the test ends.
func NewInbox(t testing.TB, cfg inbox.Config) *inbox.Inbox {
	t.Helper()
	cfg.Logger = testlog.New(t)
	cfg.SweepInterval = 50 * time.Millisecond
	ib, err := inbox.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	Go(t, ib.Run)
	return ib
}

// WaitStats waits until cond holds for ib.Stats(), failing after timeout
// with what and the last stats. A consumer counts an outcome only after
// its transaction has committed, so a test that saw the rows must still
// wait for the counters before it reads them.
func WaitStats(t testing.TB, ib *inbox.Inbox, timeout time.Duration, what string, cond func(inbox.Stats) bool) inbox.Stats {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		s := ib.Stats()
		if cond(s) {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %s: stats %+v, want %s", timeout, s, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Go runs fn until the test ends: then its context is cancelled and the
// test waits for it, failing when it returns an error.
func Go(t testing.TB, fn func(context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- fn(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("%v", err)
		}
	})
}
