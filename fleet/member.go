package fleet

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/attribute"

	"github.com/pgoutbox/pgoutbox/db/fleetdb"
	"github.com/pgoutbox/pgoutbox/dispatcher"
)

// State is where a database of the fleet stands.
type State string

const (
	StateStarting State = "starting" // being checked before its dispatcher starts
	StateRunning  State = "running"  // its dispatcher runs
	StateFailing  State = "failing"  // cannot be served; checked again after a backoff (failing until a check passes)
	StateStopped  State = "stopped"  // no longer served (removed, or the fleet stopped)
)

// member serves one database: it checks it, runs its dispatcher, watches
// it, and puts it in backoff when it cannot be served.
type member struct {
	f      *Fleet
	db     Database
	source string
	log    *slog.Logger
	errs   *lastError // the last database error its dispatcher logged
	share  *share
	kick   chan struct{} // wake-ups from the stats probe (wake.go)
	cancel context.CancelFunc
	done   chan struct{}

	mu        sync.Mutex
	state     State
	reason    string // why failing (or the last failure)
	since     time.Time
	failures  int
	nextRetry time.Time
	disp      *dispatcher.Dispatcher
	server    string // host:port of the server, for the stats probe
	dbname    string
	past      dispatcher.Stats // counters of its earlier dispatchers
	restarts  int
}

func (m *member) set(state State, reason string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.state != state {
		m.since = time.Now()
	}
	m.state = state
	if reason != "" {
		m.reason = reason
	}
}

// run serves the database until ctx ends.
func (m *member) run(ctx context.Context) {
	defer close(m.done)
	defer m.set(StateStopped, "")
	cfg := m.f.cfg
	for ctx.Err() == nil {
		// A database that failed stays reported failing, with its reason,
		// while it is checked again: it is not served until the check passes.
		m.mu.Lock()
		first := m.failures == 0
		m.mu.Unlock()
		if first {
			m.set(StateStarting, "")
		}
		err := m.serve(ctx)
		if ctx.Err() != nil {
			return
		}
		m.mu.Lock()
		m.failures++
		delay := max(dispatcher.FullJitter(m.failures, cfg.RetryMin, cfg.RetryMax), cfg.RetryMin/2)
		m.nextRetry = time.Now().Add(delay)
		failures := m.failures
		m.mu.Unlock()
		m.set(StateFailing, err.Error())
		m.log.Warn("database cannot be served; retrying after a backoff", slog.String("reason", err.Error()),
			slog.Int("failures", failures), slog.Duration("retry_in", delay))
		select {
		case <-time.After(delay):
		case <-ctx.Done():
			return
		}
	}
}

// serve checks the database and runs its dispatcher until the dispatcher
// stops making progress through database errors (returned), Run returns, or
// ctx ends (nil).
func (m *member) serve(ctx context.Context) error {
	cfg := m.f.cfg
	pcfg, err := pgxpool.ParseConfig(m.db.URL)
	if err != nil {
		return fmt.Errorf("invalid database URL: %s", parseError(err))
	}
	pcfg.MaxConns = int32(cfg.MaxConnsPerDatabase)
	pcfg.MinConns = 0
	pcfg.MaxConnIdleTime = cfg.IdleConnTimeout
	pcfg.HealthCheckPeriod = min(max(cfg.IdleConnTimeout/2, time.Second), time.Minute)
	if pcfg.ConnConfig.ConnectTimeout == 0 {
		pcfg.ConnConfig.ConnectTimeout = 10 * time.Second
	}
	if cfg.PoolConfig != nil {
		cfg.PoolConfig(m.db, pcfg)
	}
	m.mu.Lock()
	m.server = fmt.Sprintf("%s:%d", pcfg.ConnConfig.Host, pcfg.ConnConfig.Port)
	m.dbname = pcfg.ConnConfig.Database
	m.mu.Unlock()
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return fmt.Errorf("invalid database URL: %s", parseError(err))
	}
	defer pool.Close()
	if err := check(ctx, pool, cfg.Dispatcher); err != nil {
		return err
	}

	dcfg := cfg.Dispatcher
	dcfg.Logger = m.log
	if m.f.cfg.Source != nil { // else the dispatcher's default, resolved by its Run
		m.mu.Lock()
		dcfg.Source = m.source
		m.mu.Unlock()
	}
	dcfg.Limiter = m.share
	dcfg.MetricAttributes = append(append([]attribute.KeyValue{}, dcfg.MetricAttributes...), attribute.String("database", m.db.Name))
	dcfg.MeterProvider = cfg.MeterProvider
	dcfg.TracerProvider = withDatabase(cfg.TracerProvider, m.db.Name)
	d, err := dispatcher.New(pool, m.f.pub, dcfg)
	if err != nil {
		return err
	}
	m.mu.Lock()
	m.source = d.Source()
	m.mu.Unlock()
	dctx, stop := context.WithCancel(ctx)
	defer stop()
	ran := make(chan error, 1)
	go func() { ran <- d.Run(dctx) }()
	m.mu.Lock()
	m.disp = d
	m.mu.Unlock()
	defer m.retire(d)
	m.set(StateRunning, "")
	m.log.Debug("serving database", slog.String("source", d.Source()))

	var stopWake func()
	if cfg.Wake != WakeListen {
		stopWake = m.schedule(dctx, d)
		defer stopWake()
	}

	watch := time.NewTicker(cfg.WatchInterval)
	defer watch.Stop()
	last := d.Stats()
	stalled, quietFor := 0, 0
	for {
		select {
		case err := <-ran:
			if ctx.Err() != nil {
				return nil
			}
			if err == nil {
				err = errors.New("dispatcher stopped")
			}
			return classify(err)
		case <-ctx.Done():
			stop()
			<-ran
			return nil
		case <-watch.C:
		}
		now := d.Stats()
		progress := now.Claimed != last.Claimed || now.IdleWaits != last.IdleWaits || now.Published != last.Published
		failing := now.DBErrors != last.DBErrors && !progress
		if now.Claimed != last.Claimed || now.Published != last.Published || now.InFlight > 0 {
			quietFor = 0
		} else {
			quietFor++
		}
		if quietFor >= 2 {
			trimIdle(ctx, pool)
		}
		last = now
		if progress {
			m.mu.Lock()
			m.failures = 0 // served: the next failure starts the backoff over
			m.mu.Unlock()
			stalled = 0
		}
		if !failing {
			continue // progress, or a quiet interval (no claim round ran)
		}
		stalled++
		// Database errors and nothing done: is the database still one we
		// can serve? If not, or after two such intervals, stop and back off.
		cerr := check(ctx, pool, cfg.Dispatcher)
		if cerr == nil && stalled < 2 {
			continue
		}
		stop()
		<-ran
		if ctx.Err() != nil {
			return nil
		}
		if cerr != nil {
			return cerr
		}
		return fmt.Errorf("every claim fails: %s", m.errs.get())
	}
}

