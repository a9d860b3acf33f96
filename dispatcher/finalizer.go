package dispatcher

import (
	"context"
	"log/slog"
	"slices"
	"time"

	"github.com/pgoutbox/pgoutbox/db"
)

// finalizer writes successful publishes in batches: one OutboxMarkDoneMany
// per flush (FinalizeBatch rows, or FinalizeDelay after the first one), each
// row still fenced by its own claim's token (lease_owner, lease_version). While a flush runs, the next
// batch accumulates, so batches grow with load.
type finalizer struct {
	d    *Dispatcher
	in   chan *job // buffered to maxInFlight: a send never blocks
	quit chan struct{}
}

func newFinalizer(d *Dispatcher) *finalizer {
	return &finalizer{d: d, in: make(chan *job, d.maxInFlight), quit: make(chan struct{})}
}

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

// orderedFinalizeChunk bounds the ordered rows of one OutboxMarkDoneMany.
// Finalizing an ordered head hands its aggregate on (migration 00005's
// hand-off), under the aggregate's advisory lock, which the statement takes
// for every aggregate of its rows up front and holds until it commits; a
// producer committing an event of one of those aggregates waits for it
// (its COMMIT takes the same lock to decide its head). A batch of 2,000
// ordered rows over 1,000 aggregates held nearly every aggregate's lock for
// the whole statement: measured with a long snapshot held (where each row
// costs more), 0.4-0.8 s per statement and producers' COMMITs
// waiting 40-70 s per 10 s in total, which slowed the finalizer in turn
// (it waits for their locks). Chunks of 64 hold few locks, briefly; the
// unordered rows of a batch still go in one statement, which takes none.
const orderedFinalizeChunk = 64

// flush finalizes a batch: its ordered rows in chunks of
// orderedFinalizeChunk first (their hand-offs make the next heads
// claimable), then its unordered rows in one statement.
func (f *finalizer) flush(ctx context.Context, batch []*job) {
	// The claimer may claim again while this batch is written (claimRoom).
	f.d.finalizing.Add(int64(len(batch)))
	f.d.signalFreed()
	var ordered, unordered []*job
	for _, j := range batch {
		if j.msg.Ordered {
			ordered = append(ordered, j)
		} else {
			unordered = append(unordered, j)
		}
	}
	for chunk := range slices.Chunk(ordered, orderedFinalizeChunk) {
		f.flushPart(ctx, chunk, false)
	}
	if len(unordered) > 0 {
		f.flushPart(ctx, unordered, true)
	}
}

// flushPart is one fenced OutboxMarkDoneMany over part; unorderedOnly says
// part holds no ordered row (the statement then skips the hand-off locks).
func (f *finalizer) flushPart(ctx context.Context, batch []*job, unorderedOnly bool) {
	d := f.d
	ids, versions, owners := tokensOf(batch)
	done, err := retryDBValue(withLinkedJobs(ctx, batch), d, "mark done", func(ctx context.Context) ([]int64, error) {
		return d.q.OutboxMarkDoneMany(ctx, db.OutboxMarkDoneManyParams{Ids: ids, LeaseVersions: versions, LeaseOwners: owners, UnorderedOnly: unorderedOnly})
	})
	defer func() {
		d.finalizing.Add(-int64(len(batch))) // before inFlight: see claimRoom
		d.release(len(batch))
	}()
	defer endFinalized(batch, err) // publish spans: done (lease lost ones ended already)
	if err != nil {
		return // logged by retryDBValue; leases expire and messages are re-delivered
	}
	// A finalized ordered message makes the next message of its aggregate
	// the head, which nothing else announces (no INSERT, so no NOTIFY):
	// wake the claimer, or an idle one would wait for the poll interval
	// before each message of a busy aggregate (measured: one hot aggregate
	// went from about 1 msg/s with the default 1s poll to hundreds per
	// second; see BENCHMARKS.md).
	if !unorderedOnly {
		d.wakeUp()
	}
	d.metrics.finalizeFlush(ctx, len(batch))
	d.metrics.add(outPublished, int64(len(done)))
	if len(done) == len(batch) {
		return
	}
	finalized := make(map[int64]struct{}, len(done))
	for _, id := range done {
		finalized[id] = struct{}{}
	}
	for _, j := range batch {
		if _, ok := finalized[j.id]; !ok {
			d.leaseLost(j, "mark done")
		}
	}
}

// releaser hands claimed-but-unstarted messages back in batches
// (OutboxReleaseMany: fenced, attempt refunded, available now).
type releaser struct {
	d    *Dispatcher
	in   chan *job // buffered to maxInFlight: a send never blocks
	quit chan struct{}
}

func newReleaser(d *Dispatcher) *releaser {
	return &releaser{d: d, in: make(chan *job, d.maxInFlight), quit: make(chan struct{})}
}

func (r *releaser) add(j *job) { r.in <- j }

// close makes run hand back what is queued and return (see finalizer.close).
func (r *releaser) close() { close(r.quit) }

func (r *releaser) run(ctx context.Context) {
	for {
		var batch []*job
		select {
		case j := <-r.in:
			batch = append(batch, j)
		case <-r.quit:
			for len(r.in) > 0 {
				batch = append(batch, <-r.in)
			}
			if len(batch) > 0 {
				r.flush(ctx, batch)
			}
			return
		}
		for len(r.in) > 0 {
			batch = append(batch, <-r.in)
		}
		r.flush(ctx, batch)
	}
}

func (r *releaser) flush(ctx context.Context, batch []*job) {
	d := r.d
	defer d.release(len(batch))
	ids, versions, owners := tokensOf(batch)
	n, err := retryDB(ctx, d, "release", func(ctx context.Context) (int64, error) {
		return d.q.OutboxReleaseMany(ctx, db.OutboxReleaseManyParams{Ids: ids, LeaseVersions: versions, LeaseOwners: owners})
	})
	if err != nil {
		return
	}
	d.metrics.add(outReleased, n)
	d.log.Debug("handed back claimed messages", slog.Int64("count", n), slog.Int("asked", len(batch)))
	if n > 0 {
		// Wake the dispatchers (including this one's siblings) to re-claim.
		nctx, cancel := context.WithTimeout(ctx, d.cfg.WriteTimeout)
		_ = d.q.OutboxNotify(nctx)
		cancel()
	}
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
