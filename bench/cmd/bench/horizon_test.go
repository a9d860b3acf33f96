package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestPayloadSeq(t *testing.T) {
	for _, tc := range []struct {
		payload string
		want    int
		ok      bool
	}{
		{`{"seq":0}`, 0, true},
		{`{"seq":12345}`, 12345, true},
		{`{"seq": 77}`, 77, true}, // jsonb's output adds a space
		{`{"a": 1, "seq": 9}`, 9, true},
		{`{"num": 5}`, 0, false},
		{`{"seq": "x"}`, 0, false},
	} {
		got, ok := payloadSeq([]byte(tc.payload))
		if got != tc.want || ok != tc.ok {
			t.Errorf("payloadSeq(%s) = %d, %v; want %d, %v", tc.payload, got, ok, tc.want, tc.ok)
		}
	}
}

func TestSoakPlateau(t *testing.T) {
	sizes := func(xs ...int64) []soakSample {
		var ss []soakSample
		for _, x := range xs {
			ss = append(ss, soakSample{TableBytes: x, IndexBytes: []int64{x / 2}})
		}
		return ss
	}
	for _, tc := range []struct {
		name    string
		samples []soakSample
		plateau bool
	}{
		{"flat", sizes(100, 120, 120, 121, 119, 122), true},
		{"grows", sizes(100, 150, 200, 250, 300, 350), false},
		{"shrinks", sizes(100, 300, 200, 150, 140, 130), true},
		{"too few samples", sizes(100, 100), false},
	} {
		if _, got := soakPlateau(tc.samples); got != tc.plateau {
			t.Errorf("%s: plateau = %v, want %v", tc.name, got, tc.plateau)
		}
	}
}

// TestHorizonSummarize checks the windows: events count in the window of
// their commit time, undelivered events are censored with their latency up
// to the end, and the ratio is held p99 over baseline p99.
func TestHorizonSummarize(t *testing.T) {
	sec := int64(time.Second)
	rec := newHorizonRecorder(6)
	// commit second, latency ms (-1: never delivered)
	for i, ev := range []struct{ at, lat int64 }{
		{1, 10}, {2, 10}, // baseline
		{11, 50}, {12, 40}, // held
		{31, 10}, // after
		{33, -1}, // censored
	} {
		c := ev.at * sec
		rec.commitAt[i].Store(c)
		if ev.lat >= 0 {
			rec.deliverAt[i].Store(c + ev.lat*int64(time.Millisecond))
		}
	}
	h := &horizonRun{Rate: 2000, Baseline: 10 * time.Second, Hold: 20 * time.Second, After: 10 * time.Second,
		Samples: []horizonSample{{At: 15 * time.Second, Backlog: 1500, IndexBytes: []int64{1}}, {At: 35 * time.Second, Backlog: 10, IndexBytes: []int64{1}}}}
	h.summarize(rec, 0, 10*time.Second, 30*time.Second, 40*sec)
	// percentile is nearest rank rounded down: of two, p99 is the smaller.
	for _, tc := range []struct {
		phase    string
		n        int
		p99, max time.Duration
		backlog  int64
	}{
		{"baseline", 2, 10 * time.Millisecond, 10 * time.Millisecond, 0},
		{"held", 2, 40 * time.Millisecond, 50 * time.Millisecond, 1500},
		{"after", 2, 10 * time.Millisecond, 7 * time.Second, 10}, // the censored event: 40 s - 33 s
	} {
		w := h.window(tc.phase)
		if w == nil || w.N != tc.n || w.P99 != tc.p99 || w.Max != tc.max || w.Backlog != tc.backlog {
			t.Errorf("%s: %+v, want n %d p99 %s max %s backlog %d", tc.phase, w, tc.n, tc.p99, tc.max, tc.backlog)
		}
	}
	if h.Censored != 1 {
		t.Errorf("censored %d, want 1", h.Censored)
	}
	if r := h.Ratio(); r != 4 {
		t.Errorf("ratio %.2f, want 4", r)
	}
	if h.Met() {
		t.Error("Met() with a censored event and a 4x ratio")
	}
	if len(h.Buckets) != 8 || h.Buckets[2].N != 2 || h.Buckets[2].Phase != "held" {
		t.Errorf("buckets: %d, third %+v", len(h.Buckets), h.Buckets[2])
	}
}

