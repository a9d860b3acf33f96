package dispatcher

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/trace"

	"github.com/pgoutbox/pgoutbox/db"
)

// Dispatcher claims outbox messages under a lease, publishes them outside
// any transaction and finalizes them with fenced writes. Any number of
// dispatchers, in one process or many, can share the table.
type Dispatcher struct {
	pool     *pgxpool.Pool
	q        *db.Queries
	plans    customPlans     // the pool with table renaming (what q runs on, tracing aside)
	plain    customPlans     // the pool without table renaming (CheckTable)
	listenC  *pgx.ConnConfig // Config.ListenURL parsed; nil: the pool's settings
	pub      Publisher
	cfg      Config
	log      *slog.Logger
	metrics  *metrics
	tokens   *claimTokens // the lease_owner of each claim (owner.go)
	tracing  *tracing
	breaker  *breaker   // the destination's availability (breaker.go)
	failures failureLog // rate limit of the delivery-failure log lines

	maxInFlight      int
	inFlight         atomic.Int64  // claimed, not yet finalized or handed back
	finalizing       atomic.Int64  // of inFlight: published, in the finalize statement being written (claimRoom)
	worked           atomic.Int64  // jobs the workers finished with: published, failed or handed back (adaptive claim size)
	claimSize        atomic.Int64  // current unordered claim size (Stats)
	freed            chan struct{} // signals the claimer that slots were freed
	wake             chan struct{} // NOTIFY wake-ups, coalesced
	epoch            time.Time     // monotonic base of hotUntil
	hotUntil         atomic.Int64  // end of the wake window, as time since epoch
	wakes            atomic.Int64  // wakeUp calls (claimturn.go)
	busy             busyState     // the idle lock: producers notify only while a relay waits (busy.go)
	firstIdle        chan struct{} // closed when the claim loop first finds nothing to claim (stats.go)
	idleOnce         sync.Once
	idleWakes        atomic.Int64  // in an idle wait begun while listening: 1 + wakes before the empty round; else 0 (tests: export_test.go)
	stopping         atomic.Bool   // Run's context ended: start nothing new
	window           windowState   // where the next unordered claim begins (window.go)
	windowOrd        windowState   // where the next ordered claim begins
	decided          decideFloor   // where the next OutboxDecideCommitted reads from (decide.go)
	expired          expiredCursor // where the recovery lane's next pass reads expired leases (recovery_cursor.go)
	sequencesChecked time.Time     // when the recovery lane last checked the sequences (moved.go)

	running atomic.Bool

	source        atomic.Pointer[string] // Message.Source (Source)
	lastClaim     atomic.Int64           // time since epoch of the last claim that returned rows (relays.go)
	lastFinalize  atomic.Int64           // time since epoch of the last finalize statement that wrote
	relayNow      chan struct{}          // asks relayLoop to record the relay now (first claim, first finalize)
	defaultSource bool                   // Config.Source was empty: Run resolves it (resolveSource)
}

// New returns a Dispatcher over pool that publishes through pub. cfg is
// validated once here; errors wrap ErrInvalidConfig and name the field.
func New(pool *pgxpool.Pool, pub Publisher, cfg Config) (*Dispatcher, error) {
	if pool == nil {
		return nil, fmt.Errorf("%w: pool is nil", ErrInvalidConfig)
	}
	if pub == nil {
		return nil, fmt.Errorf("%w: publisher is nil", ErrInvalidConfig)
	}
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	// An empty Source is resolved by Run from the table the database
	// resolves (resolveSource); until then it reads as if the table were
	// in Config.Schema, or else in public.
	defaultSource := cfg.Source == ""
	if defaultSource {
		cfg.Source = DefaultSource(&pool.Config().ConnConfig.Config, cmpOr(cfg.Schema, "public"), cfg.Table)
	}
	rename, err := newRenamer(cfg.Table, cfg.Schema)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidConfig, err)
	}
	var listenC *pgx.ConnConfig
	if cfg.ListenURL != "" && !cfg.DisableListen {
		if listenC, err = pgx.ParseConfig(cfg.ListenURL); err != nil {
			return nil, fmt.Errorf("%w: ListenURL: %v", ErrInvalidConfig, err)
		}
		// The pool's dialer (for example Dialer's keepalive settings)
		// dials the listen connection as well.
		if dial := pool.Config().ConnConfig.DialFunc; dial != nil {
			listenC.DialFunc = dial
		}
	}
	m, err := newMetrics(cfg.MeterProvider, cfg.MetricAttributes)
	if err != nil {
		return nil, fmt.Errorf("outbox: metrics: %w", err)
	}
	tr := newTracing(cfg, pub)
	dest := "publisher"
	if md, ok := pub.(MessagingDestination); ok {
		dest = md.MessagingSystem()
	}
	plans := newCustomPlans(pool, rename)
	var dbtx db.DBTX = plans
	if !cfg.DisableTracing {
		dbtx = tracedDB{inner: dbtx, t: tr}
	}
	log := newTraceLogger(cfg.Logger).With(slog.String("owner", cfg.Owner))
	d := &Dispatcher{
		pool:        pool,
		q:           db.New(dbtx),
		plans:       plans,
		plain:       newCustomPlans(pool, nil),
		listenC:     listenC,
		pub:         pub,
		cfg:         cfg,
		log:         log,
		metrics:     m,
		tokens:      newClaimTokens(cfg.Owner),
		tracing:     tr,
		breaker:     newBreaker(cfg, dest, log),
		maxInFlight: max(2*cfg.Batch, cfg.Batch+cfg.Concurrency) + cfg.Batch, // claimRoom: plus one claim being finalized
		freed:       make(chan struct{}, 1),
		wake:        make(chan struct{}, 1),
		relayNow:    make(chan struct{}, 1),
		busy:        newBusyState(),
		firstIdle:   make(chan struct{}),
		epoch:       time.Now(),
	}
	d.defaultSource = defaultSource
	d.source.Store(&cfg.Source)
	return d, nil
}

