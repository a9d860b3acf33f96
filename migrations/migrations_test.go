package migrations_test

import (
	"context"
	"fmt"
	"io/fs"
	"testing"
	"testing/fstest"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/pgoutbox/internal/pgtest"
	"github.com/pgoutbox/pgoutbox/migrations"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func migrator(t *testing.T, pool *pgxpool.Pool) *migrations.Migrator {
	t.Helper()
	m, err := migrations.FromPool(pool)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	return m
}

func ints(t *testing.T, pool *pgxpool.Pool, sql string) []int64 {
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

// Every migration goes down and up again, twice, on an empty schema.
func TestMigrations_UpDownUpRoundTrip(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t) // migrated to Latest
	m := migrator(t, pool)
	for round := 0; round < 2; round++ {
		if _, err := m.DownTo(ctx, 0); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		var gone bool
		if err := pool.QueryRow(ctx, `SELECT to_regclass('outbox') IS NULL AND to_regclass('outbox_seq') IS NULL
		    AND to_regproc('outbox_commit_order') IS NULL`).Scan(&gone); err != nil || !gone {
			t.Fatalf("round %d: objects left after DownTo(0) (%v)", round, err)
		}
		if _, err := m.Up(ctx); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		if v, err := m.Version(ctx); err != nil || v != migrations.Latest() {
			t.Fatalf("round %d: version %d (%v), want %d", round, v, err, migrations.Latest())
		}
		// The commit-order trigger runs as the owner with a pinned search_path
		// and plans that never seq-scan the table (see 00004).
		var cfg string
		if err := pool.QueryRow(ctx, `SELECT array_to_string(proconfig, ';') FROM pg_proc
		    WHERE proname = 'outbox_commit_order' AND prosecdef`).Scan(&cfg); err != nil || cfg != "enable_seqscan=off;search_path=public, pg_catalog, pg_temp" {
			t.Fatalf("round %d: outbox_commit_order config %q (%v)", round, cfg, err)
		}
	}
}

// 00004 on a database with traffic from 00003: undelivered ordered rows get
// seq in their (xid, id) order, the order 00003 delivered them in, even where
// that differs from id order; done ordered rows get one too, unordered rows
// none. Its
// Down restores the xid column and the old head index, and Up runs again.
func TestMigrations_CommitOrderBackfillKeepsRelativeOrder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	m := migrator(t, pool)
	if _, err := m.DownTo(ctx, 3); err != nil {
		t.Fatal(err)
	}
	ins := func(tx pgx.Tx, agg string, ordered bool) int64 {
		t.Helper()
		var id int64
		if err := tx.QueryRow(ctx, `INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload, ordered)
		    VALUES ('t', $1, 'E', '{}', $2) RETURNING id`, agg, ordered).Scan(&id); err != nil {
			t.Fatal(err)
		}
		return id
	}
	begin := func() pgx.Tx {
		t.Helper()
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = tx.Rollback(ctx) })
		return tx
	}
	// T0 takes its xid first but inserts last: (xid, id) order puts its row
	// first although its id is the highest.
	t0 := begin()
	if _, err := t0.Exec(ctx, `SELECT pg_current_xact_id()`); err != nil {
		t.Fatal(err)
	}
	t1 := begin()
	a1 := ins(t1, "A", true)
	done := ins(t1, "A", true)
	unordered := ins(t1, "A", false)
	b1 := ins(t1, "B", true)
	if err := t1.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	a0 := ins(t0, "A", true)
	dead := ins(t0, "B", true)
	if err := t0.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `UPDATE outbox SET status = 'done', done_at = now() WHERE id = $1`, done); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `UPDATE outbox SET status = 'dead', last_error = 'x' WHERE id = $1`, dead); err != nil {
		t.Fatal(err)
	}
	before := ints(t, pool, `SELECT id FROM outbox WHERE ordered AND status <> 'done' ORDER BY aggregate_id, xid, id`)
	if diff := cmp.Diff([]int64{a0, a1, dead, b1}, before); diff != "" {
		t.Fatalf("setup: (xid, id) order under 00003 (-want +got):\n%s", diff)
	}

	if _, err := m.Up(ctx); err != nil {
		t.Fatal(err)
	}
	after := ints(t, pool, `SELECT id FROM outbox WHERE seq IS NOT NULL AND status <> 'done' ORDER BY aggregate_id, seq`)
	if diff := cmp.Diff(before, after); diff != "" {
		t.Fatalf("seq order after 00004 (-want (xid, id) order +got):\n%s", diff)
	}
	if unseq := ints(t, pool, `SELECT id FROM outbox WHERE seq IS NULL ORDER BY id`); !cmp.Equal([]int64{unordered}, unseq) {
		t.Fatalf("unsequenced rows %v, want only the unordered %d (done %d sequenced too)", unseq, unordered, done)
	}
	// New ordered rows are sequenced after the backfilled ones.
	tx := begin()
	a2 := ins(tx, "A", true)
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	// The relay moves the seq drawn at COMMIT into the row.
	if _, err := pool.Exec(ctx, `SELECT outbox_resolve_heads(1000)`); err != nil {
		t.Fatal(err)
	}
	if got := ints(t, pool, `SELECT id FROM outbox WHERE aggregate_id = 'A' AND seq IS NOT NULL AND status <> 'done' ORDER BY seq`); !cmp.Equal([]int64{a0, a1, a2}, got) {
		t.Fatalf("A after a new commit: %v", got)
	}
	var hasXid bool
	if err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM information_schema.columns WHERE table_name = 'outbox' AND column_name = 'xid')`).Scan(&hasXid); err != nil || hasXid {
		t.Fatalf("xid column still there after 00004 (%v)", err)
	}

	// Down to 3 restores 00003's schema; new rows get xids again; Up again.
	if _, err := m.DownTo(ctx, 3); err != nil {
		t.Fatal(err)
	}
	var restored bool
	if err := pool.QueryRow(ctx, `SELECT to_regclass('outbox_seq') IS NULL AND to_regproc('outbox_commit_order') IS NULL
	    AND pg_get_indexdef('outbox_ordered_head'::regclass) LIKE '%(aggregate_id, xid, id)%'
	    AND NOT EXISTS (SELECT 1 FROM information_schema.columns WHERE table_name = 'outbox' AND column_name = 'seq')`).Scan(&restored); err != nil || !restored {
		t.Fatalf("Down did not restore 00003's schema (%v)", err)
	}
	tx = begin()
	ins(tx, "A", true)
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Up(ctx); err != nil {
		t.Fatal(err)
	}
	if n := ints(t, pool, `SELECT count(*) FROM outbox WHERE ordered AND status <> 'done' AND seq IS NULL`); n[0] != 0 {
		t.Fatalf("%d undelivered ordered rows unsequenced after the second Up", n[0])
	}
}

// 00014 drops outbox_pending, on a table with rows waiting, whether it comes
// right after 00012 (a gap in the numbering) or after a 00013 that only
// replaces a trigger function; its Down rebuilds the index.
func TestMigrations_PendingOnceDropsOutboxPendingAfter00012Or00013(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	hasIndex := func(pool *pgxpool.Pool) bool {
		t.Helper()
		var has bool
		if err := pool.QueryRow(ctx, `SELECT to_regclass('outbox_pending') IS NOT NULL`).Scan(&has); err != nil {
			t.Fatal(err)
		}
		return has
	}
	upFrom12 := func(t *testing.T, m *migrations.Migrator, pool *pgxpool.Pool, want []int64) {
		t.Helper()
		if _, err := m.DownTo(ctx, 12); err != nil {
			t.Fatal(err)
		}
		if !hasIndex(pool) {
			t.Fatal("outbox_pending missing at version 12")
		}
		if _, err := pool.Exec(ctx, `INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
		    SELECT 't', 'a' || g, 'E', '{}' FROM generate_series(1, 10) AS g`); err != nil {
			t.Fatal(err)
		}
		res, err := m.Up(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var applied []int64
		for _, r := range res {
			applied = append(applied, r.Source.Version)
		}
		if diff := cmp.Diff(want, applied); diff != "" {
			t.Fatalf("applied (-want +got):\n%s", diff)
		}
		if hasIndex(pool) {
			t.Fatal("outbox_pending still there after 00014")
		}
		if n := ints(t, pool, `SELECT count(*) FROM outbox WHERE status = 'pending'`); n[0] < 10 {
			t.Fatalf("%d pending rows after 00014, want the 10 inserted before", n[0])
		}
	}

	t.Run("after 00012", func(t *testing.T) {
		t.Parallel()
		pool := pgtest.NewPool(t)
		m := migrator(t, pool)
		if hasIndex(pool) {
			t.Fatal("outbox_pending exists at the latest version")
		}
		var want []int64
		for v := int64(13); v <= migrations.Latest(); v++ {
			if matches, _ := fs.Glob(migrations.FS(), fmt.Sprintf("%05d_*.sql", v)); len(matches) == 1 {
				want = append(want, v)
			}
		}
		upFrom12(t, m, pool, want)
		if _, err := m.DownTo(ctx, 13); err != nil {
			t.Fatal(err)
		}
		if !hasIndex(pool) {
			t.Fatal("00014's Down did not rebuild outbox_pending")
		}
	})

	t.Run("after a 00013 that replaces a trigger function", func(t *testing.T) {
		t.Parallel()
		fsys := fstest.MapFS{}
		names, _ := fs.Glob(migrations.FS(), "*.sql")
		for _, n := range names {
			var v int64
			if _, err := fmt.Sscanf(n, "%d_", &v); err != nil || v == 13 {
				continue // this test's own 00013 stands in for whatever 00013 is
			}
			b, err := fs.ReadFile(migrations.FS(), n)
			if err != nil {
				t.Fatal(err)
			}
			fsys[n] = &fstest.MapFile{Data: b}
		}
		fsys["00013_outbox_stamp_again.sql"] = &fstest.MapFile{Data: []byte(`-- +goose Up
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION outbox_claimable_stamp() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    NEW.txid := pg_current_xact_id();
    RETURN NEW;
END;
$$;
-- +goose StatementEnd
-- +goose Down
SELECT 1;
`)}
		pool := pgtest.NewPool(t)
		m, err := migrations.FromPoolWith(pool, fsys, migrations.VersionTable)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = m.Close() })
		var want []int64
		for v := int64(13); v <= migrations.Latest(); v++ {
			if matches, _ := fs.Glob(migrations.FS(), fmt.Sprintf("%05d_*.sql", v)); len(matches) == 1 {
				want = append(want, v)
			}
		}
		upFrom12(t, m, pool, want)
		if _, err := m.DownTo(ctx, 12); err != nil {
			t.Fatal(err)
		}
		if !hasIndex(pool) {
			t.Fatal("00014's Down did not rebuild outbox_pending")
		}
	})
}
