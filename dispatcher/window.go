package dispatcher

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/pgoutbox/pgoutbox/db"
)

// claimCursor is where the next OutboxClaimWindow begins (queries/window.sql):
// a window between two txid snapshots, a keyset inside it, and the database
// time up to which due rows were handed out. Starting a claim there instead
// of at the first pending row is what keeps a claim's cost independent of
// how long the oldest open snapshot on the server has been held (a pg_dump,
// a report, an idle transaction): the dead index entries of the rows
// claimed meanwhile all lie behind the cursor.
//
// The zero cursor is "nothing handed out yet": the first window reads every
// pending row, once, forward.
type claimCursor struct {
	lower     string    // pg_snapshot text; every row visible in it was handed out ("" = the empty snapshot)
	lowerXmax int64     // its xmax: where the fresh lane of the next window starts
	upper     string    // the current window's upper snapshot; "" between windows
	upperXmax int64     //
	upperAt   time.Time // database time when upper was taken (the OutboxClaimSnapshot that opened the window)
	afterTxid int64     // fresh-lane keyset: (txid, id) of the last fresh row claimed in this window
	afterID   int64     //
	dueAfter  time.Time // database time up to which due rows were handed out
	server    string    // identity of the server the snapshots come from (OutboxClaimSnapshot's server; "": none yet)
}

// cursorStart is the empty snapshot: no transaction is visible in it, so
// every row is new.
const cursorStart = "1:1:"

func (c claimCursor) orStart() claimCursor {
	if c.lower == "" {
		c.lower = cursorStart
	}
	return c
}

// sameServer reports whether pre comes from the server c's snapshots were
// taken on: the same server identity (OutboxClaimSnapshot: system
// identifier, timeline, start and crash restart), and an xmax that did not
// go back.
// A txid snapshot is only meaningful on the server that took it. After a
// crash restart, or a standby promoted in a failover, the server may hand
// out again the txids of transactions whose WAL it never got (rolled back,
// or lost with the old primary); rows of its new transactions with those
// txids would look visible in c.lower, that is already handed out, and wait
// for the sweep. A cursor of another server starts over instead.
func (c claimCursor) sameServer(pre db.OutboxClaimSnapshotRow) bool {
	if c.server == "" {
		return true
	}
	return c.server == pre.Server && pre.Xmax >= c.lowerXmax && (c.upper == "" || pre.Xmax >= c.upperXmax)
}

// begin opens a window at pre (the OutboxClaimSnapshot read just before the
// claim) unless one is open. A cursor from another server (sameServer) is
// started over first: the zero cursor reads every pending row once.
func (c claimCursor) begin(pre db.OutboxClaimSnapshotRow) claimCursor {
	if !c.sameServer(pre) {
		c = claimCursor{lower: cursorStart}
	}
	c.server = pre.Server
	if c.upper == "" {
		c.upper, c.upperXmax, c.upperAt = pre.Snapshot, pre.Xmax, pre.At
		c.afterTxid, c.afterID = c.lowerXmax, 0
	}
	return c
}

// opened returns, for a cursor whose window is open, the snapshot row that
// opened it: a claim that continues the window (the previous one came back
// full) needs no OutboxClaimSnapshot of its own. The window's upper bound is
// fixed until a claim comes back short, and the row's time, earlier than a
// new one would be, only makes the due mark of advance earlier,
// the safe side. A server change in the middle of a window is noticed by the
// snapshot that opens the next one (sameServer) and the cursor starts over
// then: a continuing claim on the new server claims only committed rows, and
// the rows it passes are read again from the first pending row. ok is false
// between windows.
func (c claimCursor) opened() (pre db.OutboxClaimSnapshotRow, ok bool) {
	if c.upper == "" || c.server == "" {
		return pre, false
	}
	return db.OutboxClaimSnapshotRow{Snapshot: c.upper, Xmax: c.upperXmax, At: c.upperAt, Server: c.server}, true
}

// windowRow is what advance needs of a claimed row.
type windowRow struct {
	txid, id int64
	lane     string
}

