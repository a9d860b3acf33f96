// Command bench is pgoutbox's benchmark suite. It starts one throwaway
// PostgreSQL cluster (default, durable configuration: fsync on,
// synchronous_commit on; only max_connections and shared_buffers are set),
// measures every item of the suite against it in one run, and writes
// BENCHMARKS.md and PNG charts under docs/bench/ in -out.
//
//	cd bench && go run ./cmd/bench -out ..          # make bench (about 19 minutes; the horizon item about 8 of them)
//	cd bench && go run ./cmd/bench -out .. -full    # make bench-full
//
// Items: (1) drain throughput vs River, (2) sustained mode latency, (3) claim
// cost vs retained done rows, (4) ordered mode and (4b) the producer cost of
// ordered events, (5) the SQL ceiling through
// pgbench, (6) peak RSS while draining 1,000,000 messages (a child process),
// (7) the cost of tracing (tracing.go), (1e) one relay over 200 databases
// (databases.go), (7-9) the pinned horizon: latency
// while a long transaction holds the xmin horizon back (horizon.go), (10)
// what a failing receiver costs (failures.go). Opt-in, with -only: the bloat soak (soak) and
// DELETE retention at the relay's top rate (retention), horizon_soak.go.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/pgoutbox/bench/internal/cluster"
	"github.com/pgoutbox/pgoutbox/migrations"
)

// serverSettings are the only settings the benchmark passes to the server.
// Everything else, durability included, is PostgreSQL's default.
var serverSettings = map[string]string{
	"max_connections": "200",
	"shared_buffers":  "512MB",
}

const (
	outboxDB = "outbox_bench"
	riverDB  = "river_bench"
)

type options struct {
	full       bool
	out        string
	rounds     int
	only       map[string]bool
	url        string // existing server instead of a throwaway cluster (development)
	cpuprofile string
	memprofile string
	noReport   bool
	try        string
	tryN       int
	horizon    horizonOptions // item "horizon" (horizon.go)
	soak       soakOptions    // opt-in items "soak" and "retention" (horizon_soak.go)

	// failuresBefore: a pgoutbox binary of an earlier build the item
	// "failures" runs as well; failuresOnly: its scenarios to run
	// (failures.go).
	failuresBefore, failuresOnly string
}

func (o options) want(item string) bool {
	if optInItems[item] {
		return o.only[item]
	}
	return len(o.only) == 0 || o.only[item]
}

// optInItems run only when -only names them (they are long or answer a
// one-off question): see horizon_soak.go; "defaults" measures a subset of
// item 1 (defaults.go).
var optInItems = map[string]bool{"soak": true, "retention": true, "defaults": true}

