package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgoutbox/pgoutbox/dispatcher"
)

// Item "failures": what a failing receiver costs a default relay
// (`pgoutbox run --publisher http`, no tuning flags) against a Go HTTP
// receiver in this process, next to one that succeeds. With
// -failures-before PATH (a pgoutbox binary built from an earlier commit)
// every scenario runs with that binary as well, for before and after
// figures.
//
//   - success: a backlog of failuresN events committed in four
//     transactions onto the running relay, the receiver answering 204.
//   - outage: the same backlog, the receiver answering 503 to everything
//     for failuresOutage, then 204. Measured: how many events were tried
//     at least once within twice the success run's time, how many
//     retries were written, attempts spent and dead messages at the end of
//     the outage; after it, how long until the first delivery and the
//     drain rate from there. The after binary also runs it with its
//     breaker off (--breaker-threshold 0), which shows the claim order on
//     its own.
//   - message failures: the same backlog, the receiver answering 422
//     (a message-level failure: dead at once) to everything; the rate at
//     which the relay cycles through them.
//   - failing subset: producers offer failuresRate events/s for
//     failuresSubset (20 events a transaction); the receiver answers 422
//     to 10% and 503 to another 10% twice before accepting them. Measured
//     for the healthy 80%: the rate delivered and the latency from the
//     producer's COMMIT to the receiver's 2xx, against a run in which
//     every event succeeds.

const (
	failuresN     = 20_000
	failuresRate  = 2000.0
	failuresPerTx = 20
)

// failuresDurations are how long the outage and each failing-subset run
// last (quick mode; -full: a minute and 30 s).
func failuresDurations(full bool) (outage, subset time.Duration) {
	if full {
		return time.Minute, 30 * time.Second
	}
	return 15 * time.Second, 10 * time.Second
}

// failuresSubsetRounds is how many times the failing subset and its
// baseline run, alternating; the figures are the rounds' medians.
const failuresSubsetRounds = 3

// failuresRun is one binary's figures.
type failuresRun struct {
	Label string // "before", "after", "after, breaker off"

	Success time.Duration // the backlog delivered (receiver's last first 2xx)

	// The outage.
	Covered          int           // events tried at least once within 2 × Success
	CoveredAll       time.Duration // every event tried once (0: not within the outage)
	RetriesWritten   int64         // outcomes written for another try during the outage (retried, and refunded for the after binary)
	AttemptsSpent    int64         // sum(attempts) of the pending rows at the end of the outage
	DeadAtEnd        int64         // dead at the end of the outage
	Requests         int64         // requests the receiver answered 503 during the outage
	FirstAfter       time.Duration // the receiver back -> its first 2xx
	RecoveryDrain    time.Duration // first 2xx after the outage -> last
	DeadAfterOutage  int64         // dead once drained
	RecoverySkipped  bool          // the breaker-off run is not recovered
	MessageFailures  time.Duration // every event answered 422 once (receiver side) ...
	MessageFailDead  int64         // ... and dead in the table
	SubsetHealthy    subsetFigures // the failing subset, its healthy 80%
	SubsetBaseline   subsetFigures // every event healthy
	OutageSkipped    bool
	MessageSkipped   bool
	SubsetSkipped    bool
	RecoveryNotReady bool // not every event delivered within the wait after the outage
}

// subsetFigures are the healthy events' figures of one failing-subset run.
type subsetFigures struct {
	Offered        float64 // healthy events/s offered
	Delivered      float64 // healthy events/s delivered (delivered / the producers' time)
	Undelivered    int     // healthy events not delivered within 10 s after the producers stopped
	P50, P99, Max  time.Duration
	Failed, Passed int // the failing 20%: dead in the table, delivered
	BreakerOpens   int // "breaker open" lines the relay logged
}

type failuresResult struct {
	N                     int
	Outage, Subset        time.Duration
	Runs                  []failuresRun
	BeforeBin, BeforeNote string
}

// failureReceiver is the item's HTTP receiver: it answers each request as
// answer says for the event's number (payload {"num":i}) and the request
// count of that event, and records, per event, the first request and the
// first 2xx answer on one monotonic clock.
type failureReceiver struct {
	url    string
	srv    *http.Server
	base   time.Time
	answer atomic.Pointer[func(num, nth int) int]

	mu        sync.Mutex
	requests  []int32
	firstAt   []int64 // ns since base + 1; 0: never requested
	okAt      []int64 // ns since base + 1; 0: never accepted
	tried, ok int
	total     int64
	lastOK    int64 // the latest first 2xx
	firstOK   int64 // the first 2xx since reset
	lastTried int64 // the latest first request
}

