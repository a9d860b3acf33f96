package dispatcher

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/pgoutbox/pgoutbox/db"
)

// The loop, in the order a message goes through it:
//
//  1. claim (claimLoop, claimRound, claimKind): a short transaction per lane
//     that sets status 'processing', a lease and lease_version + 1 (the
//     fencing token), and COMMITs before anything is published; each claimed
//     row becomes a job on the workers' channel.
//  2. publish (work, runJob, publish): outside any transaction, within the
//     lease (a heartbeat extends it; losing it cancels the publish); the
//     outcome is classified (classify, worker.go) into done, retry, defer or
//     dead.
//  3. fenced finalize (writeResults, finalizeMany): the finalizer batches the
//     outcomes and writes each one WHERE id = ? AND status = 'processing' AND
//     lease_version = ? AND lease_owner = ?; a row whose lease was taken
//     over is left alone and missing from the result, and writeResults counts
//     and logs the lost lease (leaseLost) instead of overwriting the newer
//     owner.
//
// The lanes that recover expired leases and isolate poison messages are in
// isolate.go; the claim cursor's window in window.go; batching in
// finalizer.go.

// claimLoop claims while there is room in flight, until ctx ends. It
// claims pending messages only: expired leases are the recovery lane's
// (recoveryLane), so recovery never makes fresh work wait.
func (d *Dispatcher) claimLoop(ctx context.Context, jobs chan<- *job, rel *releaser) {
	var (
		dbFailures   int
		streak       int // rounds in a row that claimed messages (busy.go)
		orderedFirst bool
		hotSeen      int64         // the wake window hotStep belongs to
		hotStep      time.Duration // next idle wait inside the wake window
		empty        emptyKinds    // kinds left out of busy rounds (claimturn.go)
	)
	sizes := d.newClaimSizes()
	idle := true // the previous round claimed nothing (claimRound)
	poll := time.NewTimer(d.cfg.PollInterval)
	defer poll.Stop()
	for ctx.Err() == nil {
		if d.breaker.holding() {
			d.busy.waiting(ctx) // not claiming: producers notify
			d.awaitBreaker(ctx, jobs, rel)
			continue
		}
		limit := sizes.limit()
		free := d.claimRoom(limit, sizes.size())
		if free < min(sizes.size(), limit/2) {
			select {
			case <-d.freed:
			case <-ctx.Done():
			case <-time.After(busyRoomWait):
				d.metrics.roomWaits.Add(1) // before pausing: whoever sees the idle lock taken sees it counted
				d.busy.pausing()           // full for a while: producers wake the other relays
				select {
				case <-d.freed:
				case <-ctx.Done():
				}
			}
			continue
		}

		kinds := []ClaimMode{ClaimUnorderedOnly, ClaimOrderedOnly}
		if orderedFirst {
			kinds[0], kinds[1] = kinds[1], kinds[0]
		}
		// The wake-ups before the round: one during it may announce a
		// message its claims did not see.
		wakes := d.wakes.Load()
		skip := func(kind ClaimMode) bool { return empty.skip(kind, time.Now(), wakes) }
		got, err := d.claimRound(ctx, sizes, limit, kinds, jobs, rel, idle, skip)
		claimed := max(got[0], 0) + max(got[1], 0)
		orderedFirst = nextOrderedFirst(kinds, got)
		again := empty.record(kinds, got, time.Now(), wakes)
		idle = err == nil && claimed == 0
		if err != nil {
			d.dbError(ctx, "claim", err, &dbFailures)
			continue
		}
		dbFailures = 0
		if claimed > 0 {
			streak++
			if streak >= 2 {
				d.busy.claiming()
			}
		} else {
			streak = 0
		}
		if claimed > 0 || again {
			continue
		}
		// Idle: wait for a NOTIFY, the poll interval, or shutdown. Inside a
		// wake window the wait is short and doubles (1, 2, 4, … ms), so a
		// commit that skipped its NOTIFY (another commit was notifying) is
		// claimed soon.
		wait := d.cfg.PollInterval
		inWindow := false
		if hot := d.hotUntil.Load(); hot > 0 {
			if rest := time.Duration(hot) - time.Since(d.epoch); rest > 0 {
				if hot != hotSeen {
					hotSeen, hotStep = hot, time.Millisecond
				}
				wait = min(wait, hotStep, rest)
				hotStep = min(2*hotStep, d.cfg.PollInterval)
				d.metrics.hotPolls.Add(1)
				inWindow = true
			}
		}
		if inWindow {
			d.busy.pausing() // polling, not claiming back to back: producers notify
		} else {
			// Producers queue no NOTIFY unless a relay holds the idle lock:
			// make sure one does, and claim once more when it had to be
			// taken (what was committed before did not notify).
			if d.busy.waiting(ctx) {
				continue
			}
			d.metrics.idleWaits.Add(1)
			if d.busy.listening.Load() {
				d.idleWakes.Store(wakes + 1)
			}
		}
		d.idleOnce.Do(func() { close(d.firstIdle) })
		if !poll.Stop() {
			select {
			case <-poll.C:
			default:
			}
		}
		poll.Reset(wait)
		select {
		case <-d.wake:
		case <-poll.C:
		case <-ctx.Done():
		}
		d.idleWakes.Store(0)
	}
}

