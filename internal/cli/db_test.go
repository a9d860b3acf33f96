package cli

import (
	"context"
	"fmt"
	"io/fs"
	"net/url"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgoutbox/pgoutbox/internal/pgtest"
	"github.com/pgoutbox/pgoutbox/migrations"
)

var dataCommands = []string{
	"migrate up", "migrate down", "migrate status", "stats", "dead list", "dead retry 1", "dead skip 1 --reason r",
	"dead retry --all-matching --yes", "purge --older-than 7d", "run --publisher discard",
	"enqueue --aggregate-type a --aggregate-id 1 --event-type E --payload {}",
}

func TestDatabase_UnreachableSaysWhereWithoutThePassword(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, url, shown, source string
		flag                     bool
	}{
		{"url", "postgres://app:s3cr3t-pw@127.0.0.1:1/app", "postgres://app:xxxxx@127.0.0.1:1/app", "DATABASE_URL", false},
		{"url flag", "postgres://app:s3cr3t-pw@127.0.0.1:1/app?sslmode=disable", "postgres://app:xxxxx@127.0.0.1:1/app?sslmode=disable", "--database-url", true},
		{"password in query", "postgres://app@127.0.0.1:1/app?password=s3cr3t-pw", "postgres://app@127.0.0.1:1/app?password=xxxxx", "DATABASE_URL", false},
		{"keyword/value", "host=127.0.0.1 port=1 user=app password=s3cr3t-pw dbname=app", "host=127.0.0.1 port=1 user=app password=xxxxx dbname=app", "DATABASE_URL", false},
		{"quoted keyword/value", "host=127.0.0.1 port=1 user=app password='s3cr3t-pw' dbname=app", "host=127.0.0.1 port=1 user=app password=xxxxx dbname=app", "DATABASE_URL", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			for _, cmd := range dataCommands {
				inv := invocation{env: map[string]string{"DATABASE_URL": tc.url}}
				args := strings.Fields(cmd)
				if tc.flag {
					inv.env = nil
					args = append(args, "--database-url", tc.url)
				}
				r := call(t, inv, args...)
				wantCode(t, r, ExitFailure)
				mustContain(t, r, "stderr", "pgoutbox: cannot reach PostgreSQL at "+tc.shown)
				mustContain(t, r, "stderr", "connection refused")
				mustContain(t, r, "stderr", "; check "+tc.source)
				if strings.Contains(r.stdout+r.stderr, "s3cr3t") {
					t.Errorf("%s: the password leaked:\n%s", cmd, r)
				}
			}
		})
	}
}

func TestDatabase_InvalidURL(t *testing.T) {
	t.Parallel()
	r := call(t, invocation{env: map[string]string{"DATABASE_URL": "postgres://app:s3cr3t-pw@127.0.0.1:notaport/app"}}, "stats")
	wantCode(t, r, ExitFailure)
	mustContain(t, r, "stderr", "pgoutbox: invalid database URL postgres://")
	mustContain(t, r, "stderr", "check DATABASE_URL")
	if strings.Contains(r.stderr, "s3cr3t") {
		t.Errorf("the password leaked:\n%s", r)
	}
}

// A misspelled scheme is named as such, for the database URL and the
// listen URL alike, not reported as a keyword/value string pgx could not
// parse.
func TestDatabase_MisspelledSchemeIsNamed(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, scheme string
		inv          invocation
		args         []string
		want         string
	}{
		{"DATABASE_URL", "postgress", invocation{env: map[string]string{"DATABASE_URL": "postgress://app:s3cr3t-pw@127.0.0.1:1/app"}},
			[]string{"stats"}, "pgoutbox: invalid database URL postgress://app:xxxxx@127.0.0.1:1/app: unknown scheme \"postgress\": a PostgreSQL URL starts with postgres:// or postgresql://; check DATABASE_URL"},
		{"--database-url", "postgre", invocation{}, []string{"run", "--publisher", "discard", "--database-url", "postgre://app:s3cr3t-pw@127.0.0.1:1/app"},
			"pgoutbox: invalid database URL postgre://app:xxxxx@127.0.0.1:1/app: unknown scheme \"postgre\""},
		{"--listen-url", "jdbc:postgresql", invocation{env: map[string]string{"DATABASE_URL": "postgres://app@127.0.0.1:1/app"}},
			[]string{"run", "--publisher", "discard", "--listen-url", "jdbc:postgresql://app:s3cr3t-pw@127.0.0.1:1/app"},
			"unknown scheme \"jdbc:postgresql\": a PostgreSQL URL starts with postgres:// or postgresql://; check --listen-url"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := call(t, tc.inv, tc.args...)
			wantCode(t, r, ExitFailure)
			mustContain(t, r, "stderr", tc.want)
			if strings.Contains(r.stderr, "keyword/value") || strings.Contains(r.stdout+r.stderr, "s3cr3t") {
				t.Errorf("want the scheme named, without the password and without keyword/value:\n%s", r)
			}
		})
	}
}

