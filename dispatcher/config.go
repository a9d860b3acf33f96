package dispatcher

import (
	"cmp"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/pgoutbox/pgoutbox/internal/sqlrename"
)

// Defaults: lease 60 s, max attempts 12, backoff 1 s .. 300 s; claims start
// at BatchMinDefault (50), where the adaptive claim size also returns to
// when the queue is quiet.
const (
	BatchDefault              = 2000
	BatchMinDefault           = 50
	BatchWorkDefault          = time.Second
	LeaseDefault              = 60 * time.Second
	MaxAttemptsDefault        = 12
	ConcurrencyDefault        = 16
	PublishTimeoutDefault     = 10 * time.Second
	PollIntervalDefault       = time.Second
	WakeWindowDefault         = 100 * time.Millisecond
	BackoffBaseDefault        = time.Second
	BackoffCapDefault         = 300 * time.Second
	MaxDeferAgeDefault        = 7 * 24 * time.Hour
	FinalizeBatchDefault      = 2 * BatchDefault
	FinalizeDelayDefault      = 2 * time.Millisecond
	ShutdownTimeoutDefault    = 10 * time.Second
	ReapIntervalDefault       = time.Second
	ChannelDefault            = "outbox"
	DatabaseRetryMaxDefault   = time.Second // the longest wait between two attempts to reach the database (claims, recovery, LISTEN): a server back from a restart or a failover is used again within about a second
	StatsIntervalDefault      = 15 * time.Second
	RelayIntervalDefault      = 5 * time.Second
	MaxPayloadBytesDefault    = 1 << 20
	MaxIdentifierBytesDefault = 255
	ClaimTimeoutDefault       = 30 * time.Second
	WriteTimeoutDefault       = 5 * time.Second
	ListenPingDefault         = 10 * time.Second
	ReapGraceDefault          = 30 * time.Second
	ShutdownFlushDefault      = 5 * time.Second
	SweepIntervalDefault      = 30 * time.Second
	BreakerThresholdDefault   = 10
	BreakerProbeDefault       = time.Second
	BreakerProbeMaxDefault    = 30 * time.Second
)

// Upper bounds of the integer settings that are narrowed to int32 (SQL
// integer parameters) or that size buffers.
const (
	maxBatch         = 10000
	maxConcurrency   = 100000
	maxFinalizeBatch = 100000
	maxAttemptsLimit = math.MaxInt32
)

// ClaimMode selects which messages a dispatcher claims.
type ClaimMode int

const (
	// ClaimAll claims unordered messages with OutboxClaimWindow and ordered
	// messages (Event.Ordered) with OutboxClaimOrderedWindow, in the same
	// loop (queries/window.sql): at the same time on two connections when
	// both claims fit in flight, the previous round was idle and the pool has at least 8, in turn
	// otherwise.
	ClaimAll ClaimMode = iota
	// ClaimUnorderedOnly claims only unordered messages.
	ClaimUnorderedOnly
	// ClaimOrderedOnly claims only ordered messages.
	ClaimOrderedOnly
)

func (m ClaimMode) String() string {
	switch m {
	case ClaimAll:
		return "all"
	case ClaimUnorderedOnly:
		return "unordered"
	case ClaimOrderedOnly:
		return "ordered"
	}
	return fmt.Sprintf("ClaimMode(%d)", int(m))
}

// UnclassifiedPolicy says what happens when Publish returns an error that is
// none of Retryable, Defer or Permanent.
type UnclassifiedPolicy int

const (
	// UnclassifiedAsCrash (the default) is the deliberate choice
	// not to retry unknown errors silently as transient: the message is left
	// exactly as a crashed worker would leave it — processing, attempt spent —
	// and an error is logged. Its lease expires, another claim picks it up in
	// isolation, and after MaxAttempts such failures the reap sends it to dead
	// with "lease expired after max attempts". A bug therefore surfaces as a
	// dead message and an error log instead of an invisible retry loop, at
	// the cost of waiting one lease per attempt.
	UnclassifiedAsCrash UnclassifiedPolicy = iota
	// UnclassifiedAsRetryable treats unknown errors like Retryable (backoff,
	// dead when attempts are exhausted).
	UnclassifiedAsRetryable
	// UnclassifiedAsPermanent sends the message to dead at once.
	UnclassifiedAsPermanent
)

