package console_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/pgoutbox/pgoutbox/console"
	"github.com/pgoutbox/pgoutbox/internal/pgtest"
)

// The overview names what holds the oldest snapshot (a session idle in a
// REPEATABLE READ transaction): kind, pid, role, application name, state,
// the age of its xmin and its query's first words; and the dead row
// versions of the table.
func TestConsole_OverviewNamesWhatPinsTheHorizon(t *testing.T) {
	t.Parallel()
	u := pgtest.NewURL(t)
	pool := pgtest.Pool(t, u)
	ctx := context.Background()
	cfg, err := pgx.ParseConfig(u)
	if err != nil {
		t.Fatal(err)
	}
	cfg.RuntimeParams["application_name"] = "quarterly-export"
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var pid int
	if err := conn.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT count(*) FROM outbox /* export */"); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5; i++ { // transactions after the snapshot: its xmin ages
		if _, err := pool.Exec(ctx, `INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload) VALUES ('a', 'b', 'E', '{}')`); err != nil {
			t.Fatal(err)
		}
	}
	s := serveOn(t, pool, console.Config{})
	c := newClient(t, s.URL)
	code, body := c.get(t, "/")
	if code != 200 {
		t.Fatalf("GET /: %d\n%s", code, body)
	}
	for _, want := range []string{`id="horizon"`, "<td>backend</td>", ">" + strconv.Itoa(pid) + "<", "quarterly-export", "idle in transaction",
		"/* export */", `id="dead-tuples"`, "dead row versions"} {
		mustContain(t, "/", body, want)
	}
}
