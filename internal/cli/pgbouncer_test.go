package cli

// pgoutbox run and enqueue behind PgBouncer in transaction pooling mode
// (Debian's pgbouncer, started per test by pgtest.BouncerURL), with plain
// URLs: the CLI must work there without any URL parameter.

import (
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pgoutbox/pgoutbox/internal/pgbouncer"
	"github.com/pgoutbox/pgoutbox/internal/pgtest"
)

// bouncedDB is a test database and the same database through PgBouncer.
func bouncedDB(t *testing.T) (direct, through *testDB) {
	t.Helper()
	direct = newDB(t)
	u := pgtest.BouncerURL(t, direct.url, pgbouncer.Options{PoolSize: 4})
	return direct, &testDB{url: u, pool: pgtest.Pool(t, direct.url)}
}

// Producers (pgoutbox enqueue) and a polling relay (--no-listen) through
// the pooler: every event is delivered.
func TestRun_BehindPgBouncerWithNoListenDeliversEveryEvent(t *testing.T) {
	t.Parallel()
	direct, through := bouncedDB(t)
	b := start(t, invocation{env: through.env()}, "run", "--publisher", "stdout", "--no-listen", "--poll-interval", "20ms")
	var ids []int64
	for i := 0; i < 20; i++ {
		ids = append(ids, enqueueCLI(t, through, "--payload", `{"n":1}`))
	}
	eventually(t, 60*time.Second, "20 done", func() bool { return direct.count(t, "status = 'done'") == 20 })
	r := b.stop(t)
	wantCode(t, r, ExitOK)
	for _, id := range ids {
		if n := strings.Count(r.stdout, `"id":"`+strconv.FormatInt(id, 10)+`"`); n != 1 {
			t.Fatalf("message %d printed %d times, want 1\n%s", id, n, r)
		}
	}
	if strings.Contains(r.stderr, "prepared statement") || strings.Contains(r.stderr, "level=WARN") {
		t.Fatalf("warnings behind the pooler\n%s", r)
	}
}

// The relay's pool goes through the pooler, its LISTEN connection straight
// to the server (--listen-url): with --poll-interval 1h only NOTIFY wakes
// it, and it does.
func TestRun_BehindPgBouncerListenURLWakesOnNotify(t *testing.T) {
	t.Parallel()
	direct, through := bouncedDB(t)
	b := start(t, invocation{env: through.env()}, "run", "--publisher", "stdout", "--listen-url", direct.url,
		"--poll-interval", "1h", "--wake-window", "10ms", "--metrics-addr", "127.0.0.1:0", "--log-level", "debug")
	base := b.metricsURL(t)
	eventually(t, 30*time.Second, "LISTEN registered", func() bool { return strings.Contains(b.stderr.String(), "msg=listening") })
	id := enqueueCLI(t, through, "--payload", `{}`)
	eventually(t, 30*time.Second, "the message done", func() bool { return direct.status(t, id) == "done" })
	// "listening" is logged before the wake window of the LISTEN closes: the
	// claimer may find the message by itself while the listener is still
	// reading the notification. Wait for it to be counted.
	notified := regexp.MustCompile(`(?m)^pgoutbox_notifications_total [1-9]`)
	eventually(t, 30*time.Second, "a notification counted (pgoutbox_notifications_total)", func() bool {
		_, metrics := get(t, base+"/metrics")
		return notified.MatchString(metrics)
	})
	r := b.stop(t)
	wantCode(t, r, ExitOK)
	mustContain(t, r, "stderr", "listen_url=")
}

func TestRun_ListenURLContradictsNoListen(t *testing.T) {
	t.Parallel()
	r := call(t, invocation{env: map[string]string{"DATABASE_URL": "postgres://u@127.0.0.1:1/db"}},
		"run", "--publisher", "discard", "--no-listen", "--listen-url", "postgres://u@127.0.0.1:1/db")
	wantCode(t, r, ExitUsage)
	mustContain(t, r, "stderr", "--listen-url and --no-listen contradict each other")
}

func TestRun_BadListenURLExits1WithoutItsPassword(t *testing.T) {
	t.Parallel()
	r := call(t, invocation{env: map[string]string{"DATABASE_URL": "postgres://u@127.0.0.1:1/db",
		"PGOUTBOX_LISTEN_URL": "postgres://u:listen-s3cr3t@127.0.0.1:notaport/db"}},
		"run", "--publisher", "discard")
	wantCode(t, r, ExitFailure)
	mustContain(t, r, "stderr", "invalid listen URL")
	mustContain(t, r, "stderr", "check PGOUTBOX_LISTEN_URL")
	if strings.Contains(r.stdout+r.stderr, "listen-s3cr3t") {
		t.Fatalf("password leaked\n%s", r)
	}
}
