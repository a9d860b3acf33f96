package migrations_test

import (
	"context"
	"testing"

	inboxmigrations "github.com/pgoutbox/pgoutbox/inbox/migrations"
	"github.com/pgoutbox/pgoutbox/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// The inbox migrations go up, down and up again, recorded in their own
// version table, beside the outbox's.
func TestMigrations_UpDownUpInTheirOwnVersionTable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t) // the outbox's migrations are applied
	m, err := inboxmigrations.FromPool(pool)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if err := inboxmigrations.Check(ctx, pool, inboxmigrations.VersionTable); err == nil {
		t.Fatal("Check passed before migrating")
	}
	for round := range 2 {
		if _, err := m.Up(ctx); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		if err := inboxmigrations.Check(ctx, pool, inboxmigrations.VersionTable); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		if _, err := m.DownTo(ctx, 0); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		var gone bool
		if err := pool.QueryRow(ctx, `SELECT to_regclass('inbox') IS NULL AND to_regclass('inbox_aggregates') IS NULL AND to_regclass('inbox_gaps') IS NULL
		    AND to_regclass('outbox') IS NOT NULL AND to_regclass('pgoutbox_migrations') IS NOT NULL`).Scan(&gone); err != nil || !gone {
			t.Fatalf("round %d: after DownTo(0) (%v)", round, err)
		}
	}
}
