package cli

import (
	"cmp"
	"context"
	"fmt"
	"io/fs"
	"path"
	"strings"
	"testing/fstest"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pressly/goose/v3"

	"github.com/pgoutbox/pgoutbox/db"
	"github.com/pgoutbox/pgoutbox/dispatcher"
	"github.com/pgoutbox/pgoutbox/internal/sqlrename"
	"github.com/pgoutbox/pgoutbox/migrations"
)

func (a *app) migrateUp(ctx context.Context, args []string) error {
	f := newFlags("migrate up", "pgoutbox migrate up [flags]",
		"Applies every pending migration embedded in this build (goose, version table "+migrations.VersionTable+",\n"+
			"under an advisory lock so concurrent runs do not race). Safe to run on every deploy.",
		"  DATABASE_URL=postgres://app:secret@db:5432/app pgoutbox migrate up\n"+
			"  pgoutbox migrate up --database-url 'host=db user=app dbname=app'")
	dbURL := f.databaseURLs(false)
	if _, err := a.parse(f, args, 0); err != nil {
		return err
	}
	if f.isFleet() {
		return a.migrateFleet(ctx, f, true) // fleet_ops.go
	}
	m, pool, closeDB, err := a.migratorPool(ctx, f, *dbURL)
	if err != nil {
		return err
	}
	defer closeDB()
	if fp, relation, ok, err := a.migratedElsewhere(ctx, pool, m.VersionTable()); err != nil {
		return err
	} else if ok {
		// Applying the missing ones here would record them in a second
		// history: the application's migrator would apply them again once
		// they reach its folder.
		if len(fp.missing) > 0 {
			return failf("migrate up: %s", strings.TrimSpace(fp.describe(relation, m.VersionTable(), migrations.Latest())))
		}
		fmt.Fprintf(a.stdout, "already up to date: table %s has every migration of this build (%d), applied outside pgoutbox's version table %s; nothing to do\n", relation, migrations.Latest(), m.VersionTable())
		return nil
	}
	if err := a.refuseSecondOutbox(ctx, pool, m.VersionTable()); err != nil {
		return err
	}
	res, err := m.Up(ctx)
	for _, r := range res {
		if r.Error == nil {
			fmt.Fprintln(a.stdout, appliedLine(r))
		}
	}
	if err != nil {
		return a.dbError("migrate up", err)
	}
	v, err := m.Version(ctx)
	if err != nil {
		return a.dbError("migrate up", err)
	}
	if len(res) == 0 {
		fmt.Fprintf(a.stdout, "already up to date: version %d\n", v)
	} else {
		fmt.Fprintf(a.stdout, "schema at version %d\n", v)
	}
	return nil
}

func (a *app) migrateDown(ctx context.Context, args []string) error {
	f := newFlags("migrate down", "pgoutbox migrate down [flags]",
		"Rolls back the most recent migration, or every migration above --to VERSION.\n"+
			"Rolling back version 1 drops the outbox table and every message in it: that asks\n"+
			"for confirmation on a terminal, and needs --yes otherwise.",
		"  pgoutbox migrate down            # undo the latest migration\n"+
			"  pgoutbox migrate down --to 1     # keep only version 1\n"+
			"  pgoutbox migrate down --to 0 --yes   # drop everything (data included)")
	dbURL := f.databaseURL()
	to := f.int64("to", -1, "roll back every migration above this version (0 = all); default: only the latest")
	yes := f.Bool("yes", false, "do not ask before dropping the outbox table")
	f.hidden["to"] = true
	if _, err := a.parse(f, args, 0); err != nil {
		return err
	}
	if f.visited("to") && (*to < 0 || *to > migrations.Latest()) {
		return f.usageError("--to must be between 0 and %d, got %d", migrations.Latest(), *to)
	}
	m, closeDB, err := a.migrator(ctx, f, *dbURL)
	if err != nil {
		return err
	}
	defer closeDB()
	current, err := m.Version(ctx)
	if err != nil {
		return a.dbError("migrate down", err)
	}
	if current == 0 {
		fmt.Fprintln(a.stdout, "nothing to roll back: no migration is applied")
		return nil
	}
	target := *to
	if target < 0 {
		// The previous applied version, not necessarily current-1.
		st, err := m.Status(ctx)
		if err != nil {
			return a.dbError("migrate down", err)
		}
		target = 0
		for _, s := range st {
			if s.State == goose.StateApplied && s.Source.Version < current {
				target = max(target, s.Source.Version)
			}
		}
	}
	if target >= current {
		fmt.Fprintf(a.stdout, "nothing to roll back: schema at version %d\n", current)
		return nil
	}
	if target < 1 && !*yes {
		if err := a.confirm(f, "roll back to version 0, dropping the outbox table and every message in it"); err != nil {
			return err
		}
	}
	res, err := m.DownTo(ctx, target)
	for _, r := range res {
		if r.Error == nil {
			fmt.Fprintf(a.stdout, "rolled back  %s (%s)\n", path.Base(r.Source.Path), r.Duration.Round(time.Millisecond))
		}
	}
	if err != nil {
		return a.dbError("migrate down", err)
	}
	fmt.Fprintf(a.stdout, "schema at version %d\n", target)
	return nil
}