// claimRound claims once of each kind the dispatcher claims (Config.Claim),
// in the order of kinds, and returns how many messages it claimed of each
// (in the order of kinds; -1 for a kind it did not claim: not claimed by
// this dispatcher, left out by skip, no room left in flight, or after an
// error). In turn,
// the first error ends the round; at once, both claims run to the end and
// the first kind's error is returned before the second's. Either way the
// messages claimed are dispatched, and a kind whose claim failed does not
// change its claim size.
//
// With ClaimAll, when both claims fit in flight at their full sizes (an idle
// or lightly loaded dispatcher: where a message's latency counts) and the
// pool has connections to spare, the two claims run at the same time on two
// connections: a message of either kind then waits for one claim (one
// OutboxClaimSnapshot and one window claim), not for the other kind's as
// well. Otherwise they run one after the other, each sized to the room left.
func (d *Dispatcher) claimRound(ctx context.Context, sizes claimSizes, limit int, kinds []ClaimMode, jobs chan<- *job, rel *releaser, idle bool, skip func(ClaimMode) bool) ([2]int, error) {
	if idle && d.cfg.Claim == ClaimAll && d.pool.Config().MaxConns >= concurrentClaimConns {
		a, b := sizes.of(kinds[0]).size(), sizes.of(kinds[1]).size()
		if a+b <= d.claimRoom(limit, max(a, b)) {
			var (
				gotB int
				errB error
				done = make(chan struct{})
			)
			go func() {
				defer close(done)
				gotB, errB = d.claimKind(ctx, kinds[1], b, jobs, rel)
			}()
			gotA, errA := d.claimKind(ctx, kinds[0], a, jobs, rel)
			<-done
			now := time.Now()
			if errA == nil {
				sizes.of(kinds[0]).observe(a, gotA, now)
			}
			if errB == nil {
				sizes.of(kinds[1]).observe(b, gotB, now)
			}
			return [2]int{gotA, gotB}, cmp.Or(errA, errB)
		}
	}
	claimed := [2]int{-1, -1}
	for i, kind := range kinds {
		if d.cfg.Claim != ClaimAll && d.cfg.Claim != kind {
			continue
		}
		if skip(kind) {
			continue // claimturn.go
		}
		n := min(sizes.of(kind).size(), d.claimRoom(limit, sizes.of(kind).size()))
		if n <= 0 {
			break
		}
		got, err := d.claimKind(ctx, kind, n, jobs, rel)
		if err != nil {
			return claimed, err
		}
		claimed[i] = got
		sizes.of(kind).observe(n, got, time.Now())
	}
	return claimed, nil
}

