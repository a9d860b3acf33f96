package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// stats names what holds the oldest snapshots: a session idle in a
// REPEATABLE READ transaction (a report, pg_dump) and a prepared
// transaction nobody finished, with pid, role, name, state, how long and
// the first words of the query; and the table's dead row versions.
func TestStats_NamesWhatPinsTheHorizon(t *testing.T) {
	t.Parallel()
	d := newDB(t)
	ctx := context.Background()
	cfg, err := pgx.ParseConfig(d.url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.RuntimeParams["application_name"] = "nightly-report"
	report, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer report.Close(ctx)
	var pid int32
	if err := report.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		t.Fatal(err)
	}
	if _, err := report.Exec(ctx, "BEGIN ISOLATION LEVEL REPEATABLE READ"); err != nil {
		t.Fatal(err)
	}
	if _, err := report.Exec(ctx, "SELECT count(*) FROM outbox /* monthly revenue */"); err != nil {
		t.Fatal(err)
	}
	gid := "pgoutbox-test-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	prep, err := pgx.Connect(ctx, d.url)
	if err != nil {
		t.Fatal(err)
	}
	defer prep.Close(ctx)
	if _, err := prep.Exec(ctx, "BEGIN; SELECT pg_current_xact_id(); PREPARE TRANSACTION '"+gid+"'"); err != nil {
		t.Fatalf("prepare a transaction (the test server needs max_prepared_transactions > 0): %v", err)
	}
	t.Cleanup(func() { _, _ = d.pool.Exec(context.Background(), "ROLLBACK PREPARED '"+gid+"'") })
	// Work after the snapshot: the holders' xmin grows old, and the outbox
	// gets dead row versions.
	ids := d.enqueue(t, 20, "E", "a", false)
	d.exec(t, "UPDATE outbox SET status = 'done', done_at = now() WHERE id = ANY($1)", ids)

	r := call(t, invocation{env: d.env()}, "stats", "--json")
	wantCode(t, r, ExitOK)
	var rep statsReport
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatalf("stats --json: %v\n%s", err, r.stdout)
	}
	var sawReport, sawPrepared bool
	for _, h := range rep.Horizon.Holders {
		switch {
		case h.Kind == "backend" && h.PID == pid:
			sawReport = true
			if h.Name != "nightly-report" || h.State != "idle in transaction" || h.XminAge < 1 || h.Since == nil ||
				!strings.Contains(h.Query, "monthly revenue") || h.Role == "" {
				t.Errorf("the report's session is shown as %+v", h)
			}
		case h.Kind == "prepared transaction" && h.Name == gid:
			sawPrepared = true
			if h.XminAge < 1 || h.Since == nil || h.PID != 0 {
				t.Errorf("the prepared transaction is shown as %+v", h)
			}
		}
	}
	if !sawReport || !sawPrepared {
		t.Errorf("stats --json horizon holders %+v: want the report's session (pid %d) and the prepared transaction %s", rep.Horizon.Holders, pid, gid)
	}

	r = call(t, invocation{env: d.env()}, "stats")
	wantCode(t, r, ExitOK)
	mustContain(t, r, "stdout", "oldest snapshots (until they end, vacuum cannot remove the outbox's old row versions)")
	mustContain(t, r, "stdout", fmt.Sprint(pid))
	mustContain(t, r, "stdout", "nightly-report")
	mustContain(t, r, "stdout", "idle in transaction")
	mustContain(t, r, "stdout", gid)
	mustContain(t, r, "stdout", "dead row versions")
}

// The relay's /metrics names the holder of the oldest snapshot, with its
// age in transactions and seconds, and the table's dead row versions.
func TestRun_MetricsNameTheHorizonHolder(t *testing.T) {
	t.Parallel()
	d := newDB(t)
	ctx := context.Background()
	cfg, err := pgx.ParseConfig(d.url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.RuntimeParams["application_name"] = "pg_dump-nightly"
	dump, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer dump.Close(ctx)
	if _, err := dump.Exec(ctx, "BEGIN ISOLATION LEVEL REPEATABLE READ"); err != nil {
		t.Fatal(err)
	}
	if _, err := dump.Exec(ctx, "SELECT count(*) FROM outbox"); err != nil {
		t.Fatal(err)
	}
	b := start(t, invocation{env: d.env()}, "run", "--publisher", "discard", "--poll-interval", "50ms",
		"--metrics-addr", "127.0.0.1:0", "--stats-interval", "50ms")
	base := b.metricsURL(t)
	ids := d.enqueue(t, 5, "E", "a", false)
	eventually(t, 30*time.Second, "the messages to be done", func() bool { return d.status(t, ids[4]) == "done" })
	var text string
	eventually(t, 30*time.Second, "the horizon gauges to name the dump's session", func() bool {
		_, text = get(t, base+"/metrics")
		for _, line := range strings.Split(text, "\n") {
			if strings.HasPrefix(line, "pgoutbox_horizon_xmin_age") && strings.Contains(line, `holder_name="pg_dump-nightly"`) &&
				strings.Contains(line, `holder_kind="backend"`) && !strings.HasSuffix(line, " 0") {
				return strings.Contains(text, "pgoutbox_horizon_age_seconds{") && strings.Contains(text, "pgoutbox_table_dead_tuples")
			}
		}
		return false
	})
	wantCode(t, b.stop(t), ExitOK)
}