// run fails on a database it cannot reach before it logs anything: the
// error is the one line it prints, not its settings first.
func TestRun_UnreachableDatabaseFailsBeforeTheSettingsLine(t *testing.T) {
	t.Parallel()
	r := call(t, invocation{env: map[string]string{"DATABASE_URL": "postgres://app@127.0.0.1:1/app"}}, "run", "--publisher", "stdout")
	wantCode(t, r, ExitFailure)
	mustContain(t, r, "stderr", "pgoutbox: cannot reach PostgreSQL at postgres://app@127.0.0.1:1/app")
	if strings.Contains(r.stderr, "run starting") || strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 {
		t.Errorf("want the error alone on stderr, before any settings line:\n%s", r)
	}
}

// unmigratedURL creates an empty database (no pgoutbox schema).
func unmigratedURL(t *testing.T) string {
	t.Helper()
	admin := pgtest.AdminURL(t)
	name := fmt.Sprintf("pgoutbox_cli_empty_%d", time.Now().UnixNano())
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn, err := pgx.Connect(ctx, admin)
		if err != nil {
			return
		}
		defer conn.Close(ctx)
		_, _ = conn.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
	})
	u, err := url.Parse(admin)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + name
	return u.String()
}

func TestDatabase_UnmigratedSchemaSaysRunMigrateUp(t *testing.T) {
	t.Parallel()
	env := map[string]string{"DATABASE_URL": unmigratedURL(t)}
	for _, cmd := range []string{"stats", "dead list", "dead retry 1", "purge --older-than 7d", "run --publisher discard",
		"enqueue --aggregate-type a --aggregate-id 1 --event-type E --payload {}"} {
		r := call(t, invocation{env: env}, strings.Fields(cmd)...)
		wantCode(t, r, ExitFailure)
		mustContain(t, r, "stderr", "pgoutbox: outbox table not usable: table outbox not found on the search_path (\"$user\", public): apply the pgoutbox migrations (pgoutbox migrate up")
	}
}

// migrationNames is the embedded migrations' file names, in version order
// (versions 1 to 5 at least, as the walk down below expects; a gap further
// on, a version not merged yet, is allowed).
func migrationNames(t *testing.T) []string {
	t.Helper()
	ents, err := fs.Glob(migrations.FS(), "*.sql")
	if err != nil || len(ents) < 5 {
		t.Fatalf("embedded migrations: %v (%d files)", err, len(ents))
	}
	sort.Strings(ents)
	for i, n := range ents[:5] {
		if !strings.HasPrefix(n, fmt.Sprintf("%05d_", i+1)) {
			t.Fatalf("migration %d is %s: versions must start 1, 2, ... 5", i+1, n)
		}
	}
	return ents
}

// versionOfName is the goose version of a migration file name.
func versionOfName(t *testing.T, name string) int {
	t.Helper()
	var v int
	if _, err := fmt.Sscanf(name, "%d_", &v); err != nil {
		t.Fatalf("migration %s: %v", name, err)
	}
	return v
}