func main() {
	var (
		o    options
		only string
		// child mode: drain the outbox in this process and report peak RSS.
		child         = flag.String("child", "", "internal: run a child measurement (drain-rss)")
		childN        = flag.Int("n", 0, "internal: messages the child expects")
		timelineLevel int
	)
	flag.BoolVar(&o.full, "full", false, "full mode: larger runs, more rounds (make bench-full)")
	flag.StringVar(&o.out, "out", "..", "directory for BENCHMARKS.md and docs/bench/*.png")
	flag.IntVar(&o.rounds, "rounds", 0, "drain rounds per system (default 3, full 7)")
	flag.StringVar(&only, "only", "", "comma-separated items to run (drain,fleet,databases,idle,sweep,sustained,claim,ordered,producers,ceiling,rss,tracing,horizon,crash,failures; opt-in: defaults,soak,retention); default all but the opt-in ones")
	flag.StringVar(&o.url, "url", "", "use this server (a superuser URL) instead of starting a throwaway cluster")
	flag.StringVar(&o.cpuprofile, "cpuprofile", "", "write a CPU profile of the pgoutbox drain rounds to this file")
	flag.IntVar(&timelineLevel, "timeline", 0, "development: with -try, print how much of each drain ran 0, 1, 2 or more statements at once and each statement's total time (2: every statement as well)")
	flag.StringVar(&o.memprofile, "memprofile", "", "development: with -try, write an allocation profile (pprof allocs) at the end to this file")
	flag.BoolVar(&o.noReport, "no-report", false, "print results only; do not write BENCHMARKS.md or charts")
	flag.IntVar(&o.tryN, "try-n", 100_000, "development: the backlog -try drains")
	flag.StringVar(&o.try, "try", "", "development: drain -try-n (100,000) with this setup (zero=1,batch=,bmin=,conc=,fb=,fd=,disp=,pool=) -rounds times, then exit")
	// Item "horizon" (horizon.go).
	flag.DurationVar(&o.horizon.baseline, "horizon-baseline", horizonBaselineDefault, "horizon: baseline window before the long transaction")
	flag.DurationVar(&o.horizon.hold, "horizon-hold", horizonHoldDefault, "horizon: how long the long transaction stays open (the issue's goal: 10m, the default with -full)")
	flag.DurationVar(&o.horizon.after, "horizon-after", horizonAfterDefault, "horizon: window after the release")
	flag.Float64Var(&o.horizon.rate, "horizon-rate", horizonRateDefault, "horizon: events/s offered, in 20-event transactions")
	flag.StringVar(&o.horizon.variants, "horizon-variants", horizonVariantsDefault, "horizon: variants to run (unordered,ordered,writer,river,ordered-writer)")
	flag.StringVar(&o.failuresBefore, "failures-before", "", "failures: also run the item with this pgoutbox binary (an earlier build), for before and after figures")
	flag.StringVar(&o.failuresOnly, "failures-only", "", "failures: development: only these scenarios (outage,message,subset; the success run always)")
	// Opt-in items "soak" and "retention" (horizon_soak.go).
	flag.DurationVar(&o.soak.duration, "soak", soakDurationDefault, "soak: how long the bloat soak runs (item soak; the issue asks for 30m)")
	flag.Float64Var(&o.soak.rate, "soak-rate", soakRateDefault, "soak: events/s offered, in 20-event transactions")
	flag.DurationVar(&o.soak.retain, "soak-retain", soakRetainDefault, "soak: purge done rows older than this")
	flag.DurationVar(&o.soak.purgeEvery, "soak-purge-every", soakPurgeEveryDefault, "soak: how often the purge runs (until it deletes nothing)")
	flag.IntVar(&o.soak.retentionN, "retention-n", retentionNDefault, "retention: rows drained at full speed while purging")
	flag.StringVar(&o.soak.relay, "soak-relay", "default", "soak: the relay's configuration: default (the zero Config, as `pgoutbox run`) or drain (section 1's)")
	flag.Parse()
	if timelineLevel > 0 {
		statementTimeline = newTimeline(timelineLevel)
	}
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))

	if *child != "" {
		if err := runChild(*child, o.url, *childN); err != nil {
			fatal(err)
		}
		return
	}
	if o.full { // the goal duration, unless given
		set := map[string]bool{}
		flag.Visit(func(f *flag.Flag) { set[f.Name] = true })
		if !set["horizon-hold"] {
			o.horizon.hold = horizonHoldFull
		}
		if !set["horizon-baseline"] {
			o.horizon.baseline = horizonBaselineFull
		}
		if !set["horizon-after"] {
			o.horizon.after = horizonAfterFull
		}
	}
	if o.rounds == 0 {
		o.rounds = 3
		if o.full {
			o.rounds = 7
		}
	}
	if only != "" {
		o.only = map[string]bool{}
		for _, s := range strings.Split(only, ",") {
			o.only[strings.TrimSpace(s)] = true
		}
	}
	if err := run(o); err != nil {
		fatal(err)
	}
}

// fatal reports err and exits (not log.Fatal: slog.SetDefault routes the log
// package through the Warn-level handler, which would drop it).
func fatal(err error) {
	fmt.Fprintln(os.Stderr, "bench:", err)
	os.Exit(1)
}

// env is what every item gets: the server, its pools, and where results go.
type env struct {
	o          options
	adminURL   string
	outboxURL  string
	riverURL   string
	outbox     *pgxpool.Pool // setup and verification queries (not the dispatcher's pool)
	pgBin      string
	res        *results
	profFile   *os.File
	profileOne bool
}

func run(o options) error {
	started := time.Now()
	ctx := context.Background()
	res := &results{Started: started, Full: o.full, Rounds: o.rounds}
	defer relayBin.cleanup()
	e := &env{o: o, res: res}

	if o.url == "" {
		logf("starting a throwaway PostgreSQL cluster")
		c, err := cluster.Start(ctx, serverSettings)
		if err != nil {
			return err
		}
		defer c.Stop()
		e.adminURL = c.URL("postgres")
		e.pgBin = c.Bin()
		e.outboxURL = c.URL(outboxDB)
		e.riverURL = c.URL(riverDB)
	} else {
		e.adminURL = o.url
		bin, err := cluster.FindBin()
		if err != nil {
			return err
		}
		e.pgBin = bin
		e.outboxURL = withDB(o.url, outboxDB)
		e.riverURL = withDB(o.url, riverDB)
	}
	if os.Getenv("BENCH_KEEP_DB") == "" { // development: reuse the databases of a previous -url run
		if err := e.createDatabases(ctx); err != nil {
			return err
		}
	}
	var err error
	if e.outbox, err = newPool(ctx, e.outboxURL, 4); err != nil {
		return err
	}
	defer e.outbox.Close()
	if err := describeMachine(ctx, e.outbox, res); err != nil {
		return err
	}
	logf("PostgreSQL %s; non-default settings: %s", res.PGVersion, res.settingsLine())

	if o.cpuprofile != "" {
		f, err := os.Create(o.cpuprofile)
		if err != nil {
			return err
		}
		e.profFile = f
		defer f.Close()
	}

	if o.url == "" {
		if err := warmWAL(ctx, e.outbox); err != nil {
			return err
		}
	}
	if o.try != "" {
		if err := runTry(ctx, e, o.try, o.rounds); err != nil {
			return err
		}
		if o.memprofile != "" {
			f, err := os.Create(o.memprofile)
			if err != nil {
				return err
			}
			defer f.Close()
			return pprof.Lookup("allocs").WriteTo(f, 0)
		}
		return nil
	}
	items := []struct {
		name string
		f    func(context.Context, *env) error
	}{
		{"drain", runDrain},
		{"defaults", runDefaults},
		{"fleet", runFleet},
		{"databases", runDatabases},
		{"idle", runIdle},
		{"ceiling", runCeiling},
		{"sweep", runSweep},
		{"sustained", runSustained},
		{"claim", runClaimCost},
		{"ordered", runOrdered},
		{"producers", runProducers},
		{"rss", runRSS},
		{"tracing", runTracing},
		{"horizon", runHorizon},
		{"soak", runSoak},
		{"retention", runRetention},
		{"crash", runCrash},
		{"failures", runFailures},
	}
	for _, it := range items {
		if !o.want(it.name) {
			continue
		}
		if it.name == "crash" && !o.full && !o.only["crash"] {
			continue // over a minute (the default lease): -full, or -only crash
		}
		t0 := time.Now()
		logf("== %s", it.name)
		if err := it.f(ctx, e); err != nil {
			return fmt.Errorf("%s: %w", it.name, err)
		}
		logf("== %s done in %s", it.name, time.Since(t0).Round(time.Second))
	}
	res.Duration = time.Since(started)
	logf("all items done in %s", res.Duration.Round(time.Second))
	if o.noReport {
		return nil
	}
	if err := writeReport(o.out, res); err != nil {
		return err
	}
	logf("wrote %s and charts in %s", filepath.Join(o.out, "BENCHMARKS.md"), filepath.Join(o.out, "docs", "bench"))
	return nil
}

