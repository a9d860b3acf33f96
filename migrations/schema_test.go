package migrations_test

import (
	"context"
	"io/fs"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"

	"github.com/pgoutbox/pgoutbox/internal/pgtest"
	"github.com/pgoutbox/pgoutbox/migrations"
)

// emptyDatabase is a fresh test database with every migration rolled back.
func emptyDatabase(t *testing.T) *pgxpool.Pool {
	t.Helper()
	pool := pgtest.NewPool(t)
	if _, err := migrator(t, pool).DownTo(context.Background(), 0); err != nil {
		t.Fatal(err)
	}
	return pool
}

// The acceptance of schema.sql: applied as the baseline, it builds exactly
// what the numbered migrations build one by one, and records the same
// versions.
func TestSchemaFile_BuildsWhatTheMigrationsBuild(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	chainPool := emptyDatabase(t)
	chain, err := migrations.NewWith(stdlib.OpenDBFromPool(chainPool), migrations.FS(), migrations.VersionTable)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = chain.Close() })
	res, err := chain.Up(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if files, _ := fs.Glob(migrations.FS(), "*.sql"); len(res) != len(files) {
		t.Fatalf("the chain applied %d files, want every one of %d", len(res), len(files))
	}

	basePool := emptyDatabase(t)
	res, err = migrator(t, basePool).Up(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 1 || res[0].Source.Path != migrations.BaselineFile {
		t.Fatalf("Up on an empty database applied %v, want the baseline %s alone", paths(res), migrations.BaselineFile)
	}

	if diff := cmp.Diff(pgtest.SchemaObjects(t, chainPool, "public", migrations.VersionTable), pgtest.SchemaObjects(t, basePool, "public", migrations.VersionTable)); diff != "" {
		t.Errorf("schema.sql builds another schema than the migrations (-migrations +schema.sql): update migrations/schema.sql\n%s", diff)
	}
	versions := "SELECT version_id FROM " + migrations.VersionTable + " WHERE is_applied ORDER BY version_id"
	if diff := cmp.Diff(ints(t, chainPool, versions), ints(t, basePool, versions)); diff != "" {
		t.Errorf("recorded versions (-migrations +baseline):\n%s", diff)
	}
}

func paths(res []*goose.MigrationResult) []string {
	var out []string
	for _, r := range res {
		out = append(out, r.Source.Path)
	}
	return out
}

// schema.sql is the one file a reviewer reads: short, and it names the
// latest migration (a new migration without it is caught here and, for the
// objects, by the test above).
func TestSchemaFile_IsShortAndStandsForTheLatestMigration(t *testing.T) {
	src := migrations.Schema()
	if n := strings.Count(src, "\n"); n > 450 {
		t.Errorf("schema.sql has %d lines, at most 450", n)
	}
	if got, want := migrations.SchemaVersion(), migrations.Latest(); got != want {
		t.Errorf("schema.sql stands for migration %d, the latest is %d: update its first line and its objects", got, want)
	}
	if m := regexp.MustCompile(`(?i)\bissue\b|#\d+`).FindString(src); m != "" {
		t.Errorf("schema.sql refers to %q: it is read by users", m)
	}
}

// Two processes migrating one empty database at once: one applies the
// baseline, the other finds the versions recorded; neither fails.
func TestBaseline_TwoMigratorsAtOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := emptyDatabase(t)
	var wg sync.WaitGroup
	results := make([][]*goose.MigrationResult, 2)
	errs := make([]error, 2)
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m, err := migrations.FromPool(pool)
			if err != nil {
				errs[i] = err
				return
			}
			defer m.Close()
			results[i], errs[i] = m.Up(ctx)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("migrator %d: %v", i, err)
		}
	}
	if got := len(results[0]) + len(results[1]); got != 1 {
		t.Fatalf("applied %v and %v, want the baseline once", paths(results[0]), paths(results[1]))
	}
	if v, err := migrator(t, pool).Version(ctx); err != nil || v != migrations.Latest() {
		t.Fatalf("version %d (%v), want %d", v, err, migrations.Latest())
	}
}

// A database already at some version goes through the numbered files, never
// the baseline.
func TestBaseline_NotAppliedOverAnExistingSchema(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	m := migrator(t, pool)
	if _, err := m.DownTo(ctx, migrations.Latest()-1); err != nil {
		t.Fatal(err)
	}
	res, err := m.Up(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := paths(res); len(got) != 1 || got[0] == migrations.BaselineFile {
		t.Fatalf("Up from version %d applied %v, want the latest file alone", migrations.Latest()-1, got)
	}
}