// Owner is this dispatcher's name (Config.Owner). Every lease_owner it
// writes starts with Owner() + "/" followed by its run id: OwnerPrefix.
func (d *Dispatcher) Owner() string { return d.cfg.Owner }

// OwnerPrefix is the start of every lease_owner this Dispatcher writes
// (Owner, "/", its run id, "."), for finding its rows:
// WHERE lease_owner LIKE prefix || '%' (escape the LIKE wildcards of a
// custom Owner) or starts_with(lease_owner, prefix).
func (d *Dispatcher) OwnerPrefix() string { return d.tokens.prefix }

// Run dispatches until ctx ends, then shuts down gracefully: it stops
// claiming, hands back claimed messages it has not started (fenced, attempt
// refunded), lets publishes in flight finish for up to ShutdownTimeout (then
// cancels them), and flushes pending finalizes. It returns nil after a
// graceful shutdown. Transient database errors are retried with backoff; Run
// does not return because of them.
func (d *Dispatcher) Run(ctx context.Context) error {
	if err := d.checkTable(ctx); err != nil {
		return err
	}
	if !d.running.CompareAndSwap(false, true) {
		return errors.New("outbox: Run called twice on one Dispatcher")
	}
	d.log.Debug("dispatcher starting", slog.Int("batch", d.cfg.Batch), slog.Int("batch_min", d.cfg.BatchMin), slog.Duration("lease", d.cfg.Lease),
		slog.Int("concurrency", d.cfg.Concurrency), slog.String("claim", d.cfg.Claim.String()))

	// Publishes outlive ctx during shutdown; hardCancel ends them. The
	// finalizer (which hands messages back too) has a context of its own (flushCancel),
	// so that the final hand-back and finalize still run after hardCancel,
	// on their own bounded deadline (ShutdownFlush).
	hardCtx, hardCancel := context.WithCancel(context.WithoutCancel(ctx))
	defer hardCancel()
	flushCtx, flushCancel := context.WithCancel(context.WithoutCancel(ctx))
	defer flushCancel()

	jobs := make(chan *job, d.maxInFlight)
	fin := newFinalizer(d)
	rel := &releaser{f: fin}

	var bg sync.WaitGroup
	bg.Add(1)
	go func() { defer bg.Done(); fin.run(flushCtx) }()

	var workers sync.WaitGroup
	for i := 0; i < d.cfg.Concurrency; i++ {
		workers.Add(1)
		go func() {
			defer workers.Done()
			d.work(hardCtx, jobs, fin, rel)
		}()
	}
	workers.Add(1)
	go func() {
		defer workers.Done()
		d.recoveryLane(ctx, hardCtx, flushCtx, rel)
	}()

	if reg, err := d.metrics.observeBreaker(d.breaker.holding); err != nil {
		d.log.Warn("breaker gauge unavailable", slog.Any("error", err))
	} else {
		defer reg.Unregister() //nolint:errcheck
	}
	var side sync.WaitGroup
	if !d.cfg.DisableListen {
		side.Add(1)
		go func() { defer side.Done(); d.listen(ctx) }()
	}
	// The relay's record outlives ctx: it goes on beating through the
	// shutdown and is marked stopped once the last finalize is written.
	shutDown := make(chan struct{})
	if d.cfg.RelayInterval > 0 {
		side.Add(1)
		go func() { defer side.Done(); d.relayLoop(ctx, shutDown) }()
	}
	if d.cfg.StatsInterval > 0 {
		reg, err := d.metrics.observeQueue()
		if err != nil {
			d.log.Warn("queue gauges unavailable", slog.Any("error", err))
		} else {
			defer reg.Unregister() //nolint:errcheck
		}
		side.Add(1)
		go func() { defer side.Done(); d.refreshStats(ctx) }()
	}

	d.claimLoop(ctx, jobs, rel)

	// Shutdown: nothing new starts. Run itself hands back every queued job
	// at once, so that they are pending again even when every worker is
	// busy with a long publish (workers that take one meanwhile hand it
	// back too).
	d.stopping.Store(true)
	close(jobs)
	for j := range jobs {
		rel.add(j)
	}
	workersDone := make(chan struct{})
	go func() { workers.Wait(); close(workersDone) }()
	timer := time.NewTimer(d.cfg.ShutdownTimeout)
	select {
	case <-workersDone:
		timer.Stop()
	case <-timer.C:
		d.log.Warn("shutdown timeout: cancelling publishes in flight", slog.Duration("timeout", d.cfg.ShutdownTimeout))
		hardCancel()
		select {
		case <-workersDone:
		case <-time.After(d.cfg.ShutdownTimeout):
			// A publisher that ignores its context: abandon it. Its message
			// stays processing and is recovered after its lease expires.
			d.log.Error("publishes still running after cancellation; abandoning them")
		}
	}
	fin.close()
	// The final flushes run on flushCtx, which is still live here: they get
	// ShutdownFlush, then flushCancel ends whatever still waits on the
	// database (each statement is bounded by WriteTimeout as well).
	flushed := make(chan struct{})
	go func() { bg.Wait(); close(flushed) }()
	select {
	case <-flushed:
	case <-time.After(d.cfg.ShutdownFlush):
		d.log.Error("final finalize/hand-back did not complete in time; leases will expire and messages be re-delivered",
			slog.Duration("shutdown_flush", d.cfg.ShutdownFlush))
		flushCancel()
		<-flushed
	}
	close(shutDown)
	side.Wait()
	d.log.Debug("dispatcher stopped")
	return nil
}

