package main

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
)

// The "pinned horizon" item (issue 14): a relay at a steady producer rate,
// a baseline window, then one long transaction that pins the xmin horizon
// (a REPEATABLE READ read-only snapshot that read the queue table once, as
// pg_dump does, or an idle-in-transaction writer that took an xid by writing
// an unrelated table), held for a while, released, and an after window.
// Latency is end to end: from the producer's COMMIT returning to the
// publish (pgoutbox) or Work call (River) of that message, on this
// process's monotonic clock, bucketed by commit time.

// Defaults of the item (quick mode; -horizon-hold 10m for the goal).
const (
	horizonRateDefault     = 2000
	horizonPerTx           = 20
	horizonProducers       = 8
	horizonBaselineDefault = 15 * time.Second
	horizonHoldDefault     = 75 * time.Second
	horizonAfterDefault    = 20 * time.Second
	horizonBucketLen       = 5 * time.Second
	// -full: the goal's duration.
	horizonBaselineFull = 30 * time.Second
	horizonHoldFull     = 10 * time.Minute
	horizonAfterFull    = time.Minute
	// horizonDrainWait is how long after the producers stop the run waits
	// for the backlog; what is still undelivered then is censored (counted
	// with its latency so far).
	horizonDrainWait = 60 * time.Second
	// horizonP99Factor and the one-second backlog are the goal.
	horizonP99Factor = 3.0
)

// horizonPin is what holds the horizon back during the held window.
type horizonPin string

const (
	pinSnapshot horizonPin = "snapshot" // REPEATABLE READ READ ONLY, read the queue table once
	pinWriter   horizonPin = "writer"   // idle in transaction after writing an unrelated table
)

// horizonVariant is one run of the item.
type horizonVariant struct {
	Key     string // -horizon-variants name
	Label   string
	System  string // "pgoutbox" or "River"
	Ordered bool   // pgoutbox: Event.Ordered over horizonAggregates aggregates
	Pin     horizonPin
}

const horizonAggregates = 1000

var horizonVariants = []horizonVariant{
	{Key: "unordered", Label: "(a) pgoutbox, unordered, snapshot held", System: "pgoutbox", Pin: pinSnapshot},
	{Key: "ordered", Label: "(b) pgoutbox, ordered over 1,000 aggregates, snapshot held", System: "pgoutbox", Ordered: true, Pin: pinSnapshot},
	{Key: "writer", Label: "(c) pgoutbox, unordered, idle-in-transaction writer held", System: "pgoutbox", Pin: pinWriter},
	{Key: "river", Label: "(d) River, insert + work, snapshot held", System: "River", Pin: pinSnapshot},
	// Not in the default set: the ordered claim with an idle writer.
	{Key: "ordered-writer", Label: "(e) pgoutbox, ordered over 1,000 aggregates, idle-in-transaction writer held", System: "pgoutbox", Ordered: true, Pin: pinWriter},
}

const horizonVariantsDefault = "unordered,ordered,writer,river"

// horizonSystem is what one system under test provides to the common run.
type horizonSystem struct {
	// setup configures the system and starts its consumer, which calls
	// rec.delivered(seq) once per first delivery. stop ends it.
	start func(ctx context.Context, rec *horizonRecorder) (stop func(), err error)
	// produce commits one transaction carrying the events seqs.
	produce func(ctx context.Context, seqs []int) error
	// table is the queue table the snapshot reads and the sizes are taken of.
	table string
	url   string
	// settings describes the system's configuration for the report.
	settings string
}

// horizonRecorder keeps commit and delivery times per event sequence
// number, in nanoseconds since base (0: not yet).
type horizonRecorder struct {
	base      time.Time
	commitAt  []atomic.Int64
	deliverAt []atomic.Int64
	committed atomic.Int64
	published atomic.Int64
}

func newHorizonRecorder(n int) *horizonRecorder {
	return &horizonRecorder{base: time.Now(), commitAt: make([]atomic.Int64, n), deliverAt: make([]atomic.Int64, n)}
}

func (r *horizonRecorder) now() int64 { return int64(time.Since(r.base)) + 1 }

