package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/pgoutbox/bench/internal/cluster"
	"github.com/pgoutbox/pgoutbox/dispatcher"
	"github.com/pgoutbox/pgoutbox/migrations"
)

// Item "databases": one `pgoutbox run` over 200 databases of one server
// (package fleet), on a cluster of its own (200 databases need more
// connections than the suite's server allows): what a quiet fleet costs
// with each wake-up (relay CPU and RSS, the machine's busy share, server
// connections), how long one event waits in each database, the skew case
// (one database drains a backlog of 100,000 while the others each get an
// event now and then: their latency against the same without the backlog),
// the console's fleet overview, and the pg_stat_database read that the
// stats wake-up makes per server, with 200 and 1,000 databases.

const (
	dbsN          = 200
	dbsBacklog    = 100_000
	dbsIdleWindow = 30 * time.Second
	dbsEventEvery = 50 * time.Millisecond
)

// databasesResult is the item's figures.
type databasesResult struct {
	N        int
	Settings string
	Wakes    []databasesWake
	Skew     databasesSkew
	Console  databasesConsole
	Probe    []databasesProbe
}

// databasesWake is one wake-up's idle cost and single-event latency.
type databasesWake struct {
	Wake                 string
	RelayCPU             float64 // share of one core over the idle window
	MachineBusy          float64 // share of the machine (both cores) busy over the window
	RSSMiB               float64 // relay's resident set at the end of the window
	Conns, MaxConnsPerDB int     // server connections to the 200 databases, and the most to one
	P50, P99, Max        time.Duration
	Events               int
}

// databasesSkew is the fairness case.
type databasesSkew struct {
	BaseP50, BaseP99 time.Duration // quiet databases, no backlog
	SkewP50, SkewP99 time.Duration // the same while one database drains dbsBacklog
	BaseN, SkewN     int
	Drain            time.Duration
	Ratio            float64 // SkewP99 / BaseP99
	MaxConnsBusyDB   int
}

type databasesConsole struct {
	FirstRead time.Duration // from the first look until every database is read
	P50, Max  time.Duration // Server-Timing of the overview, 20 looks
}

type databasesProbe struct {
	Databases int
	Median    time.Duration
}

func runDatabases(ctx context.Context, e *env) error {
	settings := map[string]string{"max_connections": "1000", "shared_buffers": "512MB"}
	logf("starting a cluster of its own (%s)", settingsString(settings))
	c, err := cluster.Start(ctx, settings)
	if err != nil {
		return err
	}
	defer c.Stop() //nolint:errcheck
	admin, err := pgxpool.New(ctx, c.URL("postgres"))
	if err != nil {
		return err
	}
	defer admin.Close()
	r := &databasesResult{N: dbsN, Settings: settingsString(settings)}
	if err := createFleetDatabases(ctx, admin, c); err != nil {
		return err
	}
	names := make([]string, dbsN)
	for i := range names {
		names[i] = fmt.Sprintf("bench_db_%03d", i)
	}
	discover := []string{"--discover-databases", c.URL("postgres"), "--discover-pattern", `bench\_db\_%`}
	for _, wake := range []string{"listen", "stats", "poll"} {
		w, err := databasesIdle(ctx, c, admin, names, discover, wake)
		if err != nil {
			return fmt.Errorf("wake %s: %w", wake, err)
		}
		logf("  %s: relay %.1f%% of a core, machine %.1f%% busy, RSS %.0f MiB, %d connections (at most %d to one database); one event: p50 %s, p99 %s, max %s",
			wake, w.RelayCPU*100, w.MachineBusy*100, w.RSSMiB, w.Conns, w.MaxConnsPerDB, w.P50, w.P99, w.Max)
		r.Wakes = append(r.Wakes, w)
	}
	if r.Skew, err = databasesSkewCase(ctx, c, admin, names, discover); err != nil {
		return fmt.Errorf("skew: %w", err)
	}
	s := r.Skew
	logf("  skew: quiet databases p50/p99 %s / %s without a backlog, %s / %s while one drains %d (%s): p99 %.2f×",
		s.BaseP50, s.BaseP99, s.SkewP50, s.SkewP99, dbsBacklog, s.Drain, s.Ratio)
	if r.Console, err = databasesConsoleCase(ctx, discover); err != nil {
		return fmt.Errorf("console: %w", err)
	}
	logf("  console: every database read %s after the first look; overview server time p50 %s, max %s",
		r.Console.FirstRead, r.Console.P50, r.Console.Max)
	if r.Probe, err = databasesProbeCost(ctx, admin, c, e.o.full); err != nil {
		return fmt.Errorf("probe: %w", err)
	}
	for _, p := range r.Probe {
		logf("  pg_stat_database read with %d databases: %s (median)", p.Databases, p.Median)
	}
	e.res.Databases = r
	return nil
}

