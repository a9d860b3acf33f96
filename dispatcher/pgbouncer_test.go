package dispatcher_test

// Relays and producers behind PgBouncer in transaction pooling mode
// (Debian's pgbouncer, started per test by pgtest.BouncerURL).

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/pgoutbox/dispatcher"
	"github.com/pgoutbox/pgoutbox/internal/pgbouncer"
	"github.com/pgoutbox/pgoutbox/internal/pgtest"
)

// pooled is a bundle whose pool goes through a transaction-mode PgBouncer;
// direct is the server's own URL.
type pooled struct {
	*bundle
	direct string
}

func setupBouncer(t *testing.T) *pooled {
	t.Helper()
	direct := pgtest.NewURL(t)
	// Producers' pools behind a transaction-mode PgBouncer older than 1.21
	// must not use pgx's default statement cache (named prepared
	// statements live on one server connection; the next transaction may
	// run on another: "prepared statement ... does not exist / already
	// exists"). cache_describe executes through the unnamed statement.
	through := pgtest.BouncerURL(t, direct, pgbouncer.Options{PoolSize: 5}) + "&default_query_exec_mode=cache_describe"
	return &pooled{bundle: &bundle{url: through, pool: pgtest.Pool(t, through)}, direct: direct}
}

// serverPIDs is how many distinct server backends a pool's connections
// landed on over n queries: more than one proves the pool really is
// multiplexed by the pooler (in transaction mode one client connection is
// served by whichever server connection is free).
func serverPIDs(t *testing.T, pool *pgxpool.Pool, n int) int {
	t.Helper()
	pids := map[int32]bool{}
	ctx := context.Background()
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	// A second client holds a transaction open, so the first client's
	// queries cannot all land on the same free server connection.
	other, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = other.Rollback(ctx) }()
	for i := 0; i < n; i++ {
		var pid int32
		if i%2 == 1 {
			if err := other.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
				t.Fatal(err)
			}
			_ = other.Rollback(ctx)
			if other, err = pool.Begin(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if err := conn.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
			t.Fatal(err)
		}
		if pids[pid] = true; len(pids) > 1 {
			break
		}
	}
	return len(pids)
}

// Producers (Enqueue in the business transaction, through a pool on
// PgBouncer in cache_describe mode) and a relay that polls
// (DisableListen, the --no-listen setup): every event is delivered once.
func TestPgBouncer_TransactionModeWithNoListenDeliversEveryEvent(t *testing.T) {
	t.Parallel()
	b := setupBouncer(t)
	rec := newRecorder(nil)
	d, _ := b.start(t, rec, fast(dispatcher.Config{DisableListen: true, PollInterval: 20 * time.Millisecond, Batch: 20, Concurrency: 4}))
	var ids []int64
	for a := 0; a < 20; a++ {
		ids = append(ids, b.enqueue(t, 10, fmt.Sprintf("agg-%d", a), a%2 == 0)...)
	}
	waitFor(t, 60*time.Second, "200 done", func() bool { return b.count(t, "status = 'done'") == 200 })
	// The counter moves once the finalize statement has returned, just
	// after the rows are visible.
	waitFor(t, 30*time.Second, "200 counted published", func() bool { return d.Stats().Published == 200 })
	for _, id := range ids {
		if n := rec.count(id); n != 1 {
			t.Fatalf("message %d published %d times, want 1", id, n)
		}
	}
	if s := d.Stats(); s.Notifications != 0 || s.Listens != 0 {
		t.Fatalf("stats = %+v, want no LISTEN", s)
	}
	if n := serverPIDs(t, b.pool, 400); n < 2 {
		t.Fatalf("the pool's queries ran on %d server connection(s); want the pooler to multiplex them", n)
	}
}

// The pool goes through PgBouncer, the LISTEN connection goes straight to
// the server (Config.ListenURL, --listen-url): with the poll interval at an
// hour, only NOTIFY can wake the idle relay, and it does.
func TestPgBouncer_ListenURLWakesARelayBehindThePooler(t *testing.T) {
	t.Parallel()
	b := setupBouncer(t)
	rec := newRecorder(nil)
	d, _ := b.start(t, rec, fast(dispatcher.Config{PollInterval: time.Hour, WakeWindow: 10 * time.Millisecond, ListenURL: b.direct}))
	waitIdleAndListening(t, d)
	id := b.enqueue(t, 1, "a", false)[0]
	waitFor(t, 30*time.Second, "publish after NOTIFY", func() bool { return rec.count(id) == 1 })
	if d.Stats().Notifications == 0 {
		t.Fatal("no notification was received")
	}
}

// A bad ListenURL is a configuration error that names the field.
func TestPgBouncer_BadListenURLIsAConfigError(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, err := dispatcher.New(b.pool, newRecorder(nil), dispatcher.Config{ListenURL: "postgres://u:pw@host:notaport/db"})
	if err == nil || !errors.Is(err, dispatcher.ErrInvalidConfig) || !strings.Contains(err.Error(), "ListenURL") {
		t.Fatalf("err = %v, want ErrInvalidConfig naming ListenURL", err)
	}
	if strings.Contains(err.Error(), "pw@") {
		t.Fatalf("the password leaked into the error: %v", err)
	}
}
