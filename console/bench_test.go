package console_test

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/pgoutbox/console"
	"github.com/pgoutbox/pgoutbox/internal/pgtest"
)

// BenchmarkPages renders every page against a table of 10,000,000 rows
// (9.9 million done; seedLarge), measuring server time (ServeHTTP through an
// httptest recorder; the database round trips included, the browser not).
// The requirement is <= 200 ms per page. Seeding takes minutes; a smaller
// table: PGOUTBOX_CONSOLE_BENCH_ROWS=1000000.
//
// Without PGOUTBOX_CONSOLE_BENCH_URL each run seeds a throwaway database.
// With it, the run uses that database and keeps it: it applies the pending
// migrations (so an index added since the seeding gets built once), seeds
// the table when it is empty, and otherwise reuses the rows as they are
// (reuseLarge). The URL's role must be a superuser (seedLarge turns
// triggers off); the database only has to exist:
//
//	createdb -h 127.0.0.1 -U postgres console_bench
//	export PGOUTBOX_CONSOLE_BENCH_URL=postgres://postgres@127.0.0.1:5432/console_bench
//	go test ./console -run '^$' -bench BenchmarkPages -benchtime 20x   # seeds: minutes
//	go test ./console -run '^$' -bench BenchmarkPages -benchtime 20x   # reuses
//	dropdb -h 127.0.0.1 -U postgres console_bench                     # when done
//
// The seeded rows' times are relative to the seeding, and the pages' time
// range and chart (the last hour) are relative to now. The seed's newest
// 12 minutes are its undelivered rows, so right after seeding the chart's
// hour holds 48 minutes of deliveries, one minute fewer for every minute
// since, and none 48 minutes after the seeding: the overview then measures
// less than it should. Reseed for figures to report (dropdb, createdb).
//
// PGOUTBOX_CONSOLE_BENCH_DRAINED=2000000 seeds the table as after a backlog
// was drained (seedLarge): 2 million of the done rows delivered in the last
// hour. Seed it into a database of its own; its deliveries leave the charted
// hour within an hour of the seeding.
func BenchmarkPages(b *testing.B) {
	total := 10_000_000
	if s := os.Getenv("PGOUTBOX_CONSOLE_BENCH_ROWS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 100_000 {
			b.Fatalf("PGOUTBOX_CONSOLE_BENCH_ROWS=%q: want a whole number >= 100000", s)
		}
		total = n
	}
	drained := 0
	if s := os.Getenv("PGOUTBOX_CONSOLE_BENCH_DRAINED"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 || n > total*9/10 {
			b.Fatalf("PGOUTBOX_CONSOLE_BENCH_DRAINED=%q: want a whole number from 0 to 90%% of the rows", s)
		}
		drained = n
	}
	var pool *pgxpool.Pool
	if u := os.Getenv("PGOUTBOX_CONSOLE_BENCH_URL"); u != "" {
		pool = pgtest.Pool(b, u)
		reuseLarge(b, pool, total, drained)
	} else {
		pool = pgtest.NewPool(b)
		start := time.Now()
		seedLarge(b, pool, total, drained)
		b.Logf("seeded %d rows (%d drained in the last hour) in %s", total, drained, time.Since(start).Round(time.Second))
	}
	h, err := console.New(pool, console.Config{Hosts: []string{"example.com"}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		b.Fatal(err)
	}
	var deadID, doneID int64
	if err := pool.QueryRow(b.Context(), `SELECT max(id) FROM outbox WHERE status = 'dead'`).Scan(&deadID); err != nil {
		b.Fatal(err)
	}
	doneID = int64(total / 3)
	hourAgo := time.Now().UTC().Add(-3 * time.Hour).Format("2006-01-02T15:04")
	twoAgo := time.Now().UTC().Add(-2 * time.Hour).Format("2006-01-02T15:04")
	pages := []struct{ name, path string }{
		{"overview", "/"},
		{"messages", "/messages"},
		{"messages_status_done", "/messages?status=done"},
		{"messages_rare_event_type", "/messages?event_type=NoSuchEvent"},
		{"messages_aggregate_id", "/messages?aggregate_id=o-" + strconv.Itoa(total/2)},
		{"messages_time_range", "/messages?from=" + hourAgo + "&to=" + twoAgo},
		{"messages_older_page", "/messages?before=" + strconv.Itoa(total/2)},
		{"messages_status_dead", "/messages?status=dead"},
		{"message_detail_dead", "/messages/" + strconv.FormatInt(deadID, 10)},
		{"message_detail_done", "/messages/" + strconv.FormatInt(doneID, 10)},
		{"dead", "/dead"},
		{"dead_filtered", "/dead?event_type=OrderRefunded"},
		{"dead_time_range", "/dead?from=" + hourAgo + "&to=" + twoAgo},
		{"blocked", "/blocked"},
	}
	for _, p := range pages {
		b.Run(p.name, func(b *testing.B) {
			// One render first, not measured: the first opens the pool's
			// connections (and loads their catalog caches), which a running
			// console did long before.
			h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, p.path, nil))
			var took []time.Duration
			for b.Loop() {
				t0 := time.Now()
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, p.path, nil))
				took = append(took, time.Since(t0))
				if rec.Code != http.StatusOK {
					b.Fatalf("GET %s: %d\n%s", p.path, rec.Code, rec.Body.String())
				}
			}
			slices.Sort(took)
			b.ReportMetric(float64(took[len(took)/2].Microseconds())/1000, "median-ms")
			b.ReportMetric(float64(took[len(took)-1].Microseconds())/1000, "worst-ms")
		})
	}
	// The confirmation page of "retry all matching this filter" (a POST
	// with the CSRF cookie and token, as a browser sends it): it counts
	// the matching dead messages.
	b.Run("confirm_all_matching", func(b *testing.B) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/dead", nil))
		cookie := rec.Result().Cookies()[0]
		token := between(rec.Body.String(), `name="csrf" value="`, `"`)
		form := url.Values{"csrf": {token}, "do": {"retry-filter"}, "event_type": {"OrderShipped"}}.Encode()
		for b.Loop() {
			req := httptest.NewRequest(http.MethodPost, "/confirm", strings.NewReader(form))
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			req.AddCookie(cookie)
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `id="count"`) {
				b.Fatalf("confirm: %d\n%s", rec.Code, rec.Body.String())
			}
		}
	})
}

func between(s, from, to string) string {
	i := strings.Index(s, from)
	if i < 0 {
		return ""
	}
	s = s[i+len(from):]
	j := strings.Index(s, to)
	if j < 0 {
		return ""
	}
	return s[:j]
}
