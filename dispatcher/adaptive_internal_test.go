package dispatcher

import (
	"sync/atomic"
	"testing"
	"time"
)

// The controller alone, on a synthetic clock: each step is one claim
// (asked, got) at a time, with the messages the workers published since the
// last step and what each took a worker. With Concurrency 16 the workers
// can finish 16 / took messages a second.
func TestAdaptiveBatch_Rule(t *testing.T) {
	t.Parallel()
	type step struct {
		asked, got int
		after      time.Duration // since the previous step
		published  int64         // messages published meanwhile
		took       time.Duration // what each of them took a worker
		want       int           // size after the step
	}
	const fast = 100000            // published per step of 100 ms
	const quick = time.Microsecond // 16 million a second: never the cap
	cases := []struct {
		name     string
		min, max int
		work     time.Duration
		steps    []step
	}{
		{"a full claim makes the next one Batch", 50, 1000, time.Second, []step{
			{50, 50, 100 * time.Millisecond, fast, quick, 1000},
			{1000, 1000, 100 * time.Millisecond, fast, quick, 1000},
		}},
		{"short claims halve down to BatchMin", 50, 1000, time.Second, []step{
			{50, 50, 100 * time.Millisecond, fast, quick, 1000},
			{1000, 499, 100 * time.Millisecond, fast, quick, 500},
			{500, 200, 100 * time.Millisecond, fast, quick, 250},
			{250, 0, 100 * time.Millisecond, 0, 0, 125},
			{125, 0, 100 * time.Millisecond, 0, 0, 62},
			{62, 0, 100 * time.Millisecond, 0, 0, 50},
			{50, 0, 100 * time.Millisecond, 0, 0, 50},
		}},
		{"half full keeps the size", 50, 1000, time.Second, []step{
			{50, 50, 100 * time.Millisecond, fast, quick, 1000},
			{1000, 500, 100 * time.Millisecond, fast, quick, 1000},
			{1000, 999, 100 * time.Millisecond, fast, quick, 1000},
		}},
		{"a claim cut short by room in flight counts against what was asked", 50, 1000, time.Second, []step{
			{30, 30, 100 * time.Millisecond, fast, quick, 1000},
			{300, 200, 100 * time.Millisecond, fast, quick, 1000},
			{300, 100, 100 * time.Millisecond, fast, quick, 500},
		}},
		{"the publisher's pace caps the size at BatchWork of work", 50, 1000, 100 * time.Millisecond, []step{
			// 4 ms a message on 16 workers = 4,000/s; × 100 ms = 400.
			{50, 50, 100 * time.Millisecond, 400, 4 * time.Millisecond, 400},
			{400, 400, 100 * time.Millisecond, 400, 4 * time.Millisecond, 400},
			// The publisher slows to 1,000/s: the cap follows (averaged).
			{400, 400, 100 * time.Millisecond, 100, 16 * time.Millisecond, 250},
			{250, 250, 100 * time.Millisecond, 100, 16 * time.Millisecond, 175},
		}},
		{"claims that set the pace do not lower the estimate", 50, 2000, time.Second, []step{
			// Only 50 published in 100 ms (500/s: all the claims gave the
			// workers), each in a microsecond: the workers could do far more.
			{50, 50, 100 * time.Millisecond, 50, quick, 2000},
		}},
		{"a quiet window keeps the estimate for the next backlog", 50, 1000, 100 * time.Millisecond, []step{
			{50, 50, 100 * time.Millisecond, 400, 4 * time.Millisecond, 400},
			{400, 0, time.Second, 0, 0, 200},
			{200, 0, time.Second, 0, 0, 100},
			// The backlog is back: straight to the cap the publisher allows.
			{100, 100, 10 * time.Millisecond, 0, 0, 400},
		}},
		{"before the first 50 ms window, the rate so far lets a backlog grow", 50, 2000, time.Second, []step{
			// Nothing published yet: no estimate, the size stays.
			{50, 50, 10 * time.Millisecond, 0, 0, 50},
			// 6.4 ms a message = 2,500/s, × 1 s = 2,500: Batch.
			{50, 50, 10 * time.Millisecond, 50, 6400 * time.Microsecond, 2000},
		}},
		{"before the first window, the rate so far caps the jump", 50, 2000, 200 * time.Millisecond, []step{
			// 3.2 ms a message = 5,000/s, × 200 ms = 1,000.
			{50, 50, 10 * time.Millisecond, 50, 3200 * time.Microsecond, 1000},
		}},
		{"before the first window, a slow publisher is slow from its first publishes", 50, 2000, 50 * time.Millisecond, []step{
			// 8 ms a message = 2,000/s, × 50 ms = 100.
			{50, 50, 2 * time.Millisecond, 4, 8 * time.Millisecond, 100},
			{100, 100, 8 * time.Millisecond, 16, 8 * time.Millisecond, 100},
		}},
		{"the cap never goes below BatchMin", 50, 1000, 10 * time.Millisecond, []step{
			// 160 ms a message = 100/s, × 10 ms = 1.
			{50, 50, 100 * time.Millisecond, 10, 160 * time.Millisecond, 50},
			{50, 50, 100 * time.Millisecond, 10, 160 * time.Millisecond, 50},
		}},
		{"BatchMin equal to Batch is fixed", 100, 100, time.Second, []step{
			{100, 100, 100 * time.Millisecond, fast, quick, 100},
			{100, 0, 100 * time.Millisecond, 0, 0, 100},
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			var (
				worked workMeter
				pub    atomic.Int64
			)
			now := time.Unix(0, 0)
			a := newAdaptiveBatch(Config{BatchMin: c.min, Batch: c.max, BatchWork: c.work, Concurrency: 16}, &worked, &pub, now)
			if a.size() != c.min || pub.Load() != int64(c.min) {
				t.Fatalf("initial size %d (published %d), want BatchMin %d", a.size(), pub.Load(), c.min)
			}
			for i, s := range c.steps {
				now = now.Add(s.after)
				for range s.published {
					worked.add(s.took)
				}
				a.observe(s.asked, s.got, now)
				if a.size() != s.want || pub.Load() != int64(s.want) {
					t.Fatalf("step %d (asked %d, got %d): size %d (published %d), want %d", i, s.asked, s.got, a.size(), pub.Load(), s.want)
				}
				if a.limit() != max(2*s.want, s.want+16) {
					t.Fatalf("step %d: limit %d, want max(2 × %d, %d + Concurrency)", i, a.limit(), s.want, s.want)
				}
			}
		})
	}
}

