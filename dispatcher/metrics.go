package dispatcher

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

const meterName = "github.com/pgoutbox/pgoutbox/dispatcher"

// Stats is a snapshot of one dispatcher's counters since it was created, and
// the last queue gauges read from the monitoring queries.
type Stats struct {
	Claimed       int64 // messages claimed
	Recovered     int64 // claimed from an expired lease and published alone
	Published     int64 // published and finalized done
	Retried       int64 // rescheduled after a retryable failure
	Deferred      int64 // rescheduled by a business defer (attempt refunded)
	Dead          int64 // sent to dead by this dispatcher
	LeaseLost     int64 // fenced writes that changed no row
	Released      int64 // handed back unstarted (shutdown, near expiry, the breaker open)
	Unavailable   int64 // published and found the destination unavailable: handed back, attempt refunded (breaker.go)
	NearExpiry    int64 // not started because the lease was too close to expiry
	Panics        int64 // publisher panics (treated as crashes)
	Unclassified  int64 // unclassified errors left to lease recovery
	Reaped        int64 // messages this dispatcher's reap sent to dead
	Heartbeats    int64 // lease extensions
	Notifications int64 // NOTIFY wake-ups received
	WakePolls     int64 // short idle waits inside a wake window (Config.WakeWindow)
	IdleWaits     int64 // idle waits of a full PollInterval (outside a wake window), counted as each begins
	RoomWaits     int64 // waits for room in flight longer than an instant (publishes, not claims, set the pace; producers notify meanwhile), counted as each begins
	Listens       int64 // times LISTEN was registered on the listen connection (first connect and reconnects)
	DBErrors      int64 // transient database errors retried
	Flushes       int64 // batched finalize statements
	Isolations    int64 // claims that failed and fell back to the isolation path
	LockWaits     int64 // claims that ran out of ClaimTimeout while the table was locked against them (DDL), resumed where they were
	Unreadable    int64 // messages sent to dead because their row could not be read
	Requeued      int64 // pending messages the claim cursor had passed, recovered by the sweep, and heads repaired (normally 0)
	Repaired      int64 // rows and sequences brought from another server that were repaired: txids re-stamped, rows sequenced, sequences moved on (normally 0)
	InFlight      int64 // claimed now and not yet finalized or handed back
	ClaimSize     int64 // the current adaptive claim size (Config.BatchMin .. Config.Batch)
	BreakerOpen   bool  // the breaker is open now: the destination is unavailable, claims wait for probes
	BreakerOpens  int64 // times the breaker opened
	Probes        int64 // messages published as the breaker's probe

	Queue QueueStats // last refresh of the monitoring gauges
}

// QueueStats are the table-wide gauges (all dispatchers).
type QueueStats struct {
	At                time.Time
	ByStatus          map[string]int64 // pending, processing, dead exact; done exact up to 10,000, then estimated; skipped (never counted as done) exact up to 10,000 (OutboxQueueDepth)
	OldestAgeSeconds  float64
	ExpiredLeases     int64
	BlockedAggregates int64
	Horizon           Horizon // who holds the oldest snapshot, and the table's dead tuples
	// Rows from another server that nothing delivers until they are
	// repaired (OutboxPortability; a relay repairs them on its recovery
	// lane, `pgoutbox repair` at once): ordered rows inserted with the
	// table's triggers off, pending rows with a txid this server has not
	// assigned, and sequences (id, seq) behind the rows.
	Unsequenced, ForeignTxids, SequencesBehind int64
}

// outcome is what became of a claimed message (or a fenced write).
type outcome int

const (
	outPublished outcome = iota
	outRetried
	outDeferred
	outDead
	outLeaseLost
	outReleased
	outNearExpiry
	outPanic
	outUnclassified
	outReaped
	outUnavailable
	numOutcomes
)

var outcomeNames = [numOutcomes]string{"published", "retried", "deferred", "dead", "lease_lost",
	"released", "near_expiry", "panic", "unclassified", "reaped", "unavailable"}

