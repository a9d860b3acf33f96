package console_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/pgoutbox/console"
	"github.com/pgoutbox/pgoutbox/internal/pgtest"
)

// The fleet overview: a row per database sorted by what needs attention
// (the unreadable database first, then the one with blocked aggregates and
// dead messages, then the quiet ones), totals, and each name opening that
// database's own console, whose pages work under its path and link back.
func TestFleet_OverviewAndDrillDown(t *testing.T) {
	t.Parallel()
	busy := newFixture(t)
	quiet := pgtest.NewPool(t)
	if _, err := quiet.Exec(context.Background(), `INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
		SELECT 'order', 'q-' || g, 'OrderPaid', '{}' FROM generate_series(1, 3) AS g`); err != nil {
		t.Fatal(err)
	}
	// A database without the outbox table.
	bare := pgtest.Pool(t, strings.Replace(pgtest.NewURL(t), "?", "?options=-csearch_path%3Dnowhere&", 1))

	fc, err := console.NewFleet(console.Config{Prefix: "/ops", Logger: quietLog()})
	if err != nil {
		t.Fatal(err)
	}
	if err := fc.Set(map[string]*pgxpool.Pool{"tenant_busy": busy.pool, "tenant_quiet": quiet, "db2:5432/bare": bare}); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(fc)
	t.Cleanup(srv.Close)
	c := newClient(t, srv.URL)

	// The overview shows what its background reading has read so far: the
	// first look waits a little for it, later looks show it once done.
	var code int
	var body string
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, body = c.get(t, "/ops/")
		if code != http.StatusOK {
			t.Fatalf("overview: %d\n%s", code, body)
		}
		if !strings.Contains(body, "not read yet") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("databases still not read after 30s\n%s", body)
		}
		time.Sleep(20 * time.Millisecond)
	}
	order := regexp.MustCompile(`<td><a href="/ops/db/([^"]+)/">`).FindAllStringSubmatch(body, -1)
	var names []string
	for _, m := range order {
		names = append(names, m[1])
	}
	if strings.Join(names, " ") != "db2:5432/bare tenant_busy tenant_quiet" {
		t.Errorf("rows in the order %v, want the unreadable one, then the one with blocked aggregates, then the quiet one", names)
	}
	for _, want := range []string{`id="fleet-databases">3<`, `id="fleet-failed">1<`, `id="fleet-dead">19<`, `id="fleet-blocked">2<`,
		"relation &#34;outbox&#34; does not exist", `href="/ops/db/tenant_busy/dead"`, `href="/ops/db/tenant_busy/blocked"`} {
		if !strings.Contains(body, want) {
			t.Errorf("overview lacks %s", want)
		}
	}
	if !regexp.MustCompile(`(?s)tenant_quiet</a></td>\s*<td class="n">3</td>`).MatchString(body) {
		t.Errorf("tenant_quiet's row does not show its 3 pending")
	}

	code, body = c.get(t, "/ops/db/tenant_busy/")
	if code != http.StatusOK || !strings.Contains(body, `id="home"`) || !strings.Contains(body, `href="/ops/db/tenant_busy/messages"`) {
		t.Errorf("the database's overview: %d, or no link back and no navigation under its path", code)
	}
	code, body = c.get(t, "/ops/db/tenant_busy/dead")
	if code != http.StatusOK || !strings.Contains(body, "OrderShipped") {
		t.Errorf("the database's dead letters: %d", code)
	}
	if code, _ := c.get(t, "/ops/db/nope/"); code != http.StatusNotFound {
		t.Errorf("an unknown database: %d, want 404", code)
	}
	// A database let go is no longer served.
	if err := fc.Set(map[string]*pgxpool.Pool{"tenant_quiet": quiet}); err != nil {
		t.Fatal(err)
	}
	if code, _ := c.get(t, "/ops/db/tenant_busy/"); code != http.StatusNotFound {
		t.Errorf("a removed database: %d, want 404", code)
	}
}

func TestFleet_Authentication(t *testing.T) {
	t.Parallel()
	fc, err := console.NewFleet(console.Config{Token: "s3cret-token", Logger: quietLog()})
	if err != nil {
		t.Fatal(err)
	}
	if err := fc.Set(map[string]*pgxpool.Pool{"a": pgtest.NewPool(t)}); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(fc)
	t.Cleanup(srv.Close)
	for _, path := range []string{"/", "/db/a/", "/db/a/dead", "/static/style.css"} {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("%s without the token: %d, want 401", path, resp.StatusCode)
		}
	}
}

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
