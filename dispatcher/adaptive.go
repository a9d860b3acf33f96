package dispatcher

import (
	"sync/atomic"
	"time"
)

// adaptiveBatch sizes the claims of one kind (unordered or ordered) between
// Config.BatchMin and Config.Batch. Only the claim loop calls size, limit and
// observe; the current size is also published atomically for Stats.
//
// The rule:
//   - a claim that came back full (the queue holds at least what was asked)
//     makes the next claim Batch, as far as the work cap allows: a backlog
//     is drained with large claims after a few small ones, their fixed
//     costs (round trip, durable commit, statement start-up, stepping over
//     claimed index entries) spread over many rows. It used to double
//     instead (50, 100, … 2,000: seven claims before the first full one),
//     and four relays started together on a backlog spent the first
//     0.4-0.5 s of a 2.5 s drain in that climb. The
//     work cap below, not the climb, is what keeps a slow publisher's
//     claims small;
//   - a claim that came back less than half full halves it, down to
//     BatchMin: an idle or trickling queue is claimed in small batches, so
//     that a crash strands little and claims stay fair among dispatchers;
//   - the size never exceeds what the dispatcher finished in BatchWork at
//     the rate measured over the last claims (jobs the workers finished
//     with per second: published, failed or handed back; counted as each
//     publish returns, not as batched finalizes land, so the rate never
//     reads above what the publisher sustains), so a slow publisher does
//     not make the dispatcher hold minutes of work under lease: one claim
//     is at most about BatchWork of publishing, and what a crash strands
//     (at most limit() messages) at most about twice that, plus BatchMin.
type adaptiveBatch struct {
	min, max    int
	concurrency int
	work        time.Duration

	cur int
	pub *atomic.Int64 // cur, for Stats

	// The completion-rate estimate: worked is the dispatcher's running count
	// of jobs its workers finished with (runJob).
	worked    *atomic.Int64
	sampledAt time.Time
	sampled   int64
	rate      float64 // completions per second (exponentially smoothed)
	// provisional is the rate since the start while no window has been
	// measured yet (rate is 0); see measure.
	provisional float64
}

// rateWindow is the shortest interval the completion rate is measured over.
const rateWindow = 50 * time.Millisecond

func newAdaptiveBatch(cfg Config, worked, pub *atomic.Int64, now time.Time) *adaptiveBatch {
	// A message waits behind at most two claims' worth of work before its
	// publish starts, and is handed back unpublished when less than
	// PublishTimeout (HeartbeatInterval with a heartbeat) of its lease is
	// left: keep two claims' work inside the rest of the lease, whatever
	// BatchWork says (a short Lease, as in the chaos suite's 2 s, would
	// otherwise turn large claims into hand-backs).
	work := cfg.BatchWork
	minRemaining := cfg.PublishTimeout
	if cfg.HeartbeatInterval > 0 {
		minRemaining = cfg.HeartbeatInterval
	}
	if room := (cfg.Lease - minRemaining) / 2; room > 0 && room < work {
		work = room
	}
	a := &adaptiveBatch{
		min: cfg.BatchMin, max: cfg.Batch, concurrency: cfg.Concurrency, work: work,
		cur: cfg.BatchMin, pub: pub, worked: worked, sampledAt: now,
	}
	a.pub.Store(int64(a.cur))
	return a
}

// size is the most messages the next claim asks for.
func (a *adaptiveBatch) size() int { return a.cur }

// limit is the most messages in flight (claimed and not yet finalized or
// handed back) before the claimer waits: room for the batch being published
// and the next one, claimed meanwhile.
func (a *adaptiveBatch) limit() int { return max(2*a.cur, a.cur+a.concurrency) }

// observe records that a claim asked for asked messages and got got, at now.
func (a *adaptiveBatch) observe(asked, got int, now time.Time) {
	if a.min == a.max {
		return
	}
	a.measure(now)
	next := a.cur
	switch {
	case asked > 0 && got >= asked:
		next = a.max
	case 2*got < asked:
		next = a.cur / 2
	}
	next = min(next, a.max, a.workCap())
	a.cur = max(next, a.min)
	a.pub.Store(int64(a.cur))
}

// workCap is the claim size that holds about BatchWork of work at the
// measured completion rate.
func (a *adaptiveBatch) workCap() int {
	c := max(a.rate, a.provisional) * a.work.Seconds()
	if c >= float64(a.max) {
		return a.max
	}
	return int(c)
}

func (a *adaptiveBatch) measure(now time.Time) {
	dt := now.Sub(a.sampledAt)
	if dt < rateWindow {
		if done := a.worked.Load(); a.rate == 0 && dt > 0 && done > a.sampled {
			// No window measured yet (the first 50 ms of a run): a
			// provisional rate from what finished so far, so that a
			// backlog found at start-up does not wait a whole window at
			// BatchMin (measured: six claims of 50 in the first 57 ms of a
			// drain). A slow publisher shows as slow from its first
			// completions on. The window's sample is left as it is.
			a.provisional = float64(done-a.sampled) / dt.Seconds()
		}
		return
	}
	a.provisional = 0
	done := a.worked.Load()
	inst := float64(done-a.sampled) / dt.Seconds()
	a.sampledAt, a.sampled = now, done
	if a.rate == 0 || inst > a.rate {
		a.rate = inst // rise at once: a backlog must not wait for the average
		return
	}
	a.rate = (a.rate + inst) / 2
}

// claimSizes holds the claim size of each kind: an unordered backlog must not
// grow the ordered claims (whose heads are few) nor the other way round.
type claimSizes struct {
	unordered, ordered *adaptiveBatch
}

func (d *Dispatcher) newClaimSizes() claimSizes {
	now := time.Now()
	unordered, ordered := &d.claimSize, new(atomic.Int64)
	if d.cfg.Claim == ClaimOrderedOnly {
		unordered, ordered = ordered, unordered
	}
	return claimSizes{
		unordered: newAdaptiveBatch(d.cfg, &d.worked, unordered, now),
		ordered:   newAdaptiveBatch(d.cfg, &d.worked, ordered, now),
	}
}

func (s claimSizes) of(kind ClaimMode) *adaptiveBatch {
	if kind == ClaimOrderedOnly {
		return s.ordered
	}
	return s.unordered
}

// size is the larger of the two claim sizes; limit the larger of the two
// in-flight limits.
func (s claimSizes) size() int  { return max(s.unordered.size(), s.ordered.size()) }
func (s claimSizes) limit() int { return max(s.unordered.limit(), s.ordered.limit()) }
