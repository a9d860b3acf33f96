package cli

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"

	"github.com/pgoutbox/pgoutbox/internal/sqlrename"
	"github.com/pgoutbox/pgoutbox/migrations"
	"github.com/pgoutbox/pgoutbox/queries"
)

func TestInit_RefusesToOverwriteUnlessForce(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	args := []string{"init", "--table", "billing_outbox", "--dir", dir, "--sqlc-root", dir}
	r := call(t, invocation{}, args...)
	wantCode(t, r, ExitOK)
	claim := filepath.Join(dir, "queries", "claim.sql")
	if err := os.WriteFile(claim, []byte("-- my edits\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r = call(t, invocation{}, args...)
	wantCode(t, r, ExitFailure)
	mustContain(t, r, "stderr", "pgoutbox: init: "+filepath.Join(dir, "migrations")+" already holds pgoutbox migrations: 00001_billing_outbox.sql (00001_outbox.sql)")
	mustContain(t, r, "stderr", "run the same command with --upgrade")
	if b, _ := os.ReadFile(claim); string(b) != "-- my edits\n" {
		t.Errorf("a refused init changed %s", claim)
	}
	r = call(t, invocation{}, append(args, "--force")...)
	wantCode(t, r, ExitOK)
	if b, _ := os.ReadFile(claim); !strings.Contains(string(b), "-- name: BillingOutboxReap :execrows") {
		t.Errorf("--force did not rewrite %s", claim)
	}
	mustContain(t, r, "stdout", "    schema: migrations\n    queries: queries\n")
	mustContain(t, r, "stderr", fmt.Sprintf("wrote %d files for table billing_outbox:", embeddedFiles()))

	long := strings.Repeat("x", 50)
	r = call(t, invocation{}, "init", "--table", long, "--dir", t.TempDir())
	wantCode(t, r, ExitFailure)
	mustContain(t, r, "stderr", "is too long: the derived name "+long+"_lease_consistent is 67 bytes and PostgreSQL truncates names at 63; use at most 46 characters")

	r = call(t, invocation{}, "init", "--table", "billing_outbox", "--dir", t.TempDir(), "--package", "Bad-Name")
	wantCode(t, r, ExitUsage)
	mustContain(t, r, "stderr", `invalid Go package name "Bad-Name"`)
}

// naiveLeftovers is an independent check of the rename: outside comments no
// identifier may be outbox or start with outbox_, and nowhere may a name
// start with Outbox followed by a capital (query names) or outbox_ (index,
// trigger, function names), except the new names.
func naiveLeftovers(text string) []string {
	var found []string
	code := regexp.MustCompile(`(?i)(^|[^a-z0-9_])(outbox)([^a-z0-9_]|$)`)
	derived := regexp.MustCompile(`(^|[^A-Za-z0-9_])(outbox_[a-z0-9_]*|Outbox[A-Z][A-Za-z0-9]*)`)
	for _, line := range strings.Split(text, "\n") {
		if m := derived.FindAllStringSubmatch(line, -1); m != nil {
			for _, g := range m {
				found = append(found, g[2])
			}
		}
		if i := strings.Index(line, "--"); i >= 0 {
			line = line[:i]
		}
		if code.MatchString(line) {
			found = append(found, strings.TrimSpace(line))
		}
	}
	return found
}

// TestInit_GeneratedCodeCompilesMigratesAndClaims runs the copy workflow end
// to end: init into a temp project, sqlc generate with the printed sqlc.yaml
// entry, go build the generated package in its own module, apply the
// migrations next to pgoutbox's own outbox table (a missed rename collides
// there), and run the generated enqueue, claim, finalize and notify.
func TestInit_GeneratedCodeCompilesMigratesAndClaims(t *testing.T) {
	t.Parallel()
	goBin := goTool(t)
	modRoot := moduleRoot(t)
	tmp := t.TempDir()
	proj := filepath.Join(tmp, "proj")
	outDir := filepath.Join(proj, "internal", "outbox")

	r := call(t, invocation{}, "init", "--table", "billing_outbox", "--dir", outDir, "--sqlc-root", proj)
	wantCode(t, r, ExitOK)
	mustContain(t, r, "stdout", "    schema: internal/outbox/migrations\n    queries: internal/outbox/queries\n")
	mustContain(t, r, "stdout", "        sql_package: pgx/v5\n")
	mustContain(t, r, "stdout", "          - db_type: pg_catalog.interval\n            go_type: time.Duration\n")
	mustContain(t, r, "stdout", "          - db_type: pg_catalog.interval\n            go_type: time.Duration\n")
	mustContain(t, r, "stdout", "          - db_type: timestamptz\n            go_type: time.Time\n")
	if err := os.WriteFile(filepath.Join(proj, "sqlc.yaml"), []byte(r.stdout), 0o644); err != nil {
		t.Fatal(err)
	}

	// Static checks: nothing derived from outbox is left.
	written := map[string]string{}
	err := filepath.WalkDir(outDir, func(p string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		written[p] = string(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(written) != embeddedFiles() {
		t.Errorf("wrote %d files, want %d (every migration and query file)", len(written), embeddedFiles())
	}
	names := 0
	for p, text := range written {
		if left := naiveLeftovers(text); len(left) > 0 {
			t.Errorf("%s still names the old table: %q", p, left)
		}
		if left := sqlrename.Leftovers(text, "billing_outbox", "BillingOutbox"); len(left) > 0 {
			t.Errorf("%s: leftovers %q", p, left)
		}
		names += strings.Count(text, "-- name: BillingOutbox")
	}
	wantNames := 0
	entries, _ := fs.Glob(queries.FS, "*.sql")
	for _, e := range entries {
		b, _ := fs.ReadFile(queries.FS, e)
		wantNames += strings.Count(string(b), "-- name: Outbox")
	}
	if names != wantNames || names == 0 {
		t.Errorf("%d renamed query names, want %d", names, wantNames)
	}
	if _, ok := written[filepath.Join(outDir, "migrations", "00002_billing_outbox_notify.sql")]; !ok {
		t.Errorf("migration file names not renamed: %v", written)
	}

	// sqlc generate with the printed entry.
	sqlc := filepath.Join(tmp, "sqlc")
	runCmd(t, modRoot, []string{"CGO_ENABLED=0"}, goBin, "build", "-modfile=tools.mod", "-o", sqlc, "github.com/sqlc-dev/sqlc/cmd/sqlc")
	runCmd(t, proj, nil, sqlc, "generate")
	querier, err := os.ReadFile(filepath.Join(outDir, "billingoutbox", "querier.go"))
	if err != nil {
		t.Fatalf("sqlc did not generate the package: %v", err)
	}
	for _, want := range []string{"BillingOutboxClaimWindow(ctx context.Context, arg BillingOutboxClaimWindowParams) ([]BillingOutboxClaimWindowRow, error)",
		"BillingOutboxEnqueue(ctx context.Context, arg BillingOutboxEnqueueParams) (int64, error)"} {
		if !strings.Contains(string(querier), want) {
			t.Errorf("querier.go lacks %q", want)
		}
	}
	// Copying queries/ must not add CopyFrom to the app's DBTX (issue 13,
	// item 4): the :copyfrom query lives in queries/copyfrom, opt-in.
	dbgo, err := os.ReadFile(filepath.Join(outDir, "billingoutbox", "db.go"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(dbgo), "CopyFrom") {
		t.Errorf("the generated DBTX has CopyFrom:\n%s", dbgo)
	}

	// A module of its own that uses the generated package.
	gomod, err := os.ReadFile(filepath.Join(modRoot, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	pgxVersion := regexp.MustCompile(`(?m)^\s*github\.com/jackc/pgx/v5 (v\S+)`).FindSubmatch(gomod)
	goVersion := regexp.MustCompile(`(?m)^go (\S+)`).FindSubmatch(gomod)
	if pgxVersion == nil || goVersion == nil {
		t.Fatal("cannot read the pgx and go versions from go.mod")
	}
	writeFile(t, filepath.Join(proj, "go.mod"), "module example.com/proj\n\ngo "+string(goVersion[1])+
		"\n\nrequire github.com/jackc/pgx/v5 "+string(pgxVersion[1])+"\n")
	gosum, err := os.ReadFile(filepath.Join(modRoot, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(proj, "go.sum"), string(gosum))
	writeFile(t, filepath.Join(proj, "cmd", "check", "main.go"), checkProgram)
	goEnv := []string{"GOFLAGS=-mod=mod", "GOWORK=off", "CGO_ENABLED=0"}
	runCmd(t, proj, goEnv, goBin, "build", "./...")

	// Migrate next to pgoutbox's own table: a name the rename missed
	// (index, trigger, function, constraint) collides with it.
	d := newDB(t)
	ctx := context.Background()
	migs, _ := filepath.Glob(filepath.Join(outDir, "migrations", "*.sql"))
	for _, m := range migs {
		up, _ := gooseSections(t, m)
		head, _ := os.ReadFile(m)
		for _, stmt := range gooseStatements(up, strings.Contains(string(head), "-- +goose NO TRANSACTION")) {
			if _, err := d.pool.Exec(ctx, stmt); err != nil {
				t.Fatalf("apply %s: %v", filepath.Base(m), err)
			}
		}
	}
	out := runCmd(t, proj, goEnv, goBin, "run", "./cmd/check", d.url)
	if strings.TrimSpace(out) != "ok" {
		t.Fatalf("check program: %s", out)
	}
	var n int
	if err := d.pool.QueryRow(ctx, "SELECT count(*) FROM billing_outbox WHERE status = 'done'").Scan(&n); err != nil || n != 1 {
		t.Errorf("billing_outbox done rows = %d (%v), want 1", n, err)
	}
	// Only the check's own shared-transaction row may be in pgoutbox's table.
	if c := d.count(t, "event_type <> 'SharedTransaction'"); c != 0 {
		t.Errorf("pgoutbox's own outbox got %d rows", c)
	}
	// The commit-order trigger, its function and sequence were renamed.
	var renamed bool
	if err := d.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_trigger WHERE tgname = 'billing_outbox_commit_order' AND tgrelid = 'billing_outbox'::regclass)
	    AND to_regproc('billing_outbox_commit_order') IS NOT NULL AND to_regclass('billing_outbox_seq') IS NOT NULL
	    AND to_regclass('billing_outbox_ordered_head') IS NOT NULL
	    AND NOT EXISTS (SELECT 1 FROM billing_outbox WHERE ordered AND seq IS NULL)
	    AND EXISTS (SELECT 1 FROM billing_outbox WHERE ordered)`).Scan(&renamed); err != nil || !renamed {
		t.Errorf("billing_outbox commit order objects missing or rows unsequenced (%v)", err)
	}
	// Down, newest first, leaves pgoutbox's table alone.
	for i := len(migs) - 1; i >= 0; i-- {
		_, down := gooseSections(t, migs[i])
		head, _ := os.ReadFile(migs[i])
		for _, stmt := range gooseStatements(down, strings.Contains(string(head), "-- +goose NO TRANSACTION")) {
			if _, err := d.pool.Exec(ctx, stmt); err != nil {
				t.Fatalf("down %s: %v", filepath.Base(migs[i]), err)
			}
		}
	}
	var exists bool
	if err := d.pool.QueryRow(ctx, "SELECT to_regclass('billing_outbox') IS NULL AND to_regclass('outbox') IS NOT NULL AND to_regclass('outbox_pending_txid') IS NOT NULL AND to_regclass('outbox_seq') IS NOT NULL AND EXISTS (SELECT 1 FROM pg_trigger WHERE tgname = 'outbox_head_handoff') AND EXISTS (SELECT 1 FROM pg_trigger WHERE tgname = 'outbox_commit_order')").Scan(&exists); err != nil || !exists {
		t.Errorf("after the copied Down sections pgoutbox's own schema is damaged (%v)", err)
	}
}

// checkProgram exercises the generated package against a database.
const checkProgram = `package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/jackc/pgx/v5"

	"example.com/proj/internal/outbox/billingoutbox"
)

func main() {
	if err := run(); err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	fmt.Println("ok")
}

func run() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	listen, err := pgx.Connect(ctx, os.Args[1])
	if err != nil {
		return err
	}
	defer listen.Close(ctx)
	if _, err := listen.Exec(ctx, "LISTEN billing_outbox"); err != nil {
		return err
	}
	// As an idle relay: producers notify only while one holds the idle lock.
	if r, err := billingoutbox.New(listen).BillingOutboxWakeIdle(ctx); err != nil || !r.Held {
		return fmt.Errorf("the idle lock: %+v, %v", r, err)
	}
	conn, err := pgx.Connect(ctx, os.Args[1])
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	q := billingoutbox.New(conn)

	var lease time.Duration = 30 * time.Second // the interval override
	var at *time.Time                           // the nullable timestamptz override
	id, err := q.BillingOutboxEnqueue(ctx, billingoutbox.BillingOutboxEnqueueParams{
		AggregateType: "invoice", AggregateID: "i-1", EventType: "InvoicePaid",
		Payload: []byte("{\"amount\": 1}"), Headers: []byte("{}"), AvailableAt: at,
	})
	if err != nil {
		return fmt.Errorf("enqueue: %w", err)
	}
	n, err := listen.WaitForNotification(ctx)
	if err != nil || n.Channel != "billing_outbox" {
		return fmt.Errorf("no notification on billing_outbox after insert: %v", err)
	}
	now, err := q.BillingOutboxClaimSnapshot(ctx)
	if err != nil {
		return fmt.Errorf("claim snapshot: %w", err)
	}
	rows, err := q.BillingOutboxClaimWindow(ctx, billingoutbox.BillingOutboxClaimWindowParams{
		Snapshot: "1:1:", Upper: now.Snapshot, Owner: "check", Batch: 10, Lease: lease,
	})
	if err != nil {
		return fmt.Errorf("claim: %w", err)
	}
	if len(rows) != 1 || rows[0].ID != id || rows[0].Attempts != 1 {
		return fmt.Errorf("claim returned %+v, want message %d", rows, id)
	}
	var created time.Time = rows[0].CreatedAt
	_ = created
	done, err := q.BillingOutboxMarkDoneMany(ctx, billingoutbox.BillingOutboxMarkDoneManyParams{
		Ids: []int64{id}, LeaseVersions: []int64{rows[0].LeaseVersion}, LeaseOwners: []string{"check"}})
	if err != nil || len(done) != 1 {
		return fmt.Errorf("mark done: %v %v", done, err)
	}
	var status string
	if err := conn.QueryRow(ctx, "SELECT status FROM billing_outbox WHERE id = $1", id).Scan(&status); err != nil || status != "done" {
		return fmt.Errorf("status after mark done: %q %v", status, err)
	}
	if err := q.BillingOutboxNotify(ctx); err != nil {
		return fmt.Errorf("notify: %w", err)
	}
	if n, err := listen.WaitForNotification(ctx); err != nil || n.Channel != "billing_outbox" {
		return fmt.Errorf("no notification from BillingOutboxNotify: %v", err)
	}
	// One transaction inserting into both tables wakes both channels: each
	// table has its own idle lock and channel.
	if _, err := listen.Exec(ctx, "LISTEN outbox"); err != nil {
		return err
	}
	var held bool
	if err := listen.QueryRow(ctx, "SELECT pg_try_advisory_lock('outbox'::regclass::oid::integer, 1869968485)").Scan(&held); err != nil || !held {
		return fmt.Errorf("the idle lock of outbox: %v, %v", held, err)
	}
	both, err := pgx.Connect(ctx, os.Args[1])
	if err != nil {
		return err
	}
	defer both.Close(ctx)
	tx, err := both.Begin(ctx)
	if err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload) VALUES ('o', 'o-1', 'SharedTransaction', '{}')"); err != nil {
		return fmt.Errorf("insert into outbox: %w", err)
	}
	// The statement of pgoutbox's own OutboxWake (queries/enqueue.sql), for
	// the row inserted by hand.
	if _, err := tx.Exec(ctx, "SELECT current_setting('outbox.wake_queued', true) IS NOT DISTINCT FROM 'on' OR pg_try_advisory_xact_lock_shared(('outbox'::regclass)::oid::integer, 1869968485) OR NOT pg_try_advisory_xact_lock(('outbox'::regclass)::oid::integer, 1869968482) OR EXISTS (SELECT FROM pg_notify('outbox', ''))"); err != nil {
		return fmt.Errorf("wake outbox: %w", err)
	}
	if _, err := billingoutbox.New(tx).BillingOutboxEnqueue(ctx, billingoutbox.BillingOutboxEnqueueParams{
		AggregateType: "invoice", AggregateID: "i-2", EventType: "InvoicePaid",
		Payload: []byte("{}"), Headers: []byte("{}"),
	}); err != nil {
		return fmt.Errorf("enqueue in the shared transaction: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return err
	}
	channels := map[string]bool{}
	for len(channels) < 2 {
		wctx, wcancel := context.WithTimeout(ctx, 5*time.Second)
		n, err := listen.WaitForNotification(wctx)
		wcancel()
		if err != nil {
			return fmt.Errorf("one transaction into outbox and billing_outbox notified only %v: %v", channels, err)
		}
		channels[n.Channel] = true
	}
	// Ordered events are sequenced at COMMIT by the renamed trigger (its own
	// sequence and lock keys) and claimed in that order.
	otx, err := both.Begin(ctx)
	if err != nil {
		return err
	}
	var first int64
	for i := 0; i < 2; i++ {
		oid, err := billingoutbox.New(otx).BillingOutboxEnqueue(ctx, billingoutbox.BillingOutboxEnqueueParams{
			AggregateType: "invoice", AggregateID: "i-3", EventType: "InvoiceOrdered",
			Payload: []byte("{}"), Headers: []byte("{}"), Ordered: true,
		})
		if err != nil {
			return fmt.Errorf("ordered enqueue: %w", err)
		}
		if i == 0 {
			first = oid
		}
	}
	if err := otx.Commit(ctx); err != nil {
		return fmt.Errorf("ordered commit: %w", err)
	}
	// The relay decides the events committed before each ordered claim.
	if _, err := q.BillingOutboxDecideCommitted(ctx, billingoutbox.BillingOutboxDecideCommittedParams{
		MaxRows: 100, SeenHolders: []string{},
	}); err != nil {
		return fmt.Errorf("decide committed: %w", err)
	}
	snap, err := q.BillingOutboxClaimSnapshot(ctx)
	if err != nil {
		return fmt.Errorf("claim snapshot: %w", err)
	}
	heads, err := q.BillingOutboxClaimOrderedWindow(ctx, billingoutbox.BillingOutboxClaimOrderedWindowParams{
		Snapshot: "1:1:", Upper: snap.Snapshot, Batch: 10, Owner: "check", Lease: lease,
	})
	if err != nil || len(heads) != 1 || heads[0].ID != first {
		return fmt.Errorf("ordered claim returned %+v (%v), want the head %d", heads, err, first)
	}
	return nil
}
`

// gooseSections returns the Up and Down SQL of a goose migration file.
func gooseSections(t *testing.T, path string) (up, down string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	u := strings.Index(text, "-- +goose Up")
	dn := strings.Index(text, "-- +goose Down")
	if u < 0 || dn < u {
		t.Fatalf("%s: no goose Up/Down sections", path)
	}
	return text[u:dn], text[dn:]
}

// gooseStatements splits a goose section into what goose sends: the whole
// section at once in a transaction, or, for a NO TRANSACTION file, one
// statement at a time (CREATE INDEX CONCURRENTLY refuses a transaction
// block, and several statements sent at once are one).
func gooseStatements(section string, noTransaction bool) []string {
	if !noTransaction {
		return []string{section}
	}
	var stmts []string
	var cur strings.Builder
	block := false
	for _, line := range strings.SplitAfter(section, "\n") {
		switch strings.TrimSpace(line) {
		case "-- +goose StatementBegin":
			block = true
		case "-- +goose StatementEnd":
			block = false
			stmts, cur = append(stmts, cur.String()), strings.Builder{}
			continue
		}
		cur.WriteString(line)
		if !block && strings.HasSuffix(strings.TrimSpace(line), ";") && !strings.HasPrefix(strings.TrimSpace(line), "--") {
			stmts, cur = append(stmts, cur.String()), strings.Builder{}
		}
	}
	if strings.TrimSpace(cur.String()) != "" {
		stmts = append(stmts, cur.String())
	}
	return stmts
}

func writeFile(t *testing.T, path, text string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

func runCmd(t *testing.T, dir string, env []string, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s (in %s): %v\n%s", name, strings.Join(args, " "), dir, err, out)
	}
	return string(out)
}

func goTool(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	p := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("the go tool is needed to build sqlc and the generated code: %v", err)
	}
	return p
}

// moduleRoot is the pgoutbox module directory (tests run in internal/cli).
func moduleRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("module root not found: %v", err)
	}
	return root
}

// embeddedFiles is how many files init writes: every embedded migration and
// query file.
func embeddedFiles() int {
	m, _ := fs.Glob(migrations.FS(), "*.sql")
	q, _ := fs.Glob(queries.FS, "*.sql")
	return len(m) + len(q)
}