// advance moves the cursor after a claim that asked for batch rows.
//
// A claim whose open and fresh lanes came back short exhausted its window:
// every row of the window that the claim could see was claimed or found
// locked by a concurrent claim, so the upper snapshot becomes the lower one.
// When the due lane came back short as well, every due row up to the
// claim's time was handed out too, and pre's time becomes the due mark (pre
// is never newer than the claim's own snapshot, so nothing the claim could
// not see is passed); when the due lane filled the claim, the due mark
// stays. A claim whose open and fresh lanes filled it only moves the fresh
// keyset past its last fresh row.
//
// The window closes on its own lanes, not on the due lane: retries and
// hand-backs that keep coming due would otherwise fill every claim, keep
// the window open, and leave every transaction committed after it unclaimed
// (measured: a 503 receiver, 20,000 events in four transactions, three of
// them untried for 20 s while the first one's retries cycled).
func (c claimCursor) advance(pre db.OutboxClaimSnapshotRow, rows []windowRow, batch int) claimCursor {
	own := 0
	for _, r := range rows {
		if r.lane != "due" {
			own++
		}
	}
	if own < batch {
		next := claimCursor{lower: c.upper, lowerXmax: c.upperXmax, dueAfter: pre.At, server: c.server}
		if len(rows) >= batch {
			next.dueAfter = c.dueAfter
		}
		return next
	}
	for _, r := range rows { // ordered by (txid, id)
		if r.lane == "fresh" {
			c.afterTxid, c.afterID = r.txid, r.id
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
	sweepTook time.Duration // how long the last sweep ran (it paces the next: sweepDuty)
	marks     [2]sweepMark  // the cursor at the last two sweeps of this kind, oldest first
	sweeps    int           // sweeps of this kind so far
}

// sweepMark is where a cursor was when a sweep ran: the next sweep but one
// reads only what the cursor passed since (OutboxClaimPassed's @since).
type sweepMark struct {
	lower    string
	dueAfter time.Time
	server   string
}

// fullSweepEvery: one sweep in so many reads from the start, for rows
// behind the cursor that no bounded sweep covers (made claimable by hand in
// a way the stamp trigger cannot see, or passed while a claim held them
// longer than a sweep interval).
const fullSweepEvery = 10

// sweepFrom returns the position the next sweep of w reads from: the mark of
// two sweeps before, or the start (the empty snapshot, the zero time) for
// the first two sweeps, every fullSweepEvery-th, and after a server change.
func (w *windowState) sweepFrom(cur claimCursor) (since string, dueSince time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	m := w.marks[0]
	if m.lower == "" || m.server != cur.server || w.sweeps%fullSweepEvery == fullSweepEvery-1 {
		return cursorStart, time.Time{}
	}
	return m.lower, m.dueAfter
}

// swept records cur as the position of the sweep that just finished.
func (w *windowState) swept(cur claimCursor) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.marks[0], w.marks[1] = w.marks[1], sweepMark{cur.lower, cur.dueAfter, cur.server}
	w.sweeps++
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

// claimUnordered claims up to n unordered messages from the unordered
// cursor (OutboxClaimWindow).
func (d *Dispatcher) claimUnordered(ctx context.Context, n int, jobs chan<- *job) (int, error) {
	return d.claimWindow(ctx, n, jobs, &d.window, false)
}

// claimOrdered claims up to n ordered heads from the ordered cursor
// (OutboxClaimOrderedWindow): at most one per aggregate, in the order they
// became heads. First it decides the ordered events committed since the
// last claim (decideCommitted), so that a head committed just now is
// claimed in this claim.
func (d *Dispatcher) claimOrdered(ctx context.Context, n int, jobs chan<- *job) (int, error) {
	if err := d.decideCommitted(ctx); err != nil && ctx.Err() == nil {
		// The claim goes on: what was decided before is claimable, and the
		// next claim or the recovery pass decides the rest.
		d.log.Warn("deciding the ordered events committed since the last claim failed; the claim goes on",
			slog.String("sqlstate", sqlState(err)), slog.Any("error", err))
	}
	return d.claimWindow(ctx, n, jobs, &d.windowOrd, true)
}

// claimWindow runs one window claim from w and moves w on. The two window
// queries return the same columns, so their rows share one type.
func (d *Dispatcher) claimWindow(ctx context.Context, n int, jobs chan<- *job, w *windowState, ordered bool) (int, error) {
	start := time.Now()
	cctx, cancel := context.WithTimeout(ctx, d.cfg.ClaimTimeout)
	defer cancel()
	cur := w.get()
	// Inside an open window (a backlog: the previous claim came back full)
	// the claim reuses the snapshot that opened it: one round trip a claim
	// instead of two.
	pre, continuing := cur.opened()
	if !continuing {
		snap, err := d.q.OutboxClaimSnapshot(cctx)
		if err != nil {
			return 0, err
		}
		pre = *snap
	}
	if !cur.sameServer(pre) {
		d.log.Warn("the database server changed (a crash restart, a failover, a restored or replicated copy): the claim cursor starts over from the first pending row",
			slog.Bool("ordered", ordered), slog.String("server", pre.Server), slog.Int64("xmax", pre.Xmax))
	}
	cur = cur.begin(pre)
	owner := d.tokens.next()
	params := db.OutboxClaimWindowParams{
		Snapshot: cur.lower, Upper: cur.upper, AfterTxid: cur.afterTxid, AfterID: cur.afterID, DueAfter: cur.dueAfter,
		Owner: owner, Batch: int32(n), Lease: d.cfg.Lease,
	}
	var (
		rows []*db.OutboxClaimWindowRow
		err  error
	)
	if ordered {
		var got []*db.OutboxClaimOrderedWindowRow
		got, err = d.q.OutboxClaimOrderedWindow(cctx, db.OutboxClaimOrderedWindowParams(params))
		rows = make([]*db.OutboxClaimWindowRow, len(got))
		for i, r := range got {
			rows[i] = (*db.OutboxClaimWindowRow)(r)
		}
	} else {
		rows, err = d.q.OutboxClaimWindow(cctx, params)
	}
	if err != nil {
		// The cursor stays where it was (w is not moved): the next claim
		// reads the same window from the same keyset, whether this one
		// waited for a lock (claimKind waits for it to go) or failed on a
		// row (claimKind isolates the rows first).
		return 0, err
	}
	keys := make([]windowRow, len(rows))
	for i, r := range rows {
		keys[i] = windowRow{r.Txid, r.ID, r.Lane}
	}
	w.set(cur.advance(pre, keys, n))
	deadline := start.Add(d.cfg.Lease)
	d.claimed(ctx, len(rows))
	// The whole claim counts in flight before its first job reaches a
	// worker: the finalizer flushes early when everything in flight waits
	// for it, and counted one by one it caught the dispatch loop half way
	// and wrote one claim's rows in two statements (1,206 + 794).
	d.inFlight.Add(int64(len(rows)))
	for _, r := range rows {
		jobs <- d.newJob(r.ID, r.LeaseVersion, owner, r.Attempts, deadline, r.AggregateType, r.AggregateID,
			r.EventType, r.Payload, r.Headers, r.CreatedAt, ordered, position(r.Seq, r.PrevSeq, r.SentSeq))
	}
	return len(rows), nil
}

// sweepBehindCursor runs the cursors' safety nets at most once per
// Config.SweepInterval: OutboxClaimPassed / OutboxClaimPassedOrdered claim
// the pending rows a cursor passed without anybody claiming them (a
// concurrent claim that held them rolled back, or failed on one of them),
// and this lane publishes each alone, as it does recovered leases;
// OutboxDecideCommitted from the start decides ordered events below the
// claim loop's decide floor (decide.go); and OutboxRepairHeads flags heads
// the triggers could not (see its comment).
// They read from the start of the pending rows or of each aggregate, so they
// pay what a claim used to pay under a long snapshot, but once per interval
// and on the recovery lane, never in front of fresh work.
func (d *Dispatcher) sweepBehindCursor(ctx, hardCtx context.Context, sink doneSink, rel *releaser) error {
	d.window.mu.Lock()
	due := time.Since(d.window.lastSweep) >= max(d.cfg.SweepInterval, sweepDuty*d.window.sweepTook)
	if due {
		d.window.lastSweep = time.Now()
	}
	d.window.mu.Unlock()
	if !due {
		return nil
	}
	start := time.Now()
	defer func() {
		d.window.mu.Lock()
		d.window.sweepTook = time.Since(start)
		d.window.mu.Unlock()
	}()
	if d.cfg.Claim != ClaimOrderedOnly {
		if err := d.claimPassed(ctx, hardCtx, sink, rel, &d.window, false); err != nil {
			return err
		}
	}
	if d.cfg.Claim != ClaimUnorderedOnly {
		if err := d.claimPassed(ctx, hardCtx, sink, rel, &d.windowOrd, true); err != nil {
			return err
		}
		if n, err := d.decideFromStart(ctx); err != nil {
			return err
		} else if n > 0 {
			d.log.Warn("decided ordered events below the decide floor", slog.Int64("count", n))
			d.wakeUp()
		}
		sctx, cancel := context.WithTimeout(ctx, d.cfg.ClaimTimeout)
		n, err := d.q.OutboxRepairHeads(sctx)
		cancel()
		if err != nil {
			return fmt.Errorf("repair heads: %w", err)
		}
		if n > 0 {
			d.metrics.requeued.Add(n)
			d.log.Warn("flagged the heads of aggregates whose head was not flagged", slog.Int64("count", n))
			d.wakeUp()
		}
	}
	return nil
}

// claimPassed claims the rows cur passed (OutboxClaimPassed[Ordered]) and
// publishes each alone, like a recovered lease.
func (d *Dispatcher) claimPassed(ctx, hardCtx context.Context, sink doneSink, rel *releaser, w *windowState, ordered bool) error {
	cur := w.get()
	if cur.lower == cursorStart {
		return nil // nothing passed yet
	}
	since, dueSince := w.sweepFrom(cur)
	for ctx.Err() == nil && !d.stopping.Load() {
		start := time.Now()
		sctx, cancel := context.WithTimeout(ctx, d.cfg.ClaimTimeout)
		owner := d.tokens.next()
		params := db.OutboxClaimPassedParams{
			Snapshot: cur.lower, DueAfter: cur.dueAfter, Since: since, DueSince: dueSince,
			MaxRows: int32(sweepRows), Owner: owner, Lease: d.cfg.Lease,
		}
		var got []*db.OutboxClaimPassedRow
		var err error
		if ordered {
			var ord []*db.OutboxClaimPassedOrderedRow
			ord, err = d.q.OutboxClaimPassedOrdered(sctx, db.OutboxClaimPassedOrderedParams(params))
			got = make([]*db.OutboxClaimPassedRow, len(ord))
			for i, r := range ord {
				got[i] = (*db.OutboxClaimPassedRow)(r)
			}
		} else {
			got, err = d.q.OutboxClaimPassed(sctx, params)
		}
		cancel()
		rows := make([]claimedRow, len(got))
		for i, r := range got {
			rows[i] = claimedRow{r.ID, r.LeaseVersion, owner, r.Attempts, r.Ordered}
		}
		if err != nil {
			return fmt.Errorf("claim passed: %w", err)
		}
		if len(rows) == 0 {
			w.swept(cur)
			return nil
		}
		d.metrics.requeued.Add(int64(len(rows)))
		d.claimed(ctx, len(rows))
		d.log.Warn("recovering pending messages the claim cursor had passed (a claim that held them failed or rolled back)",
			slog.Int("count", len(rows)), slog.Bool("ordered", ordered))
		deadline := start.Add(d.cfg.Lease)
		for _, r := range rows {
			j := d.readClaimed(ctx, r, deadline, rel)
			if j == nil {
				continue
			}
			d.inFlight.Add(1)
			d.runJob(hardCtx, j, sink, rel, nil)
		}
		if len(rows) < sweepRows {
			w.swept(cur)
			return nil
		}
	}
	return nil
}

// sweepRows bounds one OutboxClaimPassed or OutboxDecideCommitted statement.
const sweepRows = 1000

// sweepDuty paces the statements that read from the start of an index
// (the sweeps behind the cursors, the recovery lane's full pass, the queue
// gauges): the next runs no sooner than sweepDuty times as long as the last
// took after it began, whatever its interval says, so they never take more
// than 1/sweepDuty of a connection's (and a core's) time. Under a snapshot
// held for long, each of them steps over the dead entries of every row
// processed meanwhile: measured with 2,000 events/s, the ordered gauges'
// OutboxBlockedAggregates read 300,000 buffers (0.5 s) a minute into the
// hold, and grow from there.
const sweepDuty = 50
