// Package adopttest adopts pgoutbox into the sample application
// examples/adopt as a user would: the README's two routes, command for
// command as README.md prints them (the commands are read from README.md, not
// copied here), and the shapes users try first with `pgoutbox init` (the
// app's db folder, its goose folder, a folder of its own, timestamped
// versions, the app's own version table), running every command init prints
// as printed; then the application's own code, tests and migrator, and
// pgoutbox init --upgrade on a copy made from an older release's files.
package adopttest

import (
	"bufio"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"

	"github.com/pgoutbox/pgoutbox/internal/doctest"
	"github.com/pgoutbox/pgoutbox/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func repoRoot() string { return doctest.Root() }

// tools are the pinned sqlc, this checkout's pgoutbox and goose (its
// Provider behind its command-line flags), built once (internal/doctest).
func tools(t *testing.T) (sqlc, pgoutbox string) {
	t.Helper()
	bin := doctest.Build(t).Bin
	return filepath.Join(bin, "sqlc"), filepath.Join(bin, "pgoutbox")
}

// sh runs one command of the route in dir and returns its stdout.
func sh(t *testing.T, dir string, env []string, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = append(append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off", "GOTOOLCHAIN=local", "CGO_ENABLED=0"), env...)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("in %s: %s %s: %v\nstdout:\n%s\nstderr:\n%s", dir, filepath.Base(name), strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.String()
}

// app copies examples/adopt into a temp folder.
func app(t *testing.T) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "adopt")
	doctest.CopyTree(t, filepath.Join(repoRoot(), "examples", "adopt"), dst)
	return dst
}

func writeFile(path, body string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(body), 0o644)
}

func mustWrite(t *testing.T, path, body string) {
	t.Helper()
	if err := writeFile(path, body); err != nil {
		t.Fatal(err)
	}
}

func cp(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	mustWrite(t, to, string(b))
}

// emptyDatabase creates a database with nothing in it (the application's
// own, before its migrations) and returns its URL.
func emptyDatabase(t *testing.T) string { return doctest.EmptyDatabase(t, "adopt") }

// gooseUp is `goose -dir DIR [-table TABLE] postgres "$DATABASE_URL" up`.
func gooseUp(t *testing.T, dbURL, dir, versionTable string) []string {
	t.Helper()
	ctx := context.Background()
	cfg, err := pgx.ParseConfig(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	sqlDB := stdlib.OpenDB(*cfg)
	defer sqlDB.Close()
	opts := []goose.ProviderOption{goose.WithDisableGlobalRegistry(true)}
	if versionTable != "" {
		opts = append(opts, goose.WithTableName(versionTable))
	}
	p, err := goose.NewProvider(goose.DialectPostgres, sqlDB, os.DirFS(dir), opts...)
	if err != nil {
		t.Fatalf("goose -dir %s: %v", dir, err)
	}
	res, err := p.Up(ctx)
	if err != nil {
		t.Fatalf("goose -dir %s up: %v", dir, err)
	}
	var applied []string
	for _, r := range res {
		applied = append(applied, filepath.Base(r.Source.Path))
	}
	return applied
}

// addSQLCEntry appends the list items of an sqlc.yaml fragment (as init
// prints it, or as the README shows it) under the app's "sql:".
func addSQLCEntry(t *testing.T, appDir, fragment string) {
	t.Helper()
	if i := strings.Index(fragment, "\nsql:\n"); i >= 0 {
		fragment = fragment[i+len("\nsql:\n"):]
	}
	b, err := os.ReadFile(filepath.Join(appDir, "sqlc.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	mustWrite(t, filepath.Join(appDir, "sqlc.yaml"), strings.TrimRight(string(b), "\n")+"\n"+fragment)
}

// relayProgram is a relay written against the application's generated
// outbox package: it enqueues an event in a business transaction
// (`enqueue`), or claims, "publishes" (prints) and finalizes, fenced, what is
// pending (`relay`). It also asserts at compile time that the application's
// hand-written mock satisfies the outbox package's DBTX: copying the queries
// added no CopyFrom.
const relayProgram = `package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"example.com/adopt/internal/testutil"
	"example.com/adopt/store"
	ob "example.com/adopt/{{PKGPATH}}"
)

var _ ob.DBTX = (*testutil.MockDBTX)(nil)

func main() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	switch os.Args[1] {
	case "enqueue":
		tx, err := pool.Begin(ctx)
		if err != nil {
			panic(err)
		}
		defer tx.Rollback(ctx)
		emp, err := store.New(tx).EmployeeCreate(ctx, store.EmployeeCreateParams{Name: os.Args[2]})
		if err != nil {
			panic(err)
		}
		id, err := ob.New(tx).{{CAMEL}}Enqueue(ctx, ob.{{CAMEL}}EnqueueParams{
			AggregateType: "employee", AggregateID: fmt.Sprint(emp.ID), EventType: os.Args[3],
			Payload: []byte(fmt.Sprintf("{\"name\":%q}", emp.Name)), // headers nil: stored as {}
		})
		if err != nil {
			panic(err)
		}
		if err := tx.Commit(ctx); err != nil {
			panic(err)
		}
		fmt.Println("enqueued", id)
	case "relay":
		q := ob.New(pool)
		// The relay's claim from a cursor that has handed out nothing yet:
		// the window from the empty snapshot to now.
		snap, err := q.{{CAMEL}}ClaimSnapshot(ctx)
		if err != nil {
			panic(err)
		}
		rows, err := q.{{CAMEL}}ClaimWindow(ctx, ob.{{CAMEL}}ClaimWindowParams{Snapshot: "1:1:", Upper: snap.Snapshot, Owner: "adopt-relay", Batch: 10, Lease: 30 * time.Second})
		if err != nil {
			panic(err)
		}
		for _, r := range rows {
			done, err := q.{{CAMEL}}MarkDoneMany(ctx, ob.{{CAMEL}}MarkDoneManyParams{
				Ids: []int64{r.ID}, LeaseVersions: []int64{r.LeaseVersion}, LeaseOwners: []string{"adopt-relay"}})
			if err != nil || len(done) != 1 {
				panic(fmt.Sprint("mark done: ", done, err))
			}
			fmt.Println("relayed", r.ID, r.EventType)
		}
	}
}
`

func writeRelay(t *testing.T, appDir, pkgPath, camel string) {
	t.Helper()
	src := strings.NewReplacer("{{PKGPATH}}", pkgPath, "{{CAMEL}}", camel).Replace(relayProgram)
	mustWrite(t, filepath.Join(appDir, "cmd", "relay", "main.go"), src)
}

// runUntil starts `pgoutbox run ...`, waits until its stdout has a line
// containing want, then stops it with SIGTERM and checks it exits 0.
func runUntil(t *testing.T, dir string, env []string, want string, name string, args ...string) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if strings.Contains(sc.Text(), want) {
				select {
				case found <- sc.Text():
				default:
				}
			}
		}
		close(found)
	}()
	select {
	case line, ok := <-found:
		if !ok {
			_ = cmd.Wait()
			t.Fatalf("pgoutbox %s exited before delivering %q:\n%s", strings.Join(args, " "), want, stderr.String())
		}
		t.Logf("pgoutbox run delivered: %s", line)
	case <-time.After(2 * time.Minute):
		_ = cmd.Process.Kill()
		t.Fatalf("pgoutbox %s delivered no %q in 2 minutes:\n%s", strings.Join(args, " "), want, stderr.String())
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	go func() { _, _ = io.Copy(io.Discard, out) }()
	if err := cmd.Wait(); err != nil {
		t.Errorf("pgoutbox run after SIGTERM: %v\n%s", err, stderr.String())
	}
}

func migrationNames(t *testing.T) []string {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(repoRoot(), "migrations", "0*.sql"))
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(names)
	return names
}

