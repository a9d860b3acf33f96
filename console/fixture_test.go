package console_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/pgoutbox/console"
	"github.com/pgoutbox/pgoutbox/internal/pgtest"
)

// xssPayload is a payload (and header) that would run script or add
// markup if the console rendered it as HTML.
const (
	xssPayload = `{"note": "<script>document.title='pwned'</script><img src=x onerror=alert(1)>"}`
	xssHeaders = `{"x-evil": "<b id=\"evil\">bold</b>"}`
)

// fixture is a small seeded outbox: deliveries over the last hour (for the
// charts), pending, processing under two relays (one lease expired), dead
// messages of two event types, one with the XSS payload, and two blocked
// ordered aggregates (a dead head; a pending head in backoff for 10 min).
type fixture struct {
	pool     *pgxpool.Pool
	url      string
	xssID    int64
	shipped  []int64 // dead OrderShipped
	invoices []int64 // dead InvoiceSent
	deadHead int64   // dead head of ordered aggregate cart/c-1
	slowHead int64   // pending head (in backoff) of cart/c-2
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	f := &fixture{url: pgtest.NewURL(t)}
	f.pool = pgtest.Pool(t, f.url)
	ctx := context.Background()
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := f.pool.Exec(ctx, sql, args...); err != nil {
			t.Fatalf("seed: %v\n%s", err, sql)
		}
	}
	ids := func(sql string, args ...any) []int64 {
		t.Helper()
		rows, err := f.pool.Query(ctx, sql, args...)
		if err != nil {
			t.Fatalf("seed: %v\n%s", err, sql)
		}
		defer rows.Close()
		var out []int64
		for rows.Next() {
			var id int64
			if err := rows.Scan(&id); err != nil {
				t.Fatal(err)
			}
			out = append(out, id)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		return out
	}
	// Delivered over the last hour, unevenly, 40-160 ms after creation.
	exec(`INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload, status, done_at, created_at, attempts)
	      SELECT 'order', 'o-' || g, 'OrderPaid', jsonb_build_object('order_id', g), 'done', d.done_at,
	             d.done_at - (40 + g % 120) * interval '1 ms', 1
	        FROM generate_series(1, 3000) AS g
	       CROSS JOIN LATERAL (SELECT now() - ((g * g) % 3500 + 5) * interval '1 second' AS done_at) AS d`)
	exec(`INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
	      SELECT 'order', 'o-p' || g, 'OrderPaid', '{}' FROM generate_series(1, 20) AS g`)
	exec(`INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload, status, lease_owner, lease_until, lease_version, attempts)
	      SELECT 'order', 'o-l' || g, 'OrderPaid', '{}', 'processing', CASE WHEN g < 3 THEN 'relay-a' ELSE 'relay-b' END,
	             now() + CASE WHEN g = 4 THEN interval '-3 s' ELSE interval '1 hour' END, 1, 1
	        FROM generate_series(1, 4) AS g`)
	f.shipped = ids(`INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload, status, attempts, last_error)
	      SELECT 'order', 'o-s' || g, 'OrderShipped', jsonb_build_object('order_id', g), 'dead', 8, 'webhook: HTTP 422 Unprocessable Entity'
	        FROM generate_series(1, 12) AS g RETURNING id`)
	f.invoices = ids(`INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload, status, attempts, last_error)
	      SELECT 'invoice', 'i-' || g, 'InvoiceSent', '{}', 'dead', 8, 'nats: no responders'
	        FROM generate_series(1, 5) AS g RETURNING id`)
	f.xssID = ids(`INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload, headers, status, attempts, last_error)
	      VALUES ('order', 'o-<i>x</i>', 'Evil', $1::jsonb, $2::jsonb, 'dead', 3, '<script>alert(2)</script>') RETURNING id`,
		xssPayload, xssHeaders)[0]
	cart := ids(`INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload, ordered, created_at)
	      SELECT 'cart', 'c-' || (1 + g / 4), 'ItemAdded', jsonb_build_object('n', g), true, now() - interval '10 minutes'
	        FROM generate_series(0, 7) AS g ORDER BY g RETURNING id`)
	f.deadHead, f.slowHead = cart[0], cart[4]
	exec(`SELECT outbox_resolve_heads(1000)`) // as the relay does before its ordered claims
	exec(`UPDATE outbox SET status = 'dead', attempts = 8, last_error = 'webhook: HTTP 400 Bad Request' WHERE id = $1`, f.deadHead)
	exec(`UPDATE outbox SET available_at = now() + interval '5 minutes', attempts = 3, last_error = 'webhook: HTTP 503' WHERE id = $1`, f.slowHead)
	// The done rows above were inserted done, which the delivery counters
	// (migration 00018) do not see: recount them, as after a restore.
	exec(`SELECT outbox_delivered_rebuild()`)
	exec(`ANALYZE outbox`)
	return f
}

// status returns the status (and last_error) of id.
func (f *fixture) status(t *testing.T, id int64) (string, string) {
	t.Helper()
	var st string
	var le *string
	if err := f.pool.QueryRow(context.Background(), `SELECT status, last_error FROM outbox WHERE id = $1`, id).Scan(&st, &le); err != nil {
		t.Fatal(err)
	}
	if le == nil {
		return st, ""
	}
	return st, *le
}

// deadCount counts dead rows.
func (f *fixture) deadCount(t *testing.T) int {
	t.Helper()
	var n int
	if err := f.pool.QueryRow(context.Background(), `SELECT count(*) FROM outbox WHERE status = 'dead'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// server is a console served on loopback, its log captured.
type server struct {
	*httptest.Server
	log *syncBuffer
}

func (f *fixture) serve(t *testing.T, cfg console.Config) *server {
	t.Helper()
	return serveOn(t, f.pool, cfg)
}

func serveOn(t *testing.T, pool *pgxpool.Pool, cfg console.Config) *server {
	t.Helper()
	s := &server{log: &syncBuffer{}}
	cfg.Logger = slog.New(slog.NewTextHandler(s.log, nil))
	h, err := console.New(pool, cfg)
	if err != nil {
		t.Fatal(err)
	}
	s.Server = httptest.NewServer(h)
	t.Cleanup(s.Close)
	return s
}

// get fetches path and returns the status and body.
func (s *server) get(t *testing.T, c *http.Client, path string) (int, string, http.Header) {
	t.Helper()
	if c == nil {
		c = s.Client()
	}
	resp, err := c.Get(s.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func mustContain(t *testing.T, what, s string, subs ...string) {
	t.Helper()
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			t.Errorf("%s does not contain %q:\n%s", what, sub, s)
		}
	}
}
