package console

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/pgoutbox/pgoutbox/db"
	"github.com/pgoutbox/pgoutbox/db/consoledb"
	"github.com/pgoutbox/pgoutbox/dispatcher"
	"github.com/pgoutbox/pgoutbox/internal/pgtest"
)

// failingWindow is the console's DBTX with one query failing: the window
// read that follows a page shorter than PageRows.
type failingWindow struct {
	db.DBTX
	name string // "-- name: <this> "
}

var errWindowRead = errors.New("the window read failed (test)")

func (f failingWindow) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if strings.HasPrefix(sql, "-- name: "+f.name+" ") {
		return failedRow{}
	}
	return f.DBTX.QueryRow(ctx, sql, args...)
}

type failedRow struct{}

func (failedRow) Scan(...any) error { return errWindowRead }

// A failed window read (the page's second query, for its "next" link) is an
// error page that says so: not a page without its next link, not a panic.
func TestConsole_FailedWindowReadIsAnErrorPage(t *testing.T) {
	pool := pgtest.Pool(t, pgtest.NewURL(t))
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload, status)
	      SELECT 'order', 'o-' || g, 'OrderPaid', '{}', CASE WHEN g % 2 = 0 THEN 'dead' ELSE 'pending' END
	        FROM generate_series(1, 10) AS g`); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path, query string
	}{
		{"/messages?status=pending", "OutboxConsoleScanWindow"},
		{"/dead", "OutboxConsoleDeadWindow"},
	} {
		t.Run(tc.query, func(t *testing.T) {
			c, err := New(pool, Config{Hosts: []string{"example.com"}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
			if err != nil {
				t.Fatal(err)
			}
			inner, err := dispatcher.TableDBTX(customPlans{pool: pool}, "outbox", "")
			if err != nil {
				t.Fatal(err)
			}
			c.cq = consoledb.New(failingWindow{DBTX: inner, name: tc.query})
			rec := httptest.NewRecorder()
			c.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, tc.path, nil))
			if rec.Code != http.StatusInternalServerError || !strings.Contains(rec.Body.String(), errWindowRead.Error()) {
				t.Fatalf("GET %s with %s failing: status %d, want 500 with the error; body:\n%s", tc.path, tc.query, rec.Code, rec.Body.String())
			}
		})
	}
}
