package inbox

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/metric"

	"github.com/pgoutbox/pgoutbox/db/inboxdb"
	"github.com/pgoutbox/pgoutbox/internal/sqlrename"
)

// Defaults applied by New to zero Config fields.
const (
	TableDefault         = "inbox"
	MaxParkedAgeDefault  = 5 * time.Minute
	MaxParkedDefault     = 1000
	RetentionDefault     = 7 * 24 * time.Hour
	SweepIntervalDefault = 5 * time.Second
	PurgeIntervalDefault = time.Minute
	PurgeBatchDefault    = 1000
)

// DB is what the inbox needs of the consumer's database: a *pgxpool.Pool
// satisfies it.
type DB interface {
	inboxdb.DBTX
	Begin(ctx context.Context) (pgx.Tx, error)
}

// GapPolicy says whether ordered events wait for their predecessors.
type GapPolicy int

const (
	// GapCheck (the default): an ordered event is processed only after its
	// predecessor (or once a gap is declared); an early one is parked.
	GapCheck GapPolicy = iota
	// GapIgnore: for consumers that receive only some of an aggregate's
	// event types (a filtered subscription), whose predecessors may never
	// come to them. Ordered events are processed as they arrive, never
	// parked; order still holds (an event older than one already processed
	// is Late and not processed), but a missing predecessor goes unnoticed.
	GapIgnore
)

// Config configures an Inbox.
type Config struct {
	// DB is the consumer's database, where the inbox tables live and the
	// handler's transaction runs (a *pgxpool.Pool). Required.
	DB DB
	// Handler processes each event once, in the inbox's transaction.
	// Required.
	Handler Handler
	// Table is the inbox table (its companions are Table_aggregates and
	// Table_gaps), as created by the inbox migrations or by
	// `pgoutbox inbox init --table`. Defaults to "inbox".
	Table string
	// Schema is the tables' schema. Defaults to "": resolved through the
	// connection's search_path.
	Schema string
	// Gaps is the gap policy for ordered events. Defaults to GapCheck.
	Gaps GapPolicy
	// StartAtFirstSeen lets an aggregate the inbox has no state for start at
	// the first event that arrives, even when that event has a predecessor
	// (a consumer added to a running system, or an inbox whose state was
	// reset); a gap with reason GapStart is recorded. Defaults to false: the
	// event is parked like any early event, and a gap is declared only when
	// its predecessor does not come within MaxParkedAge.
	StartAtFirstSeen bool
	// MaxParkedAge bounds how long an early event waits for its
	// predecessor. Past it the next sweep declares a gap (GapTimeout) and
	// processes the parked events in order. Size it above the longest time
	// a predecessor may arrive after its successor: the broker's
	// redelivery delay of an unacknowledged message (JetStream AckWait,
	// RabbitMQ's requeue after a lost connection) plus the time your own
	// retries of a failed message take. An arrived predecessor whose
	// handler keeps failing is not missing: no gap is declared while it has
	// failed within the last MaxParkedAge. Defaults to 5 minutes.
	MaxParkedAge time.Duration
	// MaxParked bounds the events parked per aggregate; beyond it the next
	// sweep declares a gap (GapOverflow). Defaults to 1000.
	MaxParked int
	// Retention is how long finished inbox records (and gap records) are
	// kept: at least the longest time between two deliveries of one event
	// to this consumer (see docs/inbox.md, "Retention"). A duplicate that
	// arrives after its record was purged is processed again if it is
	// unordered, and recognized as Late if it is ordered (the aggregate's
	// position outlives the records). Defaults to 7 days.
	Retention time.Duration
	// SweepInterval is how often Run sweeps parked events: releases those
	// whose predecessor has been processed (after a crash between the two)
	// and declares the gaps that are due. Defaults to 5s.
	SweepInterval time.Duration
	// PurgeInterval is how often Run purges records older than Retention.
	// Defaults to 1 minute.
	PurgeInterval time.Duration
	// PurgeBatch is the number of records deleted per purge statement.
	// Defaults to 1000.
	PurgeBatch int
	// Prepare, when set, is called by Process with each message before it
	// is validated and recorded, and may fill in what the transport did not
	// carry: for example the Position of events from relays that do not
	// send it yet, read from the outbox's seq column by a consumer that can
	// reach the outbox's database. An error is returned by Process, and the
	// message is not acknowledged. Defaults to nil.
	Prepare func(ctx context.Context, m *Message) error
	// OnGap, when set, is called after a gap is declared and committed (it
	// is also logged at Warn, counted in Stats and in the
	// pgoutbox.inbox.gaps metric, and recorded in the gaps table). It must
	// not block. Defaults to nil.
	OnGap func(Gap)
	// Logger receives gaps, late events, handler failures of parked events
	// and sweep errors. Defaults to slog.Default().
	Logger *slog.Logger
	// MeterProvider provides the OpenTelemetry instruments. Defaults to
	// otel.GetMeterProvider().
	MeterProvider metric.MeterProvider
}

