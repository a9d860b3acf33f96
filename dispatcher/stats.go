package dispatcher

import (
	"context"
	"log/slog"
	"time"

	"github.com/pgoutbox/pgoutbox/db"
)

// StalledAfterDefault is how long an ordered aggregate's head may stay
// undelivered before the aggregate counts as blocked in the gauges.
const StalledAfterDefault = 5 * time.Minute

// firstStatsSettle is how long the first read of the queue gauges waits
// after the claim loop first finds nothing to claim (refreshStats).
const firstStatsSettle = time.Second

// refreshStats reads the monitoring queries every StatsInterval into the
// observable gauges (the OpenTelemetry callbacks only read the cached copy,
// so a metrics scrape never waits on the database).
//
// The first read waits until the claim loop first finds nothing to claim,
// and then firstStatsSettle more, or StatsInterval, whichever comes first;
// until then the gauges report nothing. On an empty queue that is
// firstStatsSettle after the start.
//
// Not in the middle of a backlog found at start-up: there the gauges read
// every pending index entry (OutboxOldestPendingAge reads every pending row
// for its created_at: 29.7 ms with 100,000 pending, OutboxQueueDepth about
// 9 ms), and each relay of a fleet starting on the backlog used to pay it
// first thing: four relays about 160 ms of server time in a drain of about
// 1.8 s on two cores.
//
// Nor at once when the claim loop first finds nothing: a relay of a fleet
// finds nothing to claim while the other relays still publish and finalize
// up to three claims each (claimRoom), and the gauges cost the most at that
// moment: they step over the index entries of every row the drain claimed,
// which the fleet's snapshots keep from being removed. Four relays draining 100,000
// events on two cores: their four first reads took
// 0.6-0.9 s of server time, 62-116 ms a query against 25-38 ms for one
// relay's, in a drain of about 3 s.
func (d *Dispatcher) refreshStats(ctx context.Context) {
	t := time.NewTimer(d.cfg.StatsInterval)
	defer t.Stop()
	select {
	case <-d.firstIdle:
		settle := time.NewTimer(firstStatsSettle)
		select {
		case <-settle.C:
		case <-t.C:
		case <-ctx.Done():
		}
		settle.Stop()
	case <-t.C:
	case <-ctx.Done():
	}
	for ctx.Err() == nil {
		start := time.Now()
		q, err := ReadQueueStats(ctx, d.q)
		// The gauges read whole partial indexes: paced like the sweeps
		// (sweepDuty), so a slow refresh (a long-held snapshot, a huge
		// backlog) waits proportionally longer.
		t.Reset(max(d.cfg.StatsInterval-time.Since(start), (sweepDuty-1)*time.Since(start)))
		if err != nil && ctx.Err() == nil {
			d.log.Debug("queue stats refresh failed", slog.Any("error", err))
		} else if err == nil {
			d.metrics.mu.Lock()
			d.metrics.queue = q
			d.metrics.mu.Unlock()
		}
		select {
		case <-t.C:
		case <-ctx.Done():
			return
		}
	}
}

// ReadQueueStats runs the monitoring queries once (table-wide figures).
func ReadQueueStats(ctx context.Context, q *db.Queries) (QueueStats, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out := QueueStats{At: time.Now(), ByStatus: map[string]int64{}}
	depth, err := q.OutboxQueueDepth(ctx)
	if err != nil {
		return out, err
	}
	out.ByStatus["pending"], out.ByStatus["processing"], out.ByStatus["dead"] = depth.Pending, depth.Processing, depth.Dead
	out.ByStatus["done"] = depth.Done       // exact up to 10,000, then an estimate (OutboxQueueDepth)
	out.ByStatus["skipped"] = depth.Skipped // resolved without delivery; exact up to 10,000
	if out.OldestAgeSeconds, err = q.OutboxOldestPendingAge(ctx); err != nil {
		return out, err
	}
	if out.ExpiredLeases, err = q.OutboxExpiredLeases(ctx); err != nil {
		return out, err
	}
	blocked, err := q.OutboxBlockedAggregates(ctx, db.OutboxBlockedAggregatesParams{
		StalledAfter: StalledAfterDefault, MaxRows: 10000,
	})
	if err != nil {
		return out, err
	}
	out.BlockedAggregates = int64(len(blocked))
	if out.Horizon, err = ReadHorizon(ctx, q, 1); err != nil {
		return out, err
	}
	moved, err := q.OutboxPortability(ctx, 100000)
	if err != nil {
		return out, err
	}
	out.Unsequenced, out.ForeignTxids, out.SequencesBehind = moved.Unsequenced, moved.ForeignTxids, int64(moved.SequencesBehind)
	return out, nil
}
