package dispatcher

import (
	"math"
	"sync/atomic"
	"time"
)

// adaptiveBatch sizes the claims of one kind (unordered or ordered) between
// Config.BatchMin and Config.Batch. Only the claim loop calls size, limit and
// observe; the current size is also published atomically for Stats.
//
// The rule:
//   - a claim that came back full (the queue holds at least what was asked)
//     makes the next claim Batch: a backlog is drained with large claims from
//     the second claim on, their fixed costs (round trip, durable commit,
//     statement start-up, stepping over claimed index entries) spread over
//     many rows. It used to double instead (50, 100, … 2,000: seven claims
//     before the first full one), and four relays started together on a
//     backlog spent the first 0.4-0.5 s of a 2.5 s drain in that climb
//     (tuning log, entry 20). The work cap below, not the climb, is what
//     keeps a slow publisher's claims small;
//   - a claim that came back less than half full halves it, down to
//     BatchMin: an idle or trickling queue is claimed in small batches, so
//     that a crash strands little and claims stay fair among dispatchers;
//   - the size never exceeds what the workers can publish in BatchWork:
//     Concurrency divided by the mean time a worker spent on each message it
//     published over the last claims (counted as each publish returns, not
//     as batched finalizes land), so a slow publisher does not make the
//     dispatcher hold minutes of work under lease: one claim is at most
//     about BatchWork of publishing, and what a crash strands (at most
//     limit() messages) at most about twice that, plus BatchMin. The rate
//     the workers achieved would read low whenever the claims, not the
//     publisher, set the pace (the first claims of a backlog, a trickle):
//     four relays started together on a backlog were held at claims of
//     408-1,637 rows for their first 200-300 ms by it (tuning log, entry 20).
type adaptiveBatch struct {
	min, max    int
	concurrency int
	work        time.Duration

	cur int
	pub *atomic.Int64 // cur, for Stats

	// The estimate of what the workers can finish: worked counts the jobs
	// they published and the time each took (runJob), sampled at the start
	// of each window.
	worked      *workMeter
	sampledAt   time.Time
	sampledJobs int64
	sampledBusy int64
	rate        float64 // messages per second the workers can finish (smoothed)
	// provisional is the rate since the start while no window has been
	// measured yet (rate is 0); see measure.
	provisional float64
}

// workMeter counts the jobs the workers published (successfully or not) and
// the time the workers spent on them, from the start of the publish to the
// hand-off of its outcome: what one message costs a worker, whether or not
// the claims kept the workers busy. Jobs handed back unpublished are not
// counted.
type workMeter struct {
	jobs atomic.Int64
	busy atomic.Int64 // nanoseconds
}

func (m *workMeter) add(took time.Duration) {
	m.busy.Add(int64(took))
	m.jobs.Add(1)
}

// read returns the jobs first: a job counted in busy but not yet in jobs
// makes the mean a little longer, never shorter.
func (m *workMeter) read() (jobs, busy int64) {
	jobs = m.jobs.Load()
	return jobs, m.busy.Load()
}

// rateWindow is the shortest interval the completion rate is measured over.
const rateWindow = 50 * time.Millisecond

func newAdaptiveBatch(cfg Config, worked *workMeter, pub *atomic.Int64, now time.Time) *adaptiveBatch {
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
// estimated rate.
func (a *adaptiveBatch) workCap() int {
	c := max(a.rate, a.provisional) * a.work.Seconds()
	if c >= float64(a.max) {
		return a.max
	}
	return int(c)
}

// capacity is the rate the workers finish messages at when all of them are
// busy: Concurrency messages per mean time a message took (jobs over busy
// nanoseconds). A publish too fast for the clock reads as no limit.
func (a *adaptiveBatch) capacity(jobs, busy int64) float64 {
	if busy <= 0 {
		return math.Inf(1)
	}
	return float64(a.concurrency) * float64(jobs) / time.Duration(busy).Seconds()
}

func (a *adaptiveBatch) measure(now time.Time) {
	dt := now.Sub(a.sampledAt)
	jobs, busy := a.worked.read()
	if dt < rateWindow {
		if a.rate == 0 && jobs > a.sampledJobs {
			// No window measured yet (the first 50 ms of a run): a
			// provisional rate from what was published so far, so that a
			// backlog found at start-up does not wait a whole window at
			// BatchMin (measured: six claims of 50 in the first 57 ms of a
			// drain). A slow publisher shows as slow from its first
			// publishes on. The window's sample is left as it is.
			a.provisional = a.capacity(jobs-a.sampledJobs, busy-a.sampledBusy)
		}
		return
	}
	a.provisional = 0
	dj, db := jobs-a.sampledJobs, busy-a.sampledBusy
	a.sampledAt, a.sampledJobs, a.sampledBusy = now, jobs, busy
	if dj == 0 {
		// Nothing was published in the window: no news of the publisher (a
		// quiet queue; a publisher that hangs holds its messages in flight,
		// and the in-flight limit stops the claims). The estimate stays, so
		// the next backlog is claimed at the size the publisher allows.
		return
	}
	inst := a.capacity(dj, db)
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
