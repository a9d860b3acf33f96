package cli

import (
	"context"
	"database/sql"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"

	"github.com/pgoutbox/pgoutbox/internal/pgtest"
	"github.com/pgoutbox/pgoutbox/migrations"
)

// appFolder writes an application's goose folder with the given files.
func appFolder(t *testing.T, names ...string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "db", "migrations")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		writeFile(t, filepath.Join(dir, n), "-- +goose Up\nCREATE TABLE app_"+strings.TrimSuffix(n, ".sql")[len(strings.SplitN(n, "_", 2)[0])+1:]+" (id int);\n-- +goose Down\nSELECT 1;\n")
	}
	return dir
}

func listDir(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	return names
}

// The app's goose folder already starts at 00001 (issue 13, items 1 and 8):
// init numbers after its latest, never a duplicate version.
func TestInit_NumbersAfterTheAppsLatestMigration(t *testing.T) {
	t.Parallel()
	mig := appFolder(t, "00001_init.sql", "00002_users.sql", "00088_payroll.sql")
	root := filepath.Dir(filepath.Dir(mig))
	r := call(t, invocation{}, "init", "--table", "hr_outbox", "--dir", filepath.Join(root, "db", "outbox"),
		"--migrations-dir", mig, "--sqlc-root", root)
	wantCode(t, r, ExitOK)
	want := []string{"00001_init.sql", "00002_users.sql", "00088_payroll.sql",
		"00089_hr_outbox.sql", "00090_hr_outbox_notify.sql", "00091_hr_outbox_notify_throttle.sql"}
	if got := listDir(t, mig); strings.Join(got, " ") != strings.Join(want[:3], " ")+" "+strings.Join(pgoutboxNames("00000", 89, "hr_outbox"), " ") {
		t.Errorf("folder after init: %v, want %v", got, want)
	}
	// The sqlc entry's schema is only pgoutbox's files: no app models.
	mustContain(t, r, "stdout", "    schema:\n      - db/migrations/00089_hr_outbox.sql\n      - db/migrations/00090_hr_outbox_notify.sql\n")
	if strings.Contains(r.stdout, "00001_init.sql") {
		t.Errorf("the sqlc entry names the app's migrations:\n%s", r.stdout)
	}
	// Applied by the app's own command and version table: init prints no
	// goose command of its own for the app's folder.
	mustContain(t, r, "stderr", "then apply "+mig+" as you apply your own migrations, with your goose command and version table: they are in your history, numbered after 00088_payroll.sql.")
	if strings.Contains(r.stderr, "goose -dir") {
		t.Errorf("init printed a goose command for the app's folder:\n%s", r.stderr)
	}
	b, err := os.ReadFile(filepath.Join(mig, "00090_hr_outbox_notify.sql"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(b), "-- pgoutbox-migration: 00002_outbox_notify.sql\n") {
		t.Errorf("copy carries no version stamp:\n%.200s", b)
	}

	// Again without --upgrade: refused, nothing written.
	r = call(t, invocation{}, "init", "--table", "hr_outbox", "--dir", filepath.Join(root, "db", "outbox"), "--migrations-dir", mig)
	wantCode(t, r, ExitFailure)
	mustContain(t, r, "stderr", "already holds pgoutbox migrations")
	// --upgrade with nothing new: no new migration.
	r = call(t, invocation{}, "init", "--table", "hr_outbox", "--dir", filepath.Join(root, "db", "outbox"), "--migrations-dir", mig, "--upgrade")
	wantCode(t, r, ExitOK)
	mustContain(t, r, "stderr", "upgrade: 0 new migration(s)")
	if got := listDir(t, mig); len(got) != 3+len(pgoutboxNames("00000", 89, "hr_outbox")) {
		t.Errorf("upgrade with nothing new changed the folder: %v", got)
	}
}

// pgoutboxNames is what init names this build's migrations from version v.
func pgoutboxNames(pad string, v int, table string) []string {
	names, _ := fs.Glob(migrations.FS(), "*.sql")
	sort.Strings(names)
	var out []string
	for _, n := range names {
		m := migrationFileRe.FindStringSubmatch(n)
		out = append(out, padVersion(pad, v)+"_"+table+m[2]+".sql")
		v++
	}
	return out
}

// pgoutboxOwnNames are the names of this build's migrations copied for
// table into a folder of their own: each keeps this build's version.
func pgoutboxOwnNames(table string) []string {
	names, _ := fs.Glob(migrations.FS(), "*.sql")
	sort.Strings(names)
	var out []string
	for _, n := range names {
		m := migrationFileRe.FindStringSubmatch(n)
		out = append(out, m[1]+"_"+table+m[2]+".sql")
	}
	return out
}

func padVersion(pad string, v int) string {
	s := pad + itoa(v)
	return s[len(s)-len(pad):]
}

func itoa(v int) string {
	if v == 0 {
		return "0"
	}
	var b []byte
	for ; v > 0; v /= 10 {
		b = append([]byte{byte('0' + v%10)}, b...)
	}
	return string(b)
}

func TestInit_TimestampedFolder(t *testing.T) {
	t.Parallel()
	mig := appFolder(t, "20240101120000_init.sql", "20250301090000_users.sql")
	r := call(t, invocation{}, "init", "--table", "hr_outbox", "--dir", filepath.Join(t.TempDir(), "o"), "--migrations-dir", mig)
	wantCode(t, r, ExitOK)
	got := listDir(t, mig)
	if got[2] != "20250301090001_hr_outbox.sql" || got[3] != "20250301090002_hr_outbox_notify.sql" {
		t.Errorf("timestamped folder after init: %v", got)
	}
}

func TestInit_StartVersionAndRefusals(t *testing.T) {
	t.Parallel()
	mig := appFolder(t, "00001_init.sql", "00007_users.sql")
	out := filepath.Join(t.TempDir(), "o")
	r := call(t, invocation{}, "init", "--table", "hr_outbox", "--dir", out, "--migrations-dir", mig, "--start-version", "7")
	wantCode(t, r, ExitFailure)
	mustContain(t, r, "stderr", "--start-version 7 is not above the highest goose version already in "+mig+" (7, 00007_users.sql)")
	if got := listDir(t, mig); len(got) != 2 {
		t.Errorf("a refused init wrote files: %v", got)
	}
	r = call(t, invocation{}, "init", "--table", "hr_outbox", "--dir", out, "--migrations-dir", mig, "--start-version", "100")
	wantCode(t, r, ExitOK)
	if got := listDir(t, mig); got[2] != "00100_hr_outbox.sql" {
		t.Errorf("--start-version 100: %v", got)
	}

	bad := appFolder(t, "00001_init.sql")
	writeFile(t, filepath.Join(bad, "seed.sql"), "INSERT INTO x VALUES (1);\n")
	r = call(t, invocation{}, "init", "--table", "hr_outbox", "--dir", out, "--migrations-dir", bad)
	wantCode(t, r, ExitFailure)
	mustContain(t, r, "stderr", "seed.sql has no goose version prefix")

	// A copy made for another table is not upgraded under a new name.
	r = call(t, invocation{}, "init", "--table", "payroll_outbox", "--dir", out, "--migrations-dir", mig, "--upgrade")
	wantCode(t, r, ExitFailure)
	mustContain(t, r, "stderr", "was copied for the table hr_outbox, not payroll_outbox")
}

// Every migration in migrations/ carries the stamp of its own name, so a
// copy made by hand says which pgoutbox migration it is.
func TestMigrations_CarryTheirVersionStamp(t *testing.T) {
	t.Parallel()
	names, _ := fs.Glob(migrations.FS(), "*.sql")
	for _, n := range names {
		b, _ := fs.ReadFile(migrations.FS(), n)
		if m := stampRe.FindSubmatch(b); m == nil || string(m[1]) != n {
			t.Errorf("migrations/%s: first line must be \"-- pgoutbox-migration: %s\"", n, n)
		}
	}
}

func copyTree(t *testing.T, from, to string) {
	t.Helper()
	err := filepath.WalkDir(from, func(p string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(from, p)
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if err := os.MkdirAll(filepath.Dir(filepath.Join(to, rel)), 0o755); err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(to, rel), b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// An app that ran an older release's init (00001-00002, no stamps) gets
// only the migrations new since, numbered after its latest (issue 13,
// item 12); then the whole folder applies with goose.
func TestInitUpgrade_FromAnOlderReleasesInitCopy(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "outbox")
	copyTree(t, filepath.Join("testdata", "release-ec787be", "init-hr_outbox"), dir)
	r := call(t, invocation{}, "init", "--table", "hr_outbox", "--dir", dir, "--upgrade")
	wantCode(t, r, ExitOK)
	newOnes := len(pgoutboxNames("000", 1, "x")) - 2
	mustContain(t, r, "stderr", "upgrade: "+itoa(newOnes)+" new migration(s)")
	got := listDir(t, filepath.Join(dir, "migrations"))
	want := pgoutboxOwnNames("hr_outbox")
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("after upgrade: %v, want %v", got, want)
	}
	claim, _ := os.ReadFile(filepath.Join(dir, "queries", "claim.sql"))
	if !strings.Contains(string(claim), "-- Copied by `pgoutbox init --table hr_outbox`") {
		t.Errorf("queries not rewritten")
	}
	applyGoose(t, filepath.Join(dir, "migrations"), "pgoutbox_migrations", "hr_outbox")
}

// The README's by-hand route, from an older release, renumbered after the
// app's own migrations and applied with the app's version table.
func TestInitUpgrade_FromAnOlderReleasesCopyByHand(t *testing.T) {
	t.Parallel()
	mig := appFolder(t, "00001_init.sql", "00002_users.sql")
	for i, n := range []string{"00001_outbox.sql", "00002_outbox_notify.sql"} {
		b, err := os.ReadFile(filepath.Join("testdata", "release-ec787be", "byhand", n))
		if err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(mig, padVersion("00000", 3+i)+n[5:]), string(b))
	}
	r := call(t, invocation{}, "init", "--table", "outbox", "--schema", "", "--dir", filepath.Join(t.TempDir(), "o"),
		"--migrations-dir", mig, "--upgrade")
	wantCode(t, r, ExitOK)
	got := listDir(t, mig)
	if got[4] != "00005_outbox_notify_throttle.sql" {
		t.Errorf("after upgrade: %v", got)
	}
	applyGoose(t, mig, "goose_db_version", "outbox")
}

// applyGoose applies dir with goose's Provider (the library form of the
// goose CLI command init prints) on a fresh database with no outbox, and
// checks the table and its commit-order trigger exist.
func applyGoose(t *testing.T, dir, versionTable, table string) {
	t.Helper()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	if _, err := pool.Exec(ctx, dropOutboxSQL); err != nil {
		t.Fatal(err)
	}
	sqlDB := stdlib.OpenDBFromPool(pool)
	t.Cleanup(func() { _ = sqlDB.Close() })
	p, err := goose.NewProvider(goose.DialectPostgres, sqlDB, os.DirFS(dir),
		goose.WithTableName(versionTable), goose.WithDisableGlobalRegistry(true))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Up(ctx); err != nil {
		t.Fatalf("goose up %s: %v", dir, err)
	}
	checkOutbox(t, sqlDB, table)
}

var triggerRe = regexp.MustCompile(`_commit_order$`)

// dropOutboxSQL removes what pgoutbox's migrations created in public (the
// table, its functions and tables, the version table) from a test database.
const dropOutboxSQL = `DROP TABLE outbox CASCADE; DROP TABLE ` + migrations.VersionTable + `;
DO $$
DECLARE
    o text;
BEGIN
    FOR o IN SELECT p.oid::regprocedure::text FROM pg_proc AS p
              WHERE p.pronamespace = 'public'::regnamespace AND p.proname LIKE 'outbox\_%' LOOP
        EXECUTE 'DROP FUNCTION ' || o;
    END LOOP;
    FOR o IN SELECT c.oid::regclass::text FROM pg_class AS c
              WHERE c.relnamespace = 'public'::regnamespace AND c.relkind = 'r' AND c.relname LIKE 'outbox\_%' LOOP
        EXECUTE 'DROP TABLE ' || o;
    END LOOP;
END;
$$`

func checkOutbox(t *testing.T, sqlDB *sql.DB, table string) {
	t.Helper()
	var trig string
	err := sqlDB.QueryRow("SELECT tgname FROM pg_trigger WHERE tgrelid = to_regclass($1) AND NOT tgisinternal AND tgname LIKE '%\\_commit\\_order'", table).Scan(&trig)
	if err != nil || !triggerRe.MatchString(trig) {
		t.Errorf("table %s after goose up: trigger %q, %v", table, trig, err)
	}
}

// --schema: the copy creates its schema and qualifies the table and its
// functions, so it applies next to an existing public.outbox (issue 13,
// item 10).
func TestInit_SchemaAppliesNextToPublicOutbox(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "outbox")
	r := call(t, invocation{}, "init", "--table", "hr_outbox", "--schema", "hr", "--dir", dir)
	wantCode(t, r, ExitOK)
	mustContain(t, r, "stderr", "  $ pgoutbox migrate up --table hr_outbox --schema hr\n  $ goose -dir "+filepath.Join(dir, "migrations")+" -table hr.hr_outbox_migrations postgres \"$DATABASE_URL\" up")
	mustContain(t, r, "stderr", "pgoutbox run --table hr_outbox --schema hr")
	b, err := os.ReadFile(filepath.Join(dir, "migrations", "00001_hr_outbox.sql"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"CREATE SCHEMA IF NOT EXISTS hr;", "CREATE TABLE hr.hr_outbox", "CREATE INDEX hr_outbox_pending ON hr.hr_outbox"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("00001 lacks %q", want)
		}
	}
	ctx := context.Background()
	pool := pgtest.NewPool(t) // has public.outbox
	if _, err := pool.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS hr"); err != nil {
		t.Fatal(err)
	}
	sqlDB := stdlib.OpenDBFromPool(pool)
	t.Cleanup(func() { _ = sqlDB.Close() })
	p, err := goose.NewProvider(goose.DialectPostgres, sqlDB, os.DirFS(filepath.Join(dir, "migrations")),
		goose.WithTableName("hr.hr_outbox_migrations"), goose.WithDisableGlobalRegistry(true))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Up(ctx); err != nil {
		t.Fatalf("goose up: %v", err)
	}
	checkOutbox(t, sqlDB, "hr.hr_outbox")
	var n int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM pg_proc WHERE proname LIKE 'hr_outbox%' AND pronamespace = 'hr'::regnamespace").Scan(&n); err != nil || n == 0 {
		t.Errorf("trigger functions not in schema hr: %d, %v", n, err)
	}
	// 00014 dropped the index of 00001 in schema hr (DROP INDEX ... IF
	// EXISTS of an unqualified name would have found nothing and kept it).
	var dropped bool
	if err := pool.QueryRow(ctx, "SELECT to_regclass('hr.hr_outbox_pending') IS NULL AND to_regclass('hr.hr_outbox_pending_txid') IS NOT NULL").Scan(&dropped); err != nil || !dropped {
		t.Errorf("hr.hr_outbox_pending not dropped by 00014 (%v)", err)
	}
}
