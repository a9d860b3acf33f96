package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/pgoutbox/pgoutbox/bench/internal/chart"
)

const chartDir = "docs/bench"

func ms(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond)) }

func kfmt(v float64) string { return fmt.Sprintf("%s", groupThousands(int64(v+0.5))) }

func groupThousands(n int64) string {
	s := fmt.Sprint(n)
	if n < 0 {
		return "-" + groupThousands(-n)
	}
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

type goal struct {
	name, target, measured string
	met                    bool
	note                   string
}

func (r *results) goals() []goal {
	var g []goal
	if len(r.DrainOutbox) > 0 && len(r.DrainRiver) > 0 {
		ratio := median(r.DrainOutbox) / median(r.DrainRiver)
		g = append(g, goal{"Drain throughput vs River (same run)", "≥ 1.50×",
			fmt.Sprintf("%.2f× (%s vs %s msg/s)", ratio, kfmt(median(r.DrainOutbox)), kfmt(median(r.DrainRiver))), ratio >= 1.5, ""})
	}
	if r.CeilingRate > 0 && len(r.DrainOutbox) > 0 {
		pct := 100 * median(r.DrainOutbox) / r.CeilingRate
		g = append(g, goal{"Share of the SQL ceiling (drain configuration, in process)", "≥ 80%",
			fmt.Sprintf("%.0f%% (%s of %s rows/s)", pct, kfmt(median(r.DrainOutbox)), kfmt(r.CeilingRate)), pct >= 80, ""})
	}
	g = append(g, r.defaultsGoals()...)
	if len(r.ClaimCost) == 3 && r.ClaimCost[0].P50 > 0 {
		ratio := float64(r.ClaimCost[2].P50) / float64(r.ClaimCost[0].P50)
		g = append(g, goal{"Claim latency, 1,000,000 retained done rows vs none", "≤ 1.20×",
			fmt.Sprintf("%.2f× (p50 %s vs %s)", ratio, ms(r.ClaimCost[2].P50), ms(r.ClaimCost[0].P50)), ratio <= 1.2, ""})
	}
	latency := func(label string, s *sustainedStep) {
		if s == nil {
			return
		}
		reached := s.Achieved >= 0.95*s.Offered
		short := ""
		if !reached {
			short = fmt.Sprintf("; producers reached only %s msg/s", kfmt(s.Achieved))
		}
		g = append(g, goal{"End-to-end p50 at 1,000 msg/s, " + label, "≤ 5 ms", ms(s.P50) + short, reached && s.P50 <= 5*time.Millisecond, ""})
		g = append(g, goal{"End-to-end p99 at 1,000 msg/s, " + label, "≤ 50 ms", ms(s.P99) + short, reached && s.P99 <= 50*time.Millisecond, ""})
	}
	latency("1 event per transaction", r.LatencyAt1000)
	if s := r.LatencyAt1000Batched; s != nil {
		latency(fmt.Sprintf("%d events per transaction", s.PerTx), s)
	}
	if r.RSSPeakKiB > 0 {
		mib := float64(r.RSSPeakKiB) / 1024
		g = append(g, goal{"Peak RSS while draining 1,000,000", "≤ 100 MiB", fmt.Sprintf("%.1f MiB", mib), mib <= 100, ""})
	}
	g = append(g, r.databasesGoals()...) // databases_report.go
	g = append(g, r.horizonGoals()...)   // horizon_report.go
	g = append(g, r.failuresGoals()...)  // failures_report.go
	return g
}

// goalNotes explains the goals that were not met, from the run's own figures.
func (r *results) goalNotes() []string {
	var notes []string
	horizonNoted := false
	for _, g := range r.goals() {
		if g.met {
			continue
		}
		switch {
		case strings.HasPrefix(g.name, "Pinned horizon"): // one note for every variant: horizon_report.go
			if !horizonNoted {
				notes = append(notes, r.horizonGoalNote())
				horizonNoted = true
			}
		case strings.Contains(g.name, "1 event per transaction"):
			if strings.Contains(g.name, "p99") && !strings.Contains(g.measured, "producers") {
				notes = append(notes, "p99 with one event per transaction: see section 2; the dispatcher's own latency at 1,000 msg/s is the batched row.")
				continue
			}
			if strings.Contains(g.name, "p99") {
				continue // one note covers p50 and p99
			}
			s := r.LatencyAt1000
			var note string
			if s.Achieved < 0.95*s.Offered {
				note = fmt.Sprintf("**1,000 msg/s with one event per transaction was not reached, by the producers**: they committed only %s msg/s (the step requires 95%%); see section 2b for how fast producers can commit on this machine in this run. The dispatcher's latency on what was produced: p50 %s, p99 %s.",
					kfmt(s.Achieved), ms(s.P50), ms(s.P99))
			} else {
				// The producers kept the rate: the latency itself missed.
				note = fmt.Sprintf("**End-to-end latency at 1,000 msg/s with one event per transaction**: the producers committed %s msg/s; p50 %s, p90 %s, p99 %s, max %s (section 2).",
					kfmt(s.Achieved), ms(s.P50), ms(s.P90), ms(s.P99), ms(s.Max))
			}
			if b := r.LatencyAt1000Batched; b != nil {
				note += fmt.Sprintf(" At 1,000 msg/s in %d-event transactions: p50 %s, p99 %s.", b.PerTx, ms(b.P50), ms(b.P99))
			}
			notes = append(notes, note)
		case strings.Contains(g.name, "events per transaction"):
			notes = append(notes, fmt.Sprintf("%s: %s; see section 2.", g.name, g.measured))
		case strings.Contains(g.name, "Claim latency"):
			notes = append(notes, fmt.Sprintf("Claim latency: %s. The ready branch's plan with no done rows: %s; with 1,000,000: %s (section 3).",
				g.measured, r.ClaimCost[0].Plan, r.ClaimCost[len(r.ClaimCost)-1].Plan))
		default:
			notes = append(notes, fmt.Sprintf("%s: %s (target %s); see its section below.", g.name, g.measured, g.target))
		}
	}
	return notes
}

// writeReport writes BENCHMARKS.md and the charts into out.
func writeReport(out string, r *results) error {
	dir := filepath.Join(out, chartDir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	charts, err := r.charts(dir)
	if err != nil {
		return err
	}
	r.Carried = readCarried(filepath.Join(out, "BENCHMARKS.md"))
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	mode := "quick mode, `make bench`"
	if r.Full {
		mode = "full mode, `make bench-full`"
	}
	p("# pgoutbox benchmarks")
	p("")
	p("Generated by `bench/cmd/bench` (%s) on %s UTC; the run took %s. Regenerate with `make bench` (quick, about 25 minutes, 8 of them the pinned-horizon item, 6 the 200 databases) or `make bench-full`. Every figure below comes from that one run against one throwaway PostgreSQL cluster.",
		mode, r.Started.UTC().Format("2006-01-02 15:04"), r.Duration.Round(time.Second))
	p("")
	p("## Goals")
	p("")
	p("| Goal | Target | Measured | Met |")
	p("| --- | --- | --- | --- |")
	for _, g := range r.goals() {
		met := "met"
		if !g.met {
			met = "**not met** (see below)"
		}
		p("| %s | %s | %s | %s |", g.name, g.target, g.measured, met)
	}
	p("")
	if notes := r.goalNotes(); len(notes) > 0 {
		for _, n := range notes {
			p("- %s", n)
		}
		p("")
	}
	p("Every pgoutbox finalize in these runs is fenced (`OutboxMarkDoneMany`: `status` and `lease_version` checked per row) and every commit is durable (fsync on, synchronous_commit on: the server's defaults).")
	p("")
	p("## Machine and server")
	p("")
	p("- CPU: %s, %d cores (`nproc`); memory %s; Linux %s; %s.", r.CPUModel, r.NumCPU, r.MemTotal, r.Kernel, r.GoVersion)
	p("- The machine is a small shared VM: other processes (a developer's test runs, local brokers) can take CPU during a run, which is why throughput items alternate systems and report medians.")
	p("- %s, started by the benchmark (initdb with `--auth=trust -E UTF8 --locale=C`) and used for every item; pgoutbox in database `%s`, River in database `%s` of the same server.", r.PGVersion, outboxDB, riverDB)
	p("- Settings the benchmark passes: `max_connections=%s`, `shared_buffers=%s`. Nothing else is changed: durability is PostgreSQL's default.", serverSettings["max_connections"], serverSettings["shared_buffers"])
	p("- Every setting not at its built-in default (from `pg_settings`, sources other than default/override/client/session), plus the durability settings stated explicitly:")
	p("")
	p("| Setting | Value | Source |")
	p("| --- | --- | --- |")
	for _, s := range r.Settings {
		p("| `%s` | `%s` | %s |", s.Name, s.Value, s.Source)
	}
	p("")

	if len(r.DrainOutbox) > 0 {
		p("## 1. Drain throughput: pgoutbox vs River")
		p("")
		p("%s messages pre-enqueued, no-op publisher / no-op worker, drained to the end. %d measured rounds per system after one warm-up round each, the order of pgoutbox, River and the SQL ceiling rotating from round to round; median reported. Before every round: a fresh table (TRUNCATE), the messages enqueued, then `VACUUM ANALYZE` of both systems' tables (so no autovacuum left over from the other system's round runs during this one) and a `CHECKPOINT`. Before the first round the fresh cluster writes about 600 MB of WAL through a scratch table, so that WAL segment files are recycled as on a server that has been running.", kfmt(float64(r.DrainN)), r.Rounds)
		p("")
		p("- pgoutbox: %s. Messages enqueued with `dispatcher.EnqueueMany` (COPY, 5,000 per transaction). Timed from `Run` to the flush that finalized the last message (`Stats().Published`), then verified in the table.", r.OutboxConfig)
		p("- River: %s. Timed from `client.Start` to the last `EventKindJobCompleted` (emitted once River's completer has written the completion), then verified in `river_job`.", r.RiverConfig)
		p("- Verified: %s.", r.DrainVerified)
		p("")
		p("- SQL ceiling (section 5): pgbench with %d clients over %s fresh pending rows, in the same rotation as the two systems.", r.CeilingClients, kfmt(float64(r.CeilingRoundRows)))
		p("")
		r.writeDefaultsSetup(p)
		p("| Round | pgoutbox msg/s | River jobs/s | SQL ceiling rows/s |%s", r.defaultsHeader())
		p("| --- | --- | --- | --- |%s", r.defaultsRule())
		at := func(xs []float64, i int) string {
			if i < len(xs) {
				return kfmt(xs[i])
			}
			return ""
		}
		for i := range r.DrainOutbox {
			p("| %d | %s | %s | %s |%s", i+1, kfmt(r.DrainOutbox[i]), at(r.DrainRiver, i), at(r.CeilingRounds, i), r.defaultsCells(i))
		}
		p("| **median** | **%s** | **%s** | **%s** |%s", kfmt(median(r.DrainOutbox)), kfmt(median(r.DrainRiver)), kfmt(median(r.CeilingRounds)), r.defaultsMedians())
		p("")
		p("Ratio pgoutbox / River: **%.2f×**. pgoutbox / SQL ceiling: **%.0f%%**.", median(r.DrainOutbox)/median(r.DrainRiver),
			100*median(r.DrainOutbox)/r.CeilingRate)
		p("")
		r.writeDefaultsRatios(p)
		p("![drain throughput](%s)", charts["drain"])
		p("")
	}
	if len(r.SweepBatch) > 0 {
		p("### Throughput vs batch size and concurrency")
		p("")
		p("Each point is the better of two drains of %s messages (fresh table, `VACUUM ANALYZE`, `CHECKPOINT` before each), otherwise the drain configuration above (FinalizeBatch at least Batch; with several dispatchers in one process the pool grows to 4 connections per dispatcher). Single drains on this shared machine vary by tens of percent, so read the trends, not the third digit.", kfmt(float64(r.SweepN)))
		p("")
		p("| Batch | msg/s |  | Concurrency | msg/s |  | Dispatchers | msg/s |")
		p("| --- | --- | --- | --- | --- | --- | --- | --- |")
		n := max(len(r.SweepBatch), len(r.SweepConcurrency), len(r.SweepDispatchers))
		cell := func(ps []point, i int) (string, string) {
			if i < len(ps) {
				return fmt.Sprint(ps[i].X), kfmt(ps[i].Rate)
			}
			return "", ""
		}
		for i := 0; i < n; i++ {
			a, av := cell(r.SweepBatch, i)
			c, cv := cell(r.SweepConcurrency, i)
			d, dv := cell(r.SweepDispatchers, i)
			p("| %s | %s |  | %s | %s |  | %s | %s |", a, av, c, cv, d, dv)
		}
		p("")
		p("![throughput vs batch size](%s)", charts["batch"])
		p("")
		p("![throughput vs concurrency](%s)", charts["concurrency"])
		p("")
	}
	r.writeIdleAndCrash(p)
	r.writeDatabases(p) // databases_report.go
	if len(r.Sustained) > 0 {
		p("## 2. Sustained mode: end-to-end latency")
		p("")
		p("%d producer goroutines each loop: one business transaction = one `bench_orders` row plus its outbox event(s) (`dispatcher.Enqueue`, or `EnqueueMany` for several events), paced to a fixed offered rate. One dispatcher (the drain configuration, LISTEN/NOTIFY wake-up, default 1 s poll fallback) publishes. Latency: from the producer's `COMMIT` returning to `Publish` being called for that message, on one monotonic clock (a publish that beats the producer's view of its own commit counts as 0). A step is *kept up* when the producers achieved ≥ 95%% of the offered rate, every committed message was delivered, and p99 ≤ 100 ms (beyond that the queue grows during the step and drains only after it). Each step lasts %s (2a: %s); producers stop at the end of the step even when behind schedule.", sustainedProducers, r.Sustained[len(r.Sustained)-1].Duration, r.Sustained[0].Duration)
		p("")
		p("- **2a** — 1,000 msg/s, one event per transaction, the schema as shipped (the enqueue statement's wake-up, migration 00019).")
		p("- **2b** — the producers' ceiling: one-event transactions as fast as they go, with and without a relay waiting idle (table below).")
		p("- **2c** — rising rates, producers at 250 transactions/s carrying rate/250 events each, until a step is not kept up.")
		p("")
		p("| Step | Offered msg/s | Events/tx | Produced msg/s | Delivered | p50 | p90 | p99 | max | Kept up |")
		p("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
		row := func(name string, s sustainedStep) {
			p("| %s | %s | %d | %s | %d / %d | %s | %s | %s | %s | %v |", name, kfmt(s.Offered), s.PerTx, kfmt(s.Achieved), s.Published, s.Committed,
				ms(s.P50), ms(s.P90), ms(s.P99), ms(s.Max), yesNo(s.Kept))
		}
		row("2a", r.Sustained[0])
		for _, s := range r.Sustained[1:] {
			row("2c", s)
		}
		p("")
		p("Highest sustained rate: **%s msg/s** (the highest 2c step kept up; the ladder stops at the first step that is not).", kfmt(r.MaxSustained))
		p("")
		if len(r.ProducerCeiling) > 0 {
			c0 := r.ProducerCeiling[0]
			p("### 2b. Producer ceiling, with and without a relay waiting idle")
			p("")
			p("%d producer goroutines commit one-event business transactions (a `bench_orders` row plus `dispatcher.Enqueue`) as fast as they can for %s each, no dispatcher running; one connection LISTENs and counts the notifications. PostgreSQL lets only one transaction at a time append to the notification queue and holds that lock through the commit's WAL flush, so transactions that all NOTIFY commit one by one instead of sharing flushes. The enqueue statement queues a NOTIFY only while a relay waits idle, and then only in the one producer transaction that holds the notify gate (from its enqueue to its end); other transactions committing meanwhile skip theirs (dispatchers cover those commits with a 100 ms wake window of short claims).", c0.Producers, c0.Duration)
			p("")
			p("| Wake-up | Transactions/s | Notifications/s | Notifications per transaction |")
			p("| --- | --- | --- | --- |")
			for _, c := range r.ProducerCeiling {
				per := 0.0
				if c.Transactions > 0 {
					per = float64(c.Notifications) / float64(c.Transactions)
				}
				p("| %s | %s | %s | %.2f |", c.Variant, kfmt(c.TxPerSec), kfmt(c.NotifyPerSec), per)
			}
			p("")
		}
		if charts["latency"] != "" {
			p("![latency distribution at 1,000 msg/s](%s)", charts["latency"])
			p("")
		}
		if charts["sustained"] != "" {
			p("![latency vs rate](%s)", charts["sustained"])
			p("")
		}
	}
	if len(r.ClaimCost) > 0 {
		p("## 3. Claim cost vs retained rows")
		p("")
		p("The single-statement claim of earlier releases (`OutboxClaim`: an expired lease alone, else pending rows from the start of the queue in `(txid, id)` order; the relay's own claim starts from a cursor) of %d with 10,000 pending rows and 0, 100,000 and 1,000,000 done rows retained (built with `INSERT ... SELECT generate_series`, done rows first so they hold the older ids, then `VACUUM ANALYZE`, `CHECKPOINT`). Each claim runs in a transaction that is rolled back, so every iteration sees the same queue; %d timed claims after 20 warm-up claims; client-side round trip.", claimCostBatch, r.ClaimCost[0].Iter)
		p("")
		p("| Done rows retained | p50 | mean | p99 | vs none (p50) | Plan of the ready branch |")
		p("| --- | --- | --- | --- | --- | --- |")
		for _, c := range r.ClaimCost {
			p("| %s | %s | %s | %s | %.2f× | %s |", kfmt(float64(c.Retained)), ms(c.P50), ms(c.Mean), ms(c.P99),
				float64(c.P50)/float64(r.ClaimCost[0].P50), c.Plan)
		}
		p("")
	}
	if r.OrderedN > 0 {
		p("## 4. Ordered mode")
		p("")
		p("`Claim: ClaimOrderedOnly`, otherwise the drain configuration (%s). Messages enqueued with `Ordered: true` through `EnqueueMany`; each aggregate's messages in increasing id order. Verified: %s.", r.OrderedConfig, r.OrderedVerified)
		p("")
		p("| Workload | Messages | msg/s |")
		p("| --- | --- | --- |")
		p("| %s aggregates × %d messages | %s | %s |", kfmt(float64(r.OrderedAggregates)), r.OrderedN/r.OrderedAggregates, kfmt(float64(r.OrderedN)), kfmt(r.OrderedRate))
		p("| one hot aggregate | %s | %s |", kfmt(float64(r.HotN)), kfmt(r.HotRate))
		p("")
		p("A hot aggregate is delivered strictly one message at a time: each message costs a claim, a publish and a finalize (two durable commits) before the next becomes the head, so its rate is bounded by commit latency, not by the batch size.")
		p("")
	}
	if len(r.Producers) > 0 {
		p("### 4b. Producers: what an outbox INSERT costs a business transaction")
		p("")
		p("%d sessions, each transaction one `INSERT` (autocommit), as fast as they go, %.0f s per case and round; rounds interleaved, median of %d shown. *Plain*: the same values into a table with only a primary key (`bench_plain`: id, aggregate_type, aggregate_id, event_type, payload, created_at). *Before*: the outbox as migration 00009 left it (the same database migrated up and back down to 00009, in a database of its own); *after*: this build's. *Distinct aggregates*: each session writes its own 100 aggregates; *one hot aggregate*: every session writes the same one. WAL: `pg_current_wal_lsn()` around the round, after a `CHECKPOINT`, per committed transaction. Every ordered row was checked to be sequenced, and after, to name its aggregate's previous row as `prev_seq`.", r.ProducerClients, r.ProducerSeconds, len(r.Producers[0].Rounds))
		p("")
		if r.hasProducerCopy() {
			p("*COPY*: the same sessions, each transaction (`BEGIN`, one `COPY`, `COMMIT`) writes N events, in the same interleaved rounds. *Plain COPY*: pgx `CopyFrom` into `bench_plain`; *outbox*: `dispatcher.EnqueueMany`, which validates every event and writes them with one `COPY` (its build and validation run on the same machine and count). *Ordered*: every event of a transaction its own aggregate (each session reuses its own N aggregates, so each COMMIT sequences N aggregates). Figures per event: events/s, WAL per event, and the ratio to the plain COPY of the same size.")
			p("")
		}
		for _, l := range producerTable(r) {
			p("%s", l)
		}
		p("")
	}
	if r.CeilingRate > 0 {
		p("## 5. The SQL ceiling")
		p("")
		p("pgbench (`-M extended`, `-n`: every statement parsed and planned at each execution, as the dispatcher sends them) runs the dispatcher's three statements of a backlog round, taken verbatim from `queries/*.sql` with literal parameters, as one script: `OutboxClaimSnapshot` (kept with `\\gset`), `OutboxClaimWindow` of %d with that snapshot as its upper bound, whose rows go to pgbench whole (payload and headers included, read and dropped, as they go to a dispatcher; one extra one-row CTE keeps their ids and lease versions in two session settings, since pgbench keeps only one row of a result), then `OutboxMarkDoneMany` over them — each an autocommit, durable transaction, fenced exactly as the dispatcher does it, with no publish and no client work in between. The claim runs without a cursor (its fresh lane reads the backlog's pending index from the start). Every row is verified done afterwards.", r.CeilingBatch)
		p("")
		p("- The ceiling the goal compares with: the median of the %d-client rounds interleaved with the drain rounds (section 1): **%s rows/s**. pgoutbox's median drain rate is **%.0f%%** of it.", r.CeilingClients, kfmt(r.CeilingRate), 100*median(r.DrainOutbox)/r.CeilingRate)
		if r.CeilingDetail != "" {
			p("- By client count (%s fresh pending rows each, `VACUUM ANALYZE`, `CHECKPOINT` before each run): %s.", kfmt(float64(r.CeilingRows)), r.CeilingDetail)
		}
		p("- Earlier versions of the ceiling ran the single-statement claim with its ids aggregated on the server (`\\gset`, no message leaving it) and `OutboxMarkDoneMany`: cheaper than the dispatcher's statements can be, since no row is converted and sent. It is the claim-only figure in the list above.")
		p("- Why the dispatcher stays below it: pgbench's clients do nothing but the statements, so the server gets both cores; the dispatcher process itself needs a share of them (decoding rows, handing messages to publish goroutines, timers, GC), and one dispatcher runs one claim at a time where two pgbench clients run two.")
		p("")
	}
	if r.RSSN > 0 {
		p("## 6. Memory")
		p("")
		p("The parent fills %s pending rows (`INSERT ... SELECT generate_series`), then re-executes the benchmark binary in a child mode that does nothing but run the drain configuration until all are done, and reads its peak resident set (`VmHWM` from `/proc/self/status`, cross-checked with the child's `getrusage` maxrss).", kfmt(float64(r.RSSN)))
		p("")
		p("- Peak RSS: **%.1f MiB** (%s).", float64(r.RSSPeakKiB)/1024, r.RSSGoDetail)
		p("- Drain rate in the child: %s msg/s.", kfmt(r.RSSRate))
		p("")
	}
	writeTracing(p, r)
	r.writeHorizonSections(p, charts) // sections 7-9: horizon_report.go
	r.writeFailures(p)                // section 10: failures_report.go
	return os.WriteFile(filepath.Join(out, "BENCHMARKS.md"), []byte(b.String()), 0o644)
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// charts renders the PNGs and returns their paths relative to out.
func (r *results) charts(dir string) (map[string]string, error) {
	m := map[string]string{}
	rel := func(name string) string { return chartDir + "/" + name }
	if len(r.DrainOutbox) > 0 {
		labels := []string{"pgoutbox (drain config)", "River"}
		vals := []float64{median(r.DrainOutbox), median(r.DrainRiver)}
		if len(r.DrainRelay) > 0 {
			labels = append(labels, "pgoutbox run (defaults)", "Config{} (defaults)")
			vals = append(vals, median(r.DrainRelay), median(r.DrainZero))
		}
		if r.CeilingRate > 0 {
			labels = append(labels, "SQL ceiling")
			vals = append(vals, r.CeilingRate)
		}
		err := chart.Bar{Title: fmt.Sprintf("Drain %s messages, median msg/s", kfmt(float64(r.DrainN))), YLabel: "messages/s",
			Labels: labels, Values: vals, ValueFmt: func(v float64) string { return kfmt(v) }}.Save(filepath.Join(dir, "drain.png"))
		if err != nil {
			return nil, err
		}
		m["drain"] = rel("drain.png")
	}
	if len(r.SweepBatch) > 0 {
		xy := func(ps []point) ([]float64, []float64) {
			var x, y []float64
			for _, p := range ps {
				x, y = append(x, p.X), append(y, p.Rate)
			}
			return x, y
		}
		bx, by := xy(r.SweepBatch)
		err := chart.Line{Title: "Throughput vs batch size", XLabel: "Batch (messages per claim)", YLabel: "messages/s", LogX: true,
			Series: []chart.Series{{Name: "pgoutbox", X: bx, Y: by}}}.Save(filepath.Join(dir, "throughput_batch.png"))
		if err != nil {
			return nil, err
		}
		m["batch"] = rel("throughput_batch.png")
		cx, cy := xy(r.SweepConcurrency)
		dx, dy := xy(r.SweepDispatchers)
		err = chart.Line{Title: "Throughput vs concurrency", XLabel: "publish concurrency / dispatchers per process", YLabel: "messages/s", LogX: true,
			Series: []chart.Series{{Name: "Concurrency", X: cx, Y: cy}, {Name: "Dispatchers", X: dx, Y: dy}}}.Save(filepath.Join(dir, "throughput_concurrency.png"))
		if err != nil {
			return nil, err
		}
		m["concurrency"] = rel("throughput_concurrency.png")
	}
	if s := r.LatencyAt1000; s != nil && len(s.Samples) > 0 {
		// Latency distribution: percentile curves (x = percentile, y = ms).
		curve := func(name string, s *sustainedStep) chart.Series {
			ser := chart.Series{Name: name}
			for _, pc := range []float64{0, 10, 25, 50, 75, 90, 95, 99} {
				ser.X = append(ser.X, pc)
				ser.Y = append(ser.Y, float64(percentile(s.Samples, pc/100))/1e6)
			}
			return ser
		}
		series := []chart.Series{curve("1 event/tx (2a)", s)}
		if b := r.LatencyAt1000Batched; b != nil && len(b.Samples) > 0 {
			series = append(series, curve(fmt.Sprintf("%d events/tx (2c)", b.PerTx), b))
		}
		err := chart.Line{Title: "Latency at 1,000 msg/s, commit to Publish", XLabel: "percentile", YLabel: "milliseconds",
			Series: series}.Save(filepath.Join(dir, "latency.png"))
		if err != nil {
			return nil, err
		}
		m["latency"] = rel("latency.png")
	}
	if len(r.Sustained) > 2 {
		var x, p50, p99 []float64
		for _, s := range r.Sustained[1:] {
			x = append(x, s.Offered)
			p50 = append(p50, float64(s.P50)/1e6)
			p99 = append(p99, float64(s.P99)/1e6)
		}
		err := chart.Line{Title: "Latency vs offered rate (2c)", XLabel: "offered messages/s", YLabel: "milliseconds", LogX: true,
			Series: []chart.Series{{Name: "p50", X: x, Y: p50}, {Name: "p99", X: x, Y: p99}}}.Save(filepath.Join(dir, "sustained.png"))
		if err != nil {
			return nil, err
		}
		m["sustained"] = rel("sustained.png")
	}
	if err := r.horizonCharts(dir, m); err != nil { // horizon_report.go
		return nil, err
	}
	return m, nil
}

// producerTable is item 4b's table (and the hot aggregate's bound), as the
// report prints it and as the item prints it when it ends.
func producerTable(r *results) []string {
	var out []string
	p := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }
	find := func(name, schema string) *producerCase {
		for i := range r.Producers {
			if c := &r.Producers[i]; c.Name == name && c.Schema == schema {
				return c
			}
		}
		return nil
	}
	plain, bound := find("plain", ""), find("flush-bound", "")
	if plain == nil {
		return nil
	}
	p("| insert | tx/s before | tx/s after | vs plain, before → after | WAL per insert, before → after | rounds after (tx/s) |")
	p("| --- | --- | --- | --- | --- | --- |")
	p("| plain table, primary key only | %s | %s | 1× | %.0f B | |", kfmt(plain.TxPerSec), kfmt(plain.TxPerSec), plain.WALPerTx)
	names := map[string]string{
		"unordered":      "outbox, unordered, no relay waiting (relays busy, or none)",
		"unordered-idle": "outbox, unordered, a relay waiting idle (COMMITs notify)",
		"ordered":        "outbox, ordered, distinct aggregates, no relay waiting",
		"ordered-idle":   "outbox, ordered, distinct aggregates, a relay waiting idle",
		"ordered-hot":    "outbox, ordered, one hot aggregate",
	}
	for _, name := range []string{"unordered", "unordered-idle", "ordered", "ordered-idle", "ordered-hot"} {
		// A relay waiting idle is an after-schema case only (migration
		// 00015): its before is the same insert into the before schema,
		// where every COMMIT notifies.
		b, a := find(strings.TrimSuffix(name, "-idle"), "before"), find(name, "after")
		if b == nil || a == nil {
			continue
		}
		var rounds []string
		for _, x := range a.Rounds {
			rounds = append(rounds, kfmt(x))
		}
		p("| %s | %s | %s | %.2f× → %.2f× | %.0f → %.0f B (%.2f× → %.2f×) | %s |", names[name], kfmt(b.TxPerSec), kfmt(a.TxPerSec),
			b.TxPerSec/plain.TxPerSec, a.TxPerSec/plain.TxPerSec, b.WALPerTx, a.WALPerTx, b.WALPerTx/plain.WALPerTx, a.WALPerTx/plain.WALPerTx, strings.Join(rounds, ", "))
	}
	if a := find("ordered-hot", "after"); a != nil && bound != nil {
		p("")
		p("The hot aggregate's bound: its producers' COMMITs take the aggregate's lock one at a time, and each releases it only once its commit record is flushed, so they cannot share a WAL flush — at most one commit per flush. One session committing plain inserts, each waiting for its own flush, measured %s tx/s in this run: the hot aggregate reached %.0f%% of it.", kfmt(bound.TxPerSec), 100*a.TxPerSec/bound.TxPerSec)
	}
	if copyRows := producerCopyTable(r); len(copyRows) > 0 {
		p("")
		out = append(out, copyRows...)
	}
	return out
}

// hasProducerCopy reports whether item 4b measured COPY cases.
func (r *results) hasProducerCopy() bool {
	for _, c := range r.Producers {
		if strings.HasPrefix(c.Name, "copy-") {
			return true
		}
	}
	return false
}

// producerCopyTable is item 4b's COPY table: per size, the plain COPY and
// the outbox's EnqueueMany, per event. Cases a run did not measure (a
// schema, a size) are left out or shown as "—".
func producerCopyTable(r *results) []string {
	var out []string
	p := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }
	find := func(name, schema string, n int) *producerCase {
		for i := range r.Producers {
			if c := &r.Producers[i]; c.Name == name && c.Schema == schema && c.PerTx == n {
				return c
			}
		}
		return nil
	}
	var sizes []int
	for _, c := range r.Producers {
		if c.Name == "copy-plain" && !slices.Contains(sizes, c.PerTx) {
			sizes = append(sizes, c.PerTx)
		}
	}
	if len(sizes) == 0 {
		return nil
	}
	rounds := func(c *producerCase) string {
		var s []string
		for _, x := range c.Rounds {
			s = append(s, kfmt(x*float64(c.events())))
		}
		return strings.Join(s, ", ")
	}
	p("| COPY, one per transaction | events/s before | events/s after | vs plain COPY, before → after | WAL per event, before → after | rounds after (events/s) |")
	p("| --- | --- | --- | --- | --- | --- |")
	names := map[string]string{"copy-unordered": "outbox (`EnqueueMany`), unordered", "copy-ordered": "outbox (`EnqueueMany`), ordered, distinct aggregates"}
	for _, n := range sizes {
		plain := find("copy-plain", "", n)
		label := fmt.Sprintf("COPY, %s events per transaction", kfmt(float64(n)))
		p("| %s: plain table, primary key only | %s | %s | 1× | %.0f B | %s |", label, kfmt(plain.EventsPerSec), kfmt(plain.EventsPerSec), plain.WALPerEvent, rounds(plain))
		for _, name := range []string{"copy-unordered", "copy-ordered"} {
			b, a := find(name, "before", n), find(name, "after", n)
			if a == nil {
				continue
			}
			bRate, bRatio, bWAL, bWALRatio := "—", "—", "—", "—"
			if b != nil {
				bRate, bRatio = kfmt(b.EventsPerSec), fmt.Sprintf("%.2f×", b.EventsPerSec/plain.EventsPerSec)
				bWAL, bWALRatio = fmt.Sprintf("%.0f", b.WALPerEvent), fmt.Sprintf("%.2f×", b.WALPerEvent/plain.WALPerEvent)
			}
			p("| %s: %s | %s | %s | %s → %.2f× | %s → %.0f B (%s → %.2f×) | %s |", label, names[name], bRate, kfmt(a.EventsPerSec),
				bRatio, a.EventsPerSec/plain.EventsPerSec, bWAL, a.WALPerEvent, bWALRatio, a.WALPerEvent/plain.WALPerEvent, rounds(a))
		}
	}
	return out
}
