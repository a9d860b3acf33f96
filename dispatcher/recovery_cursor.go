package dispatcher

import (
	"context"
	"time"

	"github.com/pgoutbox/pgoutbox/db"
)

// expiredCursorMargin is how far behind a pass's database time the next
// pass of the recovery lane starts reading expired leases. A claim or lease
// extension still running when a pass read the clock writes a lease_until
// of its own start plus its Lease, and commits after the pass; it can only
// land behind the cursor if it ran longer than this margin plus its Lease.
// Anything that does is found by the pass that reads from the start, once
// per SweepInterval.
const expiredCursorMargin = 5 * time.Second

// expiredCursor is the recovery lane's position in outbox_leased
// (OutboxClaimExpired, OutboxReap): every lease that expired before after
// was recovered or reaped by an earlier pass. The zero cursor reads from the
// start. Only the recovery lane's goroutine uses it.
type expiredCursor struct {
	after    time.Time // database time; zero: from the start
	server   string    // identity of the server after comes from (OutboxClaimSnapshot's server)
	lastFull time.Time // local time of the last pass from the start
	fullTook time.Duration
	full     bool // the current pass reads from the start
}

// from returns where this pass starts: the zero time (the whole expired
// part of the index) once per sweep interval, on the first pass, and when
// the server changed (a failover: the new primary's clock is another
// clock); otherwise the cursor.
func (c *expiredCursor) from(clock db.OutboxClaimSnapshotRow, sweepEvery time.Duration) time.Time {
	c.full = c.after.IsZero() || c.server != clock.Server || time.Since(c.lastFull) >= max(sweepEvery, sweepDuty*c.fullTook)
	if c.full {
		c.lastFull = time.Now()
		return time.Time{}
	}
	return c.after
}

// passed moves the cursor after a pass that read everything expired up to
// clock (its last OutboxClaimExpired came back empty).
func (c *expiredCursor) passed(clock db.OutboxClaimSnapshotRow) {
	c.after = clock.At.Add(-expiredCursorMargin)
	c.server = clock.Server
	if c.full {
		c.fullTook = time.Since(c.lastFull)
	}
}

// recoveryClock reads the database time (and server) a recovery pass starts
// at, with the claim cursor's OutboxClaimSnapshot.
func (d *Dispatcher) recoveryClock(ctx context.Context) (db.OutboxClaimSnapshotRow, error) {
	cctx, cancel := context.WithTimeout(ctx, d.cfg.ClaimTimeout)
	defer cancel()
	clock, err := d.q.OutboxClaimSnapshot(cctx)
	if err != nil {
		return db.OutboxClaimSnapshotRow{}, err
	}
	return *clock, nil
}
