package cli

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"text/template"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/pgoutbox/pgoutbox/dispatcher"
	"github.com/pgoutbox/pgoutbox/fleet"
)

// fleetRunFlags are run's flags for several databases.
type fleetRunFlags struct {
	concurrency      *int64
	wake             *string
	pollMin, pollMax *time.Duration
	maxConns         *int64
}

func addFleetRunFlags(f *flags) fleetRunFlags {
	return fleetRunFlags{
		concurrency: f.int64("fleet-concurrency", fleet.ConcurrencyDefault, "several databases: publishes in flight across all of them, divided in turn among the databases with messages waiting (--concurrency bounds each one)"),
		wake:        f.String("wake", "listen", "several databases: how each learns of new messages: listen (a LISTEN connection each), poll (an adaptive poll schedule, no connection held) or stats (one pg_stat_database reader per server, plus the schedule)"),
		pollMin:     f.duration("poll-min", fleet.PollMinDefault, "several databases, --wake poll or stats: the poll interval after a poll that found messages"),
		pollMax:     f.duration("poll-max", fleet.PollMaxDefault, "several databases, --wake poll or stats: the longest poll interval of a quiet database"),
		maxConns:    f.int64("max-conns-per-database", fleet.MaxConnsPerDatabaseDefault, "several databases: pool size of each (claims, finalizes, recovery and gauges share it; --wake listen adds one LISTEN connection)"),
	}
}

// sourceTemplate parses --ce-source for several databases: a template over
// the database ({{.Database}}), so that every database keeps a source of
// its own.
func sourceTemplate(f *flags, s string) (func(fleet.Database) string, error) {
	if s == "" {
		return nil, nil
	}
	if !strings.Contains(s, "{{") {
		return nil, f.usageError("with several databases --ce-source must be a template naming the database, such as 'urn:billing:{{.Database}}' (one source for every database would make their idempotency keys collide)")
	}
	t, err := template.New("ce-source").Option("missingkey=error").Parse(s)
	if err != nil {
		return nil, f.usageError("--ce-source: %v", err)
	}
	var b strings.Builder
	if err := t.Execute(&b, struct{ Database string }{"a"}); err != nil {
		return nil, f.usageError("--ce-source: %v (the template knows {{.Database}})", err)
	}
	var c strings.Builder
	if err := t.Execute(&c, struct{ Database string }{"b"}); err != nil || b.String() == c.String() {
		return nil, f.usageError("--ce-source must differ between databases: use {{.Database}} in it")
	}
	return func(d fleet.Database) string {
		var out strings.Builder
		_ = t.Execute(&out, struct{ Database string }{d.Name})
		return out.String()
	}, nil
}

