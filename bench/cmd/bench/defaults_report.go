package main

import (
	"fmt"
	"time"
)

// The defaults rows, the idle item and the crash item in BENCHMARKS.md.

func (r *results) defaultsGoals() []goal {
	var g []goal
	river := median(r.DrainRiver)
	if len(r.DrainRelay) > 0 && river > 0 {
		ratio := median(r.DrainRelay) / river
		g = append(g, goal{"Defaults: `pgoutbox run` (no tuning flags) vs River (same run)", "≥ 2.00×",
			fmt.Sprintf("%.2f× (%s vs %s msg/s)", ratio, kfmt(median(r.DrainRelay)), kfmt(river)), ratio >= 2, ""})
	}
	if len(r.DrainZero) > 0 && river > 0 {
		ratio := median(r.DrainZero) / river
		g = append(g, goal{"Defaults: `dispatcher.Config{}` in process vs River (same run)", "≥ 2.00×",
			fmt.Sprintf("%.2f× (%s vs %s msg/s)", ratio, kfmt(median(r.DrainZero)), kfmt(river)), ratio >= 2, ""})
	}
	if len(r.DrainRelay4) > 0 && len(r.DrainRelay) > 0 {
		ratio := median(r.DrainRelay4) / median(r.DrainRelay)
		g = append(g, goal{"Defaults: four `pgoutbox run` sharing the backlog vs one", "≥ 1.00×",
			fmt.Sprintf("%.2f× (%s vs %s msg/s)", ratio, kfmt(median(r.DrainRelay4)), kfmt(median(r.DrainRelay))), ratio >= 1, ""})
	}
	if len(r.FleetFour) > 0 && len(r.FleetOne) > 0 {
		ratio := median(r.FleetFour) / median(r.FleetOne)
		g = append(g, goal{"Defaults: a burst onto four running `pgoutbox run` vs onto one (item 1d)", "≥ 1.00×",
			fmt.Sprintf("%.2f× (%s vs %s msg/s)", ratio, kfmt(median(r.FleetFour)), kfmt(median(r.FleetOne))), ratio >= 1, ""})
	}
	if i := r.Idle; i != nil {
		g = append(g, goal{"Idle `pgoutbox run`: one event every 50 ms into an empty table, p50", "≤ 5 ms", ms(i.P50), i.P50 <= 5*time.Millisecond, ""})
		g = append(g, goal{"Idle `pgoutbox run`: one event every 50 ms into an empty table, p99", "≤ 20 ms", ms(i.P99), i.P99 <= 20*time.Millisecond, ""})
	}
	return g
}

func (r *results) writeDefaultsSetup(p func(string, ...any)) {
	if len(r.DrainZero) == 0 && len(r.DrainRelay) == 0 {
		return
	}
	p("- **Defaults** (the same backlog, rounds and rotation, nothing tuned):")
	p("  - *Config{}*: %s; timed like the pgoutbox column.", r.ZeroConfig)
	p("  - *pgoutbox run*: one relay process, %s. Built from `cmd/pgoutbox` before the first round; timed on the database clock from `clock_timestamp()` right before starting the process to `max(done_at)`, the transaction time of the finalize that made the last message done (up to one flush earlier than the in-process rows' end); its `/metrics` is read every 200 ms only to know when it is done (one scrape costs the relay about 1.2 ms of CPU: the former poll every 2 ms took a third to a half of its CPU), so process start, connecting and the schema check count too.", r.RelayConfig)
	p("  - *4 × pgoutbox run*: four such processes started together on the backlog, timed until their published counters add up to it.")
	p("")
}

func (r *results) defaultsHeader() string {
	if len(r.DrainZero) == 0 {
		return ""
	}
	return " Config{} msg/s | pgoutbox run msg/s | 4 × pgoutbox run msg/s |"
}

func (r *results) defaultsRule() string {
	if len(r.DrainZero) == 0 {
		return ""
	}
	return " --- | --- | --- |"
}

func (r *results) defaultsCells(i int) string {
	if len(r.DrainZero) == 0 {
		return ""
	}
	at := func(xs []float64) string {
		if i < len(xs) {
			return kfmt(xs[i])
		}
		return ""
	}
	return fmt.Sprintf(" %s | %s | %s |", at(r.DrainZero), at(r.DrainRelay), at(r.DrainRelay4))
}

func (r *results) defaultsMedians() string {
	if len(r.DrainZero) == 0 {
		return ""
	}
	return fmt.Sprintf(" **%s** | **%s** | **%s** |", kfmt(median(r.DrainZero)), kfmt(median(r.DrainRelay)), kfmt(median(r.DrainRelay4)))
}