// claimKind claims up to n messages of kind. A claim that ran out of
// ClaimTimeout while the table is locked against it (DDL such as CREATE
// INDEX or ALTER TABLE, a LOCK TABLE) returns its error and leaves the cursor
// where it was: the next claim waits for the lock again and, once it is
// gone, goes on from the same keyset at full speed. A claim that failed with
// an error one row can cause, or ran out of time otherwise, falls back to
// the isolation path, which reads the claimed rows one at a time.
func (d *Dispatcher) claimKind(ctx context.Context, kind ClaimMode, n int, jobs chan<- *job, rel *releaser) (int, error) {
	var got int
	var err error
	if kind == ClaimUnorderedOnly {
		got, err = d.claimUnordered(ctx, n, jobs)
	} else {
		got, err = d.claimOrdered(ctx, n, jobs)
	}
	if err != nil && isTimeout(ctx, err) && d.tableLocked(ctx) {
		d.metrics.lockWaits.Add(1)
		d.log.Warn("claim timed out waiting for a lock on the outbox table (DDL or LOCK TABLE); it goes on from where it was once the lock is gone",
			slog.String("kind", kind.String()), slog.Duration("claim_timeout", d.cfg.ClaimTimeout))
		return 0, fmt.Errorf("%w: %w", errTableLocked, err)
	}
	if err != nil && (isRowError(err) || isTimeout(ctx, err)) {
		// One row may be what fails the whole claim (it cannot be
		// returned): claim without payloads and read them one by one.
		d.metrics.isolations.Add(1)
		d.log.Warn("claim failed with a data or resource error or timed out; claiming through the isolation path",
			slog.String("kind", kind.String()), slog.String("sqlstate", sqlState(err)), slog.Any("error", err))
		got, err = d.isolate(ctx, kind, n, jobs, rel)
	}
	return got, err
}

// work publishes jobs until the channel closes.
func (d *Dispatcher) work(hardCtx context.Context, jobs <-chan *job, fin doneSink, rel *releaser) {
	clock := newPublishClock(hardCtx, d.cfg.PublishTimeout)
	defer clock.close()
	for j := range jobs {
		d.runJob(hardCtx, j, fin, rel, clock)
	}
}

// runJob publishes one claimed job, or hands it back when it must not start
// (shutdown, or too close to the end of its lease). clock times the publish
// (a worker's, publishclock.go); nil gives the publish a context of its own.
func (d *Dispatcher) runJob(hardCtx context.Context, j *job, fin doneSink, rel *releaser, clock *publishClock) {
	// Counted when the worker is done with the job, not when its finalize
	// lands: the adaptive claim size measures the publishing rate, which
	// batched finalizes would otherwise deliver in bursts.
	defer d.worked.Add(1)
	if d.stopping.Load() || !d.acquireSlot(hardCtx, j) {
		rel.add(j) // claimed but never started: hand back at once
		return
	}
	defer d.releaseSlot(j) // limiter.go: normally given back when Publish returns
	minRemaining := d.cfg.PublishTimeout
	if d.cfg.HeartbeatInterval > 0 {
		minRemaining = d.cfg.HeartbeatInterval
	}
	if time.Until(j.deadline) < minRemaining {
		// Too close to expiry to start: another dispatcher could take it
		// over mid-publish. Hand it back instead (attempt refunded).
		d.metrics.add(outNearExpiry, 1)
		rel.add(j)
		return
	}
	publish, probe := d.breaker.admit()
	if !publish {
		// The breaker is open: hand the message back unstarted (attempt
		// refunded), without waking the other dispatchers for it.
		j.res = &result{kind: resRelease, unavailable: true}
		fin.add(j)
		return
	}
	j.probe = probe
	d.publish(hardCtx, j, fin, rel, clock)
}

