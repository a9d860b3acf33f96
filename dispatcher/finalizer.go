package dispatcher

import (
	"context"
	"log/slog"
	"slices"
	"time"
)

// resultKind is what the batch writer makes of a claimed message.
type resultKind uint8

const (
	resDone    resultKind = iota // delivered
	resRetry                     // a failure of the message: pending later, attempt spent
	resDefer                     // a business defer: pending later, attempt refunded (dead past MaxDeferAge)
	resDead                      // for a person to look at
	resRelease                   // handed back, attempt refunded: never started, or the destination was unavailable
)

// resultOutcomes are the @outcomes of OutboxFinalizeMany, by kind.
var resultOutcomes = [...]string{resDone: "done", resRetry: "retry", resDefer: "defer", resDead: "dead", resRelease: "release"}

// result is the outcome of one claimed message, set before the job reaches
// the batch writer. A pointer in the job: the success path shares
// resultDone, and only a failure allocates one (a job is allocated per
// message; the result inline made every one 64 bytes larger).
type result struct {
	kind  resultKind
	delay time.Duration // retry, defer, release: until the message is available again
	text  string        // last_error (defer: its reason; release: "" keeps last_error)
	err   error         // the publish error, for the span and the log (nil: none)
	// errType is the publish span's error.type ("" for none).
	errType string
	// unavailable: a release because the destination was unavailable (the
	// breaker's business, breaker.go), not a hand-back of an unstarted job.
	unavailable bool
}

// resultDone is every delivered message's result (read only).
var resultDone = &result{kind: resDone}

// finalizer is the dispatcher's one writer of outcomes: every claimed
// message the pipeline is done with (delivered, failed, deferred, dead or
// handed back) reaches it, and it writes them in batches: one statement per
// flush (FinalizeBatch rows, or FinalizeDelay after the first one), each
// row still fenced by its own claim's token (lease_owner, lease_version).
// While a flush runs, the next batch accumulates, so batches grow with
// load, and a failing receiver costs what a succeeding one costs: a
// statement per batch, not a transaction per message.
type finalizer struct {
	d    *Dispatcher
	in   chan *job // buffered past what can be in flight: a send never blocks
	quit chan struct{}
}

func newFinalizer(d *Dispatcher) *finalizer {
	// Claims keep the pipeline within maxInFlight; the recovery lane's
	// hand-backs (one sweep's rows at most) come on top.
	return &finalizer{d: d, in: make(chan *job, d.maxInFlight+sweepRows), quit: make(chan struct{})}
}

// add queues j, whose result is set, for the next flush.
func (f *finalizer) add(j *job) { f.in <- j }

// close makes run flush what is queued and return. The channel itself is
// never closed, so a worker that outlived the shutdown timeout cannot panic
// on a late send (its message's lease simply expires).
func (f *finalizer) close() { close(f.quit) }

func (f *finalizer) run(ctx context.Context) {
	batch := make([]*job, 0, f.d.cfg.FinalizeBatch)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		var j *job
		select {
		case j = <-f.in:
		case <-f.quit:
			for len(f.in) > 0 {
				batch = append(batch, <-f.in)
				if len(batch) == f.d.cfg.FinalizeBatch {
					f.flush(ctx, batch)
					batch = batch[:0]
				}
			}
			if len(batch) > 0 {
				f.flush(ctx, batch)
			}
			return
		}
		batch = append(batch, j)
		timer.Reset(f.d.cfg.FinalizeDelay)
	collect:
		for len(batch) < f.d.cfg.FinalizeBatch {
			// Everything in flight is waiting here: no publish can add to
			// the batch before the claimer gets slots back, so waiting out
			// FinalizeDelay would only add latency (a quiet queue, the tail
			// of a drain, one hot ordered aggregate).
			if int64(len(batch)) >= f.d.inFlight.Load() && len(f.in) == 0 {
				break collect
			}
			select {
			case j := <-f.in:
				batch = append(batch, j)
			case <-timer.C:
				break collect
			case <-f.quit:
				break collect
			}
		}
		timer.Stop()
		f.flush(ctx, batch)
		batch = batch[:0]
	}
}