func startFailureReceiver() (*failureReceiver, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	r := &failureReceiver{url: "http://" + ln.Addr().String() + "/hook", base: time.Now()}
	r.srv = &http.Server{Handler: http.HandlerFunc(r.serve), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = r.srv.Serve(ln) }()
	return r, nil
}

func (r *failureReceiver) now() int64 { return int64(time.Since(r.base)) + 1 }

// reset forgets what was received, for events 0..n-1 answered by answer.
func (r *failureReceiver) reset(n int, answer func(num, nth int) int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.requests, r.firstAt, r.okAt = make([]int32, n), make([]int64, n), make([]int64, n)
	r.tried, r.ok, r.total, r.lastOK, r.firstOK, r.lastTried = 0, 0, 0, 0, 0, 0
	r.answer.Store(&answer)
}

func (r *failureReceiver) serve(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	num := payloadNum(body)
	now := r.now()
	r.mu.Lock()
	r.total++
	if num < 0 || num >= len(r.requests) {
		r.mu.Unlock()
		w.WriteHeader(http.StatusNoContent) // not this run's
		return
	}
	r.requests[num]++
	nth := int(r.requests[num])
	if r.firstAt[num] == 0 {
		r.firstAt[num], r.lastTried = now, now
		r.tried++
	}
	code := (*r.answer.Load())(num, nth)
	if code/100 == 2 && r.okAt[num] == 0 {
		r.okAt[num], r.lastOK = now, now
		if r.firstOK == 0 {
			r.firstOK = now
		}
		r.ok++
	}
	r.mu.Unlock()
	w.WriteHeader(code)
}

// payloadNum reads i from {"num":i}; -1 when absent.
func payloadNum(body []byte) int {
	_, rest, ok := bytes.Cut(body, []byte(`"num":`))
	if !ok {
		return -1
	}
	end := bytes.IndexAny(rest, ",}")
	if end < 0 {
		return -1
	}
	n, err := strconv.Atoi(string(bytes.TrimSpace(rest[:end])))
	if err != nil {
		return -1
	}
	return n
}

// counts returns events tried, accepted, and requests answered.
func (r *failureReceiver) counts() (tried, ok int, total int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.tried, r.ok, r.total
}

// triedBy counts the events first requested by at (ns since base).
func (r *failureReceiver) triedBy(at int64) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, f := range r.firstAt {
		if f != 0 && f <= at {
			n++
		}
	}
	return n
}

// waitFor polls cond every 5 ms until it holds or limit passes.
func waitFor(limit time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
	return true
}

// startFailuresRelay starts `bin run --publisher http` against the
// receiver and waits until it serves /metrics and has had time to LISTEN.
func startFailuresRelay(e *env, bin, url string, flags ...string) (*relayProc, error) {
	p, err := startRelayBin(bin, []string{"DATABASE_URL=" + e.outboxURL}, "http", append([]string{"--http-url", url}, flags...)...)
	if err != nil {
		return nil, err
	}
	var perr error
	if !waitFor(30*time.Second, func() bool {
		n, err := p.published()
		perr = err
		return err != nil || n >= 0
	}) || perr != nil {
		_ = p.stop()
		return nil, fmt.Errorf("failures: the relay did not come up: %v\n%s", perr, p.stderr.String())
	}
	time.Sleep(300 * time.Millisecond) // LISTEN registered, first idle claim done
	return p, nil
}

// runFailures is the item.
func runFailures(ctx context.Context, e *env) error {
	after, err := relayBin.get()
	if err != nil {
		return err
	}
	rc, err := startFailureReceiver()
	if err != nil {
		return err
	}
	defer rc.srv.Close()
	outage, subset := failuresDurations(e.o.full)
	res := &failuresResult{N: failuresN, Outage: outage, Subset: subset, BeforeBin: e.o.failuresBefore}
	type binary struct {
		label, path string
		flags       []string
		breaker     bool
	}
	bins := []binary{{"after", after, nil, true}}
	if e.o.failuresBefore != "" {
		bins = append([]binary{{"before", e.o.failuresBefore, nil, false}}, bins...)
	}
	want := func(scenario string) bool {
		return e.o.failuresOnly == "" || strings.Contains(","+e.o.failuresOnly+",", ","+scenario+",")
	}
	for _, b := range bins {
		run := failuresRun{Label: b.label, OutageSkipped: true, RecoverySkipped: true, MessageSkipped: true, SubsetSkipped: true}
		if err := failuresSuccess(ctx, e, rc, b.path, &run); err != nil {
			return err
		}
		if want("outage") {
			run.OutageSkipped, run.RecoverySkipped = false, false
			if err := failuresOutage(ctx, e, rc, b.path, outage, true, &run); err != nil {
				return err
			}
		}
		if want("message") {
			run.MessageSkipped = false
			if err := failuresMessage(ctx, e, rc, b.path, &run); err != nil {
				return err
			}
		}
		if want("subset") {
			run.SubsetSkipped = false
			if err := failuresSubset(ctx, e, rc, b.path, subset, &run); err != nil {
				return err
			}
		}
		res.Runs = append(res.Runs, run)
		if b.breaker && want("outage") {
			off := failuresRun{Label: b.label + ", breaker off", Success: run.Success, MessageSkipped: true, SubsetSkipped: true, RecoverySkipped: true}
			if err := failuresOutage(ctx, e, rc, b.path, outage, false, &off, "--breaker-threshold", "0"); err != nil {
				return err
			}
			res.Runs = append(res.Runs, off)
		}
	}
	e.res.Failures = res
	return nil
}