func (r *results) writeDefaultsRatios(p func(string, ...any)) {
	if len(r.DrainZero) == 0 {
		return
	}
	river := median(r.DrainRiver)
	p("Defaults / River: `Config{}` **%.2f×**, `pgoutbox run` **%.2f×**; four relays / one: **%.2f×**. `Config{}` / SQL ceiling: %.0f%%.",
		median(r.DrainZero)/river, median(r.DrainRelay)/river, median(r.DrainRelay4)/median(r.DrainRelay), 100*median(r.DrainZero)/r.CeilingRate)
	p("")
	if len(r.DrainZeroCPU) > 0 {
		p("CPU time per message (median of the rounds; user + system, less sensitive to the machine's load than the rates): `Config{}` %s (the benchmark process during the drain: the dispatcher and its `Stats()` poll), `pgoutbox run` %s (the relay process, startup included), four relays %s (all four processes).",
			medianCPU(r.DrainZeroCPU), medianCPU(r.DrainRelayCPU), medianCPU(r.DrainRelay4CPU))
		p("")
	}
}

func (r *results) writeIdleAndCrash(p func(string, ...any)) {
	if i := r.Idle; i != nil {
		p("### 1b. An idle relay: one event at a time")
		p("")
		p("`%s` (every dispatcher setting at its default) waits on an empty table; one producer commits a one-event transaction (`dispatcher.Enqueue`) every %s for %s, after one warm-up event. Latency: from the producer's `COMMIT` returning to the relay's stdout line for that message being read by the benchmark (one monotonic clock; the pipe adds microseconds).", i.Command, i.Interval, i.Duration)
		p("")
		p("| Events | Delivered | p50 | p90 | p99 | max | Relay CPU per event | Load average |")
		p("| --- | --- | --- | --- | --- | --- | --- | --- |")
		p("| %d | %d | %s | %s | %s | %s | %s | %s |", i.Sent, i.Delivered, ms(i.P50), ms(i.P90), ms(i.P99), ms(i.Max), perMessage(i.CPU, 1), i.Load)
		p("")
	}
	if c := r.Crash; c != nil {
		p("### 1c. What a crash costs (defaults)")
		p("")
		p("`pgoutbox run --publisher discard` (defaults) drains %s messages; once it has published 20,000 it gets SIGKILL, and a second relay with every default starts at once.", kfmt(float64(c.N)))
		p("")
		p("| Published before the kill | Stranded (processing at the kill) | Lease | Last stranded message done after the kill | Recovery rate after the lease | Everything done after the kill |")
		p("| --- | --- | --- | --- | --- | --- |")
		p("| %s | %s | %s | %.1f s | %s msg/s | %.1f s |", kfmt(float64(c.KilledAfter)), kfmt(float64(c.Stranded)), c.Lease, c.Recovered.Seconds(), kfmt(c.RecoveryRate), c.Drained.Seconds())
		p("")
	}
	if len(r.FleetOne) > 0 {
		p("### 1d. A burst onto running relays")
		p("")
		p("The defaults rows start the relay processes on a standing backlog, so the start-up of four processes (their connections, the schema check, the first claims on cold backends) is part of what four relays are timed on. A fleet in production is already running when a backlog lands. Here %d producer transactions of 5,000 events (`dispatcher.EnqueueMany`, %s in all) are open while one or four `pgoutbox run --publisher discard` processes (no tuning flags) start, serve `/metrics` and run %s on the empty queue; then the transactions commit one after the other. Timed on the database clock from `clock_timestamp()` right before the first `COMMIT` to `max(done_at)`; one and four relays alternate round by round, after one warm-up round each.", fleetTxs, kfmt(float64(r.FleetN)), fleetSettle)
		p("")
		p("| Round | one relay msg/s | four relays msg/s |")
		p("| --- | --- | --- |")
		for i := range max(len(r.FleetOne), len(r.FleetFour)) {
			at := func(xs []float64) string {
				if i < len(xs) {
					return kfmt(xs[i])
				}
				return ""
			}
			p("| %d | %s | %s |", i+1, at(r.FleetOne), at(r.FleetFour))
		}
		p("| median | **%s** | **%s** |", kfmt(median(r.FleetOne)), kfmt(median(r.FleetFour)))
		p("")
		p("Four relays / one: **%.2f×**. Relay CPU per message (all processes, start-up and the settle included): one %s, four %s.", median(r.FleetFour)/median(r.FleetOne), medianCPU(r.FleetOneCPU), medianCPU(r.FleetFourCPU))
		p("")
	}
}