// Config configures a Dispatcher. The zero value is valid: every field has a
// documented default, applied by New.
type Config struct {
	// Owner names this dispatcher, for people: each claim writes
	// lease_owner = Owner + "/" + a random run id (drawn once per
	// Dispatcher) + "." + a claim number, a value unique to that claim.
	// Every write after a claim is fenced on lease_owner and lease_version
	// together, so a claim lost in a failover to an asynchronous standby
	// (where the next claim hands the same lease_version out again) can
	// never finalize the row. Two dispatchers may share an Owner.
	// Defaults to "host-pid".
	Owner string

	// Batch is the most messages one claim takes. The claim size adapts
	// between BatchMin and Batch (see BatchMin); at most
	// max(2 × size, size + Concurrency) messages not yet published are in
	// flight at once, and one claim (size) more that is published and inside
	// the finalize being written.
	// Defaults to BatchDefault (2000).
	Batch int

	// BatchMin is the claim size the dispatcher starts from and returns to
	// when the queue is quiet. A claim that comes back full (a backlog) makes
	// the next one Batch, within what BatchWork allows at the measured rate;
	// a claim that comes back less than half full halves it, down to
	// BatchMin. BatchMin equal to Batch turns the adaptation off (a fixed
	// claim size, as before).
	// Defaults to BatchMinDefault (50), or Batch when that is smaller.
	BatchMin int

	// BatchWork bounds an adaptive claim by time rather than by count: the
	// claim size never exceeds what this dispatcher finished in BatchWork at
	// the rate it measured over its recent claims. A slow publisher therefore
	// keeps claims small (a message waits at most about 2 × BatchWork in
	// flight before its publish starts), and a crash strands about
	// 2 × BatchWork of work (at least BatchMin) rather than 2 × Batch
	// messages. A message whose remaining lease is shorter than
	// PublishTimeout when a worker gets to it is handed back instead of
	// published; so the dispatcher also keeps two claims' work within half of
	// what Lease leaves after PublishTimeout (HeartbeatInterval with a
	// heartbeat), whatever BatchWork says. Defaults to BatchWorkDefault (1s).
	BatchWork time.Duration

	// Lease is how long a claim owns a message before another dispatcher may
	// take it over. Defaults to LeaseDefault (60s).
	Lease time.Duration

	// MaxAttempts is the claim count after which a failing or crashing
	// message goes to dead. Defaults to MaxAttemptsDefault (12).
	MaxAttempts int

	// Concurrency is the number of publishes in flight at once.
	// Defaults to ConcurrencyDefault (16).
	Concurrency int

	// PublishTimeout bounds one Publish call. It must be shorter than Lease
	// unless HeartbeatInterval is set. Defaults to PublishTimeoutDefault (10s).
	PublishTimeout time.Duration

	// HeartbeatInterval, when positive, extends the lease of a publish that
	// is still running after this long, and again at every interval, through
	// the fenced OutboxExtendLease; if the extension finds the lease lost the
	// publish's context is cancelled. Must be at most Lease/2.
	// Defaults to 0: no heartbeat (PublishTimeout < Lease suffices).
	HeartbeatInterval time.Duration

	// PollInterval is how long an idle dispatcher waits before claiming again
	// when no NOTIFY woke it. NOTIFY is the fast path; polling is the
	// fallback. Defaults to PollIntervalDefault (1s).
	PollInterval time.Duration

	// WakeWindow is how long a dispatcher keeps claiming after each NOTIFY
	// it receives (and after LISTEN connects), at doubling intervals of 1, 2,
	// 4, … ms with a last claim when the window ends, before it falls back to
	// PollInterval. Producers notify only while a relay waits, so the
	// commits that follow a notification (a burst, rows inserted without
	// the enqueue statement's wake-up) are found inside this window
	// instead of at the next poll. It must be at least 10ms. Defaults to
	// WakeWindowDefault (100ms).
	WakeWindow time.Duration

	// DisableListen turns the LISTEN/NOTIFY wake-up off (for example behind
	// PgBouncer in transaction mode, where LISTEN does not work, when no
	// direct connection is available for ListenURL). Defaults to false.
	DisableListen bool

	// ListenURL, when set, is the PostgreSQL URL (or keyword/value string)
	// of the dedicated LISTEN connection, in place of the pool's connection
	// settings. Behind PgBouncer in transaction mode, point the pool at the
	// pooler and ListenURL at the server itself (or at a session-mode
	// pooler): LISTEN registers on the server connection that ran it, which
	// a transaction-mode pooler hands to other clients, so notifications
	// would never arrive and only polling would find new messages. The
	// connection is one per dispatcher, idle except for notifications and a
	// ping every ListenPing, and is dialed with the pool's DialFunc. Ignored
	// with DisableListen. Defaults to "": the pool's connection settings.
	ListenURL string

	// Table is the outbox table, for a table created by `pgoutbox init
	// --table` under another name; every query and the NOTIFY channel follow
	// it. Defaults to TableDefault ("outbox").
	Table string

	// Schema is the schema of Table (`pgoutbox init --schema`). Defaults to
	// none: the table is resolved through the connection's search_path.
	Schema string

	// Channel is the NOTIFY channel; the enqueue statement (OutboxEnqueue,
	// OutboxWake) notifies on the table name. Defaults to Table.
	Channel string

	// BackoffBase and BackoffCap shape the full-jitter backoff of retryable
	// failures: delay = random(0, min(cap, base × 2^attempt)).
	// Default to 1s and 300s.
	BackoffBase time.Duration
	BackoffCap  time.Duration

	// MaxDeferAge is how long after created_at a message may keep being
	// deferred before it goes to dead (database clock).
	// Defaults to MaxDeferAgeDefault (7 days).
	MaxDeferAge time.Duration

	// BreakerThreshold is how many publishes in a row must find the
	// destination unavailable (an UnavailableError: connection refused or
	// reset, a timeout, HTTP 502/503/504, a broker that is down), with none
	// reaching it for at least 250ms (or BreakerProbe when that is
	// shorter), for the breaker to open:
	// claiming stops, the claimed messages not yet started are handed back,
	// and one message at a time probes the destination until it answers
	// (docs/failures.md). An unavailable publish costs its message no
	// attempt while the destination looks down, whether or not the breaker
	// is open yet. Negative turns both off: unavailable publishes are then
	// retried as Retryable ones, spending attempts. Defaults to
	// BreakerThresholdDefault (10).
	BreakerThreshold int

	// BreakerProbe is how long the breaker stays open before its first
	// probe; the wait doubles after each probe that finds the destination
	// still unavailable (half of it, plus up to as much at random), up to
	// BreakerProbeMax, and never less than a Retry-After the destination
	// sent. Default to BreakerProbeDefault (1s) and BreakerProbeMaxDefault
	// (30s).
	BreakerProbe    time.Duration
	BreakerProbeMax time.Duration

	// UnclassifiedErrors says what an error that is none of Retryable, Defer
	// or Permanent does. Defaults to UnclassifiedAsCrash (see its doc).
	UnclassifiedErrors UnclassifiedPolicy

	// Claim selects unordered, ordered or both kinds of messages.
	// Defaults to ClaimAll.
	Claim ClaimMode

	// FinalizeBatch and FinalizeDelay drive the batched finalize: successful
	// publishes are written with one OutboxMarkDoneMany when FinalizeBatch
	// are waiting or FinalizeDelay after the first one, whichever comes
	// first. Each row stays fenced by its own lease_version.
	// Default to FinalizeBatchDefault (2 × BatchDefault = 4000) and 2ms.
	FinalizeBatch int
	FinalizeDelay time.Duration

	// ShutdownTimeout is how long Run waits, after its context ends, for
	// publishes in flight before cancelling them. Claimed messages not yet
	// started are handed back at once. Defaults to 10s.
	ShutdownTimeout time.Duration

	// ReapInterval is how often the recovery lane runs OutboxReap and looks
	// for expired leases to recover (it keeps recovering while it finds
	// some). Defaults to 1s.
	ReapInterval time.Duration

	// SweepInterval is how often the recovery lane runs OutboxClaimPassed:
	// claims start from a cursor (queries/window.sql) and pass rows that a
	// concurrent claim held; should that claim roll back (its process died
	// inside the claim, or it failed on one of its rows), the sweep claims
	// such rows and publishes each alone, like a recovered lease. The
	// sweep, and once per interval the recovery lane's pass over expired
	// leases, read their index from its start, so under a long-held snapshot
	// they cost what every claim used to cost, once per interval, off the
	// claim path; a sweep that took d waits at least 50×d before the next
	// (at most 2% of a connection's time, whatever the interval). It bounds
	// how late such a row can be, and how long an ordered aggregate whose
	// head was lost outside the triggers (OutboxRepairHeads) waits.
	// Defaults to 30s.
	SweepInterval time.Duration

	// ReapGrace is how long after a lease expired, with every attempt
	// spent, the reap waits before it sends the message to dead. An expired
	// lease does not prove a crash: the owner may have delivered the message
	// and be late to finalize (database briefly unreachable), and burying a
	// delivered message would make `dead retry` deliver it twice and block an
	// ordered aggregate behind it. 0 keeps the default; negative means no
	// grace. Defaults to ReapGraceDefault (30s).
	ReapGrace time.Duration

	// ClaimTimeout bounds one claim statement (and the reap, and each
	// statement of the isolation path and the recovery lane). A claim that
	// runs out of this time while the table is locked against it (DDL such
	// as CREATE INDEX or ALTER TABLE, a LOCK TABLE) is claimed again from
	// where it was, and goes on at full speed once the lock is gone. A claim
	// that fails with a data or resource error (SQLSTATE class 22, 54,
	// 53200) or runs out of this time otherwise falls back to the isolation
	// path, which claims without payloads and reads each message alone, so a
	// row that cannot be returned goes to dead instead of stopping every
	// claim. Defaults to ClaimTimeoutDefault (30s).
	ClaimTimeout time.Duration

	// WriteTimeout bounds each attempt of a fenced write (finalize,
	// reschedule, defer, dead, release) and each lease extension; a write
	// that times out is retried with backoff like any transient error.
	// Defaults to WriteTimeoutDefault (5s).
	WriteTimeout time.Duration

	// ListenPing is how often the dedicated LISTEN connection is checked
	// with a ping (bounded by WriteTimeout); a connection that does not
	// answer is dropped and reconnected, and the claimer polls meanwhile.
	// Defaults to ListenPingDefault (10s).
	ListenPing time.Duration

	// ShutdownFlush bounds the final hand-back (OutboxFinalizeMany) and
	// finalize (OutboxMarkDoneMany) that Run performs after publishes have
	// stopped, on a deadline of their own (not the cancelled context of the
	// publishes). Defaults to ShutdownFlushDefault (5s).
	ShutdownFlush time.Duration

	// StatsInterval is how often the queue gauges (depth, oldest age,
	// expired leases) are refreshed from the monitoring queries; 0 keeps the
	// default, negative disables them. A refresh that took d waits at least
	// 49×d before the next (the queries read whole partial indexes). The
	// first refresh runs a second after the dispatcher first finds nothing
	// to claim, or after StatsInterval, whichever comes first: not in the
	// middle of a backlog found at start-up, nor while the other relays of
	// a fleet finish theirs. Defaults to 15s.
	StatsInterval time.Duration

	// RelayInterval is how often the dispatcher records itself in the
	// table outbox_relays (migration 00012; the table is named after
	// Table, in Schema): its owner prefix, host, process id, pgoutbox
	// version, messages in flight, last claim and last finalize, on the
	// database clock. The console's relays page and `pgoutbox stats` list
	// these rows, one per running relay; Run marks its row stopped when
	// it returns, and any relay deletes rows silent for an hour. One
	// single-row upsert per interval, never on the per-message path.
	// Negative: never (the relay does not appear in the relays view).
	// Defaults to RelayIntervalDefault (5s).
	RelayInterval time.Duration

	// Logger receives structured logs. Defaults to slog.Default().
	Logger *slog.Logger

	// MeterProvider provides the OpenTelemetry instruments.
	// Defaults to otel.GetMeterProvider() (a no-op until the application
	// installs an SDK).
	MeterProvider metric.MeterProvider

	// TracerProvider creates the spans: one producer span per publish
	// ("send {destination}"), and one client span per statement (claim,
	// finalize, reschedule, lease, reap). Defaults to
	// otel.GetTracerProvider() (a no-op until the application installs an
	// SDK). See trace.go and the README's tracing section.
	TracerProvider trace.TracerProvider

	// Propagator reads the trace context stored with each event and writes
	// the publish span's context into the headers publishers forward.
	// Defaults to propagation.TraceContext{} (traceparent, tracestate); a
	// composite with propagation.Baggage{} forwards baggage too.
	Propagator propagation.TextMapPropagator

	// TraceMode relates each publish span to the stored creation context:
	// TraceLink (a link; the publish starts a trace of its own) or
	// TraceParent (a child span). Defaults to TraceLink.
	TraceMode TraceMode

	// DisableTracing turns the tracing code off: no spans (whatever the
	// TracerProvider), no statement wrapper, no header rewriting; the
	// publish context carries nothing. Message.TraceParent and TraceState
	// are still set, so publishers still send the stored context. For
	// applications whose global TracerProvider must not see the outbox.
	// It is not needed for speed: without an SDK (the default) the
	// statement spans find that nothing records, publishes then start no
	// span and parse the stored context only on demand, which costs
	// about as little (BENCHMARKS.md, "The cost of tracing"); an SDK
	// installed later is used from the next claim on. Defaults to false.
	DisableTracing bool

	// OnLeaseLost, when set, is called for each fenced write that changed no
	// row (after the warning is logged). For tests and custom accounting.
	OnLeaseLost func(outboxID, leaseVersion int64)

	// Source is Message.Source of every message: the CloudEvents source
	// attribute and, with the outbox id, the idempotency key consumers
	// deduplicate on (see DefaultSource). Every dispatcher of one outbox must
	// use the same value. Defaults to DefaultSource of the pool's connection
	// settings and the outbox table as the database resolves it,
	// schema-qualified whether or not Schema is set
	// ("pgoutbox://HOST:PORT/DATABASE/public.outbox"; Run resolves it).
	Source string

	// Hooks for running dispatchers over many databases in one process
	// (package fleet composes them); a single dispatcher needs none.

	// Limiter, when set, is a limit on publishes that this dispatcher
	// shares with others: every publish waits in Limiter.Acquire for a slot
	// and gives it back when Publish returns (see Limiter). Concurrency
	// still bounds this dispatcher's own publishes. Defaults to nil: only
	// Concurrency.
	Limiter Limiter

	// MetricAttributes are added to every measurement of the dispatcher's
	// instruments (counters, histograms and queue gauges), for example
	// attribute.String("database", name) when several dispatchers report
	// to one MeterProvider. Defaults to none.
	MetricAttributes []attribute.KeyValue
}

