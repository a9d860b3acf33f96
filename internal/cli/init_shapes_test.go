package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// `--dir db` where db/migrations and db/queries are the application's own:
// the copies join the app's goose history (numbered after its latest), init
// prints no goose command that would run the app's migrations again under a
// second version table, the sqlc entry reads only pgoutbox's files, and the
// queries go to a folder no other entry reads.
func TestInit_DirOfTheAppsDbFolder(t *testing.T) {
	t.Parallel()
	for _, withMigDir := range []bool{false, true} {
		mig := appFolder(t, "00001_init.sql", "00002_users.sql", "00088_payroll.sql")
		root := filepath.Dir(filepath.Dir(mig))
		dbDir := filepath.Join(root, "db")
		writeFile(t, filepath.Join(dbDir, "queries", "employees.sql"), "-- name: EmployeeGet :one\nSELECT 1;\n")
		args := []string{"init", "--table", "hr_outbox", "--dir", dbDir, "--sqlc-root", root}
		if withMigDir {
			args = append(args, "--migrations-dir", mig)
		}
		r := call(t, invocation{}, args...)
		wantCode(t, r, ExitOK)
		if strings.Contains(r.stderr, "-table hr_outbox_migrations") {
			t.Errorf("init printed a goose command with a second version table for the app's folder:\n%s", r.stderr)
		}
		mustContain(t, r, "stderr", "as you apply your own migrations, with your goose command and version table: they are in your history, numbered after 00088_payroll.sql")
		mustContain(t, r, "stdout", "    schema:\n      - db/migrations/00089_hr_outbox.sql\n")
		mustContain(t, r, "stdout", "    queries: db/hr_outbox/queries\n")
		for _, app := range []string{"00001_init.sql", "00088_payroll.sql", "schema: db/migrations\n"} {
			if strings.Contains(r.stdout, app) {
				t.Errorf("the sqlc entry reads the app's %s:\n%s", app, r.stdout)
			}
		}
		if _, err := os.Stat(filepath.Join(dbDir, "queries", "claim.sql")); err == nil {
			t.Error("pgoutbox's queries went into the app's db/queries")
		}
		if _, err := os.Stat(filepath.Join(dbDir, "hr_outbox", "queries", "claim.sql")); err != nil {
			t.Errorf("pgoutbox's queries: %v", err)
		}
		// The app's own sqlc entry reads db/migrations: init says what it gains.
		mustContain(t, r, "stderr", "its package gains five types, the tables' models HrOutbox, HrOutboxAttempt, HrOutboxDelivered, HrOutboxRelay and HrOutboxSequenced (no query, no DBTX method)")
	}
}

// A folder of its own (the default) prints the commands for its own
// history, and says nothing about the app's package: it does not change.
func TestInit_FolderOfItsOwn(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	r := call(t, invocation{}, "init", "--table", "hr_outbox", "--dir", filepath.Join(root, "db", "outbox"), "--sqlc-root", root)
	wantCode(t, r, ExitOK)
	mustContain(t, r, "stdout", "    schema: db/outbox/migrations\n    queries: db/outbox/queries\n")
	mustContain(t, r, "stderr", "  $ sqlc generate\n  $ goose -dir "+filepath.Join(root, "db", "outbox", "migrations")+" -table hr_outbox_migrations postgres \"$DATABASE_URL\" up\n  $ pgoutbox migrate up --table hr_outbox   # or this alone")
	if strings.Contains(r.stderr, "gains two types") {
		t.Errorf("init warns about the app's package for a folder of its own:\n%s", r.stderr)
	}
}