// TestHorizonReport renders sections 7-9 and their goal rows from a
// synthetic run: every section and chart appears, the goal is judged.
func TestHorizonReport(t *testing.T) {
	sec := int64(time.Second)
	mk := func(v horizonVariant, heldLat time.Duration) *horizonRun {
		rec := newHorizonRecorder(40)
		for i := 0; i < 40; i++ {
			c := int64(i) * sec
			lat := int64(10 * time.Millisecond)
			if i >= 10 && i < 30 {
				lat = int64(heldLat)
			}
			rec.commitAt[i].Store(c + 1)
			rec.deliverAt[i].Store(c + 1 + lat)
		}
		h := &horizonRun{Variant: v, Rate: 2000, PerTx: 20, Baseline: 10 * time.Second, Hold: 20 * time.Second, After: 10 * time.Second,
			IndexNames: []string{"outbox_pending"}, Samples: []horizonSample{{At: 5 * time.Second, IndexBytes: []int64{8192}}}}
		h.summarize(rec, 0, 10*time.Second, 30*time.Second, 40*sec)
		return h
	}
	r := &results{Started: time.Now(), Horizon: []*horizonRun{
		mk(horizonVariants[0], 20*time.Millisecond), // 2x: met
		mk(horizonVariants[1], time.Second),         // 100x: not met
		mk(horizonVariants[3], 15*time.Millisecond), // River: no goal
	}}
	r.Soak = &soakResult{Duration: time.Minute, Rate: 2000, IndexNames: []string{"outbox_pending"},
		Samples: []soakSample{{At: 30 * time.Second, IndexBytes: []int64{1}}, {At: time.Minute, IndexBytes: []int64{1}}}}
	r.Retention = []retentionResult{{Name: "drain + purge", N: 10, PurgeBatch: 1000, DrainRate: 10, PurgeRate: 5}, {Name: "purge alone", N: 10, PurgeBatch: 10000, PurgeRate: 7}}
	dir := t.TempDir()
	if err := writeReport(dir, r); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "BENCHMARKS.md"))
	if err != nil {
		t.Fatal(err)
	}
	out := string(b)
	for _, want := range []string{
		"## 7. Pinned horizon", "## 8. Bloat soak", "## 9. Does DELETE-based retention keep up",
		"| Pinned horizon (a), held 20s at 2,000 events/s: pgoutbox, unordered, snapshot held | p99 ≤ 3× baseline, backlog < 2,000 (1 s) | 2.00×",
		"| met |", "**not met**", "**Pinned horizon (section 7)**: with the long transaction open, (b) p99 1.00 s (100×)",
		"River under the same snapshot", "docs/bench/horizon_pgoutbox.png", "docs/bench/horizon_river.png", "docs/bench/horizon_backlog.png",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q", want)
		}
	}
	if strings.Contains(out, "Pinned horizon (d)") {
		t.Error("River got a goal row")
	}
	for _, f := range []string{"horizon_pgoutbox.png", "horizon_river.png", "horizon_backlog.png", "soak.png"} {
		if _, err := os.Stat(filepath.Join(dir, chartDir, f)); err != nil {
			t.Error(err)
		}
	}
}

// A run without the opt-in items keeps their sections from the file it
// replaces, marked as carried over, once (not once more per run).
func TestReadCarried_KeepsOptInSections(t *testing.T) {
	path := filepath.Join(t.TempDir(), "BENCHMARKS.md")
	old := "# x\n\n## 7. Pinned horizon\n\nseven\n\n## 8. Bloat soak: retention on a schedule\n\n" + carriedNote + " earlier.*\nsoak figures\n\n## 9. Does DELETE-based retention keep up\n\nretention figures\n\n## Tuning log\n\nlog\n"
	if err := os.WriteFile(path, []byte(old), 0o644); err != nil {
		t.Fatal(err)
	}
	r := &results{Carried: readCarried(path)}
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	r.writeCarried(p, "8", "soak")
	r.writeCarried(p, "9", "retention")
	got := b.String()
	for _, want := range []string{"## 8. Bloat soak", "soak figures", "## 9. Does DELETE-based", "retention figures", "`-only soak`"} {
		if !strings.Contains(got, want) && !strings.Contains(got, strings.Trim(want, "`")) {
			t.Errorf("carried sections lack %q:\n%s", want, got)
		}
	}
	if strings.Count(got, carriedNote) != 2 || strings.Contains(got, "seven") || strings.Contains(got, "Tuning") {
		t.Errorf("carried sections wrong:\n%s", got)
	}
}
