package queries_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// The commit-order trigger's statements run from the producers' own
// sessions, whose plan caches outlive a purge: once the statistics said the
// outbox was empty (a new table, a TRUNCATE, a purge followed by ANALYZE),
// PostgreSQL's cached generic plan for the trigger's UPDATE scanned the whole
// table at every COMMIT, and producers slowed down as the table grew
// (measured with pgbench, 8 clients, one ordered event per transaction:
// 5,000 tx/s falling to 1,070 tx/s within 10 s of a TRUNCATE + VACUUM
// ANALYZE). The function therefore runs with enable_seqscan = off
// (migration 00004), which keeps its cached plans on the primary key; this
// test counts the rows its statements read by sequential scans after the
// table was analyzed empty.
func TestCommitOrder_TriggerKeepsIndexPlansAfterTheTableWasAnalyzedEmpty(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	conn, err := b.pool.Acquire(ctx) // one producer session: its plan cache is what matters
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	produce := func(n int) {
		t.Helper()
		for i := 0; i < n; i++ {
			if err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
				_, err := tx.Exec(ctx, `INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload, ordered)
					VALUES ('order', $1, 'E', '{}', true)`, fmt.Sprintf("agg-%d", i%50))
				return err
			}); err != nil {
				t.Fatal(err)
			}
		}
	}
	var version int
	if err := conn.QueryRow(ctx, `SELECT current_setting('server_version_num')::int`).Scan(&version); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `CREATE TABLE stats_marker (n int); INSERT INTO stats_marker VALUES (1)`); err != nil {
		t.Fatal(err)
	}
	// stat reads one counter of pg_stat_user_tables afresh (not from the
	// session's cached snapshot).
	stat := func(column, table string) int64 {
		t.Helper()
		if _, err := conn.Exec(ctx, `SELECT pg_stat_clear_snapshot()`); err != nil {
			t.Fatal(err)
		}
		var n int64
		if err := conn.QueryRow(ctx, `SELECT coalesce(`+column+`, 0) FROM pg_stat_user_tables WHERE relid = $1::regclass`, table).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	flush := func() {
		t.Helper()
		if version >= 150000 {
			// Flush this session's counters.
			if _, err := conn.Exec(ctx, `SELECT pg_stat_force_next_flush()`); err != nil {
				t.Fatal(err)
			}
			return
		}
		// Before 15 a session sends its counters to the statistics
		// collector at a transaction's end, at most every 500 ms, all tables
		// at once, and the collector may drop a message under load: scan a
		// marker table, one transaction at a time, until the collector
		// shows a scan it did not show before; the report that brought it
		// brought the outbox's counters too.
		start := stat("seq_scan", "stats_marker")
		for {
			if _, err := conn.Exec(ctx, `SELECT count(*) FROM stats_marker`); err != nil {
				t.Fatal(err)
			}
			if stat("seq_scan", "stats_marker") > start {
				return
			}
			if ctx.Err() != nil {
				t.Fatal(ctx.Err())
			}
		}
	}
	seqRead := func() int64 {
		t.Helper()
		flush()
		return stat("seq_tup_read", "outbox")
	}
	produce(20) // past the five custom plans after which a generic one may be cached
	if _, err := conn.Exec(ctx, `TRUNCATE outbox`); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `ANALYZE outbox`); err != nil {
		t.Fatal(err)
	}
	produce(20) // plans rebuilt while the statistics say "empty"
	// While the table is a few pages, a plan made for the values at hand may
	// rightly scan it; once it has grown, only a stale generic plan still
	// does (it read the whole table at each of these commits: 47,050 rows for
	// the 100).
	produce(400)
	before := seqRead()
	produce(100)
	if read := seqRead() - before; read != 0 {
		t.Fatalf("100 ordered commits into a table of 420 rows read %d rows by sequential scans of outbox, want 0 (a cached generic plan)", read)
	}
	var sequenced int
	if err := conn.QueryRow(ctx, `SELECT (SELECT count(*) FROM outbox WHERE seq IS NOT NULL) + (SELECT count(*) FROM outbox_sequenced AS s JOIN outbox AS o ON o.id = s.message_id)`).Scan(&sequenced); err != nil || sequenced != 520 {
		t.Fatalf("sequenced rows = %d (%v), want 520", sequenced, err)
	}
}