// An app that copied an older release's files by hand (00001-00002, before
// stamps, renumbered 00004-00005) and applied them: init --upgrade adds only
// the newer migrations after its latest, goose applies them, and the relay
// runs on the upgraded table.
func TestAdopt_UpgradeFromAnOlderRelease(t *testing.T) {
	t.Parallel()
	_, pgoutbox := tools(t)
	dir := app(t)
	dbURL := emptyDatabase(t)
	env := []string{"DATABASE_URL=" + dbURL}
	old := filepath.Join(repoRoot(), "internal", "cli", "testdata", "release-ec787be")
	cp(t, filepath.Join(old, "byhand", "00001_outbox.sql"), filepath.Join(dir, "db", "migrations", "00004_outbox.sql"))
	cp(t, filepath.Join(old, "byhand", "00002_outbox_notify.sql"), filepath.Join(dir, "db", "migrations", "00005_outbox_notify.sql"))
	queries, _ := filepath.Glob(filepath.Join(old, "init-hr_outbox", "queries", "*.sql"))
	for _, q := range queries { // the old release's queries, copied by hand (table outbox)
		b, _ := os.ReadFile(q)
		body := strings.NewReplacer("hr_outbox", "outbox", "HrOutbox", "Outbox").Replace(string(b))
		mustWrite(t, filepath.Join(dir, "db", "outbox", "queries", filepath.Base(q)), body[strings.Index(body, "\n")+1:])
	}
	if got := gooseUp(t, dbURL, filepath.Join(dir, "db", "migrations"), ""); len(got) != 5 {
		t.Fatalf("the old state: goose applied %v", got)
	}

	out := sh(t, dir, nil, pgoutbox, "init", "--table", "outbox", "--dir", "db/outbox", "--migrations-dir", "db/migrations", "--upgrade")
	// Only what changed: the new files for the entry's schema list, no
	// second entry.
	if !strings.HasPrefix(out, "      - db/migrations/00006_outbox_notify_throttle.sql\n") || strings.Contains(out, "00004_outbox.sql") || strings.Contains(out, "sql:") {
		t.Errorf("upgrade's stdout:\n%s", out)
	}
	applied := gooseUp(t, dbURL, filepath.Join(dir, "db", "migrations"), "")
	if want := len(migrationNames(t)) - 2; len(applied) != want || applied[0] != "00006_outbox_notify_throttle.sql" {
		t.Errorf("after init --upgrade goose applied %v, want the %d new migrations from 00006", applied, want)
	}
	claim, _ := os.ReadFile(filepath.Join(dir, "db", "outbox", "queries", "claim.sql"))
	if !strings.HasPrefix(string(claim), "-- Copied by `pgoutbox init --table outbox`") {
		t.Errorf("queries not rewritten by --upgrade:\n%.200s", claim)
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload, headers) VALUES ('employee', '1', 'EmployeeUpgraded', '{}', '{}')`); err != nil {
		t.Fatal(err)
	}
	runUntil(t, dir, env, `"event_type":"EmployeeUpgraded"`, pgoutbox, "run", "--publisher", "stdout", "--poll-interval", "200ms")
}
