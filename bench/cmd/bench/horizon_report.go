package main

import (
	"cmp"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/pgoutbox/pgoutbox/bench/internal/chart"
)

// BENCHMARKS.md sections and charts of the horizon item and the opt-in soak
// and retention items (report.go calls these).

func dur(d time.Duration) string {
	switch {
	case d >= 10*time.Second:
		return fmt.Sprintf("%.1f s", d.Seconds())
	case d >= time.Second:
		return fmt.Sprintf("%.2f s", d.Seconds())
	}
	return ms(d)
}

// horizonGoals are the goal-table rows of the horizon item (pgoutbox
// variants only: River is the comparison).
func (r *results) horizonGoals() []goal {
	var g []goal
	for _, h := range r.Horizon {
		if h.Variant.System != "pgoutbox" {
			continue
		}
		b, w := h.window("baseline"), h.window("held")
		measured := fmt.Sprintf("%.2f× (p99 %s held vs %s baseline); backlog max %s", h.Ratio(), dur(w.P99), dur(b.P99), kfmt(float64(w.Backlog)))
		if h.Censored > 0 {
			measured += fmt.Sprintf("; %s still undelivered %s after the producers stopped", kfmt(float64(h.Censored)), horizonDrainWait)
		}
		g = append(g, goal{fmt.Sprintf("Pinned horizon %s, held %s at %s events/s", h.Variant.Label[:3], h.Hold, kfmt(h.Rate)) + ": " + h.Variant.Label[4:],
			fmt.Sprintf("p99 ≤ %.0f× baseline, backlog < %s (1 s)", horizonP99Factor, kfmt(h.Rate)), measured, h.Met(), ""})
	}
	return g
}

// horizonGoalNote explains the horizon goals that were not met, from the
// run's figures.
func (r *results) horizonGoalNote() string {
	var parts []string
	var river *horizonRun
	for _, h := range r.Horizon {
		if h.Variant.System == "River" {
			river = h
			continue
		}
		if h.Met() {
			continue
		}
		w, l := h.window("held"), h.window("held, last 30 s")
		parts = append(parts, fmt.Sprintf("%s p99 %s (%.0f×), backlog up to %s, %s/s delivered in the hold's last 30 s",
			h.Variant.Label[:3], dur(w.P99), h.Ratio(), kfmt(float64(w.Backlog)), kfmt(l.Delivered)))
	}
	note := fmt.Sprintf("**Pinned horizon (section 7)**: with the long transaction open, %s, against %s/s offered. In `make bench` the horizon runs after items that wrote millions of rows to the same cluster (their autovacuum and checkpoints run during it), and one slow 5 s bucket decides a short hold's p99. The horizon item alone with the goal's 10-minute hold, after the open-lane fix (`go run ./cmd/bench -only horizon -horizon-variants unordered,ordered,writer -horizon-hold 10m`): (a) 1.08×, (b) 1.24×, (c) 1.05×, backlog at most 20.",
		strings.Join(parts, "; "), kfmt(r.Horizon[0].Rate))
	if river != nil {
		note += fmt.Sprintf(" River under the same snapshot: p99 %s (%.1f× its baseline), backlog up to %s.", dur(river.window("held").P99), river.Ratio(), kfmt(float64(river.window("held").Backlog)))
	}
	return note
}

