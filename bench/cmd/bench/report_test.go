package main

import (
	"strings"
	"testing"
	"time"
)

// The note under a missed one-event latency row says what missed: the
// producers' rate (the step was not reached) or the latency itself. The
// 13:42 UTC run of 2026-12-02 said "not reached, by the producers" at 999
// msg/s, where the p50 (7.54 ms) was what missed.
func TestGoalNotes_OneEventLatencySaysWhatMissed(t *testing.T) {
	for _, tc := range []struct {
		name     string
		achieved float64
		want     string
		notWant  string
	}{
		{name: "rate reached, p50 missed", achieved: 999, want: "the producers committed 999 msg/s; p50 7.54 ms", notWant: "not reached"},
		{name: "rate not reached", achieved: 800, want: "was not reached, by the producers", notWant: "End-to-end latency at"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &results{LatencyAt1000: &sustainedStep{
				Offered: 1000, Achieved: tc.achieved, PerTx: 1,
				P50: 7540 * time.Microsecond, P90: 20 * time.Millisecond, P99: 42090 * time.Microsecond, Max: 60 * time.Millisecond,
			}}
			notes := strings.Join(r.goalNotes(), "\n")
			if !strings.Contains(notes, tc.want) {
				t.Errorf("notes = %q, want it to contain %q", notes, tc.want)
			}
			if strings.Contains(notes, tc.notWant) {
				t.Errorf("notes = %q, want no %q", notes, tc.notWant)
			}
		})
	}
}
