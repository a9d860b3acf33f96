package main

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/pgoutbox/db/opsdb"
	"github.com/pgoutbox/pgoutbox/dispatcher"
)

// Bloat over hours (issue 14): two opt-in items.
//
//   - soak: the horizon item's relay and producers (2,000 events/s in
//     20-event transactions, the zero Config) for -soak, with retention on a
//     schedule: every -soak-purge-every, OutboxPurgeDone (what `pgoutbox
//     purge` runs, at its default --batch 1000) deletes done rows older than
//     -soak-retain until it deletes nothing. Every 30 s it samples the table
//     and each index and reports whether they plateau.
//   - retention: can DELETE-based retention keep up with the relay's top
//     rate? -retention-n pending rows drained by the drain configuration at
//     full speed while a purger deletes done rows older than 5 s as fast as
//     it can, per purge batch size; then the purge alone.

const (
	soakDurationDefault   = 30 * time.Minute
	soakRateDefault       = 2000
	soakRetainDefault     = time.Minute
	soakPurgeEveryDefault = 30 * time.Second
	soakSampleEvery       = 30 * time.Second
	// soakPlateauGrowth is the most the table + indexes may grow over the
	// second half of the soak for it to count as a plateau.
	soakPlateauGrowth = 0.10

	retentionNDefault = 1_000_000
	retentionAge      = 5 * time.Second
	purgeBatchCLI     = 1000 // `pgoutbox purge` --batch default
)

type soakOptions struct {
	duration, retain, purgeEvery time.Duration
	rate                         float64
	retentionN                   int
	relay                        string // "default" (the zero Config) or "drain" (outboxSetup)
}

// soakSample is one 30 s sample.
type soakSample struct {
	At          time.Duration
	TableBytes  int64
	IndexBytes  []int64
	TotalBytes  int64 // pg_total_relation_size: heap, indexes, TOAST, FSM, VM
	Live, Dead  int64 // pg_stat_user_tables estimates
	Autovacuums int64
	Rows        int64 // count(*)
	Deleted     int64 // purged so far
	Backlog     int64
	P99         time.Duration // events committed in the 30 s before the sample
}

type soakResult struct {
	Duration, Retain, PurgeEvery time.Duration
	Rate, Achieved               float64
	Committed, Published         int
	Deleted                      int64
	PurgeRuns                    int
	PurgeTime                    time.Duration // total time spent purging
	IndexNames                   []string
	Samples                      []soakSample
	P50, P99                     time.Duration
	Settings                     string
	Growth                       float64 // relative growth of table + indexes over the second half
	Plateau                      bool
	Purges                       []soakPurge
	RelOptions                   string // outbox's storage parameters (pg_class.reloptions), "" for none
}

// soakPurge is one scheduled purge run.
type soakPurge struct {
	At, Took time.Duration
	Rows     int64
}

func sumSizes(table int64, idx []int64) int64 {
	for _, b := range idx {
		table += b
	}
	return table
}