// init --upgrade prints only what changed: nothing for an entry that reads
// a folder, the new list lines for an entry that lists files, and with
// --sqlc-config it edits the one entry, never adds a second.
func TestInitUpgrade_PrintsOnlyWhatChanged(t *testing.T) {
	t.Parallel()
	dropNewest := func(t *testing.T, dir string, n int) []string {
		t.Helper()
		names := listDir(t, dir)
		var dropped []string
		for _, name := range names[len(names)-n:] {
			if err := os.Remove(filepath.Join(dir, name)); err != nil {
				t.Fatal(err)
			}
			dropped = append(dropped, name)
		}
		return dropped
	}

	t.Run("folder of its own", func(t *testing.T) {
		t.Parallel()
		root := t.TempDir()
		args := []string{"init", "--table", "hr_outbox", "--dir", filepath.Join(root, "db", "outbox"), "--sqlc-root", root}
		wantCode(t, call(t, invocation{}, args...), ExitOK)
		dropNewest(t, filepath.Join(root, "db", "outbox", "migrations"), 1)
		r := call(t, invocation{}, append(args, "--upgrade")...)
		wantCode(t, r, ExitOK)
		if r.stdout != "" {
			t.Errorf("upgrade printed on stdout:\n%s", r.stdout)
		}
		mustContain(t, r, "stderr", "upgrade: 1 new migration(s)")
		mustContain(t, r, "stderr", "sqlc.yaml: no change: the entry's schema is the folder db/outbox/migrations")
	})

	t.Run("the app's folder", func(t *testing.T) {
		t.Parallel()
		mig := appFolder(t, "00001_init.sql", "00002_users.sql")
		root := filepath.Dir(filepath.Dir(mig))
		args := []string{"init", "--table", "hr_outbox", "--dir", filepath.Join(root, "db", "outbox"), "--migrations-dir", mig, "--sqlc-root", root}
		wantCode(t, call(t, invocation{}, args...), ExitOK)
		dropped := dropNewest(t, mig, 2)
		r := call(t, invocation{}, append(args, "--upgrade")...)
		wantCode(t, r, ExitOK)
		want := "      - db/migrations/" + dropped[0] + "\n      - db/migrations/" + dropped[1] + "\n"
		if r.stdout != want {
			t.Errorf("upgrade printed on stdout:\n%s\nwant only the new list lines:\n%s", r.stdout, want)
		}
		mustContain(t, r, "stderr", "sqlc.yaml: add the 2 line(s) printed on stdout to the schema list of your entry for db/outbox/queries")
	})

	t.Run("--sqlc-config", func(t *testing.T) {
		t.Parallel()
		mig := appFolder(t, "00001_init.sql", "00002_users.sql")
		root := filepath.Dir(filepath.Dir(mig))
		cfg := filepath.Join(root, "sqlc.yaml")
		appEntry := "version: \"2\"\n# the app's own entry\nsql:\n  - engine: postgresql\n    schema: db/migrations\n    queries: db/queries\n    gen:\n      go:\n        package: store\n        out: store\n"
		writeFile(t, cfg, appEntry)
		args := []string{"init", "--table", "hr_outbox", "--dir", filepath.Join(root, "db", "outbox"), "--migrations-dir", mig, "--sqlc-config", cfg}
		r := call(t, invocation{}, args...)
		wantCode(t, r, ExitOK)
		if r.stdout != "" {
			t.Errorf("init with --sqlc-config printed an entry too:\n%s", r.stdout)
		}
		b, _ := os.ReadFile(cfg)
		if !strings.HasPrefix(string(b), appEntry) || strings.Count(string(b), "queries: db/outbox/queries") != 1 {
			t.Fatalf("sqlc.yaml after init:\n%s", b)
		}
		// An older copy: its two newest migrations not yet there, nor in the entry.
		dropped := dropNewest(t, mig, 2)
		old := strings.NewReplacer("      - db/migrations/"+dropped[0]+"\n", "", "      - db/migrations/"+dropped[1]+"\n", "").Replace(string(b))
		writeFile(t, cfg, old)
		r = call(t, invocation{}, append(args, "--upgrade")...)
		wantCode(t, r, ExitOK)
		if r.stdout != "" {
			t.Errorf("upgrade printed on stdout:\n%s", r.stdout)
		}
		mustContain(t, r, "stderr", "added 2 file(s) to the schema list of the entry for db/outbox/queries")
		after, _ := os.ReadFile(cfg)
		if string(after) != string(b) {
			t.Errorf("sqlc.yaml after --upgrade:\n%s\nwant, as a fresh init writes it:\n%s", after, b)
		}
		// Once more: nothing new, nothing changed.
		r = call(t, invocation{}, append(args, "--upgrade")...)
		wantCode(t, r, ExitOK)
		if again, _ := os.ReadFile(cfg); string(again) != string(b) {
			t.Errorf("a second --upgrade changed sqlc.yaml:\n%s", again)
		}
		// A second init without --upgrade refuses instead of adding an entry.
		if err := os.RemoveAll(mig); err != nil {
			t.Fatal(err)
		}
		r = call(t, invocation{}, append(args, "--force")...)
		wantCode(t, r, ExitFailure)
		mustContain(t, r, "stderr", "it already has an entry for db/outbox/queries")
	})
}

