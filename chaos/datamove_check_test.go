package main

import (
	"testing"
	"time"
)

func TestCheckDataMove(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	events := []dmEvent{
		{ID: 1, Aggregate: "a", Version: 1, Part: 1, Server: 0},
		{ID: 2, Aggregate: "a", Version: 1, Part: 2, Server: 0},
		{ID: 9, Aggregate: "a", Version: 2, Part: 1, Server: 2}, // committed later, on the logical replica
		{ID: 3, Server: 1},
	}
	for _, tc := range []struct {
		name              string
		arrivals          []dmArrival
		lost, order, dups int
		ok                bool
	}{
		{"every event, in order, one duplicate", []dmArrival{{1, at(1)}, {2, at(2)}, {9, at(3)}, {3, at(1)}, {1, at(4)}}, 0, 0, 1, true},
		{"one lost", []dmArrival{{1, at(1)}, {2, at(2)}, {9, at(3)}}, 1, 0, 0, false},
		{"a later version first", []dmArrival{{1, at(1)}, {9, at(2)}, {2, at(3)}, {3, at(1)}}, 0, 1, 0, false},
		{"parts out of order", []dmArrival{{2, at(1)}, {1, at(2)}, {9, at(3)}, {3, at(1)}}, 0, 1, 0, false},
	} {
		r := checkDataMove(events, tc.arrivals)
		if r.Lost != tc.lost || r.OrderViolations != tc.order || r.Duplicates != tc.dups || r.OK() != tc.ok {
			t.Errorf("%s: lost %d order %d duplicates %d ok %v, want %d %d %d %v\n%s", tc.name, r.Lost, r.OrderViolations, r.Duplicates, r.OK(),
				tc.lost, tc.order, tc.dups, tc.ok, r.Summary())
		}
	}
	if r := checkDataMove(events, nil); r.ByServer != [3]int{2, 1, 1} || r.Aggregates != 1 || r.Ordered != 3 {
		t.Errorf("figures: %+v", r)
	}
}