func (r *horizonRecorder) delivered(seq int) {
	if seq >= 0 && seq < len(r.deliverAt) && r.deliverAt[seq].CompareAndSwap(0, r.now()) {
		r.published.Add(1)
	}
}

// horizonSample is one sample of the queue: the backlog and the sizes of the
// table and each of its indexes.
type horizonSample struct {
	At         time.Duration
	Backlog    int64
	TableBytes int64
	IndexBytes []int64 // in horizonRun.IndexNames order
}

// horizonBucket is one 5 s window of commit time.
type horizonBucket struct {
	Start      time.Duration
	Phase      string
	N          int
	P50, P99   time.Duration
	Max        time.Duration
	Delivered  float64 // msg/s delivered during the window (by delivery time)
	Backlog    int64   // the largest backlog sampled in the window
	TableBytes int64   // at the end of the window
	IndexBytes []int64
}

// horizonWindow summarizes one phase.
type horizonWindow struct {
	Phase      string
	N          int
	P50, P99   time.Duration
	Max        time.Duration
	WorstP99   time.Duration // the worst 5 s bucket's p99
	Backlog    int64         // the largest backlog sampled
	Delivered  float64       // msg/s delivered during the phase
	TableBytes int64         // at the end of the phase
	IndexBytes []int64
}

// horizonRun is one variant's result.
type horizonRun struct {
	Variant    horizonVariant
	Settings   string
	Rate       float64
	PerTx      int
	Baseline   time.Duration
	Hold       time.Duration
	After      time.Duration
	Committed  int
	Published  int
	Censored   int // undelivered horizonDrainWait after the producers stopped
	Achieved   float64
	PinNote    string
	IndexNames []string
	Buckets    []horizonBucket
	Windows    []horizonWindow // baseline, held, held (last 30 s), after
	Samples    []horizonSample
	// Offset is when the producers started, as an offset of the samples'
	// clock (Samples[i].At - Offset is seconds since the producers started).
	Offset time.Duration
}

func (h *horizonRun) window(phase string) *horizonWindow {
	for i := range h.Windows {
		if h.Windows[i].Phase == phase {
			return &h.Windows[i]
		}
	}
	return nil
}

// Ratio is the held window's p99 over the baseline's.
func (h *horizonRun) Ratio() float64 {
	b, w := h.window("baseline"), h.window("held")
	if b == nil || w == nil || b.P99 <= 0 {
		return 0
	}
	return float64(w.P99) / float64(b.P99)
}

// Met reports the goal: p99 during the hold at most 3x the
// baseline's and the backlog below one second of traffic.
func (h *horizonRun) Met() bool {
	w := h.window("held")
	return w != nil && h.Censored == 0 && h.Ratio() <= horizonP99Factor && float64(w.Backlog) < h.Rate
}

// horizonOptions are the item's command-line settings.
type horizonOptions struct {
	baseline, hold, after time.Duration
	rate                  float64
	variants              string
}

// runHorizon is the "horizon" item.
func runHorizon(ctx context.Context, e *env) error {
	ho := e.o.horizon
	for _, key := range splitList(ho.variants) {
		i := slices.IndexFunc(horizonVariants, func(v horizonVariant) bool { return v.Key == key })
		if i < 0 {
			return fmt.Errorf("-horizon-variants: unknown variant %q (known: unordered, ordered, writer, river, ordered-writer)", key)
		}
		v := horizonVariants[i]
		var sys horizonSystem
		var err error
		if v.System == "River" {
			sys, err = riverHorizonSystem(ctx, e)
		} else {
			sys, err = outboxHorizonSystem(ctx, e, v.Ordered, false)
		}
		if err != nil {
			return err
		}
		logf("horizon %s: baseline %s, held %s, after %s at %s events/s", v.Key, ho.baseline, ho.hold, ho.after, kfmt(ho.rate))
		run, err := runHorizonVariant(ctx, e, v, sys, ho)
		if err != nil {
			return fmt.Errorf("horizon %s: %w", v.Key, err)
		}
		logHorizon(run)
		e.res.Horizon = append(e.res.Horizon, run)
	}
	return nil
}

