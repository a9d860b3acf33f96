package fleet

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/pgoutbox/pgoutbox/dispatcher"
)

// Defaults of Config.
const (
	ConcurrencyDefault         = 64
	MaxConnsPerDatabaseDefault = 2
	IdleConnTimeoutDefault     = 15 * time.Second
	PollIntervalDefault        = 5 * time.Second
	ReapIntervalDefault        = 5 * time.Second
	StatsIntervalDefault       = 30 * time.Second
	PollMinDefault             = 50 * time.Millisecond
	PollMaxDefault             = 5 * time.Second
	ProbeIntervalDefault       = 250 * time.Millisecond
	RetryMinDefault            = time.Second
	RetryMaxDefault            = time.Minute
	WatchIntervalDefault       = 5 * time.Second
	DiscoverIntervalDefault    = 30 * time.Second
)

// ErrInvalidConfig wraps every validation failure of New.
var ErrInvalidConfig = errors.New("fleet: invalid config")

// Wake selects how a database's dispatcher learns of new messages.
type Wake int

const (
	// WakeListen (the default): each database's dispatcher holds one LISTEN
	// connection, as a single relay does. Milliseconds from COMMIT to claim;
	// one connection per database while the fleet runs.
	WakeListen Wake = iota
	// WakePoll: no LISTEN. Each database is polled on a schedule of its own
	// that adapts to its traffic: PollMin after a poll that found messages,
	// doubling after each empty one up to PollMax. No connection is held
	// for wake-ups; a quiet database costs one claim round per PollMax.
	WakePoll
	// WakeStats: no LISTEN. One connection per PostgreSQL server reads
	// pg_stat_database every ProbeInterval; a database whose inserted-rows
	// counter moved is polled at once and then on the schedule of WakePoll.
	// PostgreSQL publishes a session's counters when its transaction ends,
	// at most once a second per session (later ones within that second
	// follow within 10 s, or at the session's next flush): an event
	// committed after a quiet second is claimed within about ProbeInterval,
	// and the follow-up polls find the rest of a burst. See docs/fleet.md.
	WakeStats
)

func (w Wake) String() string {
	switch w {
	case WakeListen:
		return "listen"
	case WakePoll:
		return "poll"
	case WakeStats:
		return "stats"
	}
	return fmt.Sprintf("Wake(%d)", int(w))
}

// ParseWake parses "listen", "poll" or "stats".
func ParseWake(s string) (Wake, error) {
	for _, w := range []Wake{WakeListen, WakePoll, WakeStats} {
		if w.String() == s {
			return w, nil
		}
	}
	return 0, fmt.Errorf("%w: unknown wake-up %q (listen, poll or stats)", ErrInvalidConfig, s)
}

// Config configures a Fleet. The zero value is valid.
type Config struct {
	// Dispatcher is the configuration of every database's dispatcher. The
	// fleet sets, per database: Logger (with a database attribute),
	// MetricAttributes (database=NAME), TracerProvider (every span with
	// pgoutbox.database=NAME), Source (see Source), Limiter (a share of
	// Concurrency) and, for WakePoll and WakeStats, DisableListen. Its
	// PollInterval, ReapInterval and StatsInterval default to the fleet's
	// PollIntervalDefault (5s), ReapIntervalDefault (5s) and
	// StatsIntervalDefault (30s) instead of a single relay's 1s, 1s and 15s,
	// so that a quiet database costs the server a few statements every few
	// seconds (see docs/fleet.md); its Concurrency (default 16) bounds one
	// database's publishes.
	Dispatcher dispatcher.Config

	// Concurrency is the fleet's limit on publishes in flight across every
	// database, divided in turn among the databases that have messages
	// waiting (one backlog cannot take every slot while others wait).
	// Defaults to ConcurrencyDefault (64).
	Concurrency int

	// Wake selects the wake-up source. Defaults to WakeListen.
	Wake Wake

	// PollMin and PollMax bound the adaptive poll schedule of WakePoll and
	// WakeStats. Default to 50ms and 5s.
	PollMin, PollMax time.Duration

	// ProbeInterval is how often WakeStats reads pg_stat_database on each
	// server. Defaults to 250ms.
	ProbeInterval time.Duration

	// MaxConnsPerDatabase bounds each database's pool, shared by claims,
	// finalizes, the recovery lane and the gauges; WakeListen adds one LISTEN
	// connection. Defaults to 2 (3 connections per busy database with
	// LISTEN). The dispatcher then claims its two kinds of messages in turn.
	MaxConnsPerDatabase int

	// IdleConnTimeout closes a pooled connection unused for this long.
	// Besides, a database without claims or publishes for two
	// WatchIntervals keeps one pooled connection, which its polls, recovery
	// passes and gauges take turns on (its other idle ones are closed at
	// each WatchInterval); an IdleConnTimeout shorter than the intervals
	// between them leaves it none (it connects for each). Defaults to 15s.
	IdleConnTimeout time.Duration

	// RetryMin and RetryMax bound the backoff of a database that cannot be
	// served (unreachable, dropped, read-only, not migrated, or failing
	// every claim): its dispatcher is stopped and the database checked again
	// after a full-jitter delay doubling from RetryMin up to RetryMax.
	// Default to 1s and 1m.
	RetryMin, RetryMax time.Duration

	// WatchInterval is how often each database's dispatcher is checked for
	// database errors without progress; two such intervals in a row stop it
	// and put the database in backoff. Defaults to 5s.
	WatchInterval time.Duration

	// Discover, when set, returns the databases to serve; it is called at
	// Run's start and every DiscoverInterval, and databases that appear or
	// disappear are started or stopped (the databases given to New are
	// served as well). A failed call keeps the current set. See
	// ListDatabases and QueryDatabases. Defaults to nil.
	Discover func(ctx context.Context) ([]Database, error)
	// DiscoverInterval defaults to 30s.
	DiscoverInterval time.Duration

	// Source returns the CloudEvents source of a database's messages.
	// Defaults to nil: dispatcher.DefaultSource of its connection settings
	// and table, distinct for every database.
	Source func(Database) string

	// PoolConfig, when set, adjusts each database's pool configuration
	// after the fleet's own settings (DialFunc, query exec mode, …).
	PoolConfig func(Database, *pgxpool.Config)

	// Logger, MeterProvider and TracerProvider default to the Dispatcher
	// configuration's.
	Logger         *slog.Logger
	MeterProvider  metric.MeterProvider
	TracerProvider trace.TracerProvider
}

