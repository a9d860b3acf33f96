package fleet_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/pgoutbox/pgoutbox/dispatcher"
	"github.com/pgoutbox/pgoutbox/fleet"
	"github.com/pgoutbox/pgoutbox/internal/pgtest"
)

// Fifty databases with events, one URL nobody answers, and one database
// dropped while the fleet runs: every event of the others is delivered once
// per source, each database under a source of its own, the unreachable and
// the dropped ones are reported failing, and the others go on.
func TestFiftyDatabasesOneUnreachableOneDropped(t *testing.T) {
	dbs := migrated(t, 50)
	for i, d := range dbs {
		enqueue(t, d.URL, 10, "u", false)
		enqueue(t, d.URL, 10, fmt.Sprintf("agg-%d", i), true)
	}
	dbs = append(dbs, fleet.Database{Name: "nowhere", URL: "postgres://postgres@127.0.0.1:1/nowhere?sslmode=disable&connect_timeout=2"})
	pub := newRecorder()
	f, _ := start(t, pub, dbs, fleet.Config{})
	waitFor(t, 2*time.Minute, "1,000 events delivered", func() bool { return pub.distinct() == 1000 })

	sources := pub.sources()
	if len(sources) != 50 {
		t.Errorf("%d distinct sources for 50 databases: %v", len(sources), sources)
	}
	for _, d := range dbs[:50] {
		s, _ := status(f, d.Name)
		if s.State != fleet.StateRunning || sources[s.Source] != 20 {
			t.Errorf("%s: %s, source %q with %d events, want running with 20", d.Name, s.State, s.Source, sources[s.Source])
		}
		if !strings.Contains(s.Source, dbName(t, d.URL)) {
			t.Errorf("%s: source %q does not name its database %s", d.Name, s.Source, dbName(t, d.URL))
		}
	}
	waitFor(t, 30*time.Second, "the unreachable URL reported", func() bool {
		s, _ := status(f, "nowhere")
		return s.State == fleet.StateFailing && strings.Contains(s.Reason, "unreachable")
	})

	// Drop one while running: it is reported, the others go on.
	dropped := dbs[7]
	admin(t, "DROP DATABASE "+dbName(t, dropped.URL)+" WITH (FORCE)")
	waitFor(t, time.Minute, "the dropped database reported", func() bool {
		s, _ := status(f, dropped.Name)
		return s.State == fleet.StateFailing && strings.Contains(s.Reason, "does not exist")
	})
	for i, d := range dbs[:50] {
		if i != 7 {
			enqueue(t, d.URL, 2, "after", false)
		}
	}
	waitFor(t, time.Minute, "the events committed after the drop delivered", func() bool { return pub.distinct() == 1000+49*2 })
	pub.checkOrder(t)
	st := f.Stats()
	if st.Databases != 51 || st.Running != 49 || st.Failing != 2 {
		t.Errorf("fleet stats: %d databases, %d running, %d failing; want 51, 49, 2", st.Databases, st.Running, st.Failing)
	}
}

// Two fleets (two relays) over the same fifty databases share the work
// through each database's claims: every event is delivered, both work, and
// every row ends done.
func TestTwoFleetsOverTheSameFiftyDatabases(t *testing.T) {
	dbs := migrated(t, 50)
	for i, d := range dbs {
		enqueue(t, d.URL, 20, "u", false)
		enqueue(t, d.URL, 20, fmt.Sprintf("agg-%d", i), true)
	}
	pub := newRecorder()
	var a, b atomic.Int64
	one, _ := start(t, dispatcher.PublisherFunc(func(ctx context.Context, m dispatcher.Message) error {
		a.Add(1)
		return pub.Publish(ctx, m)
	}), dbs, fleet.Config{Dispatcher: dispatcher.Config{Owner: "one", Batch: 5}})
	two, _ := start(t, dispatcher.PublisherFunc(func(ctx context.Context, m dispatcher.Message) error {
		b.Add(1)
		return pub.Publish(ctx, m)
	}), dbs, fleet.Config{Dispatcher: dispatcher.Config{Owner: "two", Batch: 5}})
	waitFor(t, 2*time.Minute, "2,000 events delivered", func() bool { return pub.distinct() == 2000 })
	for _, d := range dbs {
		waitFor(t, time.Minute, d.Name+" finalized", func() bool { return count(t, d.URL, "status = 'done'") == 40 })
	}
	if a.Load() == 0 || b.Load() == 0 {
		t.Errorf("one relay published %d, the other %d: both should have worked", a.Load(), b.Load())
	}
	pub.checkOrder(t)
	// The counters move once each finalize statement has returned, just
	// after its rows are visible. A finalize whose answer was lost (a
	// database error after its COMMIT, on a loaded machine) is retried,
	// finds its rows done already and counts them as leases lost: then
	// published and lost together cover the 2,000.
	var total dispatcher.Stats
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("counters: published %d, leases lost %d, database errors %d, recovered %d",
				total.Published, total.LeaseLost, total.DBErrors, total.Recovered)
		}
	})
	waitFor(t, time.Minute, "2,000 counted published", func() bool {
		total = one.Stats().Total
		o := two.Stats().Total
		total.Published, total.LeaseLost, total.DBErrors, total.Recovered = total.Published+o.Published,
			total.LeaseLost+o.LeaseLost, total.DBErrors+o.DBErrors, total.Recovered+o.Recovered
		return total.Published >= 2000 || (total.DBErrors > 0 && total.Published+total.LeaseLost >= 2000)
	})
}

