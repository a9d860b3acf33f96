package inbox_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/pgoutbox/inbox"
	"github.com/pgoutbox/pgoutbox/internal/inboxtest"
	"github.com/pgoutbox/pgoutbox/internal/testlog"
)

// newPool returns a consumer database (inboxtest.NewPool).
func newPool(t *testing.T) *pgxpool.Pool { return inboxtest.NewPool(t) }

func exec(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) {
	t.Helper()
	if _, err := pool.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

func queryInt(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) int64 {
	t.Helper()
	return inboxtest.Count(t, pool, sql, args...)
}

// bundle is one test's inbox, pool and handler record.
type bundle struct {
	pool *pgxpool.Pool
	ib   *inbox.Inbox

	mu    sync.Mutex
	gaps  []inbox.Gap
	fail  map[string]error // handler fails for these ids
	calls []inbox.Delivery
}

// setup builds an Inbox over a fresh database whose handler records each
// delivery in effects (inside the transaction) and in b.calls (after it).
func setup(t *testing.T, mod func(*inbox.Config)) *bundle {
	t.Helper()
	b := &bundle{pool: newPool(t), fail: map[string]error{}}
	cfg := inbox.Config{DB: b.pool, Handler: b.handle, Logger: testlog.New(t), OnGap: func(g inbox.Gap) {
		b.mu.Lock()
		b.gaps = append(b.gaps, g)
		b.mu.Unlock()
	}}
	if mod != nil {
		mod(&cfg)
	}
	ib, err := inbox.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	b.ib = ib
	return b
}

func (b *bundle) handle(ctx context.Context, tx pgx.Tx, d inbox.Delivery) error {
	b.mu.Lock()
	failErr := b.fail[d.ID]
	b.mu.Unlock()
	if err := inboxtest.Effect(ctx, tx, d); err != nil {
		return err
	}
	if failErr != nil {
		return failErr
	}
	b.mu.Lock()
	b.calls = append(b.calls, d)
	b.mu.Unlock()
	return nil
}

func (b *bundle) failFor(id string, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err == nil {
		delete(b.fail, id)
		return
	}
	b.fail[id] = err
}

// effects returns the ids the handler committed, in commit order.
func (b *bundle) effects(t *testing.T) []string {
	t.Helper()
	return inboxtest.Effects(t, b.pool)
}

func (b *bundle) process(t *testing.T, m inbox.Message) inbox.Outcome {
	t.Helper()
	out, err := b.ib.Process(context.Background(), m)
	if err != nil {
		t.Fatalf("Process(%s): %v", m.ID, err)
	}
	return out
}

func (b *bundle) wantOutcome(t *testing.T, m inbox.Message, want inbox.Outcome) {
	t.Helper()
	if got := b.process(t, m); got != want {
		t.Fatalf("Process(%s) = %v, want %v", m.ID, got, want)
	}
}

const src = "urn:test:outbox"

// unordered is an event without a position.
func unordered(id int) inbox.Message {
	return inbox.Message{Source: src, ID: strconv.Itoa(id), Type: "Created", Subject: "a-" + strconv.Itoa(id),
		Data: []byte(fmt.Sprintf(`{"n":%d}`, id))}
}

// ordered is event id of aggregate agg at position seq after prev.
func ordered(agg string, id int, seq, prev int64) inbox.Message {
	return inbox.Message{Source: src, ID: strconv.Itoa(id), Type: "Changed", Subject: agg,
		Data:     []byte(fmt.Sprintf(`{"n":%d}`, id)),
		Headers:  map[string]string{"tenant": "t1"},
		Position: inbox.Position{Seq: seq, Prev: prev}}
}