// failuresBacklog resets the outbox, starts the relay and commits the
// backlog onto it; it returns the relay and the receiver time of the
// first commit's start.
func failuresBacklog(ctx context.Context, e *env, rc *failureReceiver, bin string, answer func(num, nth int) int, flags ...string) (*relayProc, int64, error) {
	if err := resetOutbox(ctx, e.outbox); err != nil {
		return nil, 0, err
	}
	rc.reset(failuresN, answer)
	p, err := startFailuresRelay(e, bin, rc.url, flags...)
	if err != nil {
		return nil, 0, err
	}
	start := rc.now()
	if err := enqueueOutbox(ctx, e.outbox, failuresN, false, 1000); err != nil {
		_ = p.stop()
		return nil, 0, err
	}
	return p, start, nil
}

func failuresSuccess(ctx context.Context, e *env, rc *failureReceiver, bin string, run *failuresRun) error {
	p, start, err := failuresBacklog(ctx, e, rc, bin, func(int, int) int { return http.StatusNoContent })
	if err != nil {
		return err
	}
	defer p.stop() //nolint:errcheck
	if !waitFor(2*time.Minute, func() bool { _, ok, _ := rc.counts(); return ok == failuresN }) {
		return fmt.Errorf("failures: success run not delivered in 2 minutes\n%s", p.stderr.String())
	}
	rc.mu.Lock()
	run.Success = time.Duration(rc.lastOK - start)
	rc.mu.Unlock()
	logf("failures %s: success: %d delivered in %s", run.Label, failuresN, run.Success.Round(time.Millisecond))
	return p.stop()
}

func failuresOutage(ctx context.Context, e *env, rc *failureReceiver, bin string, outage time.Duration, recover bool, run *failuresRun, flags ...string) error {
	var down atomic.Bool
	down.Store(true)
	p, start, err := failuresBacklog(ctx, e, rc, bin, func(int, int) int {
		if down.Load() {
			return http.StatusServiceUnavailable
		}
		return http.StatusNoContent
	}, flags...)
	if err != nil {
		return err
	}
	defer p.stop() //nolint:errcheck
	time.Sleep(time.Until(rc.base.Add(time.Duration(start)).Add(outage)))
	run.Covered = rc.triedBy(start + int64(2*run.Success))
	tried, _, total := rc.counts()
	if tried == failuresN {
		rc.mu.Lock()
		run.CoveredAll = time.Duration(rc.lastTried - start)
		rc.mu.Unlock()
	}
	run.Requests = total
	for _, outcome := range []string{"retried", "unavailable"} {
		n, err := p.counter(`pgoutbox_messages_outcomes_total{outcome="` + outcome + `"}`)
		if err != nil {
			return err
		}
		run.RetriesWritten += max(n, 0)
	}
	if err := e.outbox.QueryRow(ctx, `SELECT coalesce(sum(attempts) FILTER (WHERE status = 'pending'), 0), count(*) FILTER (WHERE status = 'dead') FROM outbox`).
		Scan(&run.AttemptsSpent, &run.DeadAtEnd); err != nil {
		return err
	}
	logf("failures %s: outage %s: %d of %d tried within 2× the success time (%s), all tried after %s; %d requests, %d retries written, %d attempts spent, %d dead",
		run.Label, outage, run.Covered, failuresN, (2 * run.Success).Round(time.Millisecond), run.CoveredAll.Round(time.Millisecond),
		run.Requests, run.RetriesWritten, run.AttemptsSpent, run.DeadAtEnd)
	if !recover {
		return p.stop()
	}
	back := rc.now()
	down.Store(false)
	rc.mu.Lock()
	rc.firstOK = 0
	rc.mu.Unlock()
	if !waitFor(3*time.Minute, func() bool {
		var pending int64
		if err := e.outbox.QueryRow(ctx, `SELECT count(*) FROM outbox WHERE status <> 'done' AND status <> 'dead'`).Scan(&pending); err != nil {
			return false
		}
		return pending == 0
	}) {
		run.RecoveryNotReady = true
	}
	rc.mu.Lock()
	run.FirstAfter = time.Duration(rc.firstOK - back)
	run.RecoveryDrain = time.Duration(rc.lastOK - rc.firstOK)
	rc.mu.Unlock()
	if err := e.outbox.QueryRow(ctx, `SELECT count(*) FROM outbox WHERE status = 'dead'`).Scan(&run.DeadAfterOutage); err != nil {
		return err
	}
	logf("failures %s: after the outage: first delivery %s after the receiver came back, drained in %s from there, %d dead",
		run.Label, run.FirstAfter.Round(time.Millisecond), run.RecoveryDrain.Round(time.Millisecond), run.DeadAfterOutage)
	return p.stop()
}