func (c Config) withDefaults() Config {
	c.Batch = cmp.Or(c.Batch, BatchDefault)
	c.BatchMin = cmp.Or(c.BatchMin, min(BatchMinDefault, c.Batch))
	c.BatchWork = cmp.Or(c.BatchWork, BatchWorkDefault)
	c.Lease = cmp.Or(c.Lease, LeaseDefault)
	c.MaxAttempts = cmp.Or(c.MaxAttempts, MaxAttemptsDefault)
	c.Concurrency = cmp.Or(c.Concurrency, ConcurrencyDefault)
	c.PublishTimeout = cmp.Or(c.PublishTimeout, PublishTimeoutDefault)
	c.PollInterval = cmp.Or(c.PollInterval, PollIntervalDefault)
	c.WakeWindow = cmp.Or(c.WakeWindow, WakeWindowDefault)
	c.Table = cmp.Or(c.Table, TableDefault)
	c.Channel = cmp.Or(c.Channel, c.Table, ChannelDefault)
	c.BackoffBase = cmp.Or(c.BackoffBase, BackoffBaseDefault)
	c.BackoffCap = cmp.Or(c.BackoffCap, BackoffCapDefault)
	c.MaxDeferAge = cmp.Or(c.MaxDeferAge, MaxDeferAgeDefault)
	c.FinalizeBatch = cmp.Or(c.FinalizeBatch, FinalizeBatchDefault)
	c.FinalizeDelay = cmp.Or(c.FinalizeDelay, FinalizeDelayDefault)
	c.ShutdownTimeout = cmp.Or(c.ShutdownTimeout, ShutdownTimeoutDefault)
	c.ReapInterval = cmp.Or(c.ReapInterval, ReapIntervalDefault)
	c.SweepInterval = cmp.Or(c.SweepInterval, SweepIntervalDefault)
	c.StatsInterval = cmp.Or(c.StatsInterval, StatsIntervalDefault)
	c.RelayInterval = cmp.Or(c.RelayInterval, RelayIntervalDefault)
	c.ReapGrace = cmp.Or(c.ReapGrace, ReapGraceDefault)
	c.ClaimTimeout = cmp.Or(c.ClaimTimeout, ClaimTimeoutDefault)
	c.WriteTimeout = cmp.Or(c.WriteTimeout, WriteTimeoutDefault)
	c.ListenPing = cmp.Or(c.ListenPing, ListenPingDefault)
	c.ShutdownFlush = cmp.Or(c.ShutdownFlush, ShutdownFlushDefault)
	c.BreakerThreshold = cmp.Or(c.BreakerThreshold, BreakerThresholdDefault)
	c.BreakerProbe = cmp.Or(c.BreakerProbe, BreakerProbeDefault)
	c.BreakerProbeMax = cmp.Or(c.BreakerProbeMax, max(BreakerProbeMaxDefault, c.BreakerProbe))
	if c.Owner == "" {
		c.Owner = defaultOwner()
	}
	c.Owner = dbText(c.Owner, maxOwnerChars)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// Validate reports, as New would, whether c (with defaults applied) is a
// valid configuration. Errors wrap ErrInvalidConfig and name the field.
func (c Config) Validate() error { return c.withDefaults().validate() }

func (c Config) validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidConfig, fmt.Sprintf(format, args...))
	}
	switch {
	case c.Batch < 1 || c.Batch > maxBatch:
		return bad("Batch must be between 1 and %d, got %d", maxBatch, c.Batch)
	case c.BatchMin < 1 || c.BatchMin > c.Batch:
		return bad("BatchMin must be between 1 and Batch (%d), got %d", c.Batch, c.BatchMin)
	case c.BatchWork < 0:
		return bad("BatchWork must be positive, got %s", c.BatchWork)
	case c.Lease < 10*time.Millisecond:
		return bad("Lease must be at least 10ms, got %s", c.Lease)
	case c.MaxAttempts < 1 || c.MaxAttempts > maxAttemptsLimit:
		return bad("MaxAttempts must be between 1 and %d, got %d", maxAttemptsLimit, c.MaxAttempts)
	case c.Concurrency < 1 || c.Concurrency > maxConcurrency:
		return bad("Concurrency must be between 1 and %d, got %d", maxConcurrency, c.Concurrency)
	case c.PublishTimeout <= 0:
		return bad("PublishTimeout must be positive, got %s", c.PublishTimeout)
	case c.HeartbeatInterval < 0:
		return bad("HeartbeatInterval must not be negative, got %s", c.HeartbeatInterval)
	case c.HeartbeatInterval == 0 && c.PublishTimeout >= c.Lease:
		return bad("PublishTimeout (%s) must be shorter than Lease (%s), or set HeartbeatInterval", c.PublishTimeout, c.Lease)
	case c.HeartbeatInterval > 0 && c.HeartbeatInterval > c.Lease/2:
		return bad("HeartbeatInterval (%s) must be at most half of Lease (%s)", c.HeartbeatInterval, c.Lease)
	case c.PollInterval < 0:
		return bad("PollInterval must be positive, got %s", c.PollInterval)
	case c.WakeWindow < 10*time.Millisecond:
		return bad("WakeWindow must be at least 10ms, got %s", c.WakeWindow)
	case c.BackoffBase < 0 || c.BackoffCap < c.BackoffBase:
		return bad("BackoffBase (%s) must be positive and at most BackoffCap (%s)", c.BackoffBase, c.BackoffCap)
	case c.MaxDeferAge < 0:
		return bad("MaxDeferAge must be positive, got %s", c.MaxDeferAge)
	case c.FinalizeBatch < 1 || c.FinalizeBatch > maxFinalizeBatch:
		return bad("FinalizeBatch must be between 1 and %d, got %d", maxFinalizeBatch, c.FinalizeBatch)
	case c.ClaimTimeout < 0:
		return bad("ClaimTimeout must be positive, got %s", c.ClaimTimeout)
	case c.WriteTimeout < 0:
		return bad("WriteTimeout must be positive, got %s", c.WriteTimeout)
	case c.ListenPing < 0:
		return bad("ListenPing must be positive, got %s", c.ListenPing)
	case c.ShutdownFlush < 0:
		return bad("ShutdownFlush must be positive, got %s", c.ShutdownFlush)
	case c.FinalizeDelay < 0:
		return bad("FinalizeDelay must be positive, got %s", c.FinalizeDelay)
	case c.ShutdownTimeout < 0:
		return bad("ShutdownTimeout must be positive, got %s", c.ShutdownTimeout)
	case c.ReapInterval < 0:
		return bad("ReapInterval must be positive, got %s", c.ReapInterval)
	case c.SweepInterval < 0:
		return bad("SweepInterval must be positive, got %s", c.SweepInterval)
	case c.BreakerProbe < 0 || c.BreakerProbeMax < c.BreakerProbe:
		return bad("BreakerProbe (%s) must be positive and at most BreakerProbeMax (%s)", c.BreakerProbe, c.BreakerProbeMax)
	case c.UnclassifiedErrors < UnclassifiedAsCrash || c.UnclassifiedErrors > UnclassifiedAsPermanent:
		return bad("UnclassifiedErrors has unknown value %d", c.UnclassifiedErrors)
	case c.TraceMode < TraceLink || c.TraceMode > TraceParent:
		return bad("TraceMode has unknown value %d", c.TraceMode)
	case c.Claim < ClaimAll || c.Claim > ClaimOrderedOnly:
		return bad("Claim has unknown value %d", c.Claim)
	case sqlrename.ValidateTable(c.Table) != nil:
		return bad("%s", strings.Replace(sqlrename.ValidateTable(c.Table).Error(), "--table", "Table", 1))
	case c.Schema != "" && sqlrename.ValidateSchema(c.Schema) != nil:
		return bad("%s", strings.Replace(sqlrename.ValidateSchema(c.Schema).Error(), "--schema", "Schema", 1))
	case !validChannel(c.Channel):
		return bad("Channel %q must be a plain identifier (letters, digits, underscore)", c.Channel)
	}
	return nil
}

func validChannel(s string) bool {
	if s == "" || len(s) > 63 {
		return false
	}
	for i, r := range s {
		switch {
		case r == '_', r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z':
		case r >= '0' && r <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}
