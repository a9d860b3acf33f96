package main

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// The fleet variant's checker (-fleet N): a pure function from what the
// producers committed and rolled back in each database, and what arrived at
// the receiver, to the figures and the violations. A database dropped while
// the relays run takes its undelivered events with it: those of an
// incarnation that was dropped are counted apart ("gone with the
// database"), never as lost; every event of a database's last incarnation
// must arrive.

// fleetEvent is one event a producer committed (or rolled back).
type fleetEvent struct {
	Key       string // db/incarnation/producer-tx/i: unique, carried in the payload
	DB        string
	Inc       int
	Aggregate string // ordered events: their aggregate within (DB, Inc)
	K         int    // ordered events: position within the aggregate, in commit order
	Ordered   bool
}

// fleetArrival is one HTTP arrival at the receiver.
type fleetArrival struct {
	Key      string
	Source   string // ce-source header
	At       time.Time
	Accepted bool
}

// fleetHistory is what fleetCheck reads.
type fleetHistory struct {
	Committed  []fleetEvent
	RolledBack []string       // keys of events whose transaction rolled back
	Uncertain  []fleetEvent   // COMMIT returned an error: may or may not exist
	Dropped    map[string]int // database -> incarnations dropped (1..n)
	Arrivals   []fleetArrival
	End        time.Time // when the producers stopped
}

// fleetDBFigures are one database's figures.
type fleetDBFigures struct {
	Events, Delivered, Duplicates, Gone int
	Drain                               time.Duration // from End to its last first delivery
	Sources                             []string
}

// fleetResult holds the figures and the violations.
type fleetResult struct {
	PerDB                                    map[string]*fleetDBFigures
	Events, Delivered, Duplicates, Gone      int
	Lost, OrderViolations, RolledBackArrived int
	SourceViolations, UncertainDelivered     int
	Violations                               []string
}

func (r *fleetResult) OK() bool { return len(r.Violations) == 0 }

func (r *fleetResult) fail(format string, args ...any) {
	if len(r.Violations) < 50 {
		r.Violations = append(r.Violations, fmt.Sprintf(format, args...))
	}
}

// fleetCheck checks a fleet run's history.
func fleetCheck(h fleetHistory) *fleetResult {
	r := &fleetResult{PerDB: map[string]*fleetDBFigures{}}
	db := func(name string) *fleetDBFigures {
		if r.PerDB[name] == nil {
			r.PerDB[name] = &fleetDBFigures{}
		}
		return r.PerDB[name]
	}
	first := map[string]fleetArrival{} // key -> first accepted arrival
	accepted := map[string]int{}
	sources := map[string]map[string]bool{}
	for _, a := range h.Arrivals {
		if !a.Accepted {
			continue
		}
		accepted[a.Key]++
		if f, ok := first[a.Key]; !ok || a.At.Before(f.At) {
			first[a.Key] = a
		}
	}
	rolledBack := map[string]bool{}
	for _, k := range h.RolledBack {
		rolledBack[k] = true
		if accepted[k] > 0 {
			r.RolledBackArrived++
			r.fail("rolled-back event %s arrived", k)
		}
	}
	for _, e := range h.Uncertain {
		if accepted[e.Key] > 0 {
			r.UncertainDelivered++
		}
	}
	type aggKey struct {
		db  string
		inc int
		agg string
	}
	ordered := map[aggKey][]fleetEvent{}
	for _, e := range h.Committed {
		d := db(e.DB)
		d.Events++
		r.Events++
		a, ok := first[e.Key]
		switch {
		case ok:
			d.Delivered++
			r.Delivered++
			d.Duplicates += accepted[e.Key] - 1
			r.Duplicates += accepted[e.Key] - 1
			if t := a.At.Sub(h.End); t > d.Drain {
				d.Drain = t
			}
			if sources[e.DB] == nil {
				sources[e.DB] = map[string]bool{}
			}
			sources[e.DB][a.Source] = true
		case e.Inc <= h.Dropped[e.DB]:
			d.Gone++
			r.Gone++
		default:
			r.Lost++
			r.fail("lost: %s never arrived", e.Key)
		}
		if e.Ordered && ok {
			k := aggKey{e.DB, e.Inc, e.Aggregate}
			ordered[k] = append(ordered[k], e)
		}
	}
	for k, evs := range ordered {
		slices.SortFunc(evs, func(a, b fleetEvent) int { return first[a.Key].At.Compare(first[b.Key].At) })
		for i := 1; i < len(evs); i++ {
			if evs[i].K < evs[i-1].K {
				r.OrderViolations++
				r.fail("order: %s/%d/%s: event %d delivered before %d", k.db, k.inc, k.agg, evs[i-1].K, evs[i].K)
			}
		}
	}
	// Each database under a source of its own, and no source shared.
	owner := map[string]string{}
	for name, s := range sources {
		for src := range s {
			db(name).Sources = append(db(name).Sources, src)
			if other, ok := owner[src]; ok && other != name {
				r.SourceViolations++
				r.fail("source %s carried events of %s and %s", src, other, name)
			}
			owner[src] = name
			if !strings.Contains(src, name) {
				r.SourceViolations++
				r.fail("source %s of %s does not name its database", src, name)
			}
		}
	}
	return r
}
