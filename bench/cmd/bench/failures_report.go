package main

import (
	"fmt"
	"time"
)

// failuresAfter is the run of the binary under test (not the before
// binary, not the breaker-off run), or nil.
func (r *results) failuresAfter() (after, off *failuresRun) {
	f := r.Failures
	if f == nil {
		return nil, nil
	}
	for i := range f.Runs {
		switch f.Runs[i].Label {
		case "after":
			after = &f.Runs[i]
		case "after, breaker off":
			off = &f.Runs[i]
		}
	}
	return after, off
}

// failuresGoals are the item's goals, on the binary under test.
func (r *results) failuresGoals() []goal {
	after, off := r.failuresAfter()
	if after == nil {
		return nil
	}
	var g []goal
	n := r.Failures.N
	if off != nil {
		g = append(g, goal{name: "Receiver down (503), breaker off: events tried once within 2× the success drain", target: "100%",
			measured: fmt.Sprintf("%.1f%% (%s of %s within %.1f s)", 100*float64(off.Covered)/float64(n), kfmt(float64(off.Covered)), kfmt(float64(n)), (2 * off.Success).Seconds()),
			met:      off.Covered == n})
	}
	g = append(g, goal{name: fmt.Sprintf("Receiver down (503) for %s: attempts spent, dead", r.Failures.Outage), target: "0, 0",
		measured: fmt.Sprintf("%d, %d (%d after the drain)", after.AttemptsSpent, after.DeadAtEnd, after.DeadAfterOutage),
		met:      after.AttemptsSpent == 0 && after.DeadAtEnd == 0 && after.DeadAfterOutage == 0})
	if after.RecoveryDrain > 0 && after.Success > 0 {
		ratio := after.Success.Seconds() / after.RecoveryDrain.Seconds()
		g = append(g, goal{name: "Drain after the outage vs the success path", target: "≥ 0.90×",
			measured: fmt.Sprintf("%.2f× (%.2f s against %.2f s)", ratio, after.RecoveryDrain.Seconds(), after.Success.Seconds()), met: ratio >= 0.9})
	}
	if after.MessageFailures > 0 {
		ratio := after.Success.Seconds() / after.MessageFailures.Seconds()
		g = append(g, goal{name: "Every publish a message-level failure (422): cycle rate vs success rate", target: "≥ 0.50×",
			measured: fmt.Sprintf("%.2f× (%s vs %s msg/s)", ratio, kfmt(float64(n)/after.MessageFailures.Seconds()), kfmt(float64(n)/after.Success.Seconds())), met: ratio >= 0.5})
	}
	h, base := after.SubsetHealthy, after.SubsetBaseline
	if h.Offered > 0 && base.P99 > 0 {
		g = append(g, goal{name: fmt.Sprintf("20%% of %s msg/s failing: the healthy 80%% delivered", kfmt(failuresRate)), target: "≥ 95% of offered",
			measured: fmt.Sprintf("%s of %s msg/s", kfmt(h.Delivered), kfmt(h.Offered)), met: h.Delivered >= 0.95*h.Offered && h.Undelivered == 0})
		ratio := float64(h.P99) / float64(base.P99)
		g = append(g, goal{name: "20% failing: the healthy events' p99 vs every event healthy", target: "≤ 2.00×",
			measured: fmt.Sprintf("%.2f× (%s vs %s)", ratio, ms(h.P99), ms(base.P99)), met: ratio <= 2})
	}
	return g
}

