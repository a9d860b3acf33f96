package dispatcher

import (
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
)

// breakerQuiet is how long nothing must have reached the destination (at
// most: BreakerProbe when that is shorter) before the breaker opens. A
// claim of retries that all fail, among deliveries, fails for milliseconds
// at a time (measured: a single such run opened the breaker with no
// quiet time, and healthy events waited for the probe); a second of quiet
// time let a default relay send about 6,000 publishes to a receiver that
// was down before the breaker opened (bench item failures).
const breakerQuiet = 250 * time.Millisecond

// breakerState is where the breaker is.
type breakerState int32

const (
	// breakerClosed: claims and publishes run.
	breakerClosed breakerState = iota
	// breakerOpen: the destination is unavailable; nothing is claimed or
	// published until the next probe is due.
	breakerOpen
	// breakerProbeDue: the claimer may claim one message, and the first
	// job a worker takes is published as the probe.
	breakerProbeDue
	// breakerProbing: the probe is being published; other jobs are handed
	// back.
	breakerProbing
)

// breaker stops a dispatcher from spending claims and publishes on a
// destination (receiver, broker) that is unavailable, and from spending the
// messages' attempts on it.
//
// A publish whose error is an UnavailableError (or a connection refused,
// reset or timed out: unavailableAfter) costs no attempt while the
// destination looks down: no publish reached it while this one ran. The
// message is handed back (fenced, attempt refunded). If another publish got
// through meanwhile, the answer is about this message, and it is retried as
// a Retryable failure is (attempt spent).
//
// Config.BreakerThreshold such refunded publishes in a row, once none has
// reached the destination for breakerQuiet, open the breaker: the claimer stops claiming,
// the recovery lane stops recovering, and the workers hand back (refunded)
// every claimed message they have not started. After Config.BreakerProbe
// (doubling, jittered, up to Config.BreakerProbeMax) the claimer claims one
// message, an ordinary fenced claim, and a worker publishes it as the probe;
// its outcome is written like any other (a refund if the destination is
// still unavailable), so probing spends nothing and needs no write that is
// not fenced. A probe that reaches the destination (delivered, or refused
// for a reason of its own) closes the breaker and the claimer resumes at
// once; one that does not re-opens it for a longer wait. Any other publish
// that reaches the destination closes it too.
type breaker struct {
	threshold int // < 0: off
	base, cap time.Duration
	log       *slog.Logger
	dest      string // the publisher, for the log

	epoch     time.Time    // monotonic base of reachedAt
	reachedAt atomic.Int64 // when the last publish that reached the destination ended, since epoch
	failures  atomic.Int64 // unavailable publishes in a row (closed)

	mu        sync.Mutex
	state     breakerState
	openedAt  time.Time
	delay     time.Duration // the current wait between probes
	nextProbe time.Time
	probes    int           // probes of the current outage
	changed   chan struct{} // closed at every change of state, then replaced

	isOpen atomic.Bool // not closed (the gauge, Stats)
	opens  atomic.Int64
	probed atomic.Int64
}

func newBreaker(cfg Config, dest string, log *slog.Logger) *breaker {
	return &breaker{threshold: cfg.BreakerThreshold, base: cfg.BreakerProbe, cap: cfg.BreakerProbeMax,
		log: log, dest: dest, changed: make(chan struct{}), epoch: time.Now()}
}

// status returns the state, when the next probe is due (breakerOpen) and a
// channel closed at the next change of state.
func (b *breaker) status() (breakerState, time.Time, <-chan struct{}) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.state, b.nextProbe, b.changed
}

// holding reports whether the breaker keeps claims from running.
func (b *breaker) holding() bool { return b.isOpen.Load() }

// armProbe lets the claimer claim a probe once the next probe is due.
func (b *breaker) armProbe() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.state == breakerOpen && !time.Now().Before(b.nextProbe) {
		b.set(breakerProbeDue)
	}
}