func (d *Dispatcher) publish(hardCtx context.Context, j *job, fin doneSink, rel *releaser, clock *publishClock) {
	// The publish span (trace.go) ends when the outcome is known: after
	// the fenced write of a failure, or after the batched finalize. sctx is
	// hardCtx with the span; the publish runs in it.
	sctx := d.tracing.startPublish(hardCtx, j)
	start := time.Now()
	var (
		pctx      context.Context
		leaseLost = func() bool { return false }
	)
	// No span, no heartbeat: the worker's clock times the publish.
	timed := clock != nil && sctx == hardCtx && d.cfg.HeartbeatInterval == 0
	if timed {
		pctx = clock.start(start, &j.pctx)
	} else {
		var cancel context.CancelFunc
		pctx, cancel = context.WithTimeoutCause(sctx, d.cfg.PublishTimeout, context.DeadlineExceeded)
		defer cancel()
		if d.cfg.HeartbeatInterval > 0 {
			pctx2, cancel2 := context.WithCancelCause(pctx)
			defer cancel2(nil)
			pctx = pctx2
			stop, lost := d.heartbeat(hardCtx, j, cancel2)
			defer stop()
			leaseLost = lost
		}
	}

	err := d.safePublish(pctx, j.msg)
	d.releaseSlot(j)
	if timed {
		clock.stop()
	}
	elapsed := time.Since(start)
	d.metrics.publishDuration(hardCtx, elapsed, err == nil)

	switch {
	case leaseLost():
		// The heartbeat found the lease taken over: the new owner finalizes.
		d.probeAborted(j)
		d.leaseLost(j, "heartbeat")
		d.release(1)
		return
	case err == nil:
		d.breaker.reached()
		d.metrics.delivered(hardCtx, time.Since(j.msg.CreatedAt))
		j.res = resultDone
		fin.add(j)
		return
	case errors.Is(err, errPanic):
		d.probeAborted(j)
		// Treated as a crash of this message: no finalize, the attempt is
		// spent, the lease expires and a later claim recovers it in isolation
		// (or the reap buries it at max attempts).
		d.metrics.add(outPanic, 1)
		d.log.ErrorContext(sctx, "publisher panicked; message left to lease recovery",
			slog.Int64("outbox_id", j.id), slog.Int64("lease_version", j.leaseVersion), slog.Any("error", err))
		j.endPublish(spanPanic, "panic", err)
		d.release(1)
		return
	case hardCtx.Err() != nil:
		// Shutdown cancelled the publish: hand the message back; it may have
		// been delivered, and the receiver deduplicates by id.
		d.probeAborted(j)
		rel.add(j)
		return
	}
	if !d.classify(sctx, j, err, pctx, start, start.Add(elapsed)) {
		d.probeAborted(j)
		d.release(1)
		return
	}
	fin.add(j)
}