// job is one claimed message on its way through a worker.
type job struct {
	id           int64
	leaseVersion int64
	leaseOwner   string // with leaseVersion, the fencing token of every write
	attempts     int32
	deadline     time.Time // local monotonic estimate of lease_until (never later than it)
	msg          Message
	span         trace.Span // the publish span, until its outcome is known (trace.go)
	res          *result    // what the batch writer writes (finalizer.go)
	pctx         publishCtx // the publish's context when a worker clock times it (publishclock.go)
	probe        bool       // published as the breaker's probe (breaker.go)
	slot         bool       // holds a slot of Config.Limiter (limiter.go)
}

// concurrentClaimConns is the smallest pool (MaxConns) on which claimRound
// runs the two kinds' claims at once: they take two connections, and the
// finalizer, the recovery lane, its sweeps and the gauges must still find
// theirs without waiting. On pgxpool's default for 2 cores (4) it was 4 at
// first, and with a snapshot held (BENCHMARKS.md section 7, 2,000 events/s,
// 75 s) the unordered p50 rose from 4.3 ms to 36.6 ms during the hold (p99
// 107.6 ms), against 5.5 ms / 16.4 ms with the claims in turn; claiming at
// once only when the previous round was idle still gave p50 25 ms in the
// hold's last 30 s. So it needs a pool of 8 (pgxpool's default from 8 cores).
const concurrentClaimConns = 8

// errTableLocked wraps a claim's timeout when the outbox table was locked
// against the claim.
var errTableLocked = errors.New("the outbox table is locked")

// tableLocked reports whether a lock that conflicts with the claims' ROW
// EXCLUSIVE lock is held or awaited on the outbox table
// (OutboxTableLocked). When it cannot tell, it says no.
func (d *Dispatcher) tableLocked(ctx context.Context) bool {
	lctx, cancel := context.WithTimeout(ctx, d.cfg.WriteTimeout)
	defer cancel()
	locked, err := d.q.OutboxTableLocked(lctx)
	return err == nil && locked
}