// runSoak is the opt-in "soak" item.
func runSoak(ctx context.Context, e *env) error {
	so := e.o.soak
	if so.relay != "default" && so.relay != "drain" {
		return fmt.Errorf("-soak-relay: %q is neither default nor drain", so.relay)
	}
	sys, err := outboxHorizonSystem(ctx, e, false, so.relay == "drain")
	if err != nil {
		return err
	}
	res := &soakResult{Duration: so.duration, Retain: so.retain, PurgeEvery: so.purgeEvery, Rate: so.rate,
		Settings: sys.settings}
	names, err := indexNames(ctx, e.outboxURL, "outbox")
	if err != nil {
		return err
	}
	res.IndexNames = names
	if err := e.outbox.QueryRow(ctx, "SELECT coalesce(array_to_string(reloptions, ', '), '') FROM pg_class WHERE oid = 'outbox'::regclass").Scan(&res.RelOptions); err != nil {
		return err
	}
	txRate := so.rate / horizonPerTx
	nTx := int(txRate * so.duration.Seconds())
	rec := newHorizonRecorder(nTx * horizonPerTx)
	stop, err := sys.start(ctx, rec)
	if err != nil {
		return err
	}
	defer stop()
	logf("soak: %s at %s events/s, purge every %s of done rows older than %s (batch %d)", so.duration, kfmt(so.rate), so.purgeEvery, so.retain, purgeBatchCLI)

	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	start := time.Now()
	var (
		wg      sync.WaitGroup
		deleted atomic.Int64
		errs    = make(chan error, 3)
	)
	// The scheduled purge, as cron running `pgoutbox purge` would.
	wg.Add(1)
	go func() {
		defer wg.Done()
		q := opsdb.New(e.outbox)
		tick := time.NewTicker(so.purgeEvery)
		defer tick.Stop()
		for {
			select {
			case <-runCtx.Done():
				return
			case <-tick.C:
			}
			t0 := time.Now()
			before := deleted.Load()
			for runCtx.Err() == nil {
				n, err := q.OutboxPurgeDone(runCtx, opsdb.OutboxPurgeDoneParams{OlderThan: so.retain, Limit: purgeBatchCLI})
				if err != nil {
					if runCtx.Err() == nil {
						errs <- fmt.Errorf("purge: %w", err)
					}
					return
				}
				deleted.Add(n)
				if n == 0 {
					break
				}
			}
			res.PurgeRuns++
			res.PurgeTime += time.Since(t0)
			res.Purges = append(res.Purges, soakPurge{At: t0.Sub(start), Took: time.Since(t0), Rows: deleted.Load() - before})
			logf("soak purge at %s: %d rows in %s", t0.Sub(start).Round(time.Second), deleted.Load()-before, time.Since(t0).Round(time.Millisecond))
		}
	}()
	// The sampler.
	sconn, err := pgx.Connect(ctx, e.outboxURL)
	if err != nil {
		return err
	}
	defer sconn.Close(context.WithoutCancel(ctx))
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(soakSampleEvery)
		defer tick.Stop()
		for {
			select {
			case <-runCtx.Done():
				return
			case <-tick.C:
			}
			s, err := soakSampleNow(runCtx, sconn, names)
			if err != nil {
				if runCtx.Err() == nil {
					errs <- fmt.Errorf("sample: %w", err)
				}
				return
			}
			s.At = time.Since(start)
			s.Deleted = deleted.Load()
			s.Backlog = rec.committed.Load() - rec.published.Load()
			s.P99 = recentP99(rec, s.At+rec.since(start)-soakSampleEvery, s.At+rec.since(start), time.Duration(rec.now()))
			res.Samples = append(res.Samples, s)
			logf("soak %s: table %s, indexes %s, total %s, rows %d (dead %d), purged %d, autovacuums %d, backlog %d, p99 %s",
				s.At.Round(time.Second), mib(s.TableBytes), mib(sumSizes(0, s.IndexBytes)), mib(s.TotalBytes), s.Rows, s.Dead,
				s.Deleted, s.Autovacuums, s.Backlog, s.P99.Round(100*time.Microsecond))
		}
	}()
	// The producers.
	interval := time.Duration(float64(time.Second) / txRate)
	var next atomic.Int64
	var pwg sync.WaitGroup
	for p := 0; p < horizonProducers; p++ {
		pwg.Add(1)
		go func() {
			defer pwg.Done()
			seqs := make([]int, horizonPerTx)
			for runCtx.Err() == nil {
				j := int(next.Add(1) - 1)
				if j >= nTx || time.Since(start) > so.duration {
					return
				}
				if wait := time.Until(start.Add(time.Duration(j) * interval)); wait > 0 {
					time.Sleep(wait)
				}
				for k := range seqs {
					seqs[k] = j*horizonPerTx + k
				}
				if err := sys.produce(runCtx, seqs); err != nil {
					if runCtx.Err() == nil {
						errs <- fmt.Errorf("produce: %w", err)
					}
					return
				}
				now := rec.now()
				for _, s := range seqs {
					rec.commitAt[s].Store(now)
				}
				rec.committed.Add(int64(len(seqs)))
			}
		}()
	}
	pwg.Wait()
	produced := time.Since(start)
	deadline := time.Now().Add(horizonDrainWait)
	for rec.published.Load() < rec.committed.Load() && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	wg.Wait()
	select {
	case err := <-errs:
		return err
	default:
	}
	res.Committed, res.Published = int(rec.committed.Load()), int(rec.published.Load())
	res.Achieved = float64(res.Committed) / produced.Seconds()
	res.Deleted = deleted.Load()
	var lat []time.Duration
	for i := range rec.commitAt {
		c, p := rec.commitAt[i].Load(), rec.deliverAt[i].Load()
		if c != 0 && p != 0 {
			lat = append(lat, time.Duration(max(p-c, 0)))
		}
	}
	slices.Sort(lat)
	res.P50, res.P99 = percentile(lat, 0.5), percentile(lat, 0.99)
	res.Growth, res.Plateau = soakPlateau(res.Samples)
	logf("soak: committed %d (%.0f/s), delivered %d, purged %d in %d runs (%s purging), p50 %s p99 %s; table+indexes grew %.1f%% over the second half: plateau %v",
		res.Committed, res.Achieved, res.Published, res.Deleted, res.PurgeRuns, res.PurgeTime.Round(time.Millisecond),
		res.P50.Round(100*time.Microsecond), res.P99.Round(100*time.Microsecond), 100*res.Growth, res.Plateau)
	e.res.Soak = res
	return nil
}

