package console_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/pgoutbox/console"
	"github.com/pgoutbox/pgoutbox/db/opsdb"
	"github.com/pgoutbox/pgoutbox/dispatcher"
	"github.com/pgoutbox/pgoutbox/internal/pgtest"
)

// realRun is an outbox after a real relay run, not a seeded fixture: two
// relays (dispatchers relay-a and relay-b, each recording itself in
// outbox_relays) deliver a burst, stay idle, then deliver a second burst
// in which some messages fail for good (dead) and an ordered aggregate's
// head fails (blocked); two dead messages are then skipped, and a session
// holds a snapshot open (the horizon holder).
type realRun struct {
	pool     *pgxpool.Pool
	url      string
	relays   map[string]*dispatcher.Dispatcher // by owner
	stops    map[string]func()
	invoices []int64 // dead InvoiceSent
	skipped  []int64
	holder   int // pid of the session holding the snapshot
}

// rejected makes the publisher fail a message for good, as a receiver that
// answers 422 does.
var errRejected = errors.New("webhook: HTTP 422 Unprocessable Entity")

func newRealRun(t *testing.T) *realRun {
	t.Helper()
	ctx := context.Background()
	r := &realRun{url: pgtest.NewURL(t), relays: map[string]*dispatcher.Dispatcher{}, stops: map[string]func(){}}
	r.pool = pgtest.Pool(t, r.url)
	pub := dispatcher.PublisherFunc(func(ctx context.Context, m dispatcher.Message) error {
		time.Sleep(time.Millisecond) // a receiver's round trip
		if m.EventType == "InvoiceSent" || m.EventType == "ItemRejected" {
			return dispatcher.Permanent(errRejected)
		}
		return nil
	})
	for _, owner := range []string{"relay-a", "relay-b"} {
		d, err := dispatcher.New(pgtest.Pool(t, r.url), pub, dispatcher.Config{Owner: owner, PollInterval: 50 * time.Millisecond,
			RelayInterval: 100 * time.Millisecond, Concurrency: 8, Batch: 200, Logger: quietLog()})
		if err != nil {
			t.Fatal(err)
		}
		dctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- d.Run(dctx) }()
		var once sync.Once
		stop := func() {
			once.Do(func() {
				cancel()
				if err := <-done; err != nil {
					t.Errorf("Run %s: %v", owner, err)
				}
			})
		}
		t.Cleanup(stop)
		r.relays[owner], r.stops[owner] = d, stop
	}
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := r.pool.Exec(ctx, sql, args...); err != nil {
			t.Fatalf("%v\n%s", err, sql)
		}
	}
	// Burst 1: 3,000 events in one statement.
	exec(`INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
	      SELECT 'order', 'o-' || g, 'OrderPaid', jsonb_build_object('order_id', g, 'amount', g % 97) FROM generate_series(1, 3000) AS g`)
	r.waitSettled(t, 0)
	// An idle gap: the relays poll and find nothing.
	time.Sleep(1500 * time.Millisecond)
	// Burst 2: 2,000 events in 20 transactions, 5 that the receiver
	// rejects, and an ordered cart whose first event it rejects.
	for i := range 20 {
		exec(`INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
		      SELECT 'order', 'o-' || g, 'OrderShipped', jsonb_build_object('order_id', g, 'carrier', 'dhl')
		        FROM generate_series($1::int, $1::int + 99) AS g`, i*100+1)
	}
	exec(`INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
	      SELECT 'invoice', 'i-' || g, 'InvoiceSent', jsonb_build_object('invoice', g) FROM generate_series(1, 5) AS g`)
	exec(`INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload, ordered) VALUES ('cart', 'c-1', 'ItemRejected', '{"sku": "x-1"}', true)`)
	exec(`INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload, ordered)
	      SELECT 'cart', 'c-1', 'ItemAdded', jsonb_build_object('n', g), true FROM generate_series(1, 3) AS g`)
	r.waitSettled(t, 3) // the cart's three events wait behind its dead head
	rows, err := r.pool.Query(ctx, `SELECT id FROM outbox WHERE event_type = 'InvoiceSent' AND status = 'dead' ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	r.invoices, err = pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil || len(r.invoices) != 5 {
		t.Fatalf("dead invoices %v (%v), want 5", r.invoices, err)
	}
	// An operator skips two of them (pgoutbox dead skip).
	q := opsdb.New(r.pool)
	reason := "customer deleted upstream"
	for _, id := range r.invoices[:2] {
		if n, err := q.OutboxSkipDead(ctx, opsdb.OutboxSkipDeadParams{ID: id, Reason: &reason}); err != nil || n != 1 {
			t.Fatalf("skip %d: %d, %v", id, n, err)
		}
	}
	r.skipped, r.invoices = r.invoices[:2], r.invoices[2:]
	// A report holds a snapshot open.
	cfg, err := pgx.ParseConfig(r.url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.RuntimeParams["application_name"] = "nightly-report"
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	if err := conn.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&r.holder); err != nil {
		t.Fatal(err)
	}
	for _, sql := range []string{"BEGIN ISOLATION LEVEL REPEATABLE READ", "SELECT count(*) FROM outbox /* revenue report */"} {
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	// Both relays have recorded a heartbeat after the last finalize.
	waitUntil(t, "both relays' rows current", func() bool {
		return r.count(t, `SELECT count(*) FROM outbox_relays WHERE stopped_at IS NULL AND in_flight = 0 AND last_finalize_at IS NOT NULL
		                     AND heartbeat_at > last_finalize_at`) == 2
	})
	return r
}

// waitSettled waits until only undeliverable messages are undelivered:
// want pending (behind a dead head), none processing.
func (r *realRun) waitSettled(t *testing.T, want int64) {
	t.Helper()
	waitUntil(t, fmt.Sprintf("%d undelivered", want), func() bool {
		return r.count(t, `SELECT count(*) FROM outbox WHERE status IN ('pending', 'processing')`) == want &&
			r.count(t, `SELECT count(*) FROM outbox WHERE status = 'processing'`) == 0
	})
}

func (r *realRun) count(t *testing.T, sql string, args ...any) int64 {
	t.Helper()
	var n int64
	if err := r.pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// After a burst, an idle gap and a second burst delivered by two real
// relays, every figure of the overview is the table's: the counts by
// status (skipped apart from done), the deliveries of the charted hour and
// each minute's bar (its exact count over 60 s; the current minute over
// the part gone by); the relays section shows the two relay processes, one
// row each, from what they record; the horizon holder is the report's
// session. The screenshots in docs/console/ come from this run.
func TestBrowser_RealRunOverviewMatchesTheTable(t *testing.T) {
	r := newRealRun(t)
	s := serveOn(t, r.pool, console.Config{})
	ctx := browser(t)
	navigate(t, ctx, s.URL+"/", "#count-dead")
	screenshot(t, ctx, "overview")

	sqlCounts := map[string]int64{}
	for _, st := range []string{"pending", "processing", "done", "dead", "skipped"} {
		sqlCounts[st] = r.count(t, `SELECT count(*) FROM outbox WHERE status = $1`, st)
	}
	if sqlCounts["done"] != 5000 || sqlCounts["skipped"] != 2 || sqlCounts["dead"] != 4 || sqlCounts["pending"] != 3 {
		t.Errorf("the run left %v, want 5000 done, 2 skipped, 4 dead (3 invoices, 1 cart head), 3 pending", sqlCounts)
	}
	for _, st := range []string{"pending", "processing", "done", "dead", "skipped"} {
		if got, want := text(t, ctx, "#count-"+st), formatNum(sqlCounts[st]); got != want {
			t.Errorf("overview %s = %q, the table has %s", st, got, want)
		}
	}
	charted := r.count(t, `SELECT count(*) FROM outbox WHERE status = 'done' AND done_at >= date_trunc('minute', now()) - interval '59 minutes'`)
	if got := text(t, ctx, "#delivered"); got != formatNum(charted) {
		t.Errorf("delivered in the charted hour %q, the table has %d", got, charted)
	}
	// Each bar: the minute's exact count over its length.
	bars := get(t, ctx, chromedp.Evaluate[[]map[string]string](
		`Array.from(document.querySelectorAll('svg.chart rect[data-t]')).slice(0, 60).map(e => ({t: e.dataset.t, v: e.dataset.v}))`))
	seen := int64(0)
	for i, b := range bars {
		minute, err := time.Parse(time.RFC3339, b["t"])
		if err != nil {
			t.Fatal(err)
		}
		n := r.count(t, `SELECT count(*) FROM outbox WHERE status = 'done' AND done_at >= $1 AND done_at < $1 + interval '1 minute'`, minute)
		seen += n
		v, _ := strconv.ParseFloat(b["v"], 64)
		if i < len(bars)-1 || v < float64(n)/60-1e-9 {
			// A past minute: its count over 60 s. The latest bar may be the
			// minute that was current when the page was read: its count
			// over the part gone by, so at least count / 60.
			if want := float64(n) / 60; fmt.Sprintf("%.6f", v) != fmt.Sprintf("%.6f", want) {
				t.Errorf("bar %s = %g msg/s, the table has %d deliveries in that minute (%g msg/s)", b["t"], v, n, want)
			}
		}
	}
	if seen != charted {
		t.Errorf("the bars cover %d deliveries, the charted hour has %d", seen, charted)
	}

	// The relays section and page: one row per relay process.
	for _, path := range []string{"/", "/relays"} {
		navigate(t, ctx, s.URL+path, "#relays")
		if n := eval(t, ctx, `document.querySelectorAll('#relays tr.relay').length`); n != 2 {
			t.Errorf("%s: %d relay rows, want 2 (relay-a, relay-b)", path, n)
		}
		main := text(t, ctx, "#relays")
		for owner, d := range r.relays {
			mustContain(t, path+" relays", main, d.OwnerPrefix(), owner)
		}
		mustContain(t, path+" relays", main, "running")
		if strings.Contains(main, ".17") && strings.Count(main, "relay-a/") > 1 {
			t.Errorf("%s lists claims, not relays:\n%s", path, main)
		}
	}
	screenshot(t, ctx, "relays")

	// The horizon holder: the report's session.
	navigate(t, ctx, s.URL+"/", "#horizon")
	mustContain(t, "horizon", text(t, ctx, "#horizon"), strconv.Itoa(r.holder), "nightly-report", "idle in transaction", "/* revenue report */")

	// A relay that stops says so.
	r.stops["relay-b"]()
	navigate(t, ctx, s.URL+"/relays", "#relays")
	rows := text(t, ctx, "#relays")
	if !strings.Contains(rows, "stopped") || !strings.Contains(rows, r.relays["relay-b"].OwnerPrefix()) {
		t.Errorf("relay-b stopped, the relays page shows:\n%s", rows)
	}
}

// The other pages, from the same kind of run (the screenshots of
// docs/console/): messages, a dead message, dead letters, blocked
// aggregates, a retry through its confirmation.
func TestBrowser_RealRunPages(t *testing.T) {
	r := newRealRun(t)
	s := serveOn(t, r.pool, console.Config{})
	ctx := browser(t)
	for _, p := range []struct{ name, path, wait, want string }{
		{"messages", "/messages", "#messages", "OrderShipped"},
		{"messages-filtered", "/messages?status=dead&event_type=InvoiceSent", "#messages", "HTTP 422"},
		{"message", "/messages/" + strconv.FormatInt(r.invoices[0], 10), "#payload", "HTTP 422"},
		{"dead", "/dead", "#dead", "ItemRejected"},
		{"blocked", "/blocked", "#blocked", "c-1"},
	} {
		navigate(t, ctx, s.URL+p.path, p.wait)
		mustContain(t, p.path, text(t, ctx, "main"), p.want)
		screenshot(t, ctx, p.name)
	}
	navigate(t, ctx, s.URL+"/dead", "#dead")
	do(t, ctx, chromedp.Click(chromedp.CSS(fmt.Sprintf("#sel-%d", r.invoices[0]))), chromedp.Click(chromedp.CSS(fmt.Sprintf("#sel-%d", r.invoices[1]))))
	click(t, ctx, "#retry-selected", "#confirm")
	mustContain(t, "confirmation", text(t, ctx, "#summary"), "Retry 2 selected messages")
	screenshot(t, ctx, "confirm")
	click(t, ctx, "#confirm", "#result")
	mustContain(t, "result", text(t, ctx, "#result"), "Retried 2 messages of 2 selected")
	screenshot(t, ctx, "result")
}

// formatNum is the console's number format (thousands separated by commas).
func formatNum(n int64) string {
	s := strconv.FormatInt(n, 10)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
