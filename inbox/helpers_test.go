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
	inboxmigrations "github.com/pgoutbox/pgoutbox/inbox/migrations"
	"github.com/pgoutbox/pgoutbox/internal/pgtest"
	"github.com/pgoutbox/pgoutbox/internal/testlog"
)

// newPool returns a pool on a fresh database with the inbox migrations
// applied and a side-effect table the test handlers write to.
func newPool(t *testing.T) *pgxpool.Pool {
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
	exec(t, pool, `CREATE TABLE effects (n bigint GENERATED ALWAYS AS IDENTITY, source text, id text, aggregate_id text, seq bigint, gap text)`)
	return pool
}

func exec(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) {
	t.Helper()
	if _, err := pool.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

func queryInt(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) int64 {
	t.Helper()
	var n int64
	if err := pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
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
	gap := ""
	if d.Gap != nil {
		gap = string(d.Gap.Reason)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO effects (source, id, aggregate_id, seq, gap) VALUES ($1, $2, $3, $4, $5)`,
		d.Source, d.ID, d.Subject, d.Position.Seq, gap); err != nil {
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
	rows, err := b.pool.Query(context.Background(), `SELECT id FROM effects ORDER BY n`)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return ids
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