func failuresMessage(ctx context.Context, e *env, rc *failureReceiver, bin string, run *failuresRun) error {
	p, start, err := failuresBacklog(ctx, e, rc, bin, func(int, int) int { return http.StatusUnprocessableEntity })
	if err != nil {
		return err
	}
	defer p.stop() //nolint:errcheck
	if !waitFor(5*time.Minute, func() bool { tried, _, _ := rc.counts(); return tried == failuresN }) {
		return fmt.Errorf("failures: message-failure run: not every event tried in 5 minutes\n%s", p.stderr.String())
	}
	rc.mu.Lock()
	run.MessageFailures = time.Duration(rc.lastTried - start)
	rc.mu.Unlock()
	waitFor(time.Minute, func() bool {
		if err := e.outbox.QueryRow(ctx, `SELECT count(*) FROM outbox WHERE status = 'dead'`).Scan(&run.MessageFailDead); err != nil {
			return false
		}
		return run.MessageFailDead == failuresN
	})
	logf("failures %s: every event answered 422: all tried in %s (%.0f/s), %d dead", run.Label,
		run.MessageFailures.Round(time.Millisecond), float64(failuresN)/run.MessageFailures.Seconds(), run.MessageFailDead)
	return p.stop()
}

// failuresSubset runs the failing subset and its baseline (every event
// healthy) failuresSubsetRounds times each, alternating, the baseline
// first; each figure is the rounds' median.
func failuresSubset(ctx context.Context, e *env, rc *failureReceiver, bin string, d time.Duration, run *failuresRun) error {
	healthy := func(num int) bool { return num%10 >= 2 }
	answers := []func(num, nth int) int{
		func(int, int) int { return http.StatusNoContent },
		func(num, nth int) int {
			switch {
			case num%10 == 0:
				return http.StatusUnprocessableEntity
			case num%10 == 1 && nth <= 2:
				return http.StatusServiceUnavailable
			}
			return http.StatusNoContent
		},
	}
	var rounds [2][]subsetFigures
	for round := range failuresSubsetRounds {
		for i, answer := range answers {
			f, err := offerSubset(ctx, e, rc, bin, d, answer, healthy)
			if err != nil {
				return err
			}
			rounds[i] = append(rounds[i], f)
			logf("failures %s: subset round %d, %s: healthy delivered %.0f/s of %.0f offered (%d undelivered), p50 %s p99 %s max %s; failing: %d dead, %d delivered; %d breaker openings",
				run.Label, round+1, []string{"all healthy", "20% failing"}[i], f.Delivered, f.Offered, f.Undelivered, f.P50.Round(10*time.Microsecond),
				f.P99.Round(10*time.Microsecond), f.Max.Round(10*time.Microsecond), f.Failed, f.Passed, f.BreakerOpens)
		}
	}
	run.SubsetBaseline, run.SubsetHealthy = medianSubset(rounds[0]), medianSubset(rounds[1])
	return nil
}