func (a *app) migrateStatus(ctx context.Context, args []string) error {
	f := newFlags("migrate status", "pgoutbox migrate status [flags]",
		"Shows the database's schema version and, per embedded migration file, whether it is\n"+
			"applied (and when) or pending. A table migrated another way (your application's goose\n"+
			"history, or by hand) has no pgoutbox history to read: then it reads the table itself\n"+
			"(the migrations' own columns, indexes, functions and triggers) and lists each migration\n"+
			"as applied or missing.",
		"  pgoutbox migrate status")
	dbURL := f.databaseURLs(false)
	if _, err := a.parse(f, args, 0); err != nil {
		return err
	}
	if f.isFleet() {
		return a.migrateFleet(ctx, f, false) // fleet_ops.go
	}
	m, pool, closeDB, err := a.migratorPool(ctx, f, *dbURL)
	if err != nil {
		return err
	}
	defer closeDB()
	if fp, relation, ok, err := a.migratedElsewhere(ctx, pool, m.VersionTable()); err != nil {
		return err
	} else if ok {
		fmt.Fprint(a.stdout, fp.describe(relation, m.VersionTable(), migrations.Latest()))
		fmt.Fprintln(a.stdout)
		tw := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "STATE\tMIGRATION")
		for _, n := range fp.names {
			fmt.Fprintf(tw, "%s\t%s\n", fp.state[n], n)
		}
		return tw.Flush()
	}
	st, err := m.Status(ctx)
	if err != nil {
		return a.dbError("migrate status", err)
	}
	v, err := m.Version(ctx)
	if err != nil {
		return a.dbError("migrate status", err)
	}
	pending := 0
	for _, s := range st {
		if s.State != goose.StateApplied {
			pending++
		}
	}
	fmt.Fprintf(a.stdout, "version: %d (this build: %d", v, migrations.Latest())
	if pending > 0 {
		fmt.Fprintf(a.stdout, ", %d pending: run `pgoutbox migrate up`)\n\n", pending)
	} else {
		fmt.Fprint(a.stdout, ", up to date)\n\n")
	}
	tw := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "STATE\tAPPLIED AT\tMIGRATION")
	for _, s := range st {
		at := "-"
		if s.State == goose.StateApplied {
			at = s.AppliedAt.UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", s.State, at, path.Base(s.Source.Path))
	}
	return tw.Flush()
}

// migrator connects and returns a Migrator and a function closing both.
func (a *app) migrator(ctx context.Context, f *flags, dbURL string) (*migrations.Migrator, func(), error) {
	m, _, closeDB, err := a.migratorPool(ctx, f, dbURL)
	return m, closeDB, err
}

// migratorPool is migrator that also returns the pool; the Migrator works
// on the migrations renamed for --table and --schema, recorded in
// pgoutbox's version table (in --schema when given).
func (a *app) migratorPool(ctx context.Context, f *flags, dbURL string) (*migrations.Migrator, *pgxpool.Pool, func(), error) {
	d, err := a.resolveDatabase(f, dbURL)
	if err != nil {
		return nil, nil, nil, err
	}
	pool, err := a.connect(ctx, d)
	if err != nil {
		return nil, nil, nil, err
	}
	fsys, err := a.migrationFiles()
	if err != nil {
		pool.Close()
		return nil, nil, nil, failf("migrations: %v", err)
	}
	if a.schema != "" {
		// goose creates its version table (in the schema) before the first
		// migration runs. The name was validated when the flags were parsed.
		if _, err := pool.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+a.schema); err != nil {
			pool.Close()
			return nil, nil, nil, a.dbError("migrations", err)
		}
	}
	m, err := migrations.FromPoolWith(pool, fsys, migrations.VersionTableFor(a.table, a.schema))
	if err != nil {
		pool.Close()
		return nil, nil, nil, a.dbError("migrations", err)
	}
	baseline, err := a.baselineSQL()
	if err != nil {
		_ = m.Close()
		pool.Close()
		return nil, nil, nil, failf("migrations: %v", err)
	}
	m.SetBaseline(baseline)
	return m, pool, func() { _ = m.Close(); pool.Close() }, nil
}