type metrics struct {
	outcomes                                                                                                      [numOutcomes]atomic.Int64
	outcomeAttrs                                                                                                  [numOutcomes]metric.AddOption
	publishAttrs                                                                                                  [2][]metric.RecordOption // ok=false, ok=true (built once, slices included: a variadic argument built per call escapes, one allocation per publish)
	claimedN, recovered, heartbeats, notifications, hotPolls, dbErrors, flushes, isolations, unreadable, requeued atomic.Int64
	idleWaits, listens, repaired, lockWaits, roomWaits                                                            atomic.Int64

	mu    sync.Mutex
	queue QueueStats

	claimCounter   metric.Int64Counter
	outcomeCounter metric.Int64Counter
	publishHist    metric.Float64Histogram
	e2eHist        metric.Float64Histogram
	flushHist      metric.Int64Histogram

	meter                                             metric.Meter
	depthGauge, ageGauge, expiredGauge, blockedGauge  metric.Int64ObservableGauge
	horizonAgeGauge, horizonXminGauge, deadTupleGauge metric.Int64ObservableGauge
	unrepairedGauge                                   metric.Int64ObservableGauge
	unrepairedAttrs                                   [3]metric.ObserveOption // unsequenced, foreign_txid, sequence_behind
	breakerGauge                                      metric.Int64ObservableGauge

	// Config.MetricAttributes, and the options carrying them alone for the
	// measurements without an attribute of their own (nil without any:
	// built once, so a measurement allocates nothing for them).
	extra      []attribute.KeyValue
	baseAdd    []metric.AddOption
	baseRecord []metric.RecordOption
	baseObs    []metric.ObserveOption
}

// secondsBuckets are the advised boundaries of the duration histograms: 1ms
// to 5 minutes (the SDK's default boundaries, 0 to 10,000, suit milliseconds).
var secondsBuckets = metric.WithExplicitBucketBoundaries(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
	1, 2.5, 5, 10, 30, 60, 300)

