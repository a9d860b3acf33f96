package dispatcher

import (
	"sync/atomic"
	"testing"
	"time"
)

// The controller alone, on a synthetic clock: each step is one claim
// (asked, got) at a time, with a count of completions since the last step.
func TestAdaptiveBatch_Rule(t *testing.T) {
	t.Parallel()
	type step struct {
		asked, got int
		after      time.Duration // since the previous step
		completed  int64         // messages that left flight meanwhile
		want       int           // size after the step
	}
	fast := 100000 // completions per step of 100 ms: rate 1e6/s, never the cap
	cases := []struct {
		name     string
		min, max int
		work     time.Duration
		steps    []step
	}{
		{"a full claim makes the next one Batch", 50, 1000, time.Second, []step{
			{50, 50, 100 * time.Millisecond, int64(fast), 1000},
			{1000, 1000, 100 * time.Millisecond, int64(fast), 1000},
		}},
		{"short claims halve down to BatchMin", 50, 1000, time.Second, []step{
			{50, 50, 100 * time.Millisecond, int64(fast), 1000},
			{1000, 499, 100 * time.Millisecond, int64(fast), 500},
			{500, 200, 100 * time.Millisecond, int64(fast), 250},
			{250, 0, 100 * time.Millisecond, 0, 125},
			{125, 0, 100 * time.Millisecond, 0, 62},
			{62, 0, 100 * time.Millisecond, 0, 50},
			{50, 0, 100 * time.Millisecond, 0, 50},
		}},
		{"half full keeps the size", 50, 1000, time.Second, []step{
			{50, 50, 100 * time.Millisecond, int64(fast), 1000},
			{1000, 500, 100 * time.Millisecond, int64(fast), 1000},
			{1000, 999, 100 * time.Millisecond, int64(fast), 1000},
		}},
		{"a claim cut short by room in flight counts against what was asked", 50, 1000, time.Second, []step{
			{30, 30, 100 * time.Millisecond, int64(fast), 1000},
			{300, 200, 100 * time.Millisecond, int64(fast), 1000},
			{300, 100, 100 * time.Millisecond, int64(fast), 500},
		}},
		{"the rate caps the size at BatchWork of work", 50, 1000, 100 * time.Millisecond, []step{
			// 400 completions in 100 ms = 4,000/s; × 100 ms = 400.
			{50, 50, 100 * time.Millisecond, 400, 400},
			{400, 400, 100 * time.Millisecond, 400, 400},
			// The publisher slows to 1,000/s: the cap follows (averaged).
			{400, 400, 100 * time.Millisecond, 100, 250},
			{250, 250, 100 * time.Millisecond, 100, 175},
		}},
		{"before the first 50 ms window, the rate so far lets a backlog grow", 50, 2000, time.Second, []step{
			// Nothing finished yet: no rate, the size stays.
			{50, 50, 10 * time.Millisecond, 0, 50},
			// 50 in 20 ms since the start = 2,500/s, × 1 s = 2,500: Batch.
			{50, 50, 10 * time.Millisecond, 50, 2000},
		}},
		{"before the first window, the rate so far caps the jump", 50, 2000, 200 * time.Millisecond, []step{
			// 50 in 10 ms = 5,000/s, × 200 ms = 1,000.
			{50, 50, 10 * time.Millisecond, 50, 1000},
		}},
		{"before the first window, a slow publisher is slow from its first completions", 50, 2000, 50 * time.Millisecond, []step{
			// 4 done in 2 ms = 2,000/s, × 50 ms = 100.
			{50, 50, 2 * time.Millisecond, 4, 100},
			// 20 done in 10 ms: still 2,000/s; the claim stays at 100.
			{100, 100, 8 * time.Millisecond, 16, 100},
		}},
		{"the cap never goes below BatchMin", 50, 1000, 10 * time.Millisecond, []step{
			{50, 50, 100 * time.Millisecond, 10, 50},
			{50, 50, 100 * time.Millisecond, 10, 50},
		}},
		{"BatchMin equal to Batch is fixed", 100, 100, time.Second, []step{
			{100, 100, 100 * time.Millisecond, int64(fast), 100},
			{100, 0, 100 * time.Millisecond, 0, 100},
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			var completions, pub atomic.Int64
			now := time.Unix(0, 0)
			a := newAdaptiveBatch(Config{BatchMin: c.min, Batch: c.max, BatchWork: c.work, Concurrency: 16}, &completions, &pub, now)
			if a.size() != c.min || pub.Load() != int64(c.min) {
				t.Fatalf("initial size %d (published %d), want BatchMin %d", a.size(), pub.Load(), c.min)
			}
			for i, s := range c.steps {
				now = now.Add(s.after)
				completions.Add(s.completed)
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
		var x, y atomic.Int64
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