// The sqlc.yaml edit keeps the user's layout: comments, other keys after
// sql:, list items at the key's own indentation.
func TestSqlcAddItem_KeepsTheLayout(t *testing.T) {
	item := "  - engine: postgresql\n    schema:\n      - db/m/00001_x.sql\n    queries: db/x/queries\n"
	cfg := "version: \"2\"\nsql:\n# mine\n- engine: postgresql\n  schema: db/migrations\n  queries: db/queries\n\nplugins: []\n"
	got, err := sqlcAddItem(cfg, item, "db/x/queries")
	if err != nil {
		t.Fatal(err)
	}
	want := "version: \"2\"\nsql:\n# mine\n- engine: postgresql\n  schema: db/migrations\n  queries: db/queries\n- engine: postgresql\n  schema:\n    - db/m/00001_x.sql\n  queries: db/x/queries\n\nplugins: []\n"
	if got != want {
		t.Errorf("got:\n%s\nwant:\n%s", got, want)
	}
	got, added, err := sqlcAddSchemaFiles(got, "db/x/queries", []string{"db/m/00001_x.sql", "db/m/00002_x.sql"})
	if err != nil || len(added) != 1 || !strings.Contains(got, "    - db/m/00001_x.sql\n    - db/m/00002_x.sql\n  queries: db/x/queries\n") {
		t.Errorf("schema files: %v %v\n%s", added, err, got)
	}
	if _, err := sqlcAddItem("version: \"2\"\n", item, "db/x/queries"); err == nil {
		t.Error("a config without sql: was accepted")
	}
}

// init --upgrade names a query file an earlier release's init wrote and
// this release no longer ships (the console's queries, now a package of
// pgoutbox's own), and leaves it in place: the application may call it.
func TestInitUpgrade_NamesQueryFilesNoLongerShipped(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "outbox")
	args := []string{"init", "--table", "hr_outbox", "--dir", dir}
	wantCode(t, call(t, invocation{}, args...), ExitOK)
	old := filepath.Join(dir, "queries", "console.sql")
	writeFile(t, old, "-- Copied by `pgoutbox init --table hr_outbox` from pgoutbox's queries/console.sql.\n"+
		"-- name: HrOutboxConsoleNow :one\nSELECT now()::timestamptz AS now;\n")
	r := call(t, invocation{}, append(args, "--upgrade")...)
	wantCode(t, r, ExitOK)
	mustContain(t, r, "stderr", old+": no longer part of pgoutbox's queries")
	if _, err := os.Stat(old); err != nil {
		t.Errorf("the file was not left in place: %v", err)
	}
	if strings.Contains(r.stderr, filepath.Join(dir, "queries", "claim.sql")+": no longer") {
		t.Errorf("a shipped file named as no longer shipped:\n%s", r.stderr)
	}
}

// init --upgrade names the queries a rewritten file no longer holds: a copy
// of an earlier release whose claim.sql and monitor.sql held the
// single-statement claim and the operators' monitoring reads.
func TestInitUpgrade_NamesQueriesTheRewrittenFilesNoLongerHold(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "outbox")
	args := []string{"init", "--table", "hr_outbox", "--dir", dir}
	wantCode(t, call(t, invocation{}, args...), ExitOK)
	for _, f := range []struct{ file, query string }{
		{"claim.sql", "HrOutboxClaim"}, {"monitor.sql", "HrOutboxCountByStatus"},
	} {
		p := filepath.Join(dir, "queries", f.file)
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		writeFile(t, p, string(b)+"\n-- "+f.query+" of an earlier release.\n-- name: "+f.query+" :one\nSELECT 1 AS one;\n")
	}
	r := call(t, invocation{}, append(args, "--upgrade")...)
	wantCode(t, r, ExitOK)
	mustContain(t, r, "stderr", "queries the rewritten files no longer hold (their methods go at your next sqlc generate; the relay never ran them, and `pgoutbox stats` and the CLI keep the operators' reads): HrOutboxClaim, HrOutboxCountByStatus\n")
	r = call(t, invocation{}, append(args, "--upgrade")...)
	wantCode(t, r, ExitOK)
	if strings.Contains(r.stderr, "no longer hold") {
		t.Errorf("a second upgrade names queries again:\n%s", r.stderr)
	}
}
