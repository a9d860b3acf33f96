package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgoutbox/pgoutbox/db"
)

// doneSink receives jobs whose result is set (finalizer.go): the batched
// finalizer, or the recovery lane's synchronous writer.
type doneSink interface{ add(j *job) }

// claimedRow is a row claimed without its payload.
type claimedRow struct {
	id, leaseVersion int64
	leaseOwner       string
	attempts         int32
	ordered          bool
}

// isolate is the claim's fallback after it failed with an error that one row
// can cause (isRowError) or ran out of ClaimTimeout: it claims up to n
// messages of kind without their payloads, then reads each one alone
// (readClaimed), so that a row that cannot be returned goes to dead and its
// neighbours are dispatched as usual. Attempts count as in every claim.
func (d *Dispatcher) isolate(ctx context.Context, kind ClaimMode, n int, jobs chan<- *job, rel *releaser) (int, error) {
	start := time.Now()
	cctx, cancel := context.WithTimeout(ctx, d.cfg.ClaimTimeout)
	var rows []claimedRow
	owner := d.tokens.next()
	if kind == ClaimOrderedOnly {
		rs, err := d.q.OutboxIsolateClaimOrdered(cctx, db.OutboxIsolateClaimOrderedParams{
			Owner: owner, Lease: d.cfg.Lease, Batch: int32(n)})
		cancel()
		if err != nil {
			return 0, fmt.Errorf("isolation claim: %w", err)
		}
		for _, r := range rs {
			rows = append(rows, claimedRow{r.ID, r.LeaseVersion, owner, r.Attempts, r.Ordered})
		}
	} else {
		rs, err := d.q.OutboxIsolateClaim(cctx, db.OutboxIsolateClaimParams{
			Owner: owner, Lease: d.cfg.Lease, Batch: int32(n)})
		cancel()
		if err != nil {
			return 0, fmt.Errorf("isolation claim: %w", err)
		}
		for _, r := range rs {
			rows = append(rows, claimedRow{r.ID, r.LeaseVersion, owner, r.Attempts, r.Ordered})
		}
	}
	d.claimed(ctx, len(rows))
	deadline := start.Add(d.cfg.Lease)
	for _, r := range rows {
		if j := d.readClaimed(ctx, r, deadline, rel); j != nil {
			d.dispatch(jobs, j)
		}
	}
	return len(rows), nil
}

// readClaimed extends the lease of one message claimed without its payload
// to cover the read, reads it (fenced by its lease_version) and returns it as
// a job, or nil when the row was dealt with here:
//   - a data or resource error (SQLSTATE class 22, 54, 53200) belongs to the
//     row: it goes to dead (fenced) with the SQLSTATE in last_error;
//   - a timeout (ClaimTimeout) is the server being slow, not the row being
//     bad: the message is rescheduled as a retryable failure (attempt spent,
//     backoff), so it waits out of the way of the others and reaches dead
//     only after MaxAttempts reads that all timed out;
//   - any other error (the connection): the message is handed back with its
//     attempt refunded;
//   - no row: the lease was lost.
func (d *Dispatcher) readClaimed(ctx context.Context, r claimedRow, deadline time.Time, rel *releaser) *job {
	// The read of a row that cannot be returned can take longer than the
	// lease (a 1 GB rendering takes seconds of CPU, more on a busy server):
	// first extend the lease to cover the read, or another dispatcher would
	// take the row over mid-read and the fenced dead below would find the
	// lease lost, again and again, until the reap buried it without the
	// reason.
	start := time.Now()
	ectx, cancel := context.WithTimeout(ctx, d.cfg.WriteTimeout)
	n, err := d.q.OutboxExtendLease(ectx, db.OutboxExtendLeaseParams{ID: r.id, LeaseVersion: r.leaseVersion, LeaseOwner: r.leaseOwner, Lease: d.cfg.Lease + d.cfg.ClaimTimeout})
	cancel()
	if err == nil && n == 1 {
		deadline = start.Add(d.cfg.Lease + d.cfg.ClaimTimeout)
	}
	var row *db.OutboxIsolateReadRow
	if err == nil {
		rctx, cancel := context.WithTimeout(ctx, d.cfg.ClaimTimeout)
		row, err = d.q.OutboxIsolateRead(rctx, db.OutboxIsolateReadParams{ID: r.id, LeaseVersion: r.leaseVersion, LeaseOwner: r.leaseOwner})
		cancel()
	}
	if err == nil {
		// Back to a normal lease, so that a crash while publishing it (a
		// poison in the recovery lane) costs one Lease, not ClaimTimeout.
		start := time.Now()
		ectx, cancel := context.WithTimeout(ctx, d.cfg.WriteTimeout)
		_, _ = d.q.OutboxExtendLease(ectx, db.OutboxExtendLeaseParams{ID: r.id, LeaseVersion: r.leaseVersion, LeaseOwner: r.leaseOwner, Lease: d.cfg.Lease})
		cancel()
		// Whether or not that write applied, the lease ends no earlier than
		// start + Lease (a failed write left the longer one).
		deadline = start.Add(d.cfg.Lease)
		return d.newJob(row.ID, r.leaseVersion, r.leaseOwner, r.attempts, deadline, row.AggregateType, row.AggregateID,
			row.EventType, row.Payload, row.Headers, row.CreatedAt, r.ordered, position(row.Seq, row.PrevSeq, row.SentSeq))
	}
	j := &job{id: r.id, leaseVersion: r.leaseVersion, leaseOwner: r.leaseOwner, attempts: r.attempts, deadline: deadline,
		msg: Message{ID: IDString(r.id), OutboxID: r.id, Attempt: int(r.attempts), Ordered: r.ordered}}
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		d.leaseLost(j, "read")
	case isRowError(err):
		d.metrics.unreadable.Add(1)
		j.res = &result{kind: resDead, text: fmt.Sprintf(
			"the database cannot return this message (SQLSTATE %s: %v); its payload or headers cannot be read or sent, so no publish was attempted",
			sqlState(err), err)}
		d.writeResults(ctx, []*job{j}, true)
	case isTimeout(ctx, err):
		d.retry(j, fmt.Errorf("reading the message timed out after %s (ClaimTimeout): %w", d.cfg.ClaimTimeout, err), 0, "")
		d.writeResults(ctx, []*job{j}, true)
	default:
		d.log.Warn("reading a claimed message failed; handing it back", slog.Int64("outbox_id", r.id), slog.Any("error", err))
		d.inFlight.Add(1)
		rel.add(j)
	}
	return nil
}

