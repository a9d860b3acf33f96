package main

import (
	"testing"
	"time"
)

func TestFleetCheck(t *testing.T) {
	t0 := time.Now()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	ev := func(key, db string, inc int, agg string, k int) fleetEvent {
		return fleetEvent{Key: key, DB: db, Inc: inc, Aggregate: agg, K: k, Ordered: agg != ""}
	}
	ok := func(key, db string, ms int) fleetArrival {
		return fleetArrival{Key: key, Source: "urn:" + db, At: at(ms), Accepted: true}
	}
	base := fleetHistory{
		Committed: []fleetEvent{ev("a1", "a", 1, "x", 1), ev("a2", "a", 1, "x", 2), ev("b1", "b", 1, "", 0),
			ev("c1", "c", 1, "", 0), ev("c2", "c", 2, "", 0)},
		Dropped:  map[string]int{"c": 1},
		Arrivals: []fleetArrival{ok("a1", "a", 1), ok("a2", "a", 2), ok("b1", "b", 3), ok("b1", "b", 4), ok("c2", "c", 5)},
		End:      at(0),
	}
	r := fleetCheck(base)
	if !r.OK() || r.Gone != 1 || r.Duplicates != 1 || r.Delivered != 4 {
		t.Fatalf("a clean history: %+v", r)
	}
	if d := r.PerDB["b"].Drain; d != 3*time.Millisecond {
		t.Errorf("b's drain %s, want 3ms (its first delivery, not the duplicate)", d)
	}
	for name, tc := range map[string]struct {
		change func(h *fleetHistory)
		check  func(r *fleetResult) bool
	}{
		"lost":                         {func(h *fleetHistory) { h.Arrivals = h.Arrivals[:2] }, func(r *fleetResult) bool { return r.Lost == 2 }},
		"lost in the last incarnation": {func(h *fleetHistory) { h.Arrivals = h.Arrivals[:4] }, func(r *fleetResult) bool { return r.Lost == 1 }},
		"order": {func(h *fleetHistory) { h.Arrivals[0].At, h.Arrivals[1].At = at(2), at(1) },
			func(r *fleetResult) bool { return r.OrderViolations == 1 }},
		"rolled back":   {func(h *fleetHistory) { h.RolledBack = []string{"b1"} }, func(r *fleetResult) bool { return r.RolledBackArrived == 1 }},
		"shared source": {func(h *fleetHistory) { h.Arrivals[2].Source = "urn:a" }, func(r *fleetResult) bool { return r.SourceViolations > 0 }},
	} {
		h := base
		h.Arrivals = append([]fleetArrival(nil), base.Arrivals...)
		tc.change(&h)
		if r := fleetCheck(h); r.OK() || !tc.check(r) {
			t.Errorf("%s: not caught: %+v", name, r)
		}
	}
}
