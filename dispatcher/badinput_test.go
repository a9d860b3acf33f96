package dispatcher_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/pgoutbox/dispatcher"
	"github.com/pgoutbox/pgoutbox/internal/pgtest"
	"github.com/pgoutbox/pgoutbox/migrations"
	"github.com/pgoutbox/pgoutbox/publisher/webhook"
)

// Bad input, tried and answered: each gets a clear error or a defined
// outcome, and nothing already in the table is lost.

// snapshotRows returns id -> (status, payload) of every row.
func (b *bundle) snapshotRows(t *testing.T) map[int64]string {
	t.Helper()
	rows, err := b.pool.Query(context.Background(), `SELECT id, status || ' ' || payload::text FROM outbox`)
	if err != nil {
		t.Fatal(err)
	}
	m, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (struct {
		id int64
		s  string
	}, error) {
		var v struct {
			id int64
			s  string
		}
		err := r.Scan(&v.id, &v.s)
		return v, err
	})
	if err != nil {
		t.Fatal(err)
	}
	out := map[int64]string{}
	for _, v := range m {
		out[v.id] = v.s
	}
	return out
}

func (b *bundle) assertRowsIntact(t *testing.T, before map[int64]string) {
	t.Helper()
	after := b.snapshotRows(t)
	for id, s := range before {
		if after[id] != s {
			t.Errorf("row %d changed or vanished: before %q, after %q", id, s, after[id])
		}
	}
}

