package main

import (
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
