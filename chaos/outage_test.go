package main

import (
	"testing"
	"time"
)

// The outage sits in the middle of the fault window, and every fault
// planned from its start on moves after its end.
func TestWithOutage_MovesLaterFaultsAfterIt(t *testing.T) {
	o := options{duration: 2 * time.Minute, outage: 3 * time.Minute}
	plan := []plannedFault{{At: 10 * time.Second, Kind: "kill"}, {At: time.Minute, Kind: "pause"}, {At: 90 * time.Second, Kind: "pgrestart"}}
	got := withOutage(plan, o)
	want := map[string]time.Duration{"kill": 10 * time.Second, "pause": 4 * time.Minute, "pgrestart": 4*time.Minute + 30*time.Second, "outage": time.Minute}
	if len(got) != len(want) {
		t.Fatalf("plan %+v, want %d faults", got, len(want))
	}
	for _, f := range got {
		if f.At != want[f.Kind] {
			t.Errorf("%s at %s, want %s", f.Kind, f.At, want[f.Kind])
		}
	}
	if len(withOutage([]plannedFault{{Kind: "kill"}}, options{duration: time.Minute})) != 1 {
		t.Error("no -outage: the plan changed")
	}
}

// The outage's figures come from the history: when the waiting events were
// accepted after it, the attempts spent during it, and any row buried
// because the receiver was unavailable fails the run.
func TestOutageFigures_Measure(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	f := &outageFigures{start: t0, end: t0.Add(time.Minute), waiting: []int64{1, 2}}
	h := History{
		Deliveries: []Delivery{
			{ID: 1, At: t0.Add(30 * time.Second), Status: 0},
			{ID: 1, At: t0.Add(70 * time.Second), Status: 200},
			{ID: 2, At: t0.Add(65 * time.Second), Status: 503},
			{ID: 2, At: t0.Add(75 * time.Second), Status: 200},
		},
		Audit: []Transition{
			{ID: 1, OldStatus: "pending", NewStatus: "processing", OldLV: 1, NewLV: 2, OldAttempts: 1, NewAttempts: 2, At: t0.Add(10 * time.Second)},
			{ID: 1, OldStatus: "processing", NewStatus: "pending", OldLV: 2, NewLV: 2, OldAttempts: 2, NewAttempts: 1, At: t0.Add(11 * time.Second)},
			{ID: 2, OldStatus: "pending", NewStatus: "processing", OldLV: 0, NewLV: 1, OldAttempts: 0, NewAttempts: 1, At: t0.Add(20 * time.Second)},
		},
		Rows: []Row{
			{ID: 1, Status: "done"}, {ID: 2, Status: "done"},
			{ID: 3, Status: "dead", Fate: FateOK, LastError: "retries exhausted after 6 attempts: unavailable: webhook: post to 127.0.0.1:1: dial tcp: connect: connection refused"},
			{ID: 4, Status: "dead", Fate: FateExhaust, LastError: "retries exhausted after 6 attempts: retryable: webhook: receiver answered 500 Internal Server Error"},
			{ID: 5, Status: "dead", Fate: FateExhaust, LastError: "retries exhausted after 6 attempts: publish timed out after 1s: unavailable: webhook: post to 127.0.0.1:1: context deadline exceeded"},
		},
	}
	r := &Result{}
	f.measure(h, r)
	if f.drained != 15*time.Second || f.drained99 != 15*time.Second || f.firstAccepted != 10*time.Second || f.undelivered != 0 {
		t.Errorf("drained %s (99%%: %s), first accepted %s, undelivered %d; want 15s, 15s, 10s, 0", f.drained, f.drained99, f.firstAccepted, f.undelivered)
	}
	if f.claims != 2 || f.netAttempts != 1 {
		t.Errorf("claims %d, net attempts %d; want 2 and 1", f.claims, f.netAttempts)
	}
	if f.deadByOutage != 1 || r.OK() {
		t.Errorf("dead by the outage %d, result ok %v; want 1 and a failed run", f.deadByOutage, r.OK())
	}
}