// Databases created while the fleet runs are found by discovery and
// served; a database that disappears from the list stops being served.
func TestDiscoveryFindsDatabasesAddedWhileRunning(t *testing.T) {
	first := pgtest.NewURL(t)
	// Discovery by a query over the test databases this test made.
	var made []string
	made = append(made, dbName(t, first))
	list := func() string { return "SELECT unnest(ARRAY['" + strings.Join(made, "','") + "'])" }
	var query atomic.Pointer[string]
	q := list()
	query.Store(&q)
	pub := newRecorder()
	f, _ := start(t, pub, nil, fleet.Config{
		Discover: func(ctx context.Context) ([]fleet.Database, error) {
			return fleet.QueryDatabases(pgtest.AdminURL(t), *query.Load())(ctx)
		},
		DiscoverInterval: 50 * time.Millisecond,
	})
	waitFor(t, 30*time.Second, "the first database served", func() bool {
		s, ok := status(f, made[0])
		return ok && s.State == fleet.StateRunning
	})
	second := pgtest.NewURL(t)
	enqueue(t, second, 5, "a", false)
	made = append(made, dbName(t, second))
	q2 := list()
	query.Store(&q2)
	waitFor(t, time.Minute, "the events of the database added at run time", func() bool { return pub.distinct() == 5 })
	if s, _ := status(f, made[1]); s.State != fleet.StateRunning {
		t.Errorf("the added database: %s, want running", s.State)
	}
	q3 := "SELECT '" + made[1] + "'"
	query.Store(&q3)
	waitFor(t, 30*time.Second, "the first database let go", func() bool {
		_, ok := status(f, made[0])
		return !ok
	})
	if f.Stats().Discoveries < 3 {
		t.Errorf("%d discoveries", f.Stats().Discoveries)
	}
}

// A read-only database, an unmigrated one and one whose every claim fails
// are reported with their reason and retried with backoff, and cost the
// others nothing.
func TestUnservableDatabasesAreReportedAndRetried(t *testing.T) {
	good := migrated(t, 2)
	readOnly := pgtest.NewURL(t)
	admin(t, "ALTER DATABASE "+dbName(t, readOnly)+" SET default_transaction_read_only = on")
	bare := dbName(t, readOnly) + "_bare"
	admin(t, "CREATE DATABASE "+bare)
	t.Cleanup(func() { admin(t, "DROP DATABASE IF EXISTS "+bare+" WITH (FORCE)") })
	// A role that may read the outbox but not claim from it.
	noClaim := pgtest.NewURL(t)
	enqueue(t, noClaim, 1, "x", false)
	role := "fleet_reader_" + dbName(t, noClaim)[len("pgoutbox_test_"):]
	admin(t, "CREATE ROLE "+role+" LOGIN")
	p := pool(t, noClaim)
	t.Cleanup(func() {
		_, _ = p.Exec(context.Background(), "DROP OWNED BY "+role)
		admin(t, "DROP ROLE "+role)
	})
	if _, err := p.Exec(context.Background(), "GRANT SELECT ON outbox TO "+role); err != nil {
		t.Fatal(err)
	}
	readerURL := strings.Replace(noClaim, "postgres@", role+"@", 1)
	dbs := append(good,
		fleet.Database{Name: "readonly", URL: readOnly},
		fleet.Database{Name: "bare", URL: strings.Replace(readOnly, dbName(t, readOnly), bare, 1)},
		fleet.Database{Name: "noclaim", URL: readerURL},
	)
	pub := newRecorder()
	f, _ := start(t, pub, dbs, fleet.Config{})
	want := map[string]string{"readonly": "read-only", "bare": "not migrated", "noclaim": "every claim fails"}
	for name, reason := range want {
		waitFor(t, time.Minute, name+" reported", func() bool {
			s, _ := status(f, name)
			return s.State == fleet.StateFailing && strings.Contains(s.Reason, reason)
		})
	}
	waitFor(t, time.Minute, "retried with backoff", func() bool {
		for name := range want {
			if s, _ := status(f, name); s.Failures < 2 {
				return false
			}
		}
		return true
	})
	for _, d := range good {
		enqueue(t, d.URL, 3, "a", false)
	}
	waitFor(t, time.Minute, "the good databases' events", func() bool { return pub.distinct() == 6 })
	if s, _ := status(f, "noclaim"); !strings.Contains(s.Reason, "permission denied") {
		t.Errorf("noclaim's reason %q does not carry the claim's error", s.Reason)
	}
	// Fixed, it is served at its next check.
	if _, err := p.Exec(context.Background(), "GRANT UPDATE ON outbox TO "+role); err != nil {
		t.Fatal(err)
	}
	waitFor(t, time.Minute, "noclaim served once fixed", func() bool { return pub.distinct() == 7 })
}