func TestMigrate_UpStatusDown(t *testing.T) {
	t.Parallel()
	env := map[string]string{"DATABASE_URL": unmigratedURL(t)}

	names := migrationNames(t)
	latest := versionOfName(t, names[len(names)-1])

	r := call(t, invocation{env: env}, "migrate", "status")
	wantCode(t, r, ExitOK)
	mustContain(t, r, "stdout", fmt.Sprintf("version: 0 (this build: %d, %d pending: run `pgoutbox migrate up`)", latest, len(names)))
	for _, n := range names {
		mustContain(t, r, "stdout", "pending  -           "+n)
	}

	r = call(t, invocation{env: env}, "migrate", "up")
	wantCode(t, r, ExitOK)
	// An empty database gets the whole schema in one step, every version recorded.
	mustContain(t, r, "stdout", fmt.Sprintf("applied  schema.sql, the whole schema at version %d in one transaction", latest))
	mustContain(t, r, "stdout", fmt.Sprintf("schema at version %d", latest))
	if got := triggers(t, env["DATABASE_URL"]); got != "outbox_claimable_stamp:row:outbox_claimable_stamp,outbox_commit_order:row:outbox_commit_order,outbox_head_handoff:row:outbox_head_handoff" {
		t.Errorf("triggers at version %d: %q", latest, got)
	}

	r = call(t, invocation{env: env}, "migrate", "up")
	wantCode(t, r, ExitOK)
	mustContain(t, r, "stdout", fmt.Sprintf("already up to date: version %d", latest))

	r = call(t, invocation{env: env}, "migrate", "status")
	wantCode(t, r, ExitOK)
	mustContain(t, r, "stdout", fmt.Sprintf("version: %d (this build: %d, up to date)", latest, latest))
	if n := strings.Count(r.stdout, "applied  20"); n != len(names) {
		t.Errorf("want %d applied rows with a date, got %d\n%s", len(names), n, r)
	}

	// The schema works now.
	r = call(t, invocation{env: env}, "stats")
	wantCode(t, r, ExitOK)

	// Down to version 5, one migration at a time.
	for i := len(names) - 1; i >= 5; i-- {
		r = call(t, invocation{env: env}, "migrate", "down")
		wantCode(t, r, ExitOK)
		mustContain(t, r, "stdout", "rolled back  "+names[i])
		mustContain(t, r, "stdout", fmt.Sprintf("schema at version %d", versionOfName(t, names[i-1])))
	}

	r = call(t, invocation{env: env}, "migrate", "down")
	wantCode(t, r, ExitOK)
	mustContain(t, r, "stdout", "rolled back  00005_outbox_claim_window.sql")
	mustContain(t, r, "stdout", "schema at version 4")
	if got := triggers(t, env["DATABASE_URL"]); got != "outbox_commit_order:row:outbox_commit_order,outbox_notify:row:outbox_notify_throttled" {
		t.Errorf("triggers after rolling back 00005: %q", got)
	}

	r = call(t, invocation{env: env}, "migrate", "down")
	wantCode(t, r, ExitOK)
	mustContain(t, r, "stdout", "rolled back  00004_outbox_commit_order.sql")
	mustContain(t, r, "stdout", "schema at version 3")
	if got := triggers(t, env["DATABASE_URL"]); got != "outbox_notify:row:outbox_notify_throttled" {
		t.Errorf("triggers after rolling back 00004: %q", got)
	}

	r = call(t, invocation{env: env}, "migrate", "down")
	wantCode(t, r, ExitOK)
	mustContain(t, r, "stdout", "rolled back  00003_outbox_notify_throttle.sql")
	mustContain(t, r, "stdout", "schema at version 2")
	// 00003's Down put 00002's statement-level trigger back.
	if got := triggers(t, env["DATABASE_URL"]); got != "outbox_notify:statement:outbox_notify" {
		t.Errorf("triggers after rolling back 00003: %q", got)
	}

	r = call(t, invocation{env: env}, "stats")
	wantCode(t, r, ExitFailure)
	// The table check comes first: at version 2 the table lacks 00004's,
	// 00005's and 00010's columns, and the message says what to run.
	mustContain(t, r, "stderr", "lacks the columns seq, txid, head, prev_seq, sent_seq: apply the newer pgoutbox migrations (pgoutbox migrate up")

	r = call(t, invocation{env: env}, "migrate", "down")
	wantCode(t, r, ExitOK)
	mustContain(t, r, "stdout", "rolled back  00002_outbox_notify.sql")
	mustContain(t, r, "stdout", "schema at version 1")
	if got := triggers(t, env["DATABASE_URL"]); got != "" {
		t.Errorf("triggers after rolling back 00002: %q", got)
	}

	// Version 1 holds the table: dropping it needs confirmation.
	r = call(t, invocation{env: env}, "migrate", "down")
	wantCode(t, r, ExitFailure)
	mustContain(t, r, "stderr", "refusing to roll back to version 0, dropping the outbox table and every message in it without confirmation: stdin is not a terminal; pass --yes to confirm")
	yes := true
	r = call(t, invocation{env: env, terminal: &yes, stdin: "n\n"}, "migrate", "down")
	wantCode(t, r, ExitFailure)
	mustContain(t, r, "stderr", "roll back to version 0, dropping the outbox table and every message in it? [y/N]")
	mustContain(t, r, "stderr", "not confirmed; nothing changed")

	r = call(t, invocation{env: env}, "migrate", "status")
	mustContain(t, r, "stdout", "version: 1 ")

	r = call(t, invocation{env: env}, "migrate", "down", "--yes")
	wantCode(t, r, ExitOK)
	mustContain(t, r, "stdout", "rolled back  00001_outbox.sql")
	mustContain(t, r, "stdout", "schema at version 0")

	r = call(t, invocation{env: env}, "migrate", "down")
	wantCode(t, r, ExitOK)
	mustContain(t, r, "stdout", "nothing to roll back")

	r = call(t, invocation{env: env}, "migrate", "up")
	wantCode(t, r, ExitOK)
	r = call(t, invocation{env: env}, "migrate", "down", "--to", "1")
	wantCode(t, r, ExitOK)
	mustContain(t, r, "stdout", "schema at version 1")
}

// triggers lists the user triggers on outbox as name:row|statement:function.
func triggers(t *testing.T, url string) string {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var got string
	err = conn.QueryRow(ctx, `
SELECT coalesce(string_agg(tgname || ':' || CASE WHEN tgtype & 1 = 1 THEN 'row' ELSE 'statement' END || ':' || tgfoid::regproc, ',' ORDER BY tgname), '')
  FROM pg_trigger WHERE tgrelid = 'outbox'::regclass AND NOT tgisinternal`).Scan(&got)
	if err != nil {
		t.Fatal(err)
	}
	return got
}
