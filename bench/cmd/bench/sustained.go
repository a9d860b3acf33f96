package main

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgoutbox/pgoutbox/dispatcher"
)

// Sustained mode: producers write a business row and its outbox event(s) in
// one transaction at a fixed rate while a dispatcher (LISTEN on, default
// 1s poll fallback) drains. Latency is from the producer's COMMIT returning
// to the Publish call for that message, on this process's monotonic clock.

const sustainedProducers = 8

// sustainedP99Limit is the p99 a step may reach and still count as kept up.
const sustainedP99Limit = 100 * time.Millisecond

// latencyRecorder keeps, per message sequence number, the commit and publish
// times in nanoseconds since base.
type latencyRecorder struct {
	base      time.Time
	commitAt  []atomic.Int64
	publishAt []atomic.Int64
	published atomic.Int64
}

func newLatencyRecorder(n int) *latencyRecorder {
	return &latencyRecorder{base: time.Now(), commitAt: make([]atomic.Int64, n), publishAt: make([]atomic.Int64, n)}
}

func (l *latencyRecorder) now() int64 { return int64(time.Since(l.base)) + 1 }

// Publish records the first publish of each message (sequence number in
// AggregateID).
func (l *latencyRecorder) Publish(_ context.Context, m dispatcher.Message) error {
	seq, err := strconv.Atoi(m.AggregateID)
	if err == nil && seq >= 0 && seq < len(l.publishAt) {
		if l.publishAt[seq].CompareAndSwap(0, l.now()) {
			l.published.Add(1)
		}
	}
	return nil
}

// runStep offers rate msg/s for d and measures what happened.
// perTx events go in each business transaction.
func runStep(ctx context.Context, e *env, rate float64, d time.Duration, perTx int) (sustainedStep, error) {
	st := sustainedStep{Offered: rate, Producers: sustainedProducers, Duration: d, PerTx: perTx}
	txRate := rate / float64(st.PerTx)
	nTx := int(txRate * d.Seconds())
	n := nTx * st.PerTx
	if err := resetOutbox(ctx, e.outbox); err != nil {
		return st, err
	}
	if _, err := e.outbox.Exec(ctx, "TRUNCATE bench_orders"); err != nil {
		return st, err
	}
	if _, err := e.outbox.Exec(ctx, "CHECKPOINT"); err != nil {
		return st, err
	}
	rec := newLatencyRecorder(n)

	// Dispatcher: the drain setup, with the default poll interval (1s) so
	// that the latency comes from the NOTIFY wake-up.
	s := outboxSetup()
	dpool, err := newPool(ctx, e.outboxURL, s.poolConns)
	if err != nil {
		return st, err
	}
	defer dpool.Close()
	cfg := s.cfg
	cfg.Logger = quietLogger()
	d1, err := dispatcher.New(dpool, rec, cfg)
	if err != nil {
		return st, err
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var dwg sync.WaitGroup
	dwg.Add(1)
	go func() { defer dwg.Done(); _ = d1.Run(runCtx) }()
	time.Sleep(300 * time.Millisecond) // LISTEN established

	ppool, err := newPool(ctx, e.outboxURL, sustainedProducers)
	if err != nil {
		return st, err
	}
	defer ppool.Close()
	var (
		next      atomic.Int64
		committed atomic.Int64
		perr      atomic.Pointer[error]
		wg        sync.WaitGroup
	)
	interval := time.Duration(float64(time.Second) / txRate)
	start := time.Now()
	for p := 0; p < sustainedProducers; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			events := make([]dispatcher.Event, st.PerTx)
			for {
				j := int(next.Add(1) - 1)
				// Stop at the end of the step even when behind schedule: a
				// step measures a rate, not a count.
				if j >= nTx || time.Since(start) > d {
					return
				}
				at := start.Add(time.Duration(j) * interval)
				if wait := time.Until(at); wait > 0 {
					time.Sleep(wait)
				}
				for k := range events {
					seq := j*st.PerTx + k
					events[k] = dispatcher.Event{AggregateType: "order", AggregateID: strconv.Itoa(seq),
						EventType: "OrderPlaced", Payload: json.RawMessage(`{"order":` + strconv.Itoa(j) + `}`)}
				}
				err := pgx.BeginFunc(ctx, ppool, func(tx pgx.Tx) error {
					if _, err := tx.Exec(ctx, "INSERT INTO bench_orders (amount) VALUES ($1)", j%1000); err != nil {
						return err
					}
					if st.PerTx == 1 {
						_, err := dispatcher.Enqueue(ctx, tx, events[0])
						return err
					}
					_, err := dispatcher.EnqueueMany(ctx, tx, events)
					return err
				})
				now := rec.now()
				if err != nil {
					perr.Store(&err)
					return
				}
				for k := 0; k < st.PerTx; k++ {
					rec.commitAt[j*st.PerTx+k].Store(now)
				}
				committed.Add(int64(st.PerTx))
			}
		}()
	}
	wg.Wait()
	produceTime := time.Since(start)
	if p := perr.Load(); p != nil {
		return st, *p
	}
	// Let the dispatcher finish: at most 5s after the producers stopped.
	drainDeadline := time.Now().Add(5 * time.Second)
	for rec.published.Load() < committed.Load() && time.Now().Before(drainDeadline) {
		time.Sleep(2 * time.Millisecond)
	}
	deliverTime := time.Since(start)
	cancel()
	dwg.Wait()

	st.Committed = int(committed.Load())
	st.Published = int(rec.published.Load())
	st.Achieved = float64(st.Committed) / produceTime.Seconds()
	st.Delivered = float64(st.Published) / deliverTime.Seconds()
	st.Backlog = int64(st.Committed - st.Published)
	lat := make([]time.Duration, 0, n)
	for i := 0; i < n; i++ {
		c, p := rec.commitAt[i].Load(), rec.publishAt[i].Load()
		if c == 0 || p == 0 {
			continue
		}
		lat = append(lat, time.Duration(max(p-c, 0)))
	}
	slices.Sort(lat)
	st.P50, st.P90, st.P99 = percentile(lat, 0.50), percentile(lat, 0.90), percentile(lat, 0.99)
	if len(lat) > 0 {
		st.Max = lat[len(lat)-1]
	}
	st.Samples = lat
	// Kept up: the producers achieved the offered rate (within 5%), every
	// message was delivered, and p99 stayed within 100 ms (beyond that the
	// queue was growing during the step and drained only after it).
	st.Kept = st.Achieved >= 0.95*rate && st.Backlog == 0 && st.P99 <= sustainedP99Limit
	return st, nil
}

