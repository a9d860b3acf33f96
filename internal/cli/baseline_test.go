package cli

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/pgoutbox/internal/pgtest"
	"github.com/pgoutbox/pgoutbox/migrations"
)

// `migrate up --table hr_outbox --schema hr` on an empty database applies
// schema.sql renamed, in one step; it builds what the renamed migration
// files build one by one, and records the same versions.
func TestMigrateUp_RenamedBaselineBuildsWhatTheRenamedFilesBuild(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	flags := []string{"--table", "hr_outbox", "--schema", "hr"}

	baseURL := unmigratedURL(t)
	r := call(t, invocation{env: map[string]string{"DATABASE_URL": baseURL}}, append([]string{"migrate", "up"}, flags...)...)
	wantCode(t, r, ExitOK)
	mustContain(t, r, "stdout", "applied  schema.sql, the whole schema at version")

	chainPool := pgtest.Pool(t, unmigratedURL(t))
	a := &app{table: "hr_outbox", schema: "hr"}
	fsys, err := a.migrationFiles()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := chainPool.Exec(ctx, "CREATE SCHEMA hr"); err != nil {
		t.Fatal(err)
	}
	chain, err := migrations.FromPoolWith(chainPool, fsys, migrations.VersionTableFor("hr_outbox", "hr"))
	if err != nil {
		t.Fatal(err)
	}
	defer chain.Close()
	if res, err := chain.Up(ctx); err != nil || len(res) < 2 {
		t.Fatalf("the renamed files: %d applied (%v)", len(res), err)
	}

	basePool := pgtest.Pool(t, baseURL)
	got := pgtest.SchemaObjects(t, basePool, "hr", "hr_outbox_migrations")
	want := pgtest.SchemaObjects(t, chainPool, "hr", "hr_outbox_migrations")
	if len(want) < 40 {
		t.Fatalf("the renamed files built %d objects in schema hr: %v", len(want), want)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("the renamed baseline builds another schema (-renamed files +renamed schema.sql):\n%s", diff)
	}
	versions := "SELECT version_id FROM hr.hr_outbox_migrations WHERE is_applied ORDER BY version_id"
	gotV := versionsOf(t, basePool, versions)
	wantV := versionsOf(t, chainPool, versions)
	if diff := cmp.Diff(wantV, gotV); diff != "" {
		t.Errorf("recorded versions (-renamed files +baseline):\n%s", diff)
	}
}

func versionsOf(t *testing.T, pool *pgxpool.Pool, sql string) []int64 {
	t.Helper()
	rows, err := pool.Query(context.Background(), sql)
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		t.Fatal(err)
	}
	return out
}