// relayFleet runs the relay over several databases (package fleet).
func (a *app) relayFleet(ctx context.Context, rc runConfig, f *flags, fr fleetRunFlags, listenURL string) error {
	if rc.disp.DisableListen {
		return f.usageError("--no-listen: with several databases choose the wake-up with --wake poll or --wake stats")
	}
	if listenURL != "" {
		return f.usageError("--listen-url names one database's server: with several databases use --wake poll or stats behind a transaction-mode pooler")
	}
	wake, err := fleet.ParseWake(*fr.wake)
	if err != nil {
		return f.usageError("--wake %q: expected listen, poll or stats", *fr.wake)
	}
	if err := f.checkRange("fleet-concurrency", *fr.concurrency, 1, 1000000); err != nil {
		return err
	}
	if err := f.checkRange("max-conns-per-database", *fr.maxConns, 1, 100); err != nil {
		return err
	}
	if *fr.pollMin <= 0 || *fr.pollMax < *fr.pollMin {
		return f.usageError("--poll-min (%s) must be positive and at most --poll-max (%s)", *fr.pollMin, *fr.pollMax)
	}
	dbs, discover, err := a.fleetSpec(f)
	if err != nil {
		return err
	}
	source, err := sourceTemplate(f, rc.ceSource)
	if err != nil {
		return err
	}
	rc.ceSource = "" // every message carries its database's source; the publisher must not replace it
	// The fleet's defaults for a quiet database unless the flags say otherwise.
	if !f.visited("poll-interval") {
		rc.disp.PollInterval = 0
	}
	if !f.visited("stats-interval") {
		rc.disp.StatsInterval = 0
	}

	log, tel, err := a.relayTelemetry(ctx, &rc) // fleet_run.go
	if err != nil {
		return err
	}
	defer tel.shutdown(ctx, log)
	cfg := fleet.Config{
		Dispatcher: rc.disp, Concurrency: int(*fr.concurrency), Wake: wake, PollMin: *fr.pollMin, PollMax: *fr.pollMax,
		MaxConnsPerDatabase: int(*fr.maxConns), Discover: discover, Source: source, Logger: log,
		PoolConfig: func(d fleet.Database, pc *pgxpool.Config) {
			a.secrets.Add(pc.ConnConfig.Password)
			pc.ConnConfig.DialFunc = dispatcher.Dialer()
			if !strings.Contains(d.URL, "default_query_exec_mode") {
				pc.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeCacheDescribe // as resolveDatabase
			}
		},
	}
	if f.fleet.every != nil {
		cfg.DiscoverInterval = *f.fleet.every
	}
	spec := a.publisherSpec(rc, log)
	var pub dispatcher.Publisher
	var closePub func()
	defer func() {
		if closePub != nil {
			closePub()
		}
	}()
	if !spec.connects {
		if pub, closePub, err = spec.build(ctx); err != nil {
			return a.publisherError(rc.publisher, spec, err)
		}
	}
	// Validated before anything is contacted (a stand-in publisher).
	if _, err := fleet.New(dispatcher.PublisherFunc(func(context.Context, dispatcher.Message) error { return nil }), dbs, cfg); err != nil {
		msg := strings.TrimPrefix(err.Error(), fleet.ErrInvalidConfig.Error()+": ")
		return failf("run: %s", strings.TrimPrefix(msg, "Dispatcher: "+dispatcher.ErrInvalidConfig.Error()+": "))
	}
	log.Info("pgoutbox run starting", append(a.startupAttrs(rc, &database{redacted: fmt.Sprintf("%d databases", len(dbs))}),
		slog.Bool("discovery", discover != nil), slog.String("wake", wake.String()), slog.Int64("fleet_concurrency", *fr.concurrency))...)

	h := &health{}
	h.set(checkDB, nil) // each database's state is the fleet's (fleetReady)
	var fl *fleet.Fleet
	ready := fleetReady{h: h, f: func() *fleet.Fleet { return fl }}
	if spec.connects {
		if pub, closePub, err = a.connectPublisher(ctx, rc, spec, h, log); err != nil {
			return err
		}
		if pub == nil {
			log.Info("pgoutbox run stopped before the publisher connected")
			return nil
		}
	}
	if fl, err = fleet.New(pub, dbs, cfg); err != nil {
		return failf("run: %s", err)
	}
	if rc.metricsAddr != "" {
		if err := observeFleet(tel.meter(), fl, h); err != nil {
			return failf("run: metrics: %s", err)
		}
		stop, err := a.serveMetrics(ctx, rc.metricsAddr, ready, tel.metricsHandler(), log)
		if err != nil {
			return err
		}
		defer stop()
	}
	pinger, _ := pub.(dispatcher.Pinger)
	h.set(checkPublisher, nil)
	if pinger != nil {
		go a.publisherHealthLoop(ctx, rc.healthEvery, pinger, h, log)
	}
	defer tuneRelayGC(a.getenv)()
	if err := fl.Run(ctx); err != nil {
		return failf("run: %s", a.secrets.Scrub(err.Error()))
	}
	s := fl.Stats()
	log.Info("pgoutbox run stopped", slog.Int("databases", s.Databases), slog.Int64("published", s.Total.Published),
		slog.Int64("retried", s.Total.Retried), slog.Int64("dead", s.Total.Dead), slog.Int64("released", s.Total.Released))
	return nil
}