func TestBadInput_InvalidEventsRejectedAndExistingRowsKept(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	b.enqueue(t, 3, "kept", false)
	b.enqueue(t, 2, "kept-ordered", true)
	before := b.snapshotRows(t)

	valid := dispatcher.Event{AggregateType: "order", AggregateID: "o-1", EventType: "OrderPaid", Payload: []byte(`{"a":1}`)}
	bad := map[string]func(*dispatcher.Event){
		"payload not JSON":          func(e *dispatcher.Event) { e.Payload = []byte(`not json`) },
		"payload truncated JSON":    func(e *dispatcher.Event) { e.Payload = []byte(`{"a":[1,2`) },
		"payload two documents":     func(e *dispatcher.Event) { e.Payload = []byte(`{} {}`) },
		"payload empty":             func(e *dispatcher.Event) { e.Payload = []byte{} },
		"payload over 1 MiB":        func(e *dispatcher.Event) { e.Payload = []byte(`"` + strings.Repeat("x", 1<<20) + `"`) },
		"empty aggregate id":        func(e *dispatcher.Event) { e.AggregateID = "" },
		"empty event type":          func(e *dispatcher.Event) { e.EventType = "" },
		"oversized aggregate id":    func(e *dispatcher.Event) { e.AggregateID = strings.Repeat("é", 128) }, // 256 bytes
		"oversized event type":      func(e *dispatcher.Event) { e.EventType = strings.Repeat("E", 10_000) },
		"oversized aggregate type":  func(e *dispatcher.Event) { e.AggregateType = strings.Repeat("t", 256) },
		"header with an empty name": func(e *dispatcher.Event) { e.Headers = map[string]string{"": "v"} },
	}
	for name, mod := range bad {
		ev := valid
		mod(&ev)
		// Through a pool (autocommit) and inside a transaction.
		if _, err := dispatcher.Enqueue(ctx, b.pool, ev); !errors.Is(err, dispatcher.ErrInvalidEvent) {
			t.Errorf("%s: Enqueue err = %v, want ErrInvalidEvent", name, err)
		}
		tx, err := b.pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := dispatcher.EnqueueMany(ctx, tx, []dispatcher.Event{valid, ev, valid}); !errors.Is(err, dispatcher.ErrInvalidEvent) {
			t.Errorf("%s: EnqueueMany err = %v, want ErrInvalidEvent", name, err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatalf("%s: the transaction must stay usable: %v", name, err)
		}
	}
	if n := b.count(t, "true"); n != len(before) {
		t.Fatalf("rows = %d, want the %d seeded rows and nothing else", n, len(before))
	}
	b.assertRowsIntact(t, before)
}

// SQL-shaped strings in every text field are data: they round-trip
// literally through Enqueue, the claim and the publisher.
func TestBadInput_SQLShapedStringsRoundTripLiterally(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	b.enqueue(t, 2, "kept", false)
	before := b.snapshotRows(t)

	const inj = `'); DROP TABLE outbox; --`
	events := []dispatcher.Event{
		{AggregateType: inj, AggregateID: "a" + inj, EventType: inj + "e", Payload: []byte(`{"sql":"'); DROP TABLE outbox; --","q":"\"; SELECT 1; --"}`),
			Headers: map[string]string{inj: inj, "x-q": `"; DELETE FROM outbox; --`}},
		{AggregateType: `$1 $$ $tag$`, AggregateID: `%s %d \x00`[:8], EventType: `E'\\' || chr(0)`, Payload: []byte(`"'; TRUNCATE outbox; --"`)},
		{AggregateType: "o", AggregateID: "ord" + inj, EventType: "OrderPaid", Payload: []byte(`[1, "--", null]`), Ordered: true},
	}
	want := map[int64]dispatcher.Event{}
	for _, ev := range events {
		id, err := dispatcher.Enqueue(ctx, b.pool, ev)
		if err != nil {
			t.Fatalf("Enqueue(%q): %v", ev.AggregateID, err)
		}
		want[id] = ev
	}
	rec := newRecorder(nil)
	got := make(chan dispatcher.Message, 10)
	pub := dispatcher.PublisherFunc(func(ctx context.Context, m dispatcher.Message) error {
		if _, ok := want[m.OutboxID]; ok {
			got <- m
		}
		return rec.Publish(ctx, m)
	})
	_, stop := b.start(t, pub, fast(dispatcher.Config{}))
	waitFor(t, 30*time.Second, "every event published", func() bool { return b.count(t, "status = 'done'") == len(want)+len(before) })
	stop()
	close(got)
	seen := 0
	for m := range got {
		seen++
		ev := want[m.OutboxID]
		if m.AggregateType != ev.AggregateType || m.AggregateID != ev.AggregateID || m.EventType != ev.EventType {
			t.Errorf("id %d: got (%q, %q, %q), want (%q, %q, %q)", m.OutboxID, m.AggregateType, m.AggregateID, m.EventType,
				ev.AggregateType, ev.AggregateID, ev.EventType)
		}
		if !jsonEqual(t, m.Payload, ev.Payload) {
			t.Errorf("id %d: payload %s, want %s", m.OutboxID, m.Payload, ev.Payload)
		}
		for k, v := range ev.Headers {
			if m.Headers[k] != v {
				t.Errorf("id %d: header %q = %q, want %q", m.OutboxID, k, m.Headers[k], v)
			}
		}
	}
	if seen != len(want) {
		t.Fatalf("published %d of the %d events", seen, len(want))
	}
	if n := b.count(t, "true"); n != len(want)+len(before) {
		t.Fatalf("rows = %d, want %d: the table must be intact", n, len(want)+len(before))
	}
}

func jsonEqual(t *testing.T, a, b []byte) bool {
	t.Helper()
	var x, y any
	if err := json.Unmarshal(a, &x); err != nil {
		t.Fatalf("payload %q: %v", a, err)
	}
	if err := json.Unmarshal(b, &y); err != nil {
		t.Fatalf("payload %q: %v", b, err)
	}
	return fmt.Sprint(x) == fmt.Sprint(y)
}

// A status written by hand that the dispatcher does not know is refused by
// the table's CHECK constraint; nothing else changes.
func TestBadInput_UnknownStatusWrittenByHandIsRefused(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	ids := b.enqueue(t, 3, "kept", false)
	before := b.snapshotRows(t)
	for _, status := range []string{"retrying", "DONE", "", "pending "} {
		_, err := b.pool.Exec(ctx, "UPDATE outbox SET status = $1 WHERE id = $2", status, ids[0])
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "23514" {
			t.Errorf("status %q: err = %v, want a check_violation (23514)", status, err)
		}
		_, err = b.pool.Exec(ctx, `INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload, status)
			VALUES ('a', 'b', 'c', '{}', $1)`, status)
		if !errors.As(err, &pgErr) || pgErr.Code != "23514" {
			t.Errorf("insert with status %q: err = %v, want a check_violation (23514)", status, err)
		}
	}
	// processing without a lease is refused too.
	if _, err := b.pool.Exec(ctx, "UPDATE outbox SET status = 'processing' WHERE id = $1", ids[1]); err == nil {
		t.Error("processing without lease_owner/lease_until was accepted")
	}
	b.assertRowsIntact(t, before)
	// And the dispatcher still delivers them.
	rec := newRecorder(nil)
	b.start(t, rec, fast(dispatcher.Config{}))
	waitFor(t, 30*time.Second, "delivery", func() bool { return b.count(t, "status = 'done'") == 3 })
}

// Negative durations are refused naming the field; zero means the
// documented default.
func TestBadInput_NegativeAndZeroDurationsInConfig(t *testing.T) {
	t.Parallel()
	pool, err := pgxpool.New(context.Background(), "postgres://127.0.0.1:1/x") // lazy: never dialled
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	pub := dispatcher.PublisherFunc(func(context.Context, dispatcher.Message) error { return nil })
	neg := -time.Nanosecond
	cases := []struct {
		field string
		cfg   dispatcher.Config
	}{
		{"Lease", dispatcher.Config{Lease: neg}},
		{"PublishTimeout", dispatcher.Config{PublishTimeout: neg}},
		{"HeartbeatInterval", dispatcher.Config{HeartbeatInterval: neg}},
		{"PollInterval", dispatcher.Config{PollInterval: neg}},
		{"BackoffBase", dispatcher.Config{BackoffBase: neg}},
		{"BackoffCap", dispatcher.Config{BackoffCap: neg}},
		{"MaxDeferAge", dispatcher.Config{MaxDeferAge: neg}},
		{"FinalizeDelay", dispatcher.Config{FinalizeDelay: neg}},
		{"ShutdownTimeout", dispatcher.Config{ShutdownTimeout: neg}},
		{"ReapInterval", dispatcher.Config{ReapInterval: neg}},
		{"Lease", dispatcher.Config{Lease: time.Millisecond}},
		{"Batch", dispatcher.Config{Batch: 10001}},
		{"FinalizeBatch", dispatcher.Config{FinalizeBatch: -1}},
	}
	for _, c := range cases {
		_, err := dispatcher.New(pool, pub, c.cfg)
		if !errors.Is(err, dispatcher.ErrInvalidConfig) || !strings.Contains(err.Error(), c.field) {
			t.Errorf("%s: err = %v, want ErrInvalidConfig naming %s", c.field, err, c.field)
		}
	}
	// Zero everywhere: the defaults. StatsInterval < 0 is documented to
	// disable the gauges, not an error.
	for _, cfg := range []dispatcher.Config{{}, {StatsInterval: -time.Second}, {HeartbeatInterval: 0, Lease: 0, PublishTimeout: 0}} {
		if _, err := dispatcher.New(pool, pub, cfg); err != nil {
			t.Errorf("%+v: %v", cfg, err)
		}
	}
}

// A database without the schema: migrations.Check says so, and Run fails at
// once with ErrOutboxTable (issue 13: it used to start and log "relation
// does not exist" every second). A table that disappears after the start
// is a database error like any other: the dispatcher neither dies nor spins
// silently; it logs and retries with backoff, counted in Stats().DBErrors.
func TestBadInput_DatabaseWithoutTheSchema(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	admin := pgtest.AdminURL(t)
	name := fmt.Sprintf("pgoutbox_unmigrated_%d", time.Now().UnixNano())
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = conn.Exec(context.Background(), "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)") })
	u, err := url.Parse(admin)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + name
	pool := pgtest.Pool(t, u.String())

	if err := migrations.Check(ctx, pool); !errors.Is(err, migrations.ErrNotMigrated) {
		t.Fatalf("Check = %v, want ErrNotMigrated", err)
	}
	if _, err := dispatcher.Enqueue(ctx, pool, dispatcher.Event{AggregateType: "a", AggregateID: "b", EventType: "c", Payload: []byte(`{}`)}); err == nil ||
		!strings.Contains(err.Error(), "outbox") {
		t.Fatalf("Enqueue into a database without the schema: err = %v, want an error naming the outbox table", err)
	}
	d, err := dispatcher.New(pool, newRecorder(nil), fast(dispatcher.Config{Logger: quietLogger(t)}))
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Run(ctx); !errors.Is(err, dispatcher.ErrOutboxTable) {
		t.Fatalf("Run without the table: %v, want ErrOutboxTable", err)
	}

	m, err := migrations.FromPool(pool)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Up(ctx); err != nil {
		t.Fatal(err)
	}
	_ = m.Close()
	if _, err := dispatcher.Enqueue(ctx, pool, dispatcher.Event{AggregateType: "a", AggregateID: "b", EventType: "c", Payload: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	d, err = dispatcher.New(pool, newRecorder(nil), fast(dispatcher.Config{Logger: quietLogger(t)}))
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- d.Run(runCtx) }()
	waitFor(t, 30*time.Second, "the first publish", func() bool { return d.Stats().Published > 0 })
	if _, err := pool.Exec(ctx, "DROP TABLE outbox CASCADE"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "database errors counted", func() bool { return d.Stats().DBErrors >= 2 })
	// Backoff, not a hot loop: far fewer errors than claim attempts a spin would make.
	time.Sleep(time.Second)
	if n := d.Stats().DBErrors; n > 40 {
		t.Errorf("%d database errors in about a second: the loop spins", n)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
}

// A receiver URL that does not resolve: Publish says the receiver is
// unavailable, and the message goes back to pending, its attempt refunded,
// with last_error saying why.
func TestBadInput_ReceiverURLThatDoesNotResolve(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	ids := b.enqueue(t, 1, "a", false)
	pub, err := webhook.New(webhook.Config{URL: "http://does-not-resolve.invalid/hook", Timeout: 3 * time.Second, Secret: "s3cret-hmac"})
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	perr := pub.Publish(ctx, dispatcher.Message{ID: "1", OutboxID: 1, AggregateType: "a", AggregateID: "b", EventType: "c",
		Payload: []byte(`{}`), Headers: map[string]string{}})
	var unavailable *dispatcher.UnavailableError
	if !errors.As(perr, &unavailable) {
		t.Fatalf("Publish = %v, want an UnavailableError", perr)
	}
	if strings.Contains(perr.Error(), "s3cret-hmac") {
		t.Fatalf("the HMAC secret leaked into the error: %v", perr)
	}

	b.start(t, pub, fast(dispatcher.Config{PublishTimeout: 4 * time.Second, Lease: 10 * time.Second,
		BackoffBase: time.Minute, BackoffCap: time.Minute, MaxAttempts: 5}))
	waitFor(t, 30*time.Second, "the message handed back", func() bool {
		s := b.state(t, ids[0])
		return s.Status == "pending" && s.Attempts == 0 && s.LastError != ""
	})
	s := b.state(t, ids[0])
	if !strings.Contains(s.LastError, "does-not-resolve.invalid") {
		t.Fatalf("last_error = %q, want it to name the host", s.LastError)
	}
	if strings.Contains(s.LastError, "s3cret-hmac") {
		t.Fatalf("the HMAC secret leaked into last_error: %q", s.LastError)
	}
}
