package dispatcher_test

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/pgoutbox/db"
	"github.com/pgoutbox/pgoutbox/dispatcher"
	"github.com/pgoutbox/pgoutbox/internal/pgcluster"
	"github.com/pgoutbox/pgoutbox/internal/pgtest"
	"github.com/pgoutbox/pgoutbox/migrations"
)

// migratedCluster starts a throwaway cluster with opts and migrates its
// postgres database.
func migratedCluster(t *testing.T, opts pgcluster.Options) (*pgcluster.Cluster, *pgxpool.Pool) {
	t.Helper()
	ctx := context.Background()
	c, err := pgcluster.Start(ctx, opts)
	if err != nil {
		t.Fatalf("start a throwaway cluster (needs the PostgreSQL server binaries): %v", err)
	}
	t.Cleanup(func() { _ = c.Stop() })
	pool := pgtest.Pool(t, c.URL())
	m, err := migrations.FromPool(pool)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if _, err := m.Up(ctx); err != nil {
		t.Fatal(err)
	}
	return c, pool
}

// emptyDatabase creates a database with nothing in it on the test server
// and returns its URL; it is dropped when the test passes.
func emptyDatabase(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	admin := pgtest.AdminURL(t)
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	name := fmt.Sprintf("pgoutbox_restore_%d", time.Now().UnixNano())
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			return
		}
		c, err := pgx.Connect(context.Background(), admin)
		if err == nil {
			_, _ = c.Exec(context.Background(), "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
			c.Close(context.Background())
		}
	})
	cfg, err := pgx.ParseConfig(admin)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("postgres://%s@%s:%d/%s?sslmode=disable", cfg.User, cfg.Host, cfg.Port, name)
}

// pgTool runs one of the cluster's client programs (pg_dump, pg_restore).
func pgTool(t *testing.T, c *pgcluster.Cluster, name string, args ...string) {
	t.Helper()
	out, err := exec.Command(filepath.Join(c.Bin(), name), args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %v: %v\n%s", name, args, err, out)
	}
}

// Events dumped from a server past xid epoch 0 (any long-lived server) and
// restored into another: their txids (2^32 and more) are ones the target
// has not assigned, so no claim cursor would ever claim them; the relay
// re-stamps them at start and delivers them, ordered ones in order.
func TestMoved_RestoredFromAServerPastEpochZeroIsDelivered(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	settings := map[string]string{"fsync": "off", "max_connections": "30"}
	src, spool := migratedCluster(t, pgcluster.Options{Settings: settings, XidEpoch: 1})
	b := &bundle{url: src.URL(), pool: spool}
	plain := b.enqueue(t, 3, "plain", false)
	ordered := b.enqueue(t, 3, "ord", true)
	// Decided on the source (as a relay there did), and one more committed
	// after: it is dumped undecided, in outbox_sequenced.
	if _, err := spool.Exec(ctx, "SELECT outbox_resolve_heads(100)"); err != nil {
		t.Fatal(err)
	}
	ordered = append(ordered, b.enqueue(t, 1, "ord", true)...)
	var minTxid int64
	if err := spool.QueryRow(ctx, "SELECT min(txid::text::bigint) FROM outbox").Scan(&minTxid); err != nil || minTxid < 1<<32 {
		t.Fatalf("source txids from %d (%v), want past epoch 0", minTxid, err)
	}
	dump := filepath.Join(t.TempDir(), "outbox.dump")
	pgTool(t, src, "pg_dump", "-Fc", "-f", dump, "-d", src.URL())

	target := emptyDatabase(t)
	pgTool(t, src, "pg_restore", "--no-owner", "-d", target, dump)
	tb := &bundle{url: target, pool: pgtest.Pool(t, target)}
	rec := newRecorder(nil)
	start := time.Now()
	d, _ := tb.start(t, rec, fast(dispatcher.Config{}))
	waitFor(t, 30*time.Second, "every restored event delivered", func() bool { return rec.published() == 7 })
	t.Logf("relay start -> last restored event delivered: %s", time.Since(start).Round(time.Millisecond))
	for _, id := range slices.Concat(plain, ordered) {
		if rec.count(id) != 1 {
			t.Errorf("event %d published %d times", id, rec.count(id))
		}
	}
	rec.mu.Lock()
	if got := rec.order["ord"]; !slices.Equal(got, ordered) {
		t.Errorf("ordered events published as %v, want %v", got, ordered)
	}
	rec.mu.Unlock()
	if d.Stats().Repaired != 4 {
		t.Errorf("Stats().Repaired = %d, want 4 re-stamped rows: the unordered ones and the ordered aggregate's head (the hand-off stamps the rest)", d.Stats().Repaired)
	}
}