// soakPlateau compares table + indexes at the end with their largest size
// in the first half: growth over the second half, and whether it stays
// within soakPlateauGrowth.
func soakPlateau(ss []soakSample) (float64, bool) {
	if len(ss) < 4 {
		return 0, false
	}
	var mid int64
	for _, s := range ss[:len(ss)/2] {
		mid = max(mid, sumSizes(s.TableBytes, s.IndexBytes))
	}
	last := ss[len(ss)-1]
	end := sumSizes(last.TableBytes, last.IndexBytes)
	g := float64(end-mid) / float64(mid)
	return g, g <= soakPlateauGrowth
}

// recentP99 is the p99 latency of the events committed in [from, to);
// those not delivered yet count with their latency so far (now - commit).
func recentP99(rec *horizonRecorder, from, to, now time.Duration) time.Duration {
	var lat []time.Duration
	for i := range rec.commitAt {
		c := time.Duration(rec.commitAt[i].Load())
		if c == 0 || c < from || c >= to {
			continue
		}
		p := time.Duration(rec.deliverAt[i].Load())
		if p == 0 {
			p = now
		}
		lat = append(lat, max(p-c, 0))
	}
	slices.Sort(lat)
	return percentile(lat, 0.99)
}

func soakSampleNow(ctx context.Context, conn *pgx.Conn, names []string) (soakSample, error) {
	var s soakSample
	var err error
	if s.TableBytes, s.IndexBytes, err = relationSizes(ctx, conn, "outbox", names); err != nil {
		return s, err
	}
	err = conn.QueryRow(ctx, `SELECT pg_total_relation_size('outbox'), n_live_tup, n_dead_tup, autovacuum_count,
		       (SELECT count(*) FROM outbox)
		  FROM pg_stat_user_tables WHERE relid = 'outbox'::regclass`).Scan(&s.TotalBytes, &s.Live, &s.Dead, &s.Autovacuums, &s.Rows)
	return s, err
}

// retentionResult is one retention measurement.
type retentionResult struct {
	Name        string
	N           int
	PurgeBatch  int
	Drain       time.Duration // until every row was done
	DrainRate   float64       // rows/s marked done
	DeletedIn   int64         // purged while draining
	PurgeRate   float64       // rows/s purged while draining (or alone)
	CatchUp     time.Duration // after the drain, until every done row was purged
	TotalPurge  float64       // rows/s purged from the first purge to the last row
	StartBytes  int64         // table + indexes
	PeakBytes   int64
	EndBytes    int64
	IndexNames  []string
	PeakIndexes []int64
}

// runRetention is the opt-in "retention" item.
func runRetention(ctx context.Context, e *env) error {
	n := e.o.soak.retentionN
	for _, batch := range []int{purgeBatchCLI, 10000} {
		r, err := retentionDrain(ctx, e, n, batch)
		if err != nil {
			return err
		}
		e.res.Retention = append(e.res.Retention, r)
	}
	r, err := retentionAlone(ctx, e, n, 10000)
	if err != nil {
		return err
	}
	e.res.Retention = append(e.res.Retention, r)
	return nil
}