// BatchWork is cut to half of what the lease leaves after PublishTimeout
// (HeartbeatInterval with a heartbeat), so two claims' work fits the lease.
func TestAdaptiveBatch_WorkFitsTheLease(t *testing.T) {
	t.Parallel()
	cases := []struct {
		cfg  Config
		want time.Duration
	}{
		{Config{BatchWork: time.Second, Lease: time.Minute, PublishTimeout: 10 * time.Second}, time.Second},
		{Config{BatchWork: time.Second, Lease: 2 * time.Second, PublishTimeout: time.Second}, 500 * time.Millisecond},
		{Config{BatchWork: time.Second, Lease: 2 * time.Second, PublishTimeout: 5 * time.Second, HeartbeatInterval: time.Second}, 500 * time.Millisecond},
		{Config{BatchWork: time.Minute, Lease: time.Hour, PublishTimeout: time.Minute}, time.Minute},
	}
	for _, c := range cases {
		c.cfg.BatchMin, c.cfg.Batch, c.cfg.Concurrency = 1, 10, 1
		var x workMeter
		var y atomic.Int64
		if got := newAdaptiveBatch(c.cfg, &x, &y, time.Now()).work; got != c.want {
			t.Errorf("%+v: work %s, want %s", c.cfg, got, c.want)
		}
	}
}

func TestConfig_BatchDefaults(t *testing.T) {
	t.Parallel()
	cases := []struct {
		in            Config
		batch, bmin   int
		work          time.Duration
		finalizeBatch int
	}{
		{Config{}, BatchDefault, BatchMinDefault, BatchWorkDefault, FinalizeBatchDefault},
		{Config{Batch: 20}, 20, 20, BatchWorkDefault, FinalizeBatchDefault},
		{Config{Batch: 2000}, 2000, BatchMinDefault, BatchWorkDefault, FinalizeBatchDefault},
		{Config{Batch: 500, BatchMin: 500}, 500, 500, BatchWorkDefault, FinalizeBatchDefault},
		{Config{BatchWork: time.Minute, FinalizeBatch: 10}, BatchDefault, BatchMinDefault, time.Minute, 10},
	}
	for _, c := range cases {
		got := c.in.withDefaults()
		if got.Batch != c.batch || got.BatchMin != c.bmin || got.BatchWork != c.work || got.FinalizeBatch != c.finalizeBatch {
			t.Errorf("%+v: Batch %d BatchMin %d BatchWork %s FinalizeBatch %d, want %d %d %s %d", c.in,
				got.Batch, got.BatchMin, got.BatchWork, got.FinalizeBatch, c.batch, c.bmin, c.work, c.finalizeBatch)
		}
		if err := got.validate(); err != nil {
			t.Errorf("%+v: %v", c.in, err)
		}
	}
	for _, bad := range []Config{{Batch: 10, BatchMin: 11}, {BatchMin: -1}, {BatchWork: -time.Second}} {
		if err := bad.Validate(); err == nil {
			t.Errorf("%+v: accepted", bad)
		}
	}
}
