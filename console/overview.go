package console

import (
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/pgoutbox/pgoutbox/db"
	"github.com/pgoutbox/pgoutbox/db/consoledb"
	"github.com/pgoutbox/pgoutbox/dispatcher"
)

// overview is the overview page.
type overview struct {
	Now              time.Time
	Pending          count
	Processing       count
	Dead             count
	Done             count // exact below the cap
	Skipped          count // resolved without delivery: never counted as done
	DoneEstimate     int64 // when Done is capped: the planner's estimate (-1: unknown, never analyzed)
	OldestAgeSeconds float64
	ExpiredLeases    int64
	Relays           []dispatcher.Relay // as they record themselves (outbox_relays)
	Blocked          count
	StalledAfter     time.Duration
	Throughput       chart
	Latency          chart
	Delivered        int64     // exactly, the charted minutes' deliveries: since DeliveredSince
	DeliveredSince   time.Time // the first charted minute, database clock
	Sampled          bool      // some minute's latency comes from a sample (its first LatencySample deliveries)
	LatencySample    int       // Config.PerMinuteCap
	CountCap         int       // Config.CountCap
	DoneCountCap     int       // where the done count stops: min(CountCap, doneCountCap)
	Horizon          dispatcher.Horizon
	Moved            *db.OutboxPortabilityRow // rows from another server a relay (or pgoutbox repair) has yet to repair
}

// NeedsRepair reports rows from another server that nothing delivers until
// they are repaired (a running relay repairs them by itself).
func (o overview) NeedsRepair() bool {
	return o.Moved != nil && (o.Moved.Unsequenced > 0 || o.Moved.ForeignTxids > 0 || o.Moved.SequencesBehind > 0)
}

// doneCountCap is where the overview's done count stops (CountCap when
// smaller): done rows are the retained history, millions in a busy outbox,
// and above the cap the page shows the planner's estimate, so counting up
// to CountCap (100,000 index entries, about 10 ms) bought no figure.
const doneCountCap = 10_000

// count is a bounded count: N, and whether it reached the cap ("N+").
type count struct {
	N      int64
	Capped bool
}

func capped(n int64, cap int) count { return count{N: n, Capped: n >= int64(cap)} }

func (c *Console) overview(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	ctx := r.Context()
	var (
		o                                  = overview{StalledAfter: c.cfg.StalledAfter, LatencySample: c.cfg.PerMinuteCap, CountCap: c.cfg.CountCap, DoneCountCap: min(c.cfg.CountCap, doneCountCap)}
		counts                             *consoledb.OutboxConsoleStatusCountsRow
		minutes                            []*consoledb.OutboxConsoleDeliveredPerMinuteRow
		blocked                            int64
		errNow, errCounts, errExp, errLeas error
		errMin, errBlk, errHor, errMoved   error
		wg                                 sync.WaitGroup
	)
	// Independent reads, run side by side on the pool.
	run := func(f func(context.Context)) {
		wg.Add(1)
		go func() { defer wg.Done(); f(ctx) }()
	}
	run(func(ctx context.Context) { o.Now, errNow = c.cq.OutboxConsoleNow(ctx) })
	run(func(ctx context.Context) {
		counts, errCounts = c.cq.OutboxConsoleStatusCounts(ctx, consoledb.OutboxConsoleStatusCountsParams{
			Cap: int32(c.cfg.CountCap), DoneCap: int32(o.DoneCountCap), LowestIds: 1000})
	})
	run(func(ctx context.Context) { o.ExpiredLeases, errExp = c.q.OutboxExpiredLeases(ctx) })
	run(func(ctx context.Context) { o.Relays, errLeas = dispatcher.ReadRelays(ctx, c.q, 20) })
	run(func(ctx context.Context) {
		minutes, errMin = c.deliveredPerMinute(ctx, consoledb.OutboxConsoleDeliveredPerMinuteParams{
			Minutes: 60, LatencySample: int32(c.cfg.PerMinuteCap)})
	})

	run(func(ctx context.Context) {
		blocked, errBlk = c.cq.OutboxConsoleBlockedCount(ctx, consoledb.OutboxConsoleBlockedCountParams{
			StalledAfter: c.cfg.StalledAfter, Cap: int32(c.cfg.CountCap)})
	})
	run(func(ctx context.Context) { o.Horizon, errHor = dispatcher.ReadHorizon(ctx, c.q, 3) })
	run(func(ctx context.Context) {
		o.Moved, errMoved = c.q.OutboxPortability(ctx, int32(c.cfg.CountCap))
	})
	wg.Wait()
	for _, err := range []error{errNow, errCounts, errExp, errLeas, errMin, errBlk, errHor, errMoved} {
		if err != nil {
			c.fail(w, r, start, err)
			return
		}
	}
	cp := c.cfg.CountCap
	o.Pending, o.Processing, o.Dead = capped(counts.Pending, cp), capped(counts.Processing, cp), capped(counts.Dead, cp)
	o.Blocked = capped(blocked, cp)
	o.OldestAgeSeconds = counts.OldestAgeSeconds
	o.Done, o.Skipped = capped(counts.Done, o.DoneCountCap), capped(counts.Skipped, cp)
	o.DoneEstimate = -1
	if counts.EstimatedRows >= 0 && o.Done.Capped {
		o.DoneEstimate = max(int64(counts.EstimatedRows)-counts.Pending-counts.Processing-counts.Dead-counts.Skipped, counts.Done)
	}
	if len(minutes) > 0 {
		o.DeliveredSince = minutes[0].Minute
	}
	o.Throughput, o.Latency, o.Sampled = c.charts(minutes, o.Now, &o.Delivered)
	c.render(w, r, start, http.StatusOK, "overview", "Overview", "overview", c.cfg.Refresh, o)
}

// charts turns the per-minute rows into the throughput chart (messages per
// second: each minute's exact count over its length, the current minute's
// over the part of it gone by) and the latency chart (p50 and p99,
// milliseconds, from each minute's sample).
// delivered gets the sum of the minutes' counts.
func (c *Console) charts(minutes []*consoledb.OutboxConsoleDeliveredPerMinuteRow, now time.Time, delivered *int64) (tp, lat chart, sampled bool) {
	var rate, p50, p99 []point
	for _, m := range minutes {
		*delivered += m.Delivered
		span := time.Minute
		if end := m.Minute.Add(time.Minute); end.After(now) {
			span = max(now.Sub(m.Minute), time.Second) // the current, partial minute
		}
		rate = append(rate, point{m.Minute, float64(m.Delivered) / span.Seconds()})
		if m.Delivered > m.Sampled {
			sampled = true
		}
		if m.Delivered > 0 {
			p50 = append(p50, point{m.Minute, m.P50Ms})
			p99 = append(p99, point{m.Minute, m.P99Ms})
		}
	}
	from, to := now.Add(-time.Hour).Truncate(time.Minute).Add(time.Minute), now.Truncate(time.Minute).Add(time.Minute)
	tp = newChart("Throughput (messages/s, per minute)", "msg/s", from, to, series{Name: "delivered", Class: "s1", Points: rate, Bars: true})
	lat = newChart("End-to-end latency (created → done, ms)", "ms", from, to,
		series{Name: "p50", Class: "s1", Points: p50}, series{Name: "p99", Class: "s2", Points: p99})
	return tp, lat, sampled
}