// orderedFinalizeChunk bounds the ordered rows that become done in one
// statement. Finalizing an ordered head hands its aggregate on (migration
// 00005's hand-off), under the aggregate's advisory lock, which the
// statement takes for every aggregate of its rows up front and holds until
// it commits; a producer committing an event of one of those aggregates
// waits for it (its COMMIT takes the same lock to decide its head). A batch
// of 2,000 ordered rows over 1,000 aggregates held nearly every aggregate's
// lock for the whole statement: measured with a long snapshot held (where
// each row costs more), 0.4-0.8 s per statement and producers' COMMITs
// waiting 40-70 s per 10 s in total, which slowed the finalizer in turn (it
// waits for their locks). Chunks of 64 hold few locks, briefly; the rest of
// a batch (unordered rows, and ordered rows with any other outcome, which
// hand nothing on) still goes in one statement, which takes none.
const orderedFinalizeChunk = 64

// flush writes a batch: its ordered rows that become done in chunks of
// orderedFinalizeChunk first (their hand-offs make the next heads
// claimable), then the rest in one statement.
func (f *finalizer) flush(ctx context.Context, batch []*job) {
	// The claimer may claim again while this batch is written (claimRoom).
	f.d.finalizing.Add(int64(len(batch)))
	f.d.signalFreed()
	var handoff, rest []*job
	for _, j := range batch {
		if j.msg.Ordered && j.res.kind == resDone {
			handoff = append(handoff, j)
		} else {
			rest = append(rest, j)
		}
	}
	for chunk := range slices.Chunk(handoff, orderedFinalizeChunk) {
		f.flushPart(ctx, chunk, false)
	}
	if len(rest) > 0 {
		f.flushPart(ctx, rest, true)
	}
}

// flushPart writes part and frees its slots in flight.
func (f *finalizer) flushPart(ctx context.Context, part []*job, noHandoff bool) {
	defer func() {
		f.d.finalizing.Add(-int64(len(part))) // before inFlight: see claimRoom
		f.d.release(len(part))
	}()
	f.d.writeResults(ctx, part, noHandoff)
}

// historyKind is the kind of attempt-history entry (outbox_attempts) the
// batch writer records for r: every publish that failed; nothing for a
// delivered message or one handed back unstarted.
func historyKind(r *result) string {
	switch {
	case r.kind == resRetry:
		return "retry"
	case r.kind == resDead:
		return "dead"
	case r.kind == resDefer:
		return "defer"
	case r.kind == resRelease && r.err != nil:
		return "unavailable"
	}
	return ""
}

// written accounts for j once its result is in the table with status: its
// publish span and the delivery-failure log (WARN, rate-limited per event
// type: failurelog.go). It returns the outcome to count.
func (d *Dispatcher) written(j *job, status string) outcome {
	r := j.res
	switch {
	case r.kind == resDone:
		j.endPublish(spanDone, "", nil)
		return outPublished
	case r.kind == resRelease && r.err != nil:
		// Published and found the destination unavailable: refunded.
		d.logFailure(j, "delivery failed: the destination is unavailable; attempt refunded", r.delay)
		j.endPublish(spanUnavailable, r.errType, r.err)
		return outUnavailable
	case r.kind == resRelease:
		j.endPublish(spanReleased, "", nil)
		return outReleased
	case status == "dead":
		if r.kind == resDefer {
			d.logFailure(j, "deferred past MaxDeferAge; message is dead", -1)
		} else {
			d.logFailure(j, "message is dead", -1)
		}
		j.endPublish(spanDead, r.errType, r.err)
		return outDead
	case r.kind == resDefer:
		d.log.DebugContext(j.spanCtx(), "deferred", slog.Int64("outbox_id", j.id), slog.Duration("delay", r.delay), slog.String("reason", r.text))
		j.endPublish(spanDefer, r.errType, r.err)
		return outDeferred
	}
	d.logFailure(j, "delivery failed; retrying", r.delay)
	j.endPublish(spanRetry, r.errType, r.err)
	return outRetried
}

// releaser hands claimed messages back through the finalizer: a 'release'
// result (fenced, attempt refunded, available now), for messages claimed
// but never started (shutdown, a lease too close to expiry, a claimed row
// that could not be read).
type releaser struct{ f *finalizer }

func (r releaser) add(j *job) {
	j.res = &result{kind: resRelease}
	r.f.add(j)
}

// tokensOf returns the parallel arrays of a batch's fenced write: ids, and
// each claim's token (lease_version, lease_owner).
func tokensOf(batch []*job) (ids, versions []int64, owners []string) {
	ids = make([]int64, len(batch))
	versions = make([]int64, len(batch))
	owners = make([]string, len(batch))
	for i, j := range batch {
		ids[i], versions[i], owners[i] = j.id, j.leaseVersion, j.leaseOwner
	}
	return ids, versions, owners
}