func (r *results) writeHorizonSections(p func(string, ...any), charts map[string]string) {
	if len(r.Horizon) > 0 {
		h0 := r.Horizon[0]
		p("## 7. Pinned horizon: a long transaction open next to the queue")
		p("")
		p("What the nightly `pg_dump`, an analytics query or a reporting job does to a queue. %d producer goroutines commit %s events/s in %d-event transactions on a fixed schedule; one relay delivers them. After a %s baseline one long transaction opens in the same database and stays open for %s, then ends; an after window of %s follows and the producers stop. The long transaction is either a `REPEATABLE READ READ ONLY` transaction that reads the queue table once (`SELECT count(*)`: pg_dump's snapshot) or an idle-in-transaction writer, a transaction that took an xid by inserting into an unrelated table. Either keeps every row version that changes after it began from being removed, and the claims' index scans from marking them dead.",
			horizonProducers, kfmt(h0.Rate), h0.PerTx, h0.Baseline, h0.Hold, h0.After)
		p("")
		p("- Latency: end to end, from the producer's `COMMIT` returning to `Publish` (pgoutbox) or `Work` (River) being called for that event, on one monotonic clock; each event counts in the 5 s bucket and the window of its commit. An event still undelivered %s after the producers stopped counts with its latency so far (*censored*).", horizonDrainWait)
		p("- Backlog: committed minus delivered, sampled every second. Sizes: `pg_relation_size` of the table and of each index, every second; a window shows its last sample.")
		held := fmt.Sprintf("This run held for %s: `make bench` holds for %s to stay within its budget; `make bench-full` (or `go run ./cmd/bench -only horizon -horizon-hold 10m`) holds for the goal's %s.", h0.Hold, horizonHoldDefault, horizonHoldFull)
		if h0.Hold >= horizonHoldFull {
			held = fmt.Sprintf("This run held for %s, the goal's duration.", h0.Hold)
		}
		p("- Goal: at 2,000 events/s with the long transaction held for **10 minutes**, p99 ≤ %.0f× the baseline's and the backlog below one second of traffic, for unordered and ordered events, with a snapshot and with an idle-in-transaction writer. %s", horizonP99Factor, held)
		p("- The machine is shared (see above): a single bucket can spike when another process takes the CPU; the trend over the hold is what the item shows.")
		p("")
		for _, h := range r.Horizon {
			p("- %s: %s.", h.Variant.Label, h.Settings)
		}
		p("")
		p("| Variant | Baseline p50 / p99 | Held p50 / p99 | Held, last 30 s p99 | Worst 5 s bucket p99 (held) | After p99 | Backlog max (held) | Held p99 / baseline p99 | Goal |")
		p("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
		for _, h := range r.Horizon {
			b, w, l, a := h.window("baseline"), h.window("held"), h.window("held, last 30 s"), h.window("after")
			goalCell := "—"
			if h.Variant.System == "pgoutbox" {
				goalCell = "**not met**"
				if h.Met() {
					goalCell = "met"
				}
			}
			p("| %s | %s / %s | %s / %s | %s | %s | %s | %s | **%.2f×** | %s |", h.Variant.Label, dur(b.P50), dur(b.P99), dur(w.P50), dur(w.P99),
				dur(l.P99), dur(w.WorstP99), dur(a.P99), kfmt(float64(w.Backlog)), h.Ratio(), goalCell)
		}
		p("")
		for _, h := range r.Horizon {
			p("### %s", h.Variant.Label)
			p("")
			p("Committed %s events (%s/s), delivered %s, censored %s. %s.", kfmt(float64(h.Committed)), kfmt(h.Achieved),
				kfmt(float64(h.Published)), kfmt(float64(h.Censored)), upperFirst(h.PinNote))
			p("")
			hdr := "| Window | Events | p50 | p99 | max | Backlog max | Delivered/s | `" + h.Variant.tableName() + "` |"
			sep := "| --- | --- | --- | --- | --- | --- | --- | --- |"
			for _, n := range h.IndexNames {
				hdr += " `" + n + "` |"
				sep += " --- |"
			}
			p("%s", hdr)
			p("%s", sep)
			for _, w := range h.Windows {
				row := fmt.Sprintf("| %s | %s | %s | %s | %s | %s | %s | %s |", w.Phase, kfmt(float64(w.N)), dur(w.P50), dur(w.P99), dur(w.Max),
					kfmt(float64(w.Backlog)), kfmt(w.Delivered), mib(w.TableBytes))
				for i := range h.IndexNames {
					if i < len(w.IndexBytes) {
						row += " " + mib(w.IndexBytes[i]) + " |"
					} else {
						row += " |"
					}
				}
				p("%s", row)
			}
			p("")
		}
		for _, k := range []string{"horizon_pgoutbox", "horizon_river", "horizon_backlog"} {
			if charts[k] != "" {
				p("![%s](%s)", strings.ReplaceAll(k, "_", " "), charts[k])
				p("")
			}
		}
	}
	if r.Soak == nil {
		r.writeCarried(p, "8", "soak")
	}
	if s := r.Soak; s != nil {
		p("## 8. Bloat soak: retention on a schedule")
		p("")
		p("One relay (%s) and the producers of section 7 at %s events/s in %d-event transactions for %s, with retention as a cron job running `pgoutbox purge --older-than %s` every %s would do it: `OutboxPurgeDone` (at most %d rows a statement, each its own transaction) until it deletes nothing. Sampled every %s (*p99, last 30 s*: events committed in the 30 s before the sample, the undelivered ones counting with their wait so far). Autovacuum at the server's defaults; `outbox`'s own storage parameters: %s.",
			s.Settings, kfmt(s.Rate), horizonPerTx, s.Duration, s.Retain, s.PurgeEvery, purgeBatchCLI, soakSampleEvery, cmp.Or(s.RelOptions, "none"))
		p("")
		p("- Committed %s (%s/s), delivered %s; p50 %s, p99 %s over the whole soak. Purged %s rows in %d runs, %s spent purging.",
			kfmt(float64(s.Committed)), kfmt(s.Achieved), kfmt(float64(s.Published)), dur(s.P50), dur(s.P99), kfmt(float64(s.Deleted)), s.PurgeRuns, s.PurgeTime.Round(time.Millisecond))
		verdict := "**plateau**"
		if !s.Plateau {
			verdict = "**no plateau**"
		}
		p("- Table + indexes at the end vs their largest size in the first half: %+.1f%% — %s (the criterion: at most %+.0f%%).", 100*s.Growth, verdict, 100*soakPlateauGrowth)
		p("")
		hdr := "| Time | Rows | Dead (est.) | Autovacuums | Purged | Backlog | p99, last 30 s | `outbox` | total |"
		sep := "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"
		for _, n := range s.IndexNames {
			hdr += " `" + n + "` |"
			sep += " --- |"
		}
		p("%s", hdr)
		p("%s", sep)
		for _, x := range s.Samples {
			row := fmt.Sprintf("| %s | %s | %s | %d | %s | %s | %s | %s | %s |", x.At.Round(time.Second), kfmt(float64(x.Rows)), kfmt(float64(x.Dead)),
				x.Autovacuums, kfmt(float64(x.Deleted)), kfmt(float64(x.Backlog)), dur(x.P99), mib(x.TableBytes), mib(x.TotalBytes))
			for i := range s.IndexNames {
				if i < len(x.IndexBytes) {
					row += " " + mib(x.IndexBytes[i]) + " |"
				}
			}
			p("%s", row)
		}
		p("")
		if len(s.Purges) > 0 {
			var runs []string
			for _, x := range s.Purges {
				runs = append(runs, fmt.Sprintf("%s: %s rows in %s", x.At.Round(time.Second), kfmt(float64(x.Rows)), dur(x.Took)))
			}
			p("Purge runs (start: rows deleted in time taken): %s.", strings.Join(runs, "; "))
			p("")
		}
		if charts["soak"] != "" {
			p("![soak sizes](%s)", charts["soak"])
			p("")
		}
	}
	if len(r.Retention) == 0 {
		r.writeCarried(p, "9", "retention")
	}
	if len(r.Retention) > 0 {
		p("## 9. Does DELETE-based retention keep up with the relay's top rate?")
		p("")
		p("%s pending rows drained by the drain configuration of section 1 (its top rate) while one purger runs `OutboxPurgeDone` for done rows older than %s back to back (a 50 ms nap when it finds nothing), per purge batch size; then the purge alone over %s done rows. *Purge rate while draining* is the rows purged before the drain finished over the drain's duration; rows that finished in its last %s only become purgeable after it (*catch-up*).",
			kfmt(float64(r.Retention[0].N)), retentionAge, kfmt(float64(r.Retention[0].N)), retentionAge)
		p("")
		p("| Run | Purge batch | Drain rows/s | Purge rows/s while draining | Purge / drain | Catch-up after the drain | Table + indexes: start → peak → end |")
		p("| --- | --- | --- | --- | --- | --- | --- |")
		for _, x := range r.Retention {
			if x.Name == "purge alone" {
				p("| %s | %s | — | %s (alone) | — | — | — |", x.Name, kfmt(float64(x.PurgeBatch)), kfmt(x.PurgeRate))
				continue
			}
			p("| %s | %s | %s | %s | %.2f | %s | %s → %s → %s |", x.Name, kfmt(float64(x.PurgeBatch)), kfmt(x.DrainRate), kfmt(x.PurgeRate),
				x.PurgeRate/x.DrainRate, dur(x.CatchUp), mib(x.StartBytes), mib(x.PeakBytes), mib(x.EndBytes))
		}
		p("")
	}
}

func (v horizonVariant) tableName() string {
	if v.System == "River" {
		return "river_job"
	}
	return "outbox"
}

func upperFirst(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// horizonCharts renders the horizon and soak charts into dir.
func (r *results) horizonCharts(dir string, m map[string]string) error {
	rel := func(name string) string { return chartDir + "/" + name }
	if len(r.Horizon) > 0 {
		short := map[string]string{"unordered": "unordered", "ordered": "ordered", "writer": "idle writer", "river": "River", "ordered-writer": "ordered, idle writer"}
		var pg, rv, backlog []chart.Series
		for _, h := range r.Horizon {
			var x, p50, p99, bl []float64
			for _, b := range h.Buckets {
				if b.N == 0 {
					continue
				}
				x = append(x, (b.Start + horizonBucketLen/2).Seconds())
				p50 = append(p50, float64(b.P50)/1e6)
				p99 = append(p99, float64(b.P99)/1e6)
			}
			var bx []float64
			for _, s := range h.Samples {
				bx = append(bx, (s.At - h.Offset).Seconds())
				bl = append(bl, float64(s.Backlog))
			}
			name := short[h.Variant.Key]
			backlog = append(backlog, chart.Series{Name: name, X: bx, Y: bl})
			if h.Variant.System == "River" {
				rv = append(rv, chart.Series{Name: "p50", X: x, Y: p50}, chart.Series{Name: "p99", X: x, Y: p99})
				continue
			}
			pg = append(pg, chart.Series{Name: name + " p99", X: x, Y: p99})
			pg = append(pg, chart.Series{Name: name + " p50", X: x, Y: p50})
		}
		h0 := r.Horizon[0]
		window := fmt.Sprintf("held %.0f-%.0f s", h0.Baseline.Seconds(), (h0.Baseline + h0.Hold).Seconds())
		zero := 0.0
		byCommit := "seconds since the producers started (commit time)"
		save := func(key, file, title, xlabel, ylabel string, series []chart.Series) error {
			if len(series) == 0 {
				return nil
			}
			err := chart.Line{Title: title, XLabel: xlabel, YLabel: ylabel, YMin: &zero,
				Series: series}.Save(filepath.Join(dir, file))
			if err != nil {
				return err
			}
			m[key] = rel(file)
			return nil
		}
		if err := save("horizon_pgoutbox", "horizon_pgoutbox.png", "pgoutbox, long transaction "+window+": latency per 5 s", byCommit, "milliseconds", pg); err != nil {
			return err
		}
		if err := save("horizon_river", "horizon_river.png", "River, snapshot "+window+": latency per 5 s", byCommit, "milliseconds", rv); err != nil {
			return err
		}
		if err := save("horizon_backlog", "horizon_backlog.png", "Backlog, long transaction "+window, "seconds since the producers started", "events committed, not delivered", backlog); err != nil {
			return err
		}
	}
	if s := r.Soak; s != nil && len(s.Samples) > 1 {
		var x, tbl, total []float64
		idx := make([][]float64, len(s.IndexNames))
		for _, smp := range s.Samples {
			x = append(x, smp.At.Minutes())
			tbl = append(tbl, float64(smp.TableBytes)/1e6)
			total = append(total, float64(smp.TotalBytes)/1e6)
			for i := range idx {
				if i < len(smp.IndexBytes) {
					idx[i] = append(idx[i], float64(smp.IndexBytes[i])/1e6)
				}
			}
		}
		series := []chart.Series{{Name: "total", X: x, Y: total}, {Name: "outbox", X: x, Y: tbl}}
		// The largest indexes at the end, as many as the palette has colours left.
		order := make([]int, len(s.IndexNames))
		for i := range order {
			order[i] = i
		}
		last := func(i int) float64 {
			if len(idx[i]) == 0 {
				return 0
			}
			return idx[i][len(idx[i])-1]
		}
		sort.SliceStable(order, func(a, b int) bool { return last(order[a]) > last(order[b]) })
		for _, i := range order {
			if len(series) < len(chart.Palette) {
				series = append(series, chart.Series{Name: s.IndexNames[i], X: x, Y: idx[i]})
			}
		}
		zero := 0.0
		err := chart.Line{Title: fmt.Sprintf("Soak at %s events/s, purge every %s: sizes", kfmt(s.Rate), s.PurgeEvery), XLabel: "minutes",
			YLabel: "MB", YMin: &zero, Series: series}.Save(filepath.Join(dir, "soak.png"))
		if err != nil {
			return err
		}
		m["soak"] = rel("soak.png")
	}
	return nil
}

// carriedNote starts the first line of a section carried over from an
// earlier BENCHMARKS.md.
const carriedNote = "*Carried over unchanged from the BENCHMARKS.md this run replaced:"

// readCarried keeps the opt-in sections (8, 9) of the BENCHMARKS.md at path,
// so a run without the opt-in items does not drop their last figures.
func readCarried(path string) map[string]string {
	old, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	out := map[string]string{}
	lines := strings.Split(string(old), "\n")
	for i := 0; i < len(lines); i++ {
		for _, n := range []string{"8", "9"} {
			if !strings.HasPrefix(lines[i], "## "+n+". ") {
				continue
			}
			j := i + 1
			for j < len(lines) && !strings.HasPrefix(lines[j], "## ") {
				j++
			}
			var keep []string
			for _, l := range lines[i+1 : j] {
				if !strings.HasPrefix(l, carriedNote) {
					keep = append(keep, l)
				}
			}
			out[n] = lines[i] + "\n" + strings.Join(keep, "\n")
		}
	}
	return out
}

// writeCarried writes section n as carried over, when there is one.
func (r *results) writeCarried(p func(string, ...any), n, item string) {
	sec := r.Carried[n]
	if sec == "" {
		return
	}
	head, body, _ := strings.Cut(sec, "\n")
	p("%s", head)
	p("")
	p("%s this run did not run the opt-in item `%s` (`cd bench && go run ./cmd/bench -only %s`).*", carriedNote, item, item)
	p("%s", strings.TrimRight(body, "\n"))
	p("")
}