// writeResults writes the results of batch in one fenced statement:
// OutboxMarkDoneMany when every message was delivered (the success path),
// OutboxFinalizeMany otherwise. noHandoff says no ordered row of batch
// becomes done (the statement then skips the hand-off locks). Transient
// database errors are retried (retryDBValue); when the statement fails for
// good, the leases expire and the messages are delivered again. Then each
// job is accounted for: metrics, its publish span, the failure log, and
// the lease-lost report for a row the statement did not match.
func (d *Dispatcher) writeResults(ctx context.Context, batch []*job, noHandoff bool) {
	ids, versions, owners := tokensOf(batch)
	lctx := withLinkedJobs(ctx, batch)
	allDone := true
	for _, j := range batch {
		allDone = allDone && j.res.kind == resDone
	}
	var (
		written  []int64
		statuses []string // nil: all done
		err      error
		op       = "finalize"
	)
	if allDone {
		op = "mark done"
		written, err = retryDBValue(lctx, d, op, func(ctx context.Context) ([]int64, error) {
			return d.q.OutboxMarkDoneMany(ctx, db.OutboxMarkDoneManyParams{Ids: ids, LeaseVersions: versions, LeaseOwners: owners, UnorderedOnly: noHandoff})
		})
	} else {
		written, statuses, err = d.finalizeMany(lctx, batch, ids, versions, owners, noHandoff)
	}
	if err != nil {
		endFinalized(batch, err) // logged by retryDBValue
		return
	}
	d.metrics.finalizeFlush(ctx, len(batch))
	d.markFinalized()
	// A finalized ordered message makes the next message of its aggregate
	// the head, which nothing else announces (no INSERT, so no NOTIFY): wake
	// the claimer, or an idle one would wait for the poll interval before
	// each message of a busy aggregate (measured: one hot aggregate went
	// from about 1 msg/s with the default 1s poll to hundreds per second;
	// see BENCHMARKS.md). Only a statement with the hand-off locks
	// (noHandoff false) finalizes ordered rows done.
	if !noHandoff {
		defer d.wakeUp()
	}
	if statuses == nil && len(written) == len(batch) {
		// The success path: every row done, counted once per statement.
		d.metrics.add(outPublished, int64(len(batch)))
		endFinalized(batch, nil)
		return
	}
	status := make(map[int64]string, len(written))
	for i, id := range written {
		if statuses == nil {
			status[id] = "done"
		} else {
			status[id] = statuses[i]
		}
	}
	var counts [numOutcomes]int64
	notify := false
	for _, j := range batch {
		st, ok := status[j.id]
		if !ok {
			d.leaseLost(j, op)
			continue
		}
		counts[d.written(j, st)]++
		notify = notify || (j.res.kind == resRelease && !j.res.unavailable && j.res.delay == 0)
	}
	for o, n := range counts {
		d.metrics.add(outcome(o), n)
	}
	if notify {
		// Messages handed back unstarted: wake the dispatchers (this one's
		// siblings included) to claim them again.
		nctx, cancel := context.WithTimeout(ctx, d.cfg.WriteTimeout)
		_ = d.q.OutboxNotify(nctx)
		cancel()
	}
}

// finalizeMany is OutboxFinalizeMany over batch. Its texts were made valid
// by errText; should the server refuse one all the same (a data error),
// the statement is written once more with a fixed ASCII text in place of
// every error, so the messages' states still move on.
func (d *Dispatcher) finalizeMany(ctx context.Context, batch []*job, ids, versions []int64, owners []string, noHandoff bool) ([]int64, []string, error) {
	p := db.OutboxFinalizeManyParams{
		Ids: ids, LeaseVersions: versions, LeaseOwners: owners, UnorderedOnly: noHandoff, MaxDeferAge: d.cfg.MaxDeferAge,
		Outcomes: make([]string, len(batch)), DelaysUs: make([]int64, len(batch)), Errors: make([]string, len(batch)),
		History: make([]string, len(batch)), Answers: make([]string, len(batch)),
	}
	for i, j := range batch {
		p.Outcomes[i], p.DelaysUs[i], p.Errors[i] = resultOutcomes[j.res.kind], max(j.res.delay, 0).Microseconds(), errText(j.res.text)
		p.History[i] = historyKind(j.res)
		if p.History[i] != "" {
			p.Answers[i] = errText(AnswerOf(j.res.err))
		}
	}
	write := func(ctx context.Context) (*db.OutboxFinalizeManyRow, error) { return d.q.OutboxFinalizeMany(ctx, p) }
	row, err := retryDBValue(ctx, d, "finalize", write)
	if err != nil && isDataError(err) {
		safe := "error text refused by the database (SQLSTATE " + sqlState(err) + "); see the dispatcher log"
		for i := range p.Errors {
			if p.Errors[i] != "" {
				p.Errors[i] = safe
			}
			p.Answers[i] = ""
		}
		row, err = retryDBValue(ctx, d, "finalize", write)
	}
	if err != nil {
		return nil, nil, err
	}
	return row.Ids, row.Statuses, nil
}