// dbError logs a database error and sleeps a capped, jittered backoff. It
// returns true when the caller should retry (always, unless ctx ended).
func (d *Dispatcher) dbError(ctx context.Context, op string, err error, failures *int) bool {
	if ctx.Err() != nil {
		return true
	}
	*failures++
	delay := FullJitter(*failures, 50*time.Millisecond, DatabaseRetryMaxDefault)
	delay = max(delay, 10*time.Millisecond)
	d.metrics.dbErrors.Add(1)
	d.log.Warn("database error, retrying", slog.String("op", op), slog.Any("error", err),
		slog.Int("failures", *failures), slog.Duration("retry_in", delay))
	select {
	case <-time.After(delay):
	case <-ctx.Done():
	}
	return true
}

// claimRoom is how many messages the claimer may claim now under limit
// (adaptiveBatch.limit: two claims of size). Messages already published
// and inside the finalize statement being written count against it only
// beyond one claim of size: without that the claimer waited for every
// finalize, and the server, whose claim came back first, ran one statement
// at a time for a quarter of each round (a statement trace of a drain). So at most limit messages in flight are not yet published
// (what a crash leaves waiting for a lease to expire before anyone publishes
// them), and at most one claim more is published, waiting for its finalize
// to commit (a crash re-delivers those: duplicates the consumer drops).
//
// inFlight is read before finalizing: a flush lowers finalizing before
// inFlight, so a claimer reading between the two sees less room, not more.
func (d *Dispatcher) claimRoom(limit, size int) int {
	used := int(d.inFlight.Load())
	return limit - used + min(int(d.finalizing.Load()), size)
}

// dispatch hands a claimed job to the workers.
func (d *Dispatcher) dispatch(jobs chan<- *job, j *job) {
	d.inFlight.Add(1)
	jobs <- j
}

// newJob builds the job of one claimed row. Every path that publishes (the
// main pipeline, the recovery lane, the isolation path) builds its job here,
// so every message carries the dispatcher's Source: a message published
// again after a takeover must keep its idempotency key.
func (d *Dispatcher) newJob(id, leaseVersion int64, leaseOwner string, attempts int32, deadline time.Time,
	aggregateType, aggregateID, eventType string, payload, headers []byte, createdAt time.Time, ordered bool, pos Position) *job {
	if !ordered {
		pos = Position{}
	}
	return &job{
		id:           id,
		leaseVersion: leaseVersion,
		leaseOwner:   leaseOwner,
		attempts:     attempts,
		deadline:     deadline,
		msg: Message{
			ID:            IDString(id),
			OutboxID:      id,
			Source:        *d.source.Load(),
			AggregateType: aggregateType,
			AggregateID:   aggregateID,
			EventType:     eventType,
			Payload:       json.RawMessage(payload),
			Headers:       decodeHeaders(headers),
			Attempt:       int(attempts),
			CreatedAt:     createdAt,
			Ordered:       ordered,
			Position:      pos,
		},
	}
}

// position is the Position of an ordered row from its seq, prev_seq and
// sent_seq columns (migration 00010; 0 for none): the previous event was
// skipped exactly when the latest delivered one is not the previous one.
func position(seq, prev, sent int64) Position {
	if seq == 0 {
		return Position{}
	}
	p := Position{Seq: seq, Prev: prev}
	if sent != prev {
		p.Skipped, p.Sent = true, sent
	}
	return p
}

// release frees n in-flight slots and wakes the claimer.
func (d *Dispatcher) release(n int) {
	d.inFlight.Add(-int64(n))
	d.signalFreed()
}

// signalFreed wakes the claimer if it waits for room (claimRoom).
func (d *Dispatcher) signalFreed() {
	select {
	case d.freed <- struct{}{}:
	default:
	}
}

// notified records a NOTIFY (or a LISTEN (re)connect): the claimer claims
// now and keeps claiming through the wake window.
func (d *Dispatcher) notified() {
	d.hotUntil.Store(int64(time.Since(d.epoch) + d.cfg.WakeWindow))
	d.wakeUp()
}

// wakeUp asks the claimer to claim now (NOTIFY, redrive).
func (d *Dispatcher) wakeUp() {
	d.wakes.Add(1)
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

func decodeHeaders(b []byte) map[string]string {
	h := map[string]string{}
	if len(b) <= 2 { // "{}"
		return h
	}
	var raw map[string]any
	if err := json.Unmarshal(b, &raw); err != nil {
		return h
	}
	for k, v := range raw {
		switch v := v.(type) {
		case string:
			h[k] = v
		default:
			b, _ := json.Marshal(v)
			h[k] = string(b)
		}
	}
	return h
}