// admit tells a worker about to publish a job whether to publish it, and
// whether it is the probe.
func (b *breaker) admit() (publish, probe bool) {
	if !b.isOpen.Load() {
		return true, false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	switch b.state {
	case breakerClosed:
		return true, false
	case breakerProbeDue:
		b.probes++
		b.probed.Add(1)
		b.set(breakerProbing)
		return true, true
	}
	return false, false
}

// reached records a publish that reached the destination: delivered, or
// refused for a reason of the message's own. It closes the breaker. The
// success path takes no lock.
func (b *breaker) reached() {
	b.reachedAt.Store(int64(time.Since(b.epoch)))
	if !b.isOpen.Load() && b.failures.Load() == 0 {
		return
	}
	b.failures.Store(0)
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.state != breakerClosed {
		b.log.Info("the destination is reachable again: breaker closed, claiming resumes",
			slog.String("publisher", b.dest), slog.Duration("outage", time.Since(b.openedAt)), slog.Int("probes", b.probes))
		b.set(breakerClosed)
	}
}

// unavailable records a publish, from start to end, that found the
// destination unavailable (err; after is the least wait the destination
// asked for). It returns whether the message's attempt is refunded: when the
// breaker is on and no publish reached the destination while this one ran.
// A publish that reached it only after this one ended (a probe, while this
// one's verdict waited for a busy machine's scheduler) says nothing against
// this one's answer; one that reached it earlier, when the latest did not,
// is not known, and the benefit of the doubt goes to the message.
func (b *breaker) unavailable(start, end time.Time, err error, after time.Duration, probe bool) (refund bool) {
	if b.threshold < 0 {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	reached := time.Duration(b.reachedAt.Load())
	refund = b.state != breakerClosed || reached < start.Sub(b.epoch) || reached > end.Sub(b.epoch)
	switch {
	case probe && b.state == breakerProbing:
		b.delay = min(2*b.delay, b.cap)
		b.reopen(after)
		b.log.Debug("probe: the destination is still unavailable", slog.String("publisher", b.dest),
			slog.Int("probes", b.probes), slog.Time("next_probe", b.nextProbe), slog.Any("error", err))
	case b.state == breakerClosed && refund:
		// Only failures that found the destination down count, and only
		// once nothing has reached it for breakerQuiet: an unavailable
		// answer while other publishes get through is about its message,
		// and a claim of retries that all fail, among deliveries, must not
		// open the breaker.
		n := b.failures.Add(1)
		if n >= int64(b.threshold) && time.Since(b.epoch)-time.Duration(b.reachedAt.Load()) >= min(b.base, breakerQuiet) {
			b.openedAt, b.delay, b.probes = time.Now(), b.base, 0
			b.opens.Add(1)
			b.reopen(after)
			b.log.Warn("the destination is unavailable: breaker open, claims stop and one message at a time probes it",
				slog.String("publisher", b.dest), slog.Int64("failures_in_a_row", n),
				slog.Duration("next_probe_in", time.Until(b.nextProbe)), slog.Any("error", err))
		}
	}
	return refund
}

// probeAborted records a probe that ended without a verdict (handed back,
// lease lost, a panic, an unclassified error): the next probe is due now.
func (b *breaker) probeAborted() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.state == breakerProbing {
		b.nextProbe = time.Now()
		b.set(breakerOpen)
	}
}

// reopen sets the breaker open until the next probe: b.delay with equal
// jitter (half of it, plus up to as much at random), and at least after.
// Called with b.mu held.
func (b *breaker) reopen(after time.Duration) {
	wait := b.delay/2 + time.Duration(rand.Int64N(int64(b.delay/2)+1))
	b.nextProbe = time.Now().Add(max(wait, after))
	b.set(breakerOpen)
}

// set moves the breaker to s and wakes whoever waits on a change. Called
// with b.mu held.
func (b *breaker) set(s breakerState) {
	b.state = s
	b.isOpen.Store(s != breakerClosed)
	close(b.changed)
	b.changed = make(chan struct{})
}
