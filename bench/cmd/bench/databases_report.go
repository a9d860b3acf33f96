package main

import (
	"fmt"
	"time"
)

// databasesGoals are the goal rows of item "databases".
func (r *results) databasesGoals() []goal {
	d := r.Databases
	if d == nil {
		return nil
	}
	s := d.Skew
	return []goal{
		{fmt.Sprintf("%d databases, one relay: quiet databases' p99 while one drains %s, vs without", d.N, kfmt(dbsBacklog)), "≤ 3×",
			fmt.Sprintf("%.2f× (p99 %s vs %s)", s.Ratio, ms(s.SkewP99), ms(s.BaseP99)), s.Ratio > 0 && s.Ratio <= 3, ""},
		{fmt.Sprintf("Console fleet overview with %d databases, server time (max of 20)", d.N), "≤ 200 ms",
			ms(d.Console.Max), d.Console.Max > 0 && d.Console.Max <= 200*time.Millisecond, ""},
	}
}

// writeDatabases writes item "databases".
func (r *results) writeDatabases(p func(string, ...any)) {
	d := r.Databases
	if d == nil {
		return
	}
	p("### 1e. Many databases: one relay over %d", d.N)
	p("")
	p("One `pgoutbox run --publisher discard --discover-databases … --discover-pattern 'bench\\_db\\_%%'` over %d migrated databases of one server, on a cluster of the item's own (%s; durability at PostgreSQL's defaults). Per wake-up (`--wake`, docs/fleet.md): the relay's CPU and resident set and the machine's busy share over %s of a quiet fleet (after 10 s of start-up), the server connections to the databases (client backends), then one event committed into each database in turn, one every %s, from sessions idle for 1.5 s: its latency from the `COMMIT` returning to its `done_at`.", d.N, d.Settings, dbsIdleWindow, dbsEventEvery)
	p("")
	p("| wake-up | relay CPU (one core) | machine busy | relay RSS | connections (most to one database) | one event p50 | p99 | max |")
	p("|---|---:|---:|---:|---:|---:|---:|---:|")
	for _, w := range d.Wakes {
		p("| `%s` | %.1f%% | %.1f%% | %.0f MiB | %d (%d) | %s | %s | %s |", w.Wake, 100*w.RelayCPU, 100*w.MachineBusy, w.RSSMiB,
			w.Conns, w.MaxConnsPerDB, ms(w.P50), ms(w.P99), ms(w.Max))
	}
	p("")
	s := d.Skew
	p("The skew case (`--wake listen`, the fleet's default limits): one event at a time into the other databases, without a backlog (%d events) and while the first database drains %s committed in one transaction (%d events; drained in %s, at most %d connections to one database meanwhile): p50 %s → %s, p99 %s → %s, **%.2f×**.",
		s.BaseN, kfmt(dbsBacklog), s.SkewN, s.Drain.Round(100*time.Millisecond), s.MaxConnsBusyDB, ms(s.BaseP50), ms(s.SkewP50), ms(s.BaseP99), ms(s.SkewP99), s.Ratio)
	p("")
	p("The console (`pgoutbox ui` with the same discovery): every database's row read %s after the first look at the overview; the overview's server time (`Server-Timing`) over 20 looks, p50 %s, max %s.",
		d.Console.FirstRead, ms(d.Console.P50), ms(d.Console.Max))
	p("")
	for _, pr := range d.Probe {
		p("- The stats wake-up's read of `pg_stat_database` (per server, every 250 ms by default) with %d databases: %s (median of 200).", pr.Databases, ms(pr.Median))
	}
	p("")
}