// WakePoll and WakeStats deliver without any LISTEN connection; WakeStats
// finds a database written to through pg_stat_database, even when its
// poll schedule has backed off to an hour.
func TestWakePollAndWakeStats(t *testing.T) {
	for _, tc := range []struct {
		wake             fleet.Wake
		pollMin, pollMax time.Duration
	}{
		{fleet.WakePoll, 10 * time.Millisecond, 200 * time.Millisecond},
		// No poll after the first: only the probe can find the events.
		{fleet.WakeStats, time.Hour, time.Hour},
	} {
		t.Run(tc.wake.String(), func(t *testing.T) {
			dbs := migrated(t, 3)
			pub := newRecorder()
			f, _ := start(t, pub, dbs, fleet.Config{Wake: tc.wake, PollMin: tc.pollMin, PollMax: tc.pollMax,
				ProbeInterval: 20 * time.Millisecond})
			// Each database's first round, and the round of the schedule's
			// first wake-up (which may come after the first round went
			// idle): two idle waits.
			waitFor(t, 30*time.Second, "every database polled", func() bool {
				for _, s := range f.Status() {
					if s.Stats.IdleWaits < 2 {
						return false
					}
				}
				return f.Stats().Polls >= 3
			})
			for _, s := range f.Status() {
				if s.Stats.Listens != 0 {
					t.Errorf("%s listened %d times", s.Name, s.Stats.Listens)
				}
			}
			if tc.wake == fleet.WakeStats {
				// The probe's first read polls every database once.
				waitFor(t, 30*time.Second, "the probe's first read", func() bool { return f.Stats().ProbeWakes >= 3 })
			}
			wakes := f.Stats().ProbeWakes
			for i, d := range dbs {
				enqueue(t, d.URL, i+1, "a", false)
			}
			waitFor(t, time.Minute, "6 events delivered", func() bool { return pub.distinct() == 6 })
			if tc.wake == fleet.WakeStats && f.Stats().ProbeWakes < wakes+3 {
				t.Errorf("probe wake-ups %d after the inserts, %d before: want one more per database", f.Stats().ProbeWakes, wakes)
			}
		})
	}
}

// Every span of a database's dispatcher names its database.
func TestSpansCarryTheDatabase(t *testing.T) {
	dbs := migrated(t, 2)
	for _, d := range dbs {
		enqueue(t, d.URL, 1, "a", false)
	}
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	pub := newRecorder()
	start(t, pub, dbs, fleet.Config{TracerProvider: tp})
	waitFor(t, time.Minute, "2 events delivered", func() bool { return pub.distinct() == 2 })
	seen := map[string]bool{}
	for _, s := range rec.Ended() {
		var db string
		for _, a := range s.Attributes() {
			if a.Key == "pgoutbox.database" {
				db = a.Value.AsString()
			}
		}
		if db == "" {
			t.Errorf("span %q has no pgoutbox.database", s.Name())
		}
		seen[db] = true
	}
	if !seen["d00"] || !seen["d01"] {
		t.Errorf("spans of %v, want d00 and d01", seen)
	}
}

// A database that goes quiet keeps one pooled connection (plus its LISTEN),
// although its polls and recovery passes, every 20ms here, would keep two
// in use for ever, and no idle timeout closes them.
func TestQuietDatabaseKeepsOnePooledConnection(t *testing.T) {
	dbs := migrated(t, 1)
	enqueue(t, dbs[0].URL, 500, "a", false)
	pub := newRecorder()
	start(t, pub, dbs, fleet.Config{WatchInterval: 50 * time.Millisecond, IdleConnTimeout: time.Hour, // only the trim closes
		Dispatcher: dispatcher.Config{PollInterval: 20 * time.Millisecond, ReapInterval: 20 * time.Millisecond, Batch: 20}})
	waitFor(t, time.Minute, "500 events delivered", func() bool { return pub.distinct() == 500 })
	name := dbName(t, dbs[0].URL)
	admin := pool(t, pgtest.AdminURL(t))
	conns := func() int {
		var n int
		// The LISTEN connection's last statement is its LISTEN or one of
		// the wake-up's lock statements (queries/wake.sql).
		if err := admin.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
			WHERE datname = $1 AND backend_type = 'client backend' AND query NOT ILIKE 'LISTEN%'
			  AND query NOT LIKE '-- name: OutboxWake%'`, name).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	waitFor(t, time.Minute, "one pooled connection left", func() bool { return conns() == 1 })
}