// recoveryLane recovers expired leases (a crashed, frozen or partitioned
// owner's messages) one message at a time, apart from the main pipeline,
// which claims pending messages only and never waits for recovery: fresh
// work is never delayed by it (the lane adds one publish in flight beside
// Concurrency). Every ReapInterval it reaps (OutboxReap, with ReapGrace) and
// then claims expired leases one by one until none is left; each is read
// alone (readClaimed, so an unreadable row goes to dead here too), published
// alone, and finalized synchronously before the lane claims the next.
//
// Why this keeps a poison message's batch-mates safe: a message that kills
// the process (a poison) takes down its whole first batch once, and every
// message of that batch spends one attempt. From then on each of them is an
// expired lease, and expired leases are recovered only here, one at a time:
// when the lane holds the poison and the process dies again, no other
// recovered message is in the lane, so the crash costs the poison an
// attempt and no batch-mate a second one (messages of the main pipeline in
// flight at that moment spend their first, and then come here alone). So a
// batch-mate is delivered with at most 2 attempts, and the poison alone
// reaches MaxAttempts and is buried by the reap.
func (d *Dispatcher) recoveryLane(ctx, hardCtx, flushCtx context.Context, rel *releaser) {
	sink := syncDone{d: d, ctx: flushCtx}
	failures := 0
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-ctx.Done():
			return
		}
		if err := d.recoverOnce(ctx, hardCtx, sink, rel); err != nil {
			d.dbError(ctx, "recover", err, &failures)
		} else {
			failures = 0
		}
		t.Reset(d.cfg.ReapInterval)
	}
}

func (d *Dispatcher) recoverOnce(ctx, hardCtx context.Context, sink doneSink, rel *releaser) error {
	grace := d.cfg.ReapGrace
	if grace < 0 {
		grace = 0
	}
	clock, err := d.recoveryClock(ctx)
	if err != nil {
		return fmt.Errorf("recovery clock: %w", err)
	}
	after := d.expired.from(clock, d.cfg.SweepInterval)
	rctx, cancel := context.WithTimeout(ctx, d.cfg.ClaimTimeout)
	n, err := d.q.OutboxReap(rctx, db.OutboxReapParams{Grace: grace, MaxAttempts: int32(d.cfg.MaxAttempts), ExpiredAfter: after})
	cancel()
	if err != nil {
		return fmt.Errorf("reap: %w", err)
	}
	if n > 0 {
		d.metrics.add(outReaped, n)
		d.log.Warn("reaped messages whose lease expired after max attempts", slog.Int64("count", n))
	}
	if err := d.repairMoved(ctx); err != nil {
		return err
	}
	if err := d.resolveHeads(ctx); err != nil {
		return err
	}
	if d.breaker.holding() {
		// The destination is unavailable: recovering messages would only
		// hand them back (breaker.go).
		return nil
	}
	if err := d.sweepBehindCursor(ctx, hardCtx, sink, rel); err != nil {
		return err
	}
	pass := d.newRecoveryPass()
	defer pass.done()
	for ctx.Err() == nil && !d.stopping.Load() && !d.breaker.holding() {
		start := time.Now()
		cctx, cancel := context.WithTimeout(ctx, d.cfg.ClaimTimeout)
		owner := d.tokens.next()
		rows, err := d.q.OutboxClaimExpired(cctx, db.OutboxClaimExpiredParams{
			Owner: owner, Lease: d.cfg.Lease, MaxAttempts: int32(d.cfg.MaxAttempts),
			Unordered: d.cfg.Claim != ClaimOrderedOnly, Ordered: d.cfg.Claim != ClaimUnorderedOnly,
			ExpiredAfter: after,
		})
		cancel()
		if err != nil {
			return fmt.Errorf("claim expired: %w", err)
		}
		if len(rows) == 0 {
			d.expired.passed(clock)
			return nil
		}
		d.claimed(ctx, len(rows))
		for _, r := range rows {
			j := d.readClaimed(ctx, claimedRow{r.ID, r.LeaseVersion, owner, r.Attempts, r.Ordered}, start.Add(d.cfg.Lease), rel)
			if j == nil {
				continue
			}
			d.metrics.recovered.Add(1)
			pass.add()
			d.inFlight.Add(1)
			d.runJob(hardCtx, j, sink, rel, nil)
		}
	}
	return nil
}

// syncDone writes a job's result at once (the batch writer over one job), so
// the recovery lane claims its next message only after the previous one's
// outcome is in the database.
type syncDone struct {
	d   *Dispatcher
	ctx context.Context
}

func (s syncDone) add(j *job) {
	defer s.d.release(1)
	s.d.writeResults(s.ctx, []*job{j}, !(j.msg.Ordered && j.res.kind == resDone))
}