// medianSubset is the median of each figure over rounds (the counts: the
// most of any round).
func medianSubset(rounds []subsetFigures) subsetFigures {
	durs := func(get func(subsetFigures) time.Duration) time.Duration {
		var xs []time.Duration
		for _, r := range rounds {
			xs = append(xs, get(r))
		}
		slices.Sort(xs)
		return xs[len(xs)/2]
	}
	rates := func(get func(subsetFigures) float64) float64 {
		var xs []float64
		for _, r := range rounds {
			xs = append(xs, get(r))
		}
		return median(xs)
	}
	m := subsetFigures{
		Offered:   rates(func(f subsetFigures) float64 { return f.Offered }),
		Delivered: rates(func(f subsetFigures) float64 { return f.Delivered }),
		P50:       durs(func(f subsetFigures) time.Duration { return f.P50 }),
		P99:       durs(func(f subsetFigures) time.Duration { return f.P99 }),
		Max:       durs(func(f subsetFigures) time.Duration { return f.Max }),
	}
	for _, r := range rounds {
		m.Undelivered, m.Failed, m.Passed, m.BreakerOpens = max(m.Undelivered, r.Undelivered), max(m.Failed, r.Failed),
			max(m.Passed, r.Passed), max(m.BreakerOpens, r.BreakerOpens)
	}
	return m
}

// offerSubset offers failuresRate events/s for d onto a running relay, and
// measures the healthy events.
func offerSubset(ctx context.Context, e *env, rc *failureReceiver, bin string, d time.Duration, answer func(num, nth int) int, healthy func(int) bool) (subsetFigures, error) {
	var f subsetFigures
	if err := resetOutbox(ctx, e.outbox); err != nil {
		return f, err
	}
	nTx := int(failuresRate / failuresPerTx * d.Seconds())
	n := nTx * failuresPerTx
	rc.reset(n, answer)
	p, err := startFailuresRelay(e, bin, rc.url)
	if err != nil {
		return f, err
	}
	defer p.stop() //nolint:errcheck
	ppool, err := newPool(ctx, e.outboxURL, 4)
	if err != nil {
		return f, err
	}
	defer ppool.Close()
	commitAt := make([]atomic.Int64, n)
	var (
		next atomic.Int64
		perr atomic.Pointer[error]
		wg   sync.WaitGroup
	)
	interval := time.Duration(float64(time.Second) * failuresPerTx / failuresRate)
	start := time.Now()
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			events := make([]dispatcher.Event, failuresPerTx)
			for {
				j := int(next.Add(1) - 1)
				if j >= nTx {
					return
				}
				if wait := time.Until(start.Add(time.Duration(j) * interval)); wait > 0 {
					time.Sleep(wait)
				}
				for k := range events {
					num := j*failuresPerTx + k
					events[k] = dispatcher.Event{AggregateType: "bench", AggregateID: strconv.Itoa(num % 1000), EventType: "benchmark",
						Payload: json.RawMessage(`{"num":` + strconv.Itoa(num) + `}`)}
				}
				err := pgx.BeginFunc(ctx, ppool, func(tx pgx.Tx) error {
					_, err := dispatcher.EnqueueMany(ctx, tx, events)
					return err
				})
				if err != nil {
					perr.Store(&err)
					return
				}
				now := rc.now()
				for k := range failuresPerTx {
					commitAt[j*failuresPerTx+k].Store(now)
				}
			}
		}()
	}
	wg.Wait()
	produced := time.Since(start)
	if e := perr.Load(); e != nil {
		return f, *e
	}
	nHealthy := 0
	for num := range n {
		if healthy(num) {
			nHealthy++
		}
	}
	waitFor(10*time.Second, func() bool {
		rc.mu.Lock()
		defer rc.mu.Unlock()
		for num, at := range rc.okAt {
			if healthy(num) && at == 0 {
				return false
			}
		}
		return true
	})
	rc.mu.Lock()
	var lat []time.Duration
	for num := range n {
		if !healthy(num) {
			if rc.okAt[num] != 0 {
				f.Passed++
			}
			continue
		}
		if rc.okAt[num] == 0 {
			f.Undelivered++
			continue
		}
		lat = append(lat, time.Duration(max(rc.okAt[num]-commitAt[num].Load(), 0)))
	}
	rc.mu.Unlock()
	slices.Sort(lat)
	f.Offered = failuresRate * float64(nHealthy) / float64(n)
	f.Delivered = float64(len(lat)) / produced.Seconds()
	f.P50, f.P99 = percentile(lat, 0.50), percentile(lat, 0.99)
	if len(lat) > 0 {
		f.Max = lat[len(lat)-1]
	}
	var dead int64
	if err := e.outbox.QueryRow(ctx, `SELECT count(*) FROM outbox WHERE status = 'dead'`).Scan(&dead); err != nil {
		return f, err
	}
	f.Failed = int(dead)
	if err := p.stop(); err != nil {
		return f, err
	}
	f.BreakerOpens = strings.Count(p.stderr.String(), "breaker open")
	if len(lat) == 0 {
		return f, errors.New("failures: no healthy event delivered")
	}
	return f, nil
}