func logHorizon(h *horizonRun) {
	for _, w := range h.Windows {
		logf("horizon %s %-16s n %7d  p50 %9s  p99 %9s  worst-bucket p99 %9s  backlog max %6d  delivered %5.0f/s  table %s",
			h.Variant.Key, w.Phase, w.N, w.P50.Round(100*time.Microsecond), w.P99.Round(100*time.Microsecond),
			w.WorstP99.Round(100*time.Microsecond), w.Backlog, w.Delivered, mib(w.TableBytes))
	}
	logf("horizon %s: committed %d (%.0f/s), delivered %d, censored %d; held p99 / baseline p99 = %.2fx; goal met: %v",
		h.Variant.Key, h.Committed, h.Achieved, h.Published, h.Censored, h.Ratio(), h.Met())
}

func mib(b int64) string { return fmt.Sprintf("%.1f MB", float64(b)/1e6) }

// runHorizonVariant runs one variant end to end.
func runHorizonVariant(ctx context.Context, e *env, v horizonVariant, sys horizonSystem, ho horizonOptions) (*horizonRun, error) {
	total := ho.baseline + ho.hold + ho.after
	txRate := ho.rate / horizonPerTx
	nTx := int(txRate * total.Seconds())
	n := nTx * horizonPerTx
	run := &horizonRun{Variant: v, Settings: sys.settings, Rate: ho.rate, PerTx: horizonPerTx,
		Baseline: ho.baseline, Hold: ho.hold, After: ho.after}

	names, err := indexNames(ctx, sys.url, sys.table)
	if err != nil {
		return nil, err
	}
	run.IndexNames = names
	rec := newHorizonRecorder(n)
	stop, err := sys.start(ctx, rec)
	if err != nil {
		return nil, err
	}
	stopped := false
	defer func() {
		if !stopped {
			stop()
		}
	}()

	// The sampler: backlog and sizes every second (its own connection, so
	// it never waits for a pool).
	sconn, err := pgx.Connect(ctx, sys.url)
	if err != nil {
		return nil, err
	}
	defer sconn.Close(context.WithoutCancel(ctx))
	sctx, scancel := context.WithCancel(ctx)
	var swg sync.WaitGroup
	var samples []horizonSample
	var serr error
	swg.Add(1)
	go func() {
		defer swg.Done()
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			s := horizonSample{At: time.Since(rec.base), Backlog: rec.committed.Load() - rec.published.Load()}
			var err error
			if s.TableBytes, s.IndexBytes, err = relationSizes(sctx, sconn, sys.table, names); err != nil {
				if sctx.Err() == nil {
					serr = err
				}
				return
			}
			samples = append(samples, s)
			select {
			case <-sctx.Done():
				return
			case <-tick.C:
			}
		}
	}()

	// Producers: nTx transactions of horizonPerTx events on a fixed
	// schedule; they stop at the end of the run even when behind.
	var (
		next  atomic.Int64
		perr  atomic.Pointer[error]
		pwg   sync.WaitGroup
		start = time.Now()
	)
	interval := time.Duration(float64(time.Second) / txRate)
	for p := 0; p < horizonProducers; p++ {
		pwg.Add(1)
		go func() {
			defer pwg.Done()
			seqs := make([]int, horizonPerTx)
			for {
				j := int(next.Add(1) - 1)
				if j >= nTx || time.Since(start) > total {
					return
				}
				if wait := time.Until(start.Add(time.Duration(j) * interval)); wait > 0 {
					time.Sleep(wait)
				}
				for k := range seqs {
					seqs[k] = j*horizonPerTx + k
				}
				if err := sys.produce(ctx, seqs); err != nil {
					perr.Store(&err)
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

	// The pin: taken after the baseline, released after the hold.
	pinAt := rec.since(start) + ho.baseline
	releaseAt := pinAt + ho.hold
	sleepUntil(ctx, rec.base.Add(pinAt))
	release, note, err := pinHorizon(ctx, sys.url, sys.table, v.Pin)
	if err != nil {
		perr.Store(&err)
	} else {
		run.PinNote = note
		logf("horizon %s: %s", v.Key, note)
		sleepUntil(ctx, rec.base.Add(releaseAt))
		if err := release(); err != nil {
			perr.Store(&err)
		}
		logf("horizon %s: released after %s", v.Key, ho.hold)
	}
	pwg.Wait()
	produceTime := time.Since(start)
	if p := perr.Load(); p != nil {
		scancel()
		swg.Wait()
		return nil, *p
	}
	// Wait for the backlog (a condition, bounded).
	drainDeadline := time.Now().Add(horizonDrainWait)
	for rec.published.Load() < rec.committed.Load() && time.Now().Before(drainDeadline) {
		time.Sleep(10 * time.Millisecond)
	}
	endAt := rec.now()
	stop()
	stopped = true
	scancel()
	swg.Wait()
	if serr != nil {
		return nil, fmt.Errorf("sampler: %w", serr)
	}
	run.Samples = samples
	run.Offset = rec.since(start)
	run.Committed = int(rec.committed.Load())
	run.Published = int(rec.published.Load())
	run.Achieved = float64(run.Committed) / produceTime.Seconds()
	run.summarize(rec, rec.since(start), pinAt, releaseAt, endAt)
	return run, nil
}

func (r *horizonRecorder) since(t time.Time) time.Duration { return t.Sub(r.base) }

func sleepUntil(ctx context.Context, t time.Time) {
	select {
	case <-ctx.Done():
	case <-time.After(time.Until(t)):
	}
}

// summarize fills Buckets and Windows from the recorder and the samples.
// Times are offsets from rec.base; start is when producing began.
func (h *horizonRun) summarize(rec *horizonRecorder, start, pinAt, releaseAt time.Duration, endAt int64) {
	phase := func(at time.Duration) string {
		switch {
		case at < pinAt:
			return "baseline"
		case at < releaseAt:
			return "held"
		}
		return "after"
	}
	type lat struct {
		commit time.Duration
		d      time.Duration
	}
	var all []lat
	var delivered []time.Duration // delivery times
	for i := range rec.commitAt {
		c := rec.commitAt[i].Load()
		if c == 0 {
			continue
		}
		p := rec.deliverAt[i].Load()
		if p == 0 {
			h.Censored++
			p = endAt
		} else {
			delivered = append(delivered, time.Duration(p))
		}
		all = append(all, lat{time.Duration(c), time.Duration(max(p-c, 0))})
	}
	end := h.Baseline + h.Hold + h.After
	nb := int((end + horizonBucketLen - 1) / horizonBucketLen)
	groups := make([][]time.Duration, nb)
	for _, l := range all {
		i := int((l.commit - start) / horizonBucketLen)
		if i >= 0 && i < nb {
			groups[i] = append(groups[i], l.d)
		}
	}
	slices.Sort(delivered)
	deliveredIn := func(from, to time.Duration) float64 {
		lo, _ := slices.BinarySearch(delivered, from)
		hi, _ := slices.BinarySearch(delivered, to)
		return float64(hi-lo) / (to - from).Seconds()
	}
	sampleIn := func(from, to time.Duration) (backlog int64, last *horizonSample) {
		for i := range h.Samples {
			s := &h.Samples[i]
			if s.At < from || s.At >= to {
				continue
			}
			backlog = max(backlog, s.Backlog)
			if s.IndexBytes != nil {
				last = s
			}
		}
		return backlog, last
	}
	for i, g := range groups {
		from := start + time.Duration(i)*horizonBucketLen
		to := from + horizonBucketLen
		slices.Sort(g)
		b := horizonBucket{Start: time.Duration(i) * horizonBucketLen, Phase: phase(from), N: len(g),
			P50: percentile(g, 0.50), P99: percentile(g, 0.99), Delivered: deliveredIn(from, to)}
		if len(g) > 0 {
			b.Max = g[len(g)-1]
		}
		var last *horizonSample
		b.Backlog, last = sampleIn(from, to)
		if last != nil {
			b.TableBytes, b.IndexBytes = last.TableBytes, last.IndexBytes
		}
		h.Buckets = append(h.Buckets, b)
	}
	windows := []struct {
		name     string
		from, to time.Duration
	}{
		{"baseline", start, pinAt},
		{"held", pinAt, releaseAt},
		{"held, last 30 s", max(pinAt, releaseAt-30*time.Second), releaseAt},
		{"after", releaseAt, start + end},
	}
	for _, wd := range windows {
		var g []time.Duration
		for _, l := range all {
			if l.commit >= wd.from && l.commit < wd.to {
				g = append(g, l.d)
			}
		}
		slices.Sort(g)
		w := horizonWindow{Phase: wd.name, N: len(g), P50: percentile(g, 0.50), P99: percentile(g, 0.99)}
		if len(g) > 0 {
			w.Max = g[len(g)-1]
		}
		for _, b := range h.Buckets {
			bs := start + b.Start
			if bs >= wd.from && bs < wd.to {
				w.WorstP99 = max(w.WorstP99, b.P99)
			}
		}
		if wd.to > wd.from {
			w.Delivered = deliveredIn(wd.from, wd.to)
		}
		var last *horizonSample
		w.Backlog, last = sampleIn(wd.from, wd.to)
		if last != nil {
			w.TableBytes, w.IndexBytes = last.TableBytes, last.IndexBytes
		}
		h.Windows = append(h.Windows, w)
	}
}

// pinHorizon opens the long transaction and returns the function that ends
// it, plus a line saying what it holds.
func pinHorizon(ctx context.Context, url, table string, pin horizonPin) (func() error, string, error) {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return nil, "", err
	}
	fail := func(err error) (func() error, string, error) {
		conn.Close(context.WithoutCancel(ctx))
		return nil, "", err
	}
	var tx pgx.Tx
	var note string
	switch pin {
	case pinSnapshot:
		if tx, err = conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}); err != nil {
			return fail(err)
		}
		var rows int64
		if err := tx.QueryRow(ctx, "SELECT count(*) FROM "+table).Scan(&rows); err != nil {
			return fail(err)
		}
		note = fmt.Sprintf("REPEATABLE READ READ ONLY transaction read %s once (%d rows) and stays open", table, rows)
	case pinWriter:
		if _, err := conn.Exec(ctx, "CREATE TABLE IF NOT EXISTS bench_horizon_unrelated (id bigint GENERATED ALWAYS AS IDENTITY, at timestamptz NOT NULL DEFAULT now())"); err != nil {
			return fail(err)
		}
		if tx, err = conn.Begin(ctx); err != nil {
			return fail(err)
		}
		var xid string
		if err := tx.QueryRow(ctx, "INSERT INTO bench_horizon_unrelated DEFAULT VALUES RETURNING pg_current_xact_id()::text").Scan(&xid); err != nil {
			return fail(err)
		}
		note = fmt.Sprintf("a transaction wrote bench_horizon_unrelated (xid %s) and stays idle in transaction", xid)
	default:
		return fail(fmt.Errorf("unknown pin %q", pin))
	}
	var xmin *string
	if err := conn.QueryRow(ctx, "SELECT backend_xmin::text FROM pg_stat_activity WHERE pid = pg_backend_pid()").Scan(&xmin); err == nil && xmin != nil {
		note += "; backend_xmin " + *xmin
	}
	release := func() error {
		defer conn.Close(context.WithoutCancel(ctx))
		return tx.Rollback(context.WithoutCancel(ctx))
	}
	return release, note, nil
}

// indexNames lists table's indexes by name.
func indexNames(ctx context.Context, url, table string) ([]string, error) {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	rows, err := conn.Query(ctx, `SELECT indexrelid::regclass::text FROM pg_index WHERE indrelid = $1::regclass ORDER BY 1`, table)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// relationSizes reads the table's size (main fork) and each index's.
func relationSizes(ctx context.Context, conn *pgx.Conn, table string, names []string) (int64, []int64, error) {
	var tbl int64
	var idx []int64
	err := conn.QueryRow(ctx, `SELECT pg_relation_size($1::regclass),
		       array(SELECT pg_relation_size(n::regclass) FROM unnest($2::text[]) WITH ORDINALITY AS u(n, o) ORDER BY o)`,
		table, names).Scan(&tbl, &idx)
	return tbl, idx, err
}