func (c Config) withDefaults() Config {
	c.Concurrency = cmp.Or(c.Concurrency, ConcurrencyDefault)
	c.PollMin = cmp.Or(c.PollMin, PollMinDefault)
	c.PollMax = cmp.Or(c.PollMax, PollMaxDefault)
	c.ProbeInterval = cmp.Or(c.ProbeInterval, ProbeIntervalDefault)
	c.MaxConnsPerDatabase = cmp.Or(c.MaxConnsPerDatabase, MaxConnsPerDatabaseDefault)
	c.IdleConnTimeout = cmp.Or(c.IdleConnTimeout, IdleConnTimeoutDefault)
	c.RetryMin = cmp.Or(c.RetryMin, RetryMinDefault)
	c.RetryMax = cmp.Or(c.RetryMax, RetryMaxDefault)
	c.WatchInterval = cmp.Or(c.WatchInterval, WatchIntervalDefault)
	c.DiscoverInterval = cmp.Or(c.DiscoverInterval, DiscoverIntervalDefault)
	d := &c.Dispatcher
	d.PollInterval = cmp.Or(d.PollInterval, PollIntervalDefault)
	d.ReapInterval = cmp.Or(d.ReapInterval, ReapIntervalDefault)
	d.StatsInterval = cmp.Or(d.StatsInterval, StatsIntervalDefault)
	c.Logger = cmp.Or(c.Logger, d.Logger, slog.Default())
	if c.MeterProvider == nil {
		c.MeterProvider = d.MeterProvider
	}
	if c.TracerProvider == nil {
		c.TracerProvider = d.TracerProvider
	}
	if c.Wake != WakeListen {
		d.DisableListen = true
		// The schedule (wake.go) polls; the dispatcher's own poll is the
		// fallback behind it.
		d.PollInterval = max(d.PollInterval, c.PollMax)
	}
	return c
}

func (c Config) validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidConfig, fmt.Sprintf(format, args...))
	}
	switch {
	case c.Concurrency < 1:
		return bad("Concurrency must be at least 1, got %d", c.Concurrency)
	case c.Wake < WakeListen || c.Wake > WakeStats:
		return bad("Wake has unknown value %d", c.Wake)
	case c.PollMin <= 0 || c.PollMax < c.PollMin:
		return bad("PollMin (%s) must be positive and at most PollMax (%s)", c.PollMin, c.PollMax)
	case c.ProbeInterval <= 0:
		return bad("ProbeInterval must be positive, got %s", c.ProbeInterval)
	case c.MaxConnsPerDatabase < 1:
		return bad("MaxConnsPerDatabase must be at least 1, got %d", c.MaxConnsPerDatabase)
	case c.IdleConnTimeout <= 0:
		return bad("IdleConnTimeout must be positive, got %s", c.IdleConnTimeout)
	case c.RetryMin <= 0 || c.RetryMax < c.RetryMin:
		return bad("RetryMin (%s) must be positive and at most RetryMax (%s)", c.RetryMin, c.RetryMax)
	case c.WatchInterval <= 0:
		return bad("WatchInterval must be positive, got %s", c.WatchInterval)
	case c.DiscoverInterval <= 0:
		return bad("DiscoverInterval must be positive, got %s", c.DiscoverInterval)
	case c.Dispatcher.Limiter != nil:
		return bad("Dispatcher.Limiter is the fleet's to set (use Concurrency)")
	}
	if err := c.Dispatcher.Validate(); err != nil {
		return fmt.Errorf("%w: Dispatcher: %v", ErrInvalidConfig, err)
	}
	return nil
}