// trimIdle closes all idle pooled connections but one. The watch loop
// calls it while the database is quiet (no claim, publish or message in
// flight for two WatchIntervals), so a quiet database keeps one pooled
// connection, which its polls, recovery passes and gauges take turns on.
// An idle timeout alone does not do it: the pool's health check hands its
// idle connections out in turn, and timers every few seconds keep them all
// in use. (Closing connections as they are released would do it too, but a
// pool with an AfterRelease hook returns connections asynchronously, and a
// statement right after another then opens a new one.)
func trimIdle(ctx context.Context, pool *pgxpool.Pool) {
	if pool.Stat().IdleConns() <= 1 {
		return
	}
	for i, c := range pool.AcquireAllIdle(ctx) {
		if i == 0 {
			c.Release()
			continue
		}
		_ = c.Hijack().Close(ctx)
	}
}

// retire keeps the counters of a dispatcher that stopped.
func (m *member) retire(d *dispatcher.Dispatcher) {
	s := d.Stats()
	s.Queue, s.InFlight, s.ClaimSize = dispatcher.QueueStats{}, 0, 0 // gauges: the current dispatcher's only
	m.mu.Lock()
	defer m.mu.Unlock()
	m.past = addStats(m.past, s)
	m.source = d.Source() // resolved by Run
	m.disp = nil
	m.restarts++
}

// check tells whether the database can be served: it answers, it is not
// read-only, and its outbox table is usable. Errors say which.
func check(ctx context.Context, pool *pgxpool.Pool, cfg dispatcher.Config) error {
	cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	w, err := fleetdb.New(pool).FleetWritable(cctx)
	if err != nil {
		return classify(err)
	}
	if w.InRecovery {
		return errors.New("read-only: the server is a standby (in recovery)")
	}
	if w.ReadOnly == "on" {
		return errors.New("read-only: default_transaction_read_only is on")
	}
	if err := dispatcher.CheckTable(cctx, pool, cfg.Table, cfg.Schema); err != nil {
		if errors.Is(err, dispatcher.ErrOutboxTable) {
			return fmt.Errorf("not migrated: %w", err)
		}
		return classify(err)
	}
	return nil
}

// classify words a database error for the database's status.
func classify(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "3D000":
			return fmt.Errorf("database does not exist: %s", pgErr.Message)
		case "25006":
			return fmt.Errorf("read-only: %s", pgErr.Message)
		case "57P01", "57P02", "57P03":
			return fmt.Errorf("unreachable: %s", pgErr.Message)
		}
		return err
	}
	var connErr *pgconn.ConnectError
	if errors.As(err, &connErr) || pgconn.Timeout(err) {
		return fmt.Errorf("unreachable: %w", err)
	}
	return err
}

// lastError is a slog.Handler in front of a database's logger that keeps
// the error of the last warning its dispatcher logged ("database error,
// retrying"), for the status of a database whose every claim fails.
type lastError struct {
	slog.Handler
	v *atomic.Pointer[string]
}

func newLastError(h slog.Handler) *lastError {
	return &lastError{Handler: h, v: &atomic.Pointer[string]{}}
}

// Enabled is true for warnings whatever the logger's level: they are kept
// even when not written.
func (l *lastError) Enabled(ctx context.Context, level slog.Level) bool {
	return level >= slog.LevelWarn || l.Handler.Enabled(ctx, level)
}

func (l *lastError) Handle(ctx context.Context, r slog.Record) error {
	if r.Level >= slog.LevelWarn {
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "error" {
				s := a.Value.String()
				l.v.Store(&s)
				return false
			}
			return true
		})
	}
	if !l.Handler.Enabled(ctx, r.Level) {
		return nil
	}
	return l.Handler.Handle(ctx, r)
}

func (l *lastError) WithAttrs(as []slog.Attr) slog.Handler {
	return &lastError{Handler: l.Handler.WithAttrs(as), v: l.v}
}

func (l *lastError) WithGroup(name string) slog.Handler {
	return &lastError{Handler: l.Handler.WithGroup(name), v: l.v}
}

func (l *lastError) get() string {
	if s := l.v.Load(); s != nil {
		return *s
	}
	return "(no error logged)"
}
