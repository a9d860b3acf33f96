package main

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"
)

// The checker of a data-moves run (-datamove): a pure function from what
// the producers committed and what the receiver got to the figures and the
// violations. datamove_check_test.go feeds it histories that break each
// invariant.

// dmEvent is one committed event, as its producer recorded it.
type dmEvent struct {
	ID        int64
	Aggregate string // ordered events: the aggregate; "" for unordered ones
	Version   int64  // ordered events: the aggregate's version its transaction wrote (commit order)
	Part      int    // ordered events: the event's place in its transaction
	Server    int    // where it was committed: 0 the source, 1 the restored copy, 2 the logical replica
}

// dmArrival is one HTTP arrival at the receiver.
type dmArrival struct {
	ID int64
	At time.Time
}

// dmResult holds the figures and the violations of a data-moves run.
type dmResult struct {
	Events, Ordered, Aggregates int
	ByServer                    [3]int
	Arrivals                    int
	Duplicates                  int
	Lost                        int
	OrderViolations             int
	Violations                  []string // examples, at most 10
}

func (r *dmResult) OK() bool { return r.Lost == 0 && r.OrderViolations == 0 && len(r.Violations) == 0 }

func (r *dmResult) fail(format string, args ...any) {
	if len(r.Violations) < 10 {
		r.Violations = append(r.Violations, fmt.Sprintf(format, args...))
	}
}

func (r *dmResult) Summary() string {
	return "  " + strings.Join(r.Violations, "\n  ") + "\n"
}

// checkDataMove checks that every committed event arrived, and that every
// ordered event first arrived after the first arrival of every event its
// aggregate committed before it (version, then part: the order the
// producers' transactions committed in, across the three servers).
func checkDataMove(events []dmEvent, arrivals []dmArrival) *dmResult {
	r := &dmResult{}
	first := map[int64]time.Time{}
	count := map[int64]int{}
	for _, a := range arrivals {
		r.Arrivals++
		count[a.ID]++
		if t, ok := first[a.ID]; !ok || a.At.Before(t) {
			first[a.ID] = a.At
		}
	}
	aggs := map[string][]dmEvent{}
	for _, e := range events {
		r.Events++
		r.ByServer[e.Server]++
		switch n := count[e.ID]; {
		case n == 0:
			r.Lost++
			r.fail("lost: event %d (committed on server %d) never arrived", e.ID, e.Server)
		case n > 1:
			r.Duplicates += n - 1
		}
		if e.Aggregate != "" {
			r.Ordered++
			aggs[e.Aggregate] = append(aggs[e.Aggregate], e)
		}
	}
	r.Aggregates = len(aggs)
	for agg, evs := range aggs {
		slices.SortFunc(evs, func(a, b dmEvent) int { return cmp.Or(cmp.Compare(a.Version, b.Version), cmp.Compare(a.Part, b.Part)) })
		var prev *dmEvent
		for i := range evs {
			e := &evs[i]
			t, ok := first[e.ID]
			if !ok {
				continue // lost, reported above
			}
			if prev != nil && t.Before(first[prev.ID]) {
				r.OrderViolations++
				r.fail("order: aggregate %s: event %d (version %d) arrived before event %d (version %d)", agg, e.ID, e.Version, prev.ID, prev.Version)
			}
			prev = e
		}
	}
	return r
}