// runSustained is item 2.
func runSustained(ctx context.Context, e *env) error {
	if _, err := e.outbox.Exec(ctx, `CREATE TABLE IF NOT EXISTS bench_orders (
		id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, amount integer NOT NULL,
		created_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		return err
	}
	base := 10 * time.Second
	stepDur := 5 * time.Second
	if e.o.full {
		base, stepDur = 60*time.Second, 15*time.Second
	}
	// 2a: 1,000 msg/s, one event per business transaction, the schema as
	// shipped.
	st, err := runStep(ctx, e, 1000, base, 1)
	if err != nil {
		return err
	}
	logSustained(st)
	e.res.Sustained = append(e.res.Sustained, st)
	// 2b: how fast producers can commit one-event transactions, with and
	// without a relay waiting idle.
	ceilDur := 5 * time.Second
	if e.o.full {
		ceilDur = 15 * time.Second
	}
	for _, v := range triggerVariants {
		c, err := runProducerCeiling(ctx, e, v, ceilDur)
		if err != nil {
			return err
		}
		logf("producer ceiling, %s: %.0f tx/s, %.0f notifications/s", c.Variant, c.TxPerSec, c.NotifyPerSec)
		e.res.ProducerCeiling = append(e.res.ProducerCeiling, c)
	}
	// 2c: rising rates, producers at 250 transactions/s carrying rate/250
	// events each, until a step is not kept up.
	for _, rate := range []float64{1000, 2000, 5000, 10000, 20000, 30000, 40000, 50000} {
		st, err := runStep(ctx, e, rate, stepDur, int(rate/250))
		if err != nil {
			return err
		}
		logSustained(st)
		if rate != 1000 {
			st.Samples = nil
		}
		e.res.Sustained = append(e.res.Sustained, st)
		if !st.Kept {
			break
		}
		e.res.MaxSustained = rate
	}
	e.res.LatencyAt1000 = &e.res.Sustained[0]
	e.res.LatencyAt1000Batched = &e.res.Sustained[1]
	return nil
}

func logSustained(st sustainedStep) {
	logf("sustained %s msg/s (%d per tx): produced %.0f/s, delivered %d/%d, p50 %s p90 %s p99 %s max %s, kept up: %v",
		fmt.Sprint(st.Offered), st.PerTx, st.Achieved, st.Published, st.Committed,
		st.P50.Round(10*time.Microsecond), st.P90.Round(10*time.Microsecond), st.P99.Round(10*time.Microsecond),
		st.Max.Round(10*time.Microsecond), st.Kept)
}

// triggerVariant is one wake-up setup for item 2b.
// With idle, the listening connection holds the idle lock (migration
// 00015) as an idle relay's does, so producers queue their wake-ups.
type triggerVariant struct {
	name string
	idle bool
}

var triggerVariants = []triggerVariant{
	{name: "as shipped, no relay waiting idle (no wake-up queued)"},
	{name: "as shipped, a relay waiting idle (every committing producer notifies)", idle: true},
}

// runProducerCeiling is item 2b: sustainedProducers goroutines commit
// one-event business transactions (a bench_orders row plus Enqueue) as fast
// as they can for d, no dispatcher running, while one connection LISTENs and
// counts the notifications that arrive.
func runProducerCeiling(ctx context.Context, e *env, v triggerVariant, d time.Duration) (producerCeiling, error) {
	c := producerCeiling{Variant: v.name, Producers: sustainedProducers, Duration: d}
	if err := resetOutbox(ctx, e.outbox); err != nil {
		return c, err
	}
	if _, err := e.outbox.Exec(ctx, "TRUNCATE bench_orders"); err != nil {
		return c, err
	}
	if _, err := e.outbox.Exec(ctx, "CHECKPOINT"); err != nil {
		return c, err
	}
	lconn, err := pgx.Connect(ctx, e.outboxURL)
	if err != nil {
		return c, err
	}
	defer lconn.Close(context.WithoutCancel(ctx))
	if _, err := lconn.Exec(ctx, "LISTEN outbox"); err != nil {
		return c, err
	}
	if v.idle {
		var held bool
		if err := lconn.QueryRow(ctx, "SELECT pg_try_advisory_lock(('outbox'::regclass)::oid::integer, 1869968485)").Scan(&held); err != nil || !held {
			return c, fmt.Errorf("2b: the idle lock: %v, %v", held, err)
		}
	}
	var notes atomic.Int64
	lctx, lcancel := context.WithCancel(ctx)
	ldone := make(chan struct{})
	go func() {
		defer close(ldone)
		for {
			if _, err := lconn.WaitForNotification(lctx); err != nil {
				return
			}
			notes.Add(1)
		}
	}()
	ppool, err := newPool(ctx, e.outboxURL, sustainedProducers)
	if err != nil {
		lcancel()
		<-ldone
		return c, err
	}
	defer ppool.Close()
	var (
		txs  atomic.Int64
		perr atomic.Pointer[error]
		wg   sync.WaitGroup
	)
	start := time.Now()
	for p := 0; p < sustainedProducers; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; time.Since(start) < d; i++ {
				err := pgx.BeginFunc(ctx, ppool, func(tx pgx.Tx) error {
					if _, err := tx.Exec(ctx, "INSERT INTO bench_orders (amount) VALUES ($1)", i%1000); err != nil {
						return err
					}
					_, err := dispatcher.Enqueue(ctx, tx, dispatcher.Event{AggregateType: "order", AggregateID: strconv.Itoa(i),
						EventType: "OrderPlaced", Payload: json.RawMessage(`{"order":1}`)})
					return err
				})
				if err != nil {
					perr.Store(&err)
					return
				}
				txs.Add(1)
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	time.Sleep(300 * time.Millisecond) // the last notifications arrive
	lcancel()
	<-ldone
	if p := perr.Load(); p != nil {
		return c, *p
	}
	c.Transactions = txs.Load()
	c.Notifications = notes.Load()
	c.TxPerSec = float64(c.Transactions) / elapsed.Seconds()
	c.NotifyPerSec = float64(c.Notifications) / elapsed.Seconds()
	return c, nil
}
