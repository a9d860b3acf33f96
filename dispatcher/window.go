package dispatcher

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/pgoutbox/pgoutbox/db"
)

// claimCursor is where the next OutboxClaimWindow begins (queries/window.sql):
// a txid snapshot, a keyset inside its fresh lane, and the database time of
// the snapshot. Starting a claim there instead of at the first pending row
// is what keeps a claim's cost independent of how long the oldest open
// snapshot on the server has been held (a pg_dump, a report, an idle
// transaction): the dead index entries of the rows claimed meanwhile all lie
// behind the cursor.
//
// The zero cursor is "nothing handed out yet": the first pass reads every
// pending row, once, forward.
type claimCursor struct {
	snapshot  string    // pg_snapshot text; every row visible in it was handed out
	afterTxid int64     // fresh-lane keyset: (txid, id) of the last fresh row claimed
	afterID   int64     //
	dueAfter  time.Time // database time of snapshot: due lane reads rows due after it
}

// cursorStart is the empty snapshot: no transaction is visible in it, so
// every row is new.
const cursorStart = "1:1:"

func (c claimCursor) orStart() claimCursor {
	if c.snapshot == "" {
		c.snapshot = cursorStart
	}
	return c
}

// advance moves the cursor after a claim that asked for batch rows. pre is
// the OutboxClaimSnapshot read just before the claim.
//
// A claim that came back short exhausted its window: every row new to the
// old cursor that the claim could see was claimed or found locked by a
// concurrent claim, so the cursor moves to pre (never newer than the claim's
// own snapshot, so nothing the claim could not see is passed). A full claim
// only moves the fresh keyset past its last fresh row; the snapshot stays,
// so rows of transactions still open at it keep their place.
func (c claimCursor) advance(pre db.OutboxClaimSnapshotRow, rows []db.OutboxClaimWindowRow, batch int) claimCursor {
	if len(rows) < batch {
		return claimCursor{snapshot: pre.Snapshot, afterTxid: pre.Xmax, dueAfter: pre.At}
	}
	for _, r := range rows { // ordered by (txid, id)
		if r.Lane == "fresh" {
			c.afterTxid, c.afterID = r.Txid, r.ID
		}
	}
	return c
}

// windowState is the cursor shared by the claim loop (which moves it) and
// the recovery lane (which sweeps behind it).
type windowState struct {
	mu        sync.Mutex
	cur       claimCursor
	lastSweep time.Time
}

func (w *windowState) get() claimCursor {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.cur.orStart()
}

func (w *windowState) set(c claimCursor) {
	w.mu.Lock()
	w.cur = c
	w.mu.Unlock()
}

// claimUnordered claims up to n unordered messages from the cursor.
func (d *Dispatcher) claimUnordered(ctx context.Context, n int, jobs chan<- *job) (int, error) {
	start := time.Now()
	cctx, cancel := context.WithTimeout(ctx, d.cfg.ClaimTimeout)
	defer cancel()
	pre, err := d.q.OutboxClaimSnapshot(cctx)
	if err != nil {
		return 0, err
	}
	cur := d.window.get()
	rows, err := d.q.OutboxClaimWindow(cctx, db.OutboxClaimWindowParams{
		Snapshot: cur.snapshot, AfterTxid: cur.afterTxid, AfterID: cur.afterID, DueAfter: cur.dueAfter,
		Owner: d.cfg.Owner, Batch: int32(n), Lease: d.cfg.Lease,
	})
	if err != nil {
		return 0, err
	}
	d.window.set(cur.advance(pre, rows, n))
	deadline := start.Add(d.cfg.Lease)
	d.metrics.claimed(ctx, len(rows))
	for _, r := range rows {
		d.dispatch(jobs, d.newJob(r.ID, r.LeaseVersion, r.Attempts, deadline, r.AggregateType, r.AggregateID,
			r.EventType, r.Payload, r.Headers, r.CreatedAt, false))
	}
	return len(rows), nil
}

// sweepBehindCursor runs OutboxRequeuePassed at most once per
// Config.SweepInterval: pending rows the cursor passed without anybody
// claiming them (a concurrent claim that held them rolled back) go back to
// the fresh lane. It reads from the start of the pending rows, so it pays
// what a claim used to pay under a long snapshot, but once per interval and
// on the recovery lane, never in front of fresh work.
func (d *Dispatcher) sweepBehindCursor(ctx context.Context) error {
	if d.cfg.Claim == ClaimOrderedOnly {
		return nil
	}
	d.window.mu.Lock()
	due := time.Since(d.window.lastSweep) >= d.cfg.SweepInterval
	cur := d.window.cur
	if due {
		d.window.lastSweep = time.Now()
	}
	d.window.mu.Unlock()
	if !due || cur.snapshot == "" {
		return nil
	}
	for ctx.Err() == nil {
		sctx, cancel := context.WithTimeout(ctx, d.cfg.ClaimTimeout)
		n, err := d.q.OutboxRequeuePassed(sctx, db.OutboxRequeuePassedParams{
			Snapshot: cur.snapshot, DueAfter: cur.dueAfter, MaxRows: int32(sweepRows),
		})
		cancel()
		if err != nil {
			return err
		}
		if n > 0 {
			d.metrics.requeued.Add(n)
			d.log.Warn("returned pending messages the claim cursor had passed to the fresh lane",
				slog.Int64("count", n))
			d.wakeUp()
		}
		if n < sweepRows {
			return nil
		}
	}
	return nil
}

// sweepRows bounds one OutboxRequeuePassed statement.
const sweepRows = 1000