// relayTelemetry makes the relay's logger and starts its telemetry, and
// sets both in rc's dispatcher configuration.
func (a *app) relayTelemetry(ctx context.Context, rc *runConfig) (*slog.Logger, *telemetry, error) {
	log := a.relayLogger(*rc)
	rc.disp.Logger = log
	tel, err := startTelemetry(ctx, rc.telemetry, rc.metricsAddr != "")
	if err != nil {
		return nil, nil, failf("run: %s", a.secrets.Scrub(err.Error()))
	}
	rc.disp.MeterProvider, rc.disp.TraceMode = tel.mp, rc.telemetry.mode
	if tel.tp != nil {
		rc.disp.TracerProvider = tel.tp
	}
	return log, tel, nil
}

// relayLogger is the relay's logger (--log-level, --log-format) on stderr.
func (a *app) relayLogger(rc runConfig) *slog.Logger {
	hopts := &slog.HandlerOptions{Level: rc.logLevel}
	if rc.logJSON {
		return slog.New(slog.NewJSONHandler(a.stderr, hopts))
	}
	return slog.New(slog.NewTextHandler(a.stderr, hopts))
}

// publisherHealthLoop pings the publisher every interval (the databases
// are the fleet's to watch).
func (a *app) publisherHealthLoop(ctx context.Context, every time.Duration, pinger dispatcher.Pinger, h *health, log *slog.Logger) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		cctx, cancel := context.WithTimeout(ctx, max(min(every, 5*time.Second), time.Second))
		err := pinger.Ping(cctx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		a.logChange(log, h, checkPublisher, err, "publisher")
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// fleetReady is /healthz of a relay over several databases: ready when
// the publisher answers and every database is served; otherwise the reason
// names each database that is not.
type fleetReady struct {
	h *health
	f func() *fleet.Fleet
}

func (r fleetReady) ready() (bool, string) {
	ok, reason := r.h.ready()
	var reasons []string
	if !ok {
		reasons = append(reasons, reason)
	}
	fl := r.f()
	if fl == nil {
		return false, strings.Join(append(reasons, "databases: not started yet"), "; ")
	}
	for _, s := range fl.Status() {
		switch s.State {
		case fleet.StateRunning:
		case fleet.StateFailing:
			reasons = append(reasons, fmt.Sprintf("database %s: %s", s.Name, compactErr(s.Reason)))
		default:
			reasons = append(reasons, fmt.Sprintf("database %s: %s", s.Name, s.State))
		}
	}
	return len(reasons) == 0, strings.Join(reasons, "; ")
}

// observeFleet registers the relay's own series for several databases:
// the counters of metrics.go and the queue gauges, each with a database
// attribute, whether each database is served (pgoutbox_database_up), and
// the publisher's health.
func observeFleet(meter metric.Meter, fl *fleet.Fleet, h *health) error {
	ri, err := newRelayInstruments(meter) // metrics.go
	if err != nil {
		return err
	}
	dbUp, err := meter.Int64ObservableGauge("pgoutbox_database_up",
		metric.WithDescription("Whether the database is served (1) or starting or failing (0)."))
	if err != nil {
		return err
	}
	_, err = meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		for _, st := range fl.Status() {
			db := attribute.String("database", st.Name)
			ri.observe(o, &st.Stats, db)
			o.ObserveInt64(dbUp, int64(boolInt(st.State == fleet.StateRunning)), metric.WithAttributes(db))
		}
		o.ObserveInt64(ri.up, int64(boolInt(h.up(checkPublisher))), metric.WithAttributes(attribute.String("dependency", "publisher")))
		return nil
	}, append(ri.all, dbUp)...)
	return err
}
