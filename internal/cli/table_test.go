package cli

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"

	"github.com/pgoutbox/pgoutbox/dispatcher"
	"github.com/pgoutbox/pgoutbox/migrations"
)

// Every command works on a table created under another name in a schema
// (issue 13, items 9 and 10): migrate, enqueue, stats, dead, purge and run
// delivering the event, while the plain outbox next to it is untouched.
func TestCommands_TableAndSchema(t *testing.T) {
	t.Parallel()
	d := newDB(t)
	env := d.env()
	tbl := []string{"--table", "hr_outbox", "--schema", "hr"}
	with := func(args ...string) []string { return append(args, tbl...) }

	r := call(t, invocation{env: env}, with("migrate", "up")...)
	wantCode(t, r, ExitOK)
	mustContain(t, r, "stdout", "applied  schema.sql, the whole schema at version")
	plain := d.enqueue(t, 1, "Plain", "p", false)[0]

	r = call(t, invocation{env: env}, with("enqueue", "--aggregate-type", "employee", "--aggregate-id", "e1", "--event-type", "Hired", "--payload", `{"n":1}`)...)
	wantCode(t, r, ExitOK)
	r = call(t, invocation{env: env}, with("stats")...)
	wantCode(t, r, ExitOK)
	mustContain(t, r, "stdout", "pending")
	r = call(t, invocation{env: env}, with("dead", "list")...)
	wantCode(t, r, ExitOK)

	b := start(t, invocation{env: env}, with("run", "--publisher", "discard", "--poll-interval", "50ms")...)
	eventually(t, 30*time.Second, "the hr.hr_outbox message to be done", func() bool {
		var n int
		_ = d.pool.QueryRow(context.Background(), "SELECT count(*) FROM hr.hr_outbox WHERE status = 'done'").Scan(&n)
		return n == 1
	})
	wantCode(t, b.stop(t), ExitOK)
	if s := d.status(t, plain); s != "pending" {
		t.Errorf("public.outbox row is %s", s)
	}
	r = call(t, invocation{env: env}, with("purge", "--older-than", "0s", "--yes")...)
	if r.code != ExitOK && r.code != ExitUsage {
		t.Errorf("purge: %s", r)
	}

	// Forgetting --schema: a clear refusal naming the table, the schema and
	// the search_path, never a second outbox.
	r = call(t, invocation{env: env}, "stats", "--table", "hr_outbox")
	wantCode(t, r, ExitFailure)
	mustContain(t, r, "stderr", "table hr_outbox not found on the search_path (\"$user\", public), but hr.hr_outbox exists: set the schema")
	r = call(t, invocation{env: env}, "migrate", "up", "--table", "hr_outbox")
	wantCode(t, r, ExitFailure)
	mustContain(t, r, "stderr", "but hr.hr_outbox exists: pass --schema")
	var n int
	if err := d.pool.QueryRow(context.Background(), "SELECT count(*) FROM pg_class WHERE relname = 'hr_outbox'").Scan(&n); err != nil || n != 1 {
		t.Errorf("%d tables named hr_outbox (%v): a second outbox was created", n, err)
	}
}

// Migrations applied through the application's own goose history (no
// pgoutbox_migrations): the commands accept the table, migrate status reads
// what the table has, and migrate up neither fails on "relation already
// exists" nor refuses when there is nothing to do.
func TestCommands_OutboxMigratedWithTheAppsGooseTable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := newDB(t)
	d.exec(t, dropOutboxSQL)
	dir := filepath.Join(t.TempDir(), "migrations")
	r := call(t, invocation{}, "init", "--table", "outbox", "--dir", filepath.Dir(dir), "--migrations-dir", dir)
	wantCode(t, r, ExitOK)
	entries, _ := os.ReadDir(dir)
	if len(entries) == 0 {
		t.Fatal("init wrote no migrations")
	}
	sqlDB := stdlib.OpenDBFromPool(d.pool)
	defer sqlDB.Close()
	p, err := goose.NewProvider(goose.DialectPostgres, sqlDB, os.DirFS(dir), goose.WithDisableGlobalRegistry(true)) // goose_db_version
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Up(ctx); err != nil {
		t.Fatal(err)
	}
	id := d.enqueue(t, 1, "E", "a", false)[0]
	r = call(t, invocation{env: d.env()}, "stats")
	wantCode(t, r, ExitOK)
	b := start(t, invocation{env: d.env()}, "run", "--publisher", "discard", "--poll-interval", "50ms")
	eventually(t, 30*time.Second, "the message to be done", func() bool { return d.status(t, id) == "done" })
	wantCode(t, b.stop(t), ExitOK)

	// migrate status tells the truth: every migration is there, recorded in
	// the app's history, not pgoutbox's.
	r = call(t, invocation{env: d.env()}, "migrate", "status")
	wantCode(t, r, ExitOK)
	mustContain(t, r, "stdout", "table outbox: migrated outside pgoutbox's version table pgoutbox_migrations (through your application's goose history, or by hand); goose version tables in this database: public.goose_db_version")
	files, _ := fs.Glob(migrations.FS(), "*.sql")
	mustContain(t, r, "stdout", fmt.Sprintf("%d of this build's %d migrations present (this build: %d, up to date)", len(files), len(files), migrations.Latest()))
	mustContain(t, r, "stdout", "applied  00001_outbox.sql\n")
	// (A state, not a word of a file name.)
	if regexp.MustCompile(`(?m)^(pending|missing|unknown)\s`).MatchString(r.stdout) || strings.Contains(r.stdout, "; missing ") {
		t.Errorf("migrate status on a table migrated by the app:\n%s", r.stdout)
	}
	// ... and migrate up does not refuse: there is nothing to do.
	r = call(t, invocation{env: d.env()}, "migrate", "up")
	wantCode(t, r, ExitOK)
	mustContain(t, r, "stdout", "already up to date: table outbox has every migration of this build")
	if strings.Contains(r.stderr, "already exists (SQLSTATE") {
		t.Errorf("migrate up ran the migrations: %s", r)
	}

	// A table one migration behind (the app has not copied the newest):
	// status names it, up says how to bring it in and applies nothing.
	last := files[len(files)-1] // this build's name of the newest migration (embedded names sort by version)
	if _, err := p.Down(ctx); err != nil {
		t.Fatal(err)
	}
	r = call(t, invocation{env: d.env()}, "migrate", "status")
	wantCode(t, r, ExitOK)
	mustContain(t, r, "stdout", "missing  "+last+"\n")
	mustContain(t, r, "stdout", "missing "+last+": copy them with `pgoutbox init --upgrade`")
	r = call(t, invocation{env: d.env()}, "migrate", "up")
	wantCode(t, r, ExitFailure)
	mustContain(t, r, "stderr", "missing "+last)
	if r.stdout != "" {
		t.Errorf("migrate up applied something: %s", r.stdout)
	}
	_ = dispatcher.TableDefault
}
