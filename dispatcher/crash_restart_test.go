package dispatcher_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/pgoutbox/dispatcher"
	"github.com/pgoutbox/pgoutbox/internal/pgcluster"
	"github.com/pgoutbox/pgoutbox/internal/tcpproxy"
)

// crashBackend makes the server recover from a crash in place, as when the
// kernel's OOM killer ends one backend: a backend is killed with SIGKILL
// (by the server's own OS user, through COPY TO PROGRAM), the postmaster
// ends every other backend and replays the WAL, and keeps its start time.
// It returns once the server has been through that: a second connection
// opened before the kill has been ended by the postmaster, and the server
// accepts connections again. (Accepting connections alone is not enough:
// the postmaster may notice the crash only after a first new connection went
// through, and a read of xmax on it would still see the server before the
// crash.) It writes nothing, so it leaves the WAL as it was.
func crashBackend(t *testing.T, url string) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	witness, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer witness.Close(ctx)
	var pid int
	if err := conn.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		t.Fatal(err)
	}
	_, _ = conn.Exec(ctx, fmt.Sprintf("COPY (SELECT 1) TO PROGRAM 'kill -9 %d'", pid))
	conn.Close(ctx)
	deadline := time.Now().Add(time.Minute)
	for witness.Ping(ctx) == nil {
		if time.Now().After(deadline) {
			t.Fatal("the postmaster did not end the other connections after a backend was killed: no crash restart")
		}
		time.Sleep(20 * time.Millisecond)
	}
	for {
		c, err := pgx.Connect(ctx, url)
		if err == nil {
			var ok bool
			err = c.QueryRow(ctx, "SELECT NOT pg_is_in_recovery()").Scan(&ok)
			c.Close(ctx)
			if err == nil && ok {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the server did not come back from the crash: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// xmax is the server's next txid. Right after crashBackend the postmaster
// may only now notice the crash and reset every connection (crashBackend
// can see the server up before that), so a failed read is retried for a
// while.
func xmax(t *testing.T, pool *pgxpool.Pool) int64 {
	t.Helper()
	var x int64
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := pool.QueryRow(context.Background(), "SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint").Scan(&x)
		if err == nil {
			return x
		}
		if time.Now().After(deadline) {
			t.Fatal(err)
		}
		pool.Reset()
		time.Sleep(100 * time.Millisecond)
	}
}

// burnXids commits n transactions that each take a txid.
func burnXids(t *testing.T, pool *pgxpool.Pool, n int) {
	t.Helper()
	for range n {
		if _, err := pool.Exec(context.Background(), "SELECT pg_current_xact_id()"); err != nil {
			t.Fatal(err)
		}
	}
}

// After a crash restart the server hands out again the txids of the
// transactions whose commit records it lost (asynchronous commit), and its
// postmaster start time does not change. An event committed after the
// crash with such a reused txid, behind the relay's claim cursor, must be
// delivered at once, not when a sweep comes across it (SweepInterval is an
// hour here), even when the server's xmax has moved past the cursor again
// by the time the relay reconnects.
func TestCrashRestart_ReusedTxidIsDeliveredAtOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// Asynchronous commit, and nothing that would flush the WAL before the
	// crash: no WAL writer round for 10 s, no background writes of dirty
	// pages (each flushes the WAL up to its page first), no autovacuum, no
	// checkpoint.
	c, pool := migratedCluster(t, pgcluster.Options{Settings: map[string]string{
		"fsync": "off", "max_connections": "40", "synchronous_commit": "off",
		"wal_writer_delay": "10000ms", "wal_writer_flush_after": "0", "checkpoint_timeout": "1h",
		"bgwriter_lru_maxpages": "0", "autovacuum": "off",
	}})
	proxy := tcpproxy.Start(t, fmt.Sprintf("127.0.0.1:%d", c.Port()))
	relayURL := fmt.Sprintf("postgres://postgres@%s/postgres?sslmode=disable&connect_timeout=2", proxy.Addr())
	b := &bundle{url: relayURL, pool: pool}
	rec := newRecorder(nil)
	d, _ := b.start(t, rec, fast(dispatcher.Config{PollInterval: 20 * time.Millisecond, SweepInterval: time.Hour}))
	first := b.enqueue(t, 1, "a", false)[0]
	waitFor(t, 30*time.Second, "the first event delivered", func() bool { return rec.count(first) == 1 })

	// Should the server have written the burnt commits out before the crash
	// all the same, no txid would be handed out again: then the crash is
	// tried again (none was needed in 24 runs once crashBackend waited for
	// the crash itself; before, xmax was at times read before the postmaster
	// had noticed the crash).
	var before, after int64
	for attempt := 1; ; attempt++ {
		if _, err := pool.Exec(ctx, "CHECKPOINT"); err != nil {
			t.Fatal(err)
		}
		burnXids(t, pool, 30) // commit records that stay in the WAL buffers
		before = xmax(t, pool)
		idle := d.Stats().IdleWaits
		waitFor(t, 30*time.Second, "the relay's cursor past the burnt txids", func() bool { return d.Stats().IdleWaits >= idle+2 })
		proxy.Down()

		crashBackend(t, c.URL())
		pool.Reset()
		after = xmax(t, pool)
		if after < before {
			break
		}
		t.Logf("attempt %d: xmax %d after the crash, %d before: the commit records were written out, so no txid is handed out again; crashing again", attempt, after, before)
		if attempt == 10 {
			t.Fatalf("in each of %d crashes the commit records were written out before the crash: no txid was handed out again (the test needs them lost)", attempt)
		}
		listens := d.Stats().Listens
		proxy.Up()
		waitFor(t, 30*time.Second, "the relay back after the crash", func() bool { return d.Stats().Listens > listens })
	}
	ev := b.enqueue(t, 1, "a", false)[0]
	var txid int64
	if err := pool.QueryRow(ctx, "SELECT txid::text::bigint FROM outbox WHERE id = $1", ev).Scan(&txid); err != nil || txid >= before {
		t.Fatalf("the new event's txid %d (%v), want one handed out before the crash (below %d)", txid, err, before)
	}
	burnXids(t, pool, int(before-after)+5) // xmax past the cursor again
	reopened := time.Now()
	proxy.Up()
	waitFor(t, 30*time.Second, "the event committed after the crash delivered", func() bool { return rec.count(ev) == 1 })
	t.Logf("relay reconnected -> event with a reused txid delivered: %s", time.Since(reopened).Round(time.Millisecond))
}