// retentionDrain drains n pending rows with the drain configuration while a
// purger deletes done rows older than retentionAge, batch rows a statement,
// without pause (a 50 ms nap when it finds nothing).
func retentionDrain(ctx context.Context, e *env, n, batch int) (retentionResult, error) {
	r := retentionResult{Name: "drain + purge", N: n, PurgeBatch: batch}
	if err := resetOutbox(ctx, e.outbox); err != nil {
		return r, err
	}
	if err := fillOutboxSQL(ctx, e.outbox, n, "pending"); err != nil {
		return r, err
	}
	if err := settle(ctx, e.outbox, "outbox"); err != nil {
		return r, err
	}
	names, err := indexNames(ctx, e.outboxURL, "outbox")
	if err != nil {
		return r, err
	}
	r.IndexNames = names
	sconn, err := pgx.Connect(ctx, e.outboxURL)
	if err != nil {
		return r, err
	}
	defer sconn.Close(context.WithoutCancel(ctx))
	tb, ib, err := relationSizes(ctx, sconn, "outbox", names)
	if err != nil {
		return r, err
	}
	r.StartBytes, r.PeakBytes = sumSizes(tb, ib), sumSizes(tb, ib)

	s := outboxSetup()
	pool, err := newPool(ctx, e.outboxURL, s.poolConns)
	if err != nil {
		return r, err
	}
	defer pool.Close()
	cfg := s.cfg
	cfg.Logger = quietLogger()
	d, err := dispatcher.New(pool, noopPublisher, cfg)
	if err != nil {
		return r, err
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	var deleted atomic.Int64
	var drained atomic.Bool
	perr := make(chan error, 1)
	start := time.Now()
	wg.Add(2)
	go func() { defer wg.Done(); _ = d.Run(runCtx) }()
	go func() {
		defer wg.Done()
		perr <- purgeLoop(runCtx, e.outbox, batch, &deleted, func() bool { return drained.Load() && deleted.Load() >= int64(n) })
	}()
	var drainEnd, purgeEnd time.Time
	for i, deadline := 0, time.Now().Add(10*time.Minute); time.Now().Before(deadline); i++ {
		if !drained.Load() && d.Stats().Published >= int64(n) {
			drainEnd = time.Now()
			r.DeletedIn = deleted.Load()
			drained.Store(true)
		}
		if drained.Load() && deleted.Load() >= int64(n) {
			purgeEnd = time.Now()
			break
		}
		if i%10 == 0 {
			if tb, ib, err := relationSizes(ctx, sconn, "outbox", names); err == nil && sumSizes(tb, ib) > r.PeakBytes {
				r.PeakBytes, r.PeakIndexes = sumSizes(tb, ib), ib
			}
		}
		time.Sleep(25 * time.Millisecond)
	}
	cancel()
	wg.Wait()
	if err := <-perr; err != nil {
		return r, err
	}
	if drainEnd.IsZero() || deleted.Load() < int64(n) {
		return r, fmt.Errorf("retention: drained %v, purged %d of %d within 10 minutes", !drainEnd.IsZero(), deleted.Load(), n)
	}
	r.Drain = drainEnd.Sub(start)
	r.DrainRate = float64(n) / r.Drain.Seconds()
	r.PurgeRate = float64(r.DeletedIn) / r.Drain.Seconds()
	r.CatchUp = purgeEnd.Sub(drainEnd)
	r.TotalPurge = float64(n) / purgeEnd.Sub(start).Seconds()
	if tb, ib, err = relationSizes(ctx, sconn, "outbox", names); err != nil {
		return r, err
	}
	r.EndBytes = sumSizes(tb, ib)
	logf("retention, batch %d: drained %d in %s (%.0f/s); purged %d meanwhile (%.0f/s, rows older than %s), the rest %s later; table+indexes %s -> peak %s -> %s",
		batch, n, r.Drain.Round(time.Millisecond), r.DrainRate, r.DeletedIn, r.PurgeRate, retentionAge,
		r.CatchUp.Round(time.Millisecond), mib(r.StartBytes), mib(r.PeakBytes), mib(r.EndBytes))
	return r, nil
}

// retentionAlone measures the purge by itself: n done rows, older than
// retentionAge, deleted with OutboxPurgeDone of batch rows a statement.
func retentionAlone(ctx context.Context, e *env, n, batch int) (retentionResult, error) {
	r := retentionResult{Name: "purge alone", N: n, PurgeBatch: batch}
	if err := resetOutbox(ctx, e.outbox); err != nil {
		return r, err
	}
	if _, err := e.outbox.Exec(ctx, `
		INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload, status, done_at, attempts, lease_version)
		SELECT 'bench', 'a' || (g % 1000), 'benchmark', jsonb_build_object('num', g), 'done', now() - interval '1 hour', 1, 1
		  FROM generate_series(1, $1::integer) AS g`, n); err != nil {
		return r, err
	}
	if err := settle(ctx, e.outbox, "outbox"); err != nil {
		return r, err
	}
	var deleted atomic.Int64
	start := time.Now()
	if err := purgeLoop(ctx, e.outbox, batch, &deleted, func() bool { return true }); err != nil {
		return r, err
	}
	el := time.Since(start)
	r.PurgeRate = float64(deleted.Load()) / el.Seconds()
	r.TotalPurge = r.PurgeRate
	r.Drain = el
	logf("retention, purge alone, batch %d: %d done rows deleted in %s = %.0f rows/s", batch, deleted.Load(), el.Round(time.Millisecond), r.PurgeRate)
	return r, nil
}

// purgeLoop runs OutboxPurgeDone(retentionAge, batch) until ctx ends or it
// deletes nothing while finished() holds; it naps 50 ms when it deletes
// nothing.
func purgeLoop(ctx context.Context, pool *pgxpool.Pool, batch int, deleted *atomic.Int64, finished func() bool) error {
	q := opsdb.New(pool)
	for ctx.Err() == nil {
		n, err := q.OutboxPurgeDone(ctx, opsdb.OutboxPurgeDoneParams{OlderThan: retentionAge, Limit: int32(batch)})
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		deleted.Add(n)
		if n == 0 {
			if finished() {
				return nil
			}
			select {
			case <-ctx.Done():
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	return nil
}