func newMetrics(mp metric.MeterProvider, extra []attribute.KeyValue) (*metrics, error) {
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	m := &metrics{extra: extra}
	if len(extra) > 0 {
		base := metric.WithAttributeSet(attribute.NewSet(extra...))
		m.baseAdd, m.baseRecord, m.baseObs = []metric.AddOption{base}, []metric.RecordOption{base}, []metric.ObserveOption{base}
	}
	with := func(kv attribute.KeyValue) attribute.Set {
		return attribute.NewSet(append([]attribute.KeyValue{kv}, extra...)...)
	}
	for i, name := range outcomeNames {
		m.outcomeAttrs[i] = metric.WithAttributeSet(with(attribute.String("outcome", name)))
	}
	for i, ok := range []bool{false, true} {
		m.publishAttrs[i] = []metric.RecordOption{metric.WithAttributeSet(with(attribute.Bool("ok", ok)))}
	}
	meter := mp.Meter(meterName)
	var err error
	if m.claimCounter, err = meter.Int64Counter("pgoutbox.messages.claimed",
		metric.WithDescription("Messages claimed under a lease.")); err != nil {
		return nil, err
	}
	if m.outcomeCounter, err = meter.Int64Counter("pgoutbox.messages.outcomes",
		metric.WithDescription("Finalize outcomes by kind: published, retried, deferred, dead, lease_lost, released, unavailable, panic.")); err != nil {
		return nil, err
	}
	if m.publishHist, err = meter.Float64Histogram("pgoutbox.publish.duration", metric.WithUnit("s"),
		metric.WithDescription("Time spent in Publisher.Publish."), secondsBuckets); err != nil {
		return nil, err
	}
	if m.e2eHist, err = meter.Float64Histogram("pgoutbox.delivery.latency", metric.WithUnit("s"),
		metric.WithDescription("From created_at (the producing transaction) to a successful publish."), secondsBuckets); err != nil {
		return nil, err
	}
	if m.flushHist, err = meter.Int64Histogram("pgoutbox.finalize.batch_size",
		metric.WithDescription("Rows per batched finalize statement."),
		metric.WithExplicitBucketBoundaries(1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000)); err != nil {
		return nil, err
	}
	if m.depthGauge, err = meter.Int64ObservableGauge("pgoutbox.queue.depth", metric.WithUnit("{message}"),
		metric.WithDescription("Messages by status (table-wide).")); err != nil {
		return nil, err
	}
	if m.ageGauge, err = meter.Int64ObservableGauge("pgoutbox.queue.oldest_age", metric.WithUnit("s"),
		metric.WithDescription("Age of the oldest undelivered message.")); err != nil {
		return nil, err
	}
	if m.expiredGauge, err = meter.Int64ObservableGauge("pgoutbox.leases.expired", metric.WithUnit("{message}"),
		metric.WithDescription("Processing messages past their lease.")); err != nil {
		return nil, err
	}
	if m.blockedGauge, err = meter.Int64ObservableGauge("pgoutbox.aggregates.blocked", metric.WithUnit("{aggregate}"),
		metric.WithDescription("Ordered aggregates whose head is dead or stalled.")); err != nil {
		return nil, err
	}
	if m.breakerGauge, err = meter.Int64ObservableGauge("pgoutbox.breaker.open",
		metric.WithDescription("1 while this dispatcher's breaker is open (the destination is unavailable: claims wait for probes), 0 otherwise.")); err != nil {
		return nil, err
	}
	if m.horizonAgeGauge, err = meter.Int64ObservableGauge("pgoutbox.horizon.age", metric.WithUnit("s"),
		metric.WithDescription("How long the holder of the server's oldest snapshot has held it (its transaction's age; 0 when unknown), labelled with the holder.")); err != nil {
		return nil, err
	}
	if m.horizonXminGauge, err = meter.Int64ObservableGauge("pgoutbox.horizon.xmin_age", metric.WithUnit("{transaction}"),
		metric.WithDescription("Age in transactions of the oldest snapshot on the server, labelled with its holder (kind, pid, role, name).")); err != nil {
		return nil, err
	}
	if m.deadTupleGauge, err = meter.Int64ObservableGauge("pgoutbox.table.dead_tuples", metric.WithUnit("{tuple}"),
		metric.WithDescription("Dead row versions in the outbox table that vacuum has not removed (statistics, approximate).")); err != nil {
		return nil, err
	}
	if m.unrepairedGauge, err = meter.Int64ObservableGauge("pgoutbox.queue.unrepaired", metric.WithUnit("{row}"),
		metric.WithDescription("Rows from another server waiting for a repair, by kind: unsequenced (ordered rows inserted with triggers off), foreign_txid (pending rows with a txid this server has not assigned), sequence_behind (sequences behind the rows).")); err != nil {
		return nil, err
	}
	for i, kind := range []string{"unsequenced", "foreign_txid", "sequence_behind"} {
		m.unrepairedAttrs[i] = metric.WithAttributeSet(with(attribute.String("kind", kind)))
	}
	m.meter = meter
	return m, nil
}

// observeBreaker registers the callback of the breaker gauge; Run
// unregisters it when it returns.
func (m *metrics) observeBreaker(open func() bool) (metric.Registration, error) {
	return m.meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		v := int64(0)
		if open() {
			v = 1
		}
		o.ObserveInt64(m.breakerGauge, v, m.baseObs...)
		return nil
	}, m.breakerGauge)
}