// rename is the rename of pgoutbox's SQL for --table and --schema.
func (a *app) rename() (sqlrename.Rename, error) {
	return sqlrename.New(cmp.Or(a.table, dispatcher.TableDefault), a.schema)
}

// baselineSQL is migrations/schema.sql renamed for --table and --schema the
// way migrationFiles renames each file: what `migrate up` applies to a
// database where no migration is applied yet.
func (a *app) baselineSQL() (string, error) {
	r, err := a.rename()
	if err != nil {
		return "", err
	}
	if r.Identity() {
		return migrations.Schema(), nil
	}
	body, _ := r.SQL(migrations.Schema())
	return body, nil
}

// appliedLine is how `migrate up` reports one applied file, or the
// baseline with the versions it recorded.
func appliedLine(r *goose.MigrationResult) string {
	d := r.Duration.Round(time.Millisecond)
	if r.Source.Path == migrations.BaselineFile {
		return fmt.Sprintf("applied  %s, the whole schema at version %d in one transaction (%s)", migrations.BaselineFile, r.Source.Version, d)
	}
	return fmt.Sprintf("applied  %s (%s)", path.Base(r.Source.Path), d)
}

// migrationFiles are the embedded migrations, renamed for --table and
// --schema (the same rename as `pgoutbox init`; with --schema the first one
// creates the schema).
func (a *app) migrationFiles() (fs.FS, error) {
	r, err := a.rename()
	if err != nil {
		return nil, err
	}
	if r.Identity() {
		return migrations.FS(), nil
	}
	out := fstest.MapFS{}
	names, err := fs.Glob(migrations.FS(), "*.sql")
	if err != nil {
		return nil, err
	}
	for _, n := range names {
		src, err := fs.ReadFile(migrations.FS(), n)
		if err != nil {
			return nil, err
		}
		body, _ := r.SQL(string(src))
		if a.schema != "" && versionOf(n) == 1 {
			body = strings.Replace(body, "-- +goose Up\n", "-- +goose Up\nCREATE SCHEMA IF NOT EXISTS "+a.schema+";\n", 1)
		}
		out[n] = &fstest.MapFile{Data: []byte(body)}
	}
	return out, nil
}

// migratedElsewhere reports whether the table exists without pgoutbox's
// version table (its migrations applied through another goose history, or by
// hand), and then what its schema holds.
func (a *app) migratedElsewhere(ctx context.Context, pool *pgxpool.Pool, versionTable string) (footprintStatus, string, bool, error) {
	r, err := a.rename()
	if err != nil {
		return footprintStatus{}, "", false, err
	}
	var haveVersions bool
	var relation string
	if err := pool.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL, coalesce(to_regclass($2)::text, '')", versionTable, r.Qualified()).Scan(&haveVersions, &relation); err != nil {
		return footprintStatus{}, "", false, a.dbError("migrate", err)
	}
	if haveVersions || relation == "" {
		return footprintStatus{}, "", false, nil
	}
	fsys, err := a.migrationFiles()
	if err != nil {
		return footprintStatus{}, "", false, failf("migrations: %v", err)
	}
	fp, err := readFootprint(ctx, pool, fsys, r.Qualified())
	if err != nil {
		return footprintStatus{}, "", false, a.dbError("migrate", err)
	}
	return fp, relation, true, nil
}

// refuseSecondOutbox stops `migrate up` from creating a second outbox when
// the table is missing here but exists in another schema and no --schema was
// given (with --schema, an outbox of the same name in another schema is a
// second outbox on purpose).
func (a *app) refuseSecondOutbox(ctx context.Context, pool *pgxpool.Pool, versionTable string) error {
	r, err := a.rename()
	if err != nil {
		return err
	}
	var haveVersions bool
	if err := pool.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", versionTable).Scan(&haveVersions); err != nil {
		return a.dbError("migrate up", err)
	}
	if haveVersions {
		return nil
	}
	row, err := db.New(pool).OutboxCheckTable(ctx, db.OutboxCheckTableParams{
		Relation: r.Qualified(), TableName: r.Table(), HistoryName: r.Table() + "_attempts",
	})
	if err != nil {
		return a.dbError("migrate up", err)
	}
	// A table found here without the version table is migratedElsewhere's
	// case, handled before this check.
	if row.Relation == "" && len(row.Elsewhere) > 0 && a.schema == "" {
		return failf("migrate up: no table %s in the search_path (%s), but %s exists: pass --schema (and use the same on every command) instead of creating a second outbox",
			r.Qualified(), row.SearchPath, strings.Join(row.Elsewhere, ", "))
	}
	return nil
}