func settingsString(s map[string]string) string {
	keys := make([]string, 0, len(s))
	for k := range s {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var out []string
	for _, k := range keys {
		out = append(out, k+"="+s[k])
	}
	return strings.Join(out, ", ")
}

// createFleetDatabases migrates a template and creates the databases from it.
func createFleetDatabases(ctx context.Context, admin *pgxpool.Pool, c *cluster.Cluster) error {
	t0 := time.Now()
	if _, err := admin.Exec(ctx, "CREATE DATABASE bench_tmpl"); err != nil {
		return err
	}
	pool, err := pgxpool.New(ctx, c.URL("bench_tmpl"))
	if err != nil {
		return err
	}
	m, err := migrations.FromPool(pool)
	if err == nil {
		_, err = m.Up(ctx)
		m.Close()
	}
	pool.Close()
	if err != nil {
		return err
	}
	for i := range dbsN {
		if _, err := admin.Exec(ctx, fmt.Sprintf("CREATE DATABASE bench_db_%03d TEMPLATE bench_tmpl", i)); err != nil {
			return err
		}
	}
	logf("  %d migrated databases created in %s", dbsN, time.Since(t0).Round(100*time.Millisecond))
	return nil
}

// fleetRelay starts `pgoutbox run --publisher discard` over the databases
// and waits until every one is served.
func fleetRelay(ctx context.Context, args ...string) (*relayProc, error) {
	p, err := startRelayWith(nil, "discard", args...) // defaults.go
	if err != nil {
		return nil, err
	}
	up := regexp.MustCompile(`(?m)^pgoutbox_database_up\{database="[^"]+"[^}]*\} 1$`)
	deadline := time.Now().Add(2 * time.Minute)
	for {
		resp, err := metricsClient.Get(p.metrics)
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if len(up.FindAllIndex(b, -1)) == dbsN {
				return p, nil
			}
		}
		if time.Now().After(deadline) {
			_ = p.stop()
			return nil, fmt.Errorf("not every database served within 2 minutes: %s", p.stderr.String())
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// connections counts the server connections to the fleet's databases.
func connections(ctx context.Context, admin *pgxpool.Pool) (total, most int, err error) {
	err = admin.QueryRow(ctx, `SELECT coalesce(sum(n), 0)::int, coalesce(max(n), 0)::int FROM (
		SELECT count(*) AS n FROM pg_stat_activity
		 WHERE datname LIKE 'bench\_db\_%' AND backend_type = 'client backend' GROUP BY datname) AS c`).Scan(&total, &most)
	return total, most, err
}

func procRSSMiB(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			f := strings.Fields(v)
			kb, _ := strconv.ParseFloat(f[0], 64)
			return kb / 1024
		}
	}
	return 0
}

// databasesIdle measures one wake-up: the quiet fleet's cost over
// dbsIdleWindow, then one event into each database in turn.
func databasesIdle(ctx context.Context, c *cluster.Cluster, admin *pgxpool.Pool, names, discover []string, wake string) (databasesWake, error) {
	w := databasesWake{Wake: wake}
	p, err := fleetRelay(ctx, append(discover, "--wake", wake)...)
	if err != nil {
		return w, err
	}
	defer p.stop()               //nolint:errcheck
	time.Sleep(10 * time.Second) // start-up done: first gauges, first polls
	cpu0, _ := p.cpu()
	m0, t0 := readMachineCPU(), time.Now()
	time.Sleep(dbsIdleWindow)
	cpu1, _ := p.cpu()
	w.RelayCPU = float64(cpu1-cpu0) / float64(time.Since(t0))
	w.MachineBusy = m0.share(readMachineCPU())
	w.RSSMiB = procRSSMiB(p.cmd.Process.Pid)
	if w.Conns, w.MaxConnsPerDB, err = connections(ctx, admin); err != nil {
		return w, err
	}
	lat, err := singleEvents(ctx, c, names, dbsEventEvery)
	if err != nil {
		return w, err
	}
	w.Events = len(lat)
	w.P50, w.P99, w.Max = pct(lat, 0.5), pct(lat, 0.99), pct(lat, 1)
	return w, nil
}

// singleEvents commits one event into each of targets in turn, one every
// every, and returns each event's latency: from its COMMIT returning here
// to its done_at (the finalize after the publish), read afterwards.
func singleEvents(ctx context.Context, c *cluster.Cluster, targets []string, every time.Duration) ([]time.Duration, error) {
	conns := map[string]*pgx.Conn{}
	defer func() {
		for _, cn := range conns {
			cn.Close(context.Background())
		}
	}()
	type sent struct {
		db string
		id int64
		at time.Time
	}
	var all []sent
	// The producers' sessions are open and idle for a second and a half
	// before they commit, as an application's pooled connections are (a
	// session publishes its statistics at most once a second: the stats
	// wake-up sees a commit at once only after such a pause).
	for _, name := range targets {
		if conns[name] == nil {
			cn, err := pgx.Connect(ctx, c.URL(name))
			if err != nil {
				return nil, err
			}
			conns[name] = cn
		}
	}
	time.Sleep(1500 * time.Millisecond)
	tick := time.NewTicker(every)
	defer tick.Stop()
	for _, name := range targets {
		cn := conns[name]
		var id int64
		err := pgx.BeginFunc(ctx, cn, func(tx pgx.Tx) error {
			var err error
			id, err = dispatcher.Enqueue(ctx, tx, dispatcher.Event{AggregateType: "bench", AggregateID: "one", EventType: "benchmark", Payload: []byte(`{}`)})
			return err
		})
		if err != nil {
			return nil, err
		}
		all = append(all, sent{name, id, time.Now()})
		<-tick.C
	}
	var out []time.Duration
	deadline := time.Now().Add(time.Minute)
	for _, s := range all {
		for {
			var done *time.Time
			if err := conns[s.db].QueryRow(ctx, "SELECT done_at FROM outbox WHERE id = $1", s.id).Scan(&done); err != nil {
				return nil, err
			}
			if done != nil {
				out = append(out, max(done.Sub(s.at), 0))
				break
			}
			if time.Now().After(deadline) {
				return nil, fmt.Errorf("event %d of %s not delivered within a minute", s.id, s.db)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return out, nil
}

func pct(xs []time.Duration, q float64) time.Duration {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	i := int(q*float64(len(s))+0.5) - 1
	return s[min(max(i, 0), len(s)-1)].Round(10 * time.Microsecond)
}

// databasesSkewCase: quiet databases' single events without, then during,
// a backlog of dbsBacklog in the first database (listen wake-ups, the
// fleet's default limits).
func databasesSkewCase(ctx context.Context, c *cluster.Cluster, admin *pgxpool.Pool, names, discover []string) (databasesSkew, error) {
	var s databasesSkew
	p, err := fleetRelay(ctx, append(discover, "--wake", "listen")...)
	if err != nil {
		return s, err
	}
	defer p.stop() //nolint:errcheck
	time.Sleep(5 * time.Second)
	quiet := names[1:]
	base, err := singleEvents(ctx, c, quiet, dbsEventEvery)
	if err != nil {
		return s, err
	}
	busy, err := pgx.Connect(ctx, c.URL(names[0]))
	if err != nil {
		return s, err
	}
	defer busy.Close(context.Background())
	// The backlog, committed in one statement; the drain starts at its COMMIT.
	if _, err := busy.Exec(ctx, `INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
		SELECT 'bench', 'backlog', 'benchmark', '{}' FROM generate_series(1, $1::int)`, dbsBacklog); err != nil {
		return s, err
	}
	start := time.Now()
	var (
		wg   sync.WaitGroup
		skew []time.Duration
		serr error
	)
	stop := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		// Rounds over the quiet databases until the backlog is drained.
		for {
			select {
			case <-stop:
				return
			default:
			}
			lat, err := singleEvents(ctx, c, quiet[:20], dbsEventEvery)
			if err != nil {
				serr = err
				return
			}
			skew = append(skew, lat...)
		}
	}()
	for {
		var left int
		if err := busy.QueryRow(ctx, "SELECT count(*) FROM outbox WHERE status <> 'done'").Scan(&left); err != nil {
			return s, err
		}
		if _, most, err := connections(ctx, admin); err == nil {
			s.MaxConnsBusyDB = max(s.MaxConnsBusyDB, most)
		}
		if left == 0 {
			break
		}
		if time.Since(start) > 5*time.Minute {
			return s, fmt.Errorf("backlog not drained in 5 minutes (%d left)", left)
		}
		time.Sleep(100 * time.Millisecond)
	}
	s.Drain = time.Since(start)
	close(stop)
	wg.Wait()
	if serr != nil {
		return s, serr
	}
	s.BaseN, s.SkewN = len(base), len(skew)
	s.BaseP50, s.BaseP99 = pct(base, 0.5), pct(base, 0.99)
	s.SkewP50, s.SkewP99 = pct(skew, 0.5), pct(skew, 0.99)
	if s.BaseP99 > 0 {
		s.Ratio = float64(s.SkewP99) / float64(s.BaseP99)
	}
	return s, nil
}

// databasesConsoleCase serves `pgoutbox ui` over the databases and reads
// the overview's Server-Timing.
func databasesConsoleCase(ctx context.Context, discover []string) (databasesConsole, error) {
	var r databasesConsole
	bin, err := relayBin.get()
	if err != nil {
		return r, err
	}
	port, err := freePort()
	if err != nil {
		return r, err
	}
	cmd := exec.Command(bin, append([]string{"ui", "--addr", fmt.Sprintf("127.0.0.1:%d", port), "--read-only"}, discover...)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return r, err
	}
	defer func() { _ = cmd.Process.Signal(os.Interrupt); _ = cmd.Wait() }()
	base := fmt.Sprintf("http://127.0.0.1:%d/", port)
	look := func() (string, time.Duration, error) {
		resp, err := metricsClient.Get(base)
		if err != nil {
			return "", 0, err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var ms float64
		fmt.Sscanf(resp.Header.Get("Server-Timing"), "app;dur=%g", &ms)
		return string(b), time.Duration(ms * float64(time.Millisecond)), nil
	}
	var t0 time.Time
	began := time.Now()
	for {
		body, _, err := look()
		if err == nil {
			if t0.IsZero() {
				t0 = time.Now()
			}
			if !strings.Contains(body, "not read yet") && strings.Count(body, `<td><a href="/db/`) == dbsN {
				break
			}
		}
		if t0.IsZero() && time.Since(began) > time.Minute {
			return r, fmt.Errorf("ui did not answer: %s", stderr.String())
		}
		select {
		case <-ctx.Done():
			return r, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	r.FirstRead = time.Since(t0).Round(time.Millisecond)
	var times []time.Duration
	for range 20 {
		_, d, err := look()
		if err != nil {
			return r, err
		}
		times = append(times, d)
		time.Sleep(300 * time.Millisecond)
	}
	r.P50, r.Max = pct(times, 0.5), pct(times, 1)
	return r, nil
}

// databasesProbeCost times the stats wake-up's read of pg_stat_database
// with the 200 databases and, with -full, with 800 more (empty ones;
// creating them takes minutes).
func databasesProbeCost(ctx context.Context, admin *pgxpool.Pool, c *cluster.Cluster, full bool) ([]databasesProbe, error) {
	measure := func() (databasesProbe, error) {
		var n int
		if err := admin.QueryRow(ctx, "SELECT count(*) FROM pg_database").Scan(&n); err != nil {
			return databasesProbe{}, err
		}
		var times []time.Duration
		for range 200 {
			t := time.Now()
			rows, err := admin.Query(ctx, "SELECT datname, tup_inserted FROM pg_stat_database WHERE datname IS NOT NULL")
			if err != nil {
				return databasesProbe{}, err
			}
			for rows.Next() {
			}
			rows.Close()
			times = append(times, time.Since(t))
		}
		return databasesProbe{Databases: n, Median: pct(times, 0.5)}, nil
	}
	a, err := measure()
	if err != nil || !full {
		return []databasesProbe{a}, err
	}
	for i := range 1000 - a.Databases {
		if _, err := admin.Exec(ctx, fmt.Sprintf("CREATE DATABASE bench_extra_%04d TEMPLATE template0", i)); err != nil {
			return nil, err
		}
	}
	// pg_stat_database lists a database once a session touched it.
	for i := range 1000 - a.Databases {
		cn, err := pgx.Connect(ctx, c.URL(fmt.Sprintf("bench_extra_%04d", i)))
		if err != nil {
			return nil, err
		}
		cn.Close(ctx)
	}
	b, err := measure()
	if err != nil {
		return nil, err
	}
	return []databasesProbe{a, b}, nil
}