// observeQueue registers the callback of the queue gauges; Run unregisters
// it when it returns, so a stopped dispatcher leaves no series behind.
func (m *metrics) observeQueue() (metric.Registration, error) {
	return m.meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		q := m.queueStats()
		if q.At.IsZero() {
			return nil // not read yet
		}
		for status, n := range q.ByStatus {
			o.ObserveInt64(m.depthGauge, n, metric.WithAttributes(append([]attribute.KeyValue{attribute.String("status", status)}, m.extra...)...))
		}
		o.ObserveInt64(m.ageGauge, int64(q.OldestAgeSeconds), m.baseObs...)
		o.ObserveInt64(m.expiredGauge, q.ExpiredLeases, m.baseObs...)
		o.ObserveInt64(m.blockedGauge, q.BlockedAggregates, m.baseObs...)
		o.ObserveInt64(m.deadTupleGauge, q.Horizon.DeadTuples, m.baseObs...)
		if h, ok := q.Horizon.Oldest(); ok {
			attrs := metric.WithAttributes(append([]attribute.KeyValue{attribute.String("holder_kind", h.Kind), attribute.Int("holder_pid", int(h.PID)),
				attribute.String("holder_role", h.Role), attribute.String("holder_name", h.Name)}, m.extra...)...)
			o.ObserveInt64(m.horizonXminGauge, h.XminAge, attrs)
			o.ObserveInt64(m.horizonAgeGauge, int64(h.HeldSeconds), attrs)
		}
		for i, n := range []int64{q.Unsequenced, q.ForeignTxids, q.SequencesBehind} {
			o.ObserveInt64(m.unrepairedGauge, n, m.unrepairedAttrs[i])
		}
		return nil
	}, m.depthGauge, m.ageGauge, m.expiredGauge, m.blockedGauge, m.horizonAgeGauge, m.horizonXminGauge, m.deadTupleGauge, m.unrepairedGauge)
}

func (m *metrics) queueStats() QueueStats {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.queue
}

func (m *metrics) claimed(ctx context.Context, n int) {
	if n == 0 {
		return
	}
	m.claimedN.Add(int64(n))
	m.claimCounter.Add(ctx, int64(n), m.baseAdd...)
}

// add counts n messages with outcome o.
func (m *metrics) add(o outcome, n int64) {
	if n == 0 {
		return
	}
	m.outcomes[o].Add(n)
	m.outcomeCounter.Add(context.Background(), n, m.outcomeAttrs[o])
}

func (m *metrics) publishDuration(ctx context.Context, d time.Duration, ok bool) {
	i := 0
	if ok {
		i = 1
	}
	m.publishHist.Record(ctx, d.Seconds(), m.publishAttrs[i]...)
}

func (m *metrics) delivered(ctx context.Context, sinceCreated time.Duration) {
	m.e2eHist.Record(ctx, sinceCreated.Seconds(), m.baseRecord...)
}

func (m *metrics) finalizeFlush(ctx context.Context, n int) {
	m.flushes.Add(1)
	m.flushHist.Record(ctx, int64(n), m.baseRecord...)
}

// Stats returns a snapshot of this dispatcher's counters.
func (d *Dispatcher) Stats() Stats {
	m := d.metrics
	return Stats{
		Claimed: m.claimedN.Load(), Recovered: m.recovered.Load(), Published: m.outcomes[outPublished].Load(), Retried: m.outcomes[outRetried].Load(),
		Deferred: m.outcomes[outDeferred].Load(), Dead: m.outcomes[outDead].Load(), LeaseLost: m.outcomes[outLeaseLost].Load(),
		Released: m.outcomes[outReleased].Load(), NearExpiry: m.outcomes[outNearExpiry].Load(), Panics: m.outcomes[outPanic].Load(),
		Unclassified: m.outcomes[outUnclassified].Load(), Reaped: m.outcomes[outReaped].Load(), Heartbeats: m.heartbeats.Load(),
		Unavailable: m.outcomes[outUnavailable].Load(), BreakerOpen: d.breaker.holding(), BreakerOpens: d.breaker.opens.Load(), Probes: d.breaker.probed.Load(),
		Notifications: m.notifications.Load(), WakePolls: m.hotPolls.Load(), DBErrors: m.dbErrors.Load(), Flushes: m.flushes.Load(),
		Isolations: m.isolations.Load(), Unreadable: m.unreadable.Load(), Requeued: m.requeued.Load(), Repaired: m.repaired.Load(), LockWaits: m.lockWaits.Load(),
		InFlight: d.inFlight.Load(), ClaimSize: d.claimSize.Load(),
		IdleWaits: m.idleWaits.Load(), RoomWaits: m.roomWaits.Load(), Listens: m.listens.Load(),
		Queue: m.queueStats(),
	}
}
