package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgoutbox/pgoutbox/fleet"
	"github.com/pgoutbox/pgoutbox/internal/pgtest"
	"github.com/pgoutbox/pgoutbox/migrations"
)

// The one-shot commands over several databases: migrate up and status over
// databases found by a name pattern (with a summary), stats --json per
// database and in total, dead list, dead retry --all-matching and purge
// over each, and a database that cannot be read reported while the others
// are done.
func TestFleetCommandsOverDiscoveredDatabases(t *testing.T) {
	t.Parallel()
	admin := pgtest.AdminURL(t)
	prefix := fmt.Sprintf("fleetops_%d", time.Now().UnixNano()%1_000_000_000)
	ctx := context.Background()
	adminExec := func(sql string) {
		t.Helper()
		conn, err := pgx.Connect(ctx, admin)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	var dbs []*testDB
	for i := 1; i <= 3; i++ {
		name := fmt.Sprintf("%s_%d", prefix, i)
		adminExec("CREATE DATABASE " + name)
		t.Cleanup(func() { adminExec("DROP DATABASE IF EXISTS " + name + " WITH (FORCE)") })
		u := fleet.WithDatabase(admin, name)
		dbs = append(dbs, &testDB{url: u})
	}
	discover := []string{"--discover-databases", admin, "--discover-pattern", prefix + `\_%`}

	r := call(t, invocation{}, append([]string{"migrate", "status"}, discover...)...)
	wantCode(t, r, ExitOK)
	mustContain(t, r, "stdout", "3 databases: 0 up to date, 3 with pending migrations")
	// Every file of this build is pending on an empty database (the
	// numbering may have gaps: files, not the latest version).
	files, _ := fs.Glob(migrations.FS(), "*.sql")
	mustContain(t, r, "stdout", fmt.Sprintf(" %d pending\n", len(files)))
	r = call(t, invocation{}, append([]string{"migrate", "up"}, discover...)...)
	wantCode(t, r, ExitOK)
	mustContain(t, r, "stdout", prefix+"_2")
	mustContain(t, r, "stdout", "3 databases: 3 migrated, 0 already up to date, 0 failed")
	r = call(t, invocation{}, append([]string{"migrate", "up"}, discover...)...)
	wantCode(t, r, ExitOK)
	mustContain(t, r, "stdout", "3 databases: 0 migrated, 3 already up to date, 0 failed")

	for i, d := range dbs {
		d.pool = pgtest.Pool(t, d.url)
		ids := d.enqueue(t, 2+i, "OrderPaid", "o-1", false)
		d.kill(t, ids[0])
		d.exec(t, "UPDATE outbox SET status = 'done', done_at = now() - interval '2 hours' WHERE id = $1", ids[1])
	}
	r = call(t, invocation{}, append([]string{"stats", "--json"}, discover...)...)
	wantCode(t, r, ExitOK)
	var rep fleetStatsReport
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatalf("stats --json: %v\n%s", err, r)
	}
	if len(rep.Databases) != 3 || rep.Total.ByStatus["pending"] != 3 || rep.Total.Dead != 3 || rep.Total.ByStatus["done"] != 3 {
		t.Errorf("stats --json: %d databases, total %+v; want 3, pending 3, dead 3, done 3\n%s", len(rep.Databases), rep.Total, r.stdout)
	}
	if got := rep.Databases[prefix+"_3"].ByStatus["pending"]; got != 2 {
		t.Errorf("%s_3 pending %d, want 2", prefix, got)
	}

	// One more, unmigrated, named by --database-url: reported, the rest read.
	bare := prefix + "bare" // outside the pattern
	adminExec("CREATE DATABASE " + bare)
	t.Cleanup(func() { adminExec("DROP DATABASE IF EXISTS " + bare + " WITH (FORCE)") })
	withBare := append([]string{"--database-url", fleet.WithDatabase(admin, bare)}, discover...)
	r = call(t, invocation{}, append([]string{"stats"}, withBare...)...)
	wantCode(t, r, ExitFailure)
	mustContain(t, r, "stdout", "TOTAL")
	mustContain(t, r, "stdout", "not read (1)")
	mustContain(t, r, "stdout", bare+": outbox table not usable")
	mustContain(t, r, "stderr", "stats: 1 of 4 databases failed")

	r = call(t, invocation{}, append([]string{"dead", "list", "--json"}, discover...)...)
	wantCode(t, r, ExitOK)
	var list struct {
		Databases map[string]struct {
			Messages []deadJSON `json:"messages"`
		} `json:"databases"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &list); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 3; i++ {
		if n := len(list.Databases[fmt.Sprintf("%s_%d", prefix, i)].Messages); n != 1 {
			t.Errorf("dead list of %s_%d: %d messages, want 1\n%s", prefix, i, n, r.stdout)
		}
	}
	r = call(t, invocation{}, append([]string{"dead", "retry", "1"}, discover...)...)
	wantCode(t, r, ExitUsage)
	mustContain(t, r, "stderr", "ids are per database")
	r = call(t, invocation{}, append([]string{"dead", "retry", "--all-matching", "--yes"}, discover...)...)
	wantCode(t, r, ExitOK)
	mustContain(t, r, "stdout", "retried 3 of 3 dead messages in 3 databases")
	for _, d := range dbs {
		if n := d.count(t, "status = 'dead'"); n != 0 {
			t.Errorf("%d dead left after dead retry", n)
		}
	}
	r = call(t, invocation{}, append([]string{"purge", "--older-than", "1h"}, discover...)...)
	wantCode(t, r, ExitOK)
	mustContain(t, r, "stdout", "deleted 3 done messages older than 1h0m0s in 3 databases")
	if !strings.Contains(r.stdout, prefix+"_1: deleted 1") {
		t.Errorf("no per-database line:\n%s", r)
	}
}