// warmWAL writes about 1 GB of WAL through a scratch table and checkpoints
// twice, so that the fresh cluster recycles WAL segment files like a server
// that has been running, instead of creating (zero-filling) new ones in the
// middle of whichever round comes first.
func warmWAL(ctx context.Context, pool *pgxpool.Pool) error {
	t0 := time.Now()
	for _, q := range []string{
		"CREATE TABLE bench_wal_warmup AS SELECT g, repeat('x', 800) AS pad FROM generate_series(1, 600000) AS g",
		"CHECKPOINT",
		"UPDATE bench_wal_warmup SET g = g + 1",
		"DROP TABLE bench_wal_warmup",
		"CHECKPOINT",
	} {
		if _, err := pool.Exec(ctx, q); err != nil {
			return fmt.Errorf("warm WAL: %w", err)
		}
	}
	var segs int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM pg_ls_waldir()").Scan(&segs); err != nil {
		return err
	}
	logf("WAL warmed in %s (%d segment files)", time.Since(t0).Round(time.Millisecond), segs)
	return nil
}

// startProfile starts the CPU profile for the first pgoutbox round only.
func (e *env) startProfile() func() {
	if e.profFile == nil || e.profileOne {
		return func() {}
	}
	e.profileOne = true
	if err := pprof.StartCPUProfile(e.profFile); err != nil {
		logf("cpuprofile: %v", err)
		return func() {}
	}
	return pprof.StopCPUProfile
}

func (e *env) createDatabases(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, e.adminURL)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	for _, name := range []string{outboxDB, riverDB} {
		if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			return err
		}
		if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
			return err
		}
	}
	pool, err := newPool(ctx, e.outboxURL, 2)
	if err != nil {
		return err
	}
	defer pool.Close()
	m, err := migrations.FromPool(pool)
	if err != nil {
		return err
	}
	defer m.Close()
	if _, err := m.Up(ctx); err != nil {
		return err
	}
	return migrateRiver(ctx, e.riverURL)
}

// adminExec runs one statement on the server's postgres database.
func (e *env) adminExec(ctx context.Context, sql string) error {
	conn, err := pgx.Connect(ctx, e.adminURL)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, sql)
	return err
}

// migratedDatabase (re)creates database name with pgoutbox's migrations and
// returns a small pool on it.
func (e *env) migratedDatabase(ctx context.Context, name string) (*pgxpool.Pool, error) {
	if err := e.adminExec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
		return nil, err
	}
	if err := e.adminExec(ctx, "CREATE DATABASE "+name); err != nil {
		return nil, err
	}
	pool, err := newPool(ctx, withDB(e.adminURL, name), 2)
	if err != nil {
		return nil, err
	}
	m, err := migrations.FromPool(pool)
	if err != nil {
		pool.Close()
		return nil, err
	}
	_, err = m.Up(ctx)
	m.Close()
	if err != nil {
		pool.Close()
		return nil, err
	}
	return pool, nil
}

func newPool(ctx context.Context, url string, maxConns int32) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	if maxConns > 0 { // 0: pgxpool's default, max(4, NumCPU)
		cfg.MaxConns = maxConns
	}
	if statementTimeline != nil {
		cfg.ConnConfig.Tracer = statementTimeline
	}
	return pgxpool.NewWithConfig(ctx, cfg)
}

func withDB(url, name string) string {
	i := strings.LastIndex(url, "/")
	q := ""
	if j := strings.Index(url[i:], "?"); j >= 0 {
		q = url[i+j:]
	}
	return url[:i+1] + name + q
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s bench: %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}