// writeFailures is the item's section.
func (r *results) writeFailures(p func(string, ...any)) {
	f := r.Failures
	if f == nil {
		return
	}
	p("## 10. A failing receiver")
	p("")
	p("`pgoutbox run --publisher http` with no tuning flags (the relay as shipped: breaker after 10 unavailable publishes in a row, probes from 1 s doubling to 30 s, 12 attempts, backoff 1 s to 300 s) against a Go HTTP receiver in the benchmark's process, which answers each request by the event's number. The backlogs are %s events committed in four transactions of 5,000 onto the running relay; times are on the receiver's clock, from the first commit.", kfmt(float64(f.N)))
	if f.BeforeBin != "" {
		p("**before** is the same harness running a relay built from an earlier commit (`-failures-before`), **after** this build; **after, breaker off** adds `--breaker-threshold 0`, which shows the claim order alone (every unavailable publish then spends an attempt, as before).")
	}
	p("")
	p("- **success**: the receiver answers 204.")
	p("- **outage**: the receiver answers 503 to everything for %s, then 204. Tried within 2×: events the receiver saw at least once within twice the success run's time. Retries written: outcomes written for another try during the outage (`retried`, and `unavailable`, the refunded ones). Attempts spent: `sum(attempts)` of the pending rows when the receiver comes back. Then: from the receiver's return to its first 2xx (the breaker's next probe), and from there to the last.", f.Outage)
	p("- **message failures**: the receiver answers 422 (a failure of the message: dead at once) to everything; the time until every event was answered once, all of them dead in the table.")
	p("- **failing subset**: producers offer %s events/s for %s (%d events a transaction); the receiver answers 422 to 10%% of them and 503 to another 10%% twice before accepting them. For the healthy 80%%: the rate delivered and the latency from the producer's `COMMIT` to the receiver's 2xx, against a run in which every event is accepted. %d rounds of each, alternating; each figure is the median of the rounds (the counts: the most of any round).", kfmt(failuresRate), f.Subset, failuresPerTx, failuresSubsetRounds)
	p("")
	p("| Relay | Success | Outage: tried within 2× | all tried after | requests | retries written | attempts spent | dead | back: first 2xx after | drained in | dead after | 422s: cycled in (rate) |")
	p("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
	secs := func(d time.Duration) string {
		if d <= 0 {
			return "–"
		}
		return fmt.Sprintf("%.2f s", d.Seconds())
	}
	for _, run := range f.Runs {
		if run.OutageSkipped {
			continue
		}
		allTried := "not within the outage"
		if run.CoveredAll > 0 {
			allTried = secs(run.CoveredAll)
		}
		back, drained, deadAfter := secs(run.FirstAfter), secs(run.RecoveryDrain), fmt.Sprint(run.DeadAfterOutage)
		if run.RecoverySkipped {
			back, drained, deadAfter = "–", "–", "–"
		}
		cycled := "–"
		if !run.MessageSkipped && run.MessageFailures > 0 {
			cycled = fmt.Sprintf("%s (%s msg/s, %s dead)", secs(run.MessageFailures), kfmt(float64(f.N)/run.MessageFailures.Seconds()), kfmt(float64(run.MessageFailDead)))
		}
		p("| %s | %s (%s msg/s) | %s | %s | %s | %s | %s | %d | %s | %s | %s | %s |", run.Label, secs(run.Success), kfmt(float64(f.N)/run.Success.Seconds()),
			kfmt(float64(run.Covered)), allTried, kfmt(float64(run.Requests)), kfmt(float64(run.RetriesWritten)), kfmt(float64(run.AttemptsSpent)),
			run.DeadAtEnd, back, drained, deadAfter, cycled)
	}
	p("")
	p("| Relay | Failing subset | healthy offered | delivered | undelivered 10 s later | p50 | p99 | max | failing: dead / delivered | breaker openings |")
	p("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
	for _, run := range f.Runs {
		if run.SubsetSkipped {
			continue
		}
		for _, row := range []struct {
			name string
			s    subsetFigures
		}{{"none (all 204)", run.SubsetBaseline}, {"10% 422, 10% 503 ×2", run.SubsetHealthy}} {
			s := row.s
			p("| %s | %s | %s msg/s | %s msg/s | %d | %s | %s | %s | %d / %d | %d |", run.Label, row.name, kfmt(s.Offered), kfmt(s.Delivered), s.Undelivered,
				ms(s.P50), ms(s.P99), ms(s.Max), s.Failed, s.Passed, s.BreakerOpens)
		}
	}
	p("")
	p("What an outage longer than this one costs follows from the table without waiting for it: with the breaker, attempts stay where they were at any length (a probe's attempt is refunded by the same fenced write that hands it back), so a 24-hour outage ends with 0 dead; without it (before), every claim of a message spends an attempt, and with 12 attempts and full-jitter backoff from 1 s capped at 300 s a message reaches dead about 12 minutes after its first failure.")
	p("")
}