// Ordered events inserted while the table's triggers are off (as a logical
// replication apply or pg_restore --disable-triggers inserts rows) are never
// sequenced by a COMMIT; the relay sequences them in id order, after what
// the aggregate already has, and delivers them in that order.
func TestMoved_OrderedRowsInsertedWithTriggersOffAreSequencedAndDelivered(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	before := b.enqueue(t, 1, "agg", true)                                          // sequenced, the aggregate's head
	if _, err := b.pool.Exec(ctx, "SELECT outbox_resolve_heads(100)"); err != nil { // as a relay does
		t.Fatal(err)
	}
	conn, err := b.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var off []int64
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SET LOCAL session_replication_role = replica"); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload, ordered)
			SELECT 'order', a, 'E', '{}', true FROM unnest(ARRAY['agg', 'agg', 'other', 'other']) AS a RETURNING id`)
		if err != nil {
			return err
		}
		off, err = pgx.CollectRows(rows, pgx.RowTo[int64])
		return err
	})
	conn.Release()
	if err != nil {
		t.Fatal(err)
	}
	if n := b.count(t, "ordered AND seq IS NULL"); n != 4 {
		t.Fatalf("%d unsequenced rows, want 4", n)
	}
	// The queue gauges name them (pgoutbox.queue.unrepaired{kind=unsequenced}).
	if q, err := dispatcher.ReadQueueStats(ctx, db.New(b.pool)); err != nil || q.Unsequenced != 4 {
		t.Errorf("ReadQueueStats: Unsequenced = %d (%v), want 4", q.Unsequenced, err)
	}
	rec := newRecorder(nil)
	d, _ := b.start(t, rec, fast(dispatcher.Config{}))
	waitFor(t, 30*time.Second, "every ordered event delivered", func() bool { return rec.published() == 5 })
	rec.mu.Lock()
	if got, want := rec.order["agg"], append(before, off[0], off[1]); !slices.Equal(got, want) {
		t.Errorf("aggregate agg published as %v, want %v", got, want)
	}
	if got := rec.order["other"]; !slices.Equal(got, off[2:]) {
		t.Errorf("aggregate other published as %v, want %v", got, off[2:])
	}
	rec.mu.Unlock()
	if d.Stats().Repaired != 4 {
		t.Errorf("Stats().Repaired = %d, want 4", d.Stats().Repaired)
	}
}

// A logical replication copy carries the rows but not the sequences: on the
// copy, the id identity sequence and outbox_seq are behind the rows. The
// relay moves them past the rows when it starts, so a producer's next
// insert neither collides on id nor is sequenced before undelivered events
// of its aggregate.
func TestMoved_SequencesBehindTheRowsAreMovedOn(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	first := b.enqueue(t, 3, "agg", true)
	if _, err := b.pool.Exec(ctx, "SELECT setval(pg_get_serial_sequence('outbox', 'id'), 1), setval('outbox_seq', 1)"); err != nil {
		t.Fatal(err)
	}
	rec := newRecorder(func(ctx context.Context, m dispatcher.Message) error { return nil })
	d, _ := b.start(t, rec, fast(dispatcher.Config{}))
	waitFor(t, 30*time.Second, "the sequences repaired", func() bool { return d.Stats().Repaired >= 2 })
	next := b.enqueue(t, 1, "agg", true)
	waitFor(t, 30*time.Second, "every event delivered", func() bool { return rec.published() == 4 })
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if got, want := rec.order["agg"], append(first, next...); !slices.Equal(got, want) {
		t.Errorf("published %v, want %v", got, want)
	}
}