// ErrInvalidConfig is wrapped by New for a Config it rejects; the message
// names the field.
var ErrInvalidConfig = errors.New("inbox: invalid config")

func invalid(field, format string, args ...any) error {
	return fmt.Errorf("%w: Config.%s: %s", ErrInvalidConfig, field, fmt.Sprintf(format, args...))
}

func (c Config) withDefaults() Config {
	c.Table = cmp.Or(c.Table, TableDefault)
	c.MaxParkedAge = cmp.Or(c.MaxParkedAge, MaxParkedAgeDefault)
	c.MaxParked = cmp.Or(c.MaxParked, MaxParkedDefault)
	c.Retention = cmp.Or(c.Retention, RetentionDefault)
	c.SweepInterval = cmp.Or(c.SweepInterval, SweepIntervalDefault)
	c.PurgeInterval = cmp.Or(c.PurgeInterval, PurgeIntervalDefault)
	c.PurgeBatch = cmp.Or(c.PurgeBatch, PurgeBatchDefault)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

func (c Config) validate() (*sqlrename.Tables, error) {
	switch {
	case c.DB == nil:
		return nil, invalid("DB", "required (the consumer's database, such as a *pgxpool.Pool)")
	case c.Handler == nil:
		return nil, invalid("Handler", "required")
	case c.Gaps != GapCheck && c.Gaps != GapIgnore:
		return nil, invalid("Gaps", "unknown policy %d (use GapCheck or GapIgnore)", c.Gaps)
	case c.MaxParkedAge < 0:
		return nil, invalid("MaxParkedAge", "must not be negative, got %s", c.MaxParkedAge)
	case c.MaxParked < 0:
		return nil, invalid("MaxParked", "must not be negative, got %d", c.MaxParked)
	case c.Retention < 0:
		return nil, invalid("Retention", "must not be negative, got %s", c.Retention)
	case c.Retention > 0 && c.Retention < c.MaxParkedAge:
		return nil, invalid("Retention", "%s must be at least MaxParkedAge (%s): a record must outlive the wait of the events parked behind it", c.Retention, c.MaxParkedAge)
	case c.SweepInterval < 0:
		return nil, invalid("SweepInterval", "must not be negative, got %s", c.SweepInterval)
	case c.PurgeInterval < 0:
		return nil, invalid("PurgeInterval", "must not be negative, got %s", c.PurgeInterval)
	case c.PurgeBatch < 0 || c.PurgeBatch > 100000:
		return nil, invalid("PurgeBatch", "must be between 1 and 100000, got %d", c.PurgeBatch)
	}
	names, err := sqlrename.NewTables(TableDefault, sqlrename.InboxTables, cmp.Or(c.Table, TableDefault), c.Schema)
	if err != nil {
		field := "Table"
		if c.Schema != "" && sqlrename.ValidateSchema(c.Schema) != nil {
			field = "Schema"
		}
		return nil, invalid(field, "%v", err)
	}
	return &names, nil
}
