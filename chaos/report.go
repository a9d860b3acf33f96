package main

import (
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"
)

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func joinCounts(m map[string]int) string {
	if len(m) == 0 {
		return "none"
	}
	var parts []string
	for _, k := range sortedKeys(m) {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

// reproduce is the command line that repeats the run.
func reproduce(o options) string {
	extra := ""
	if o.failover {
		extra += " -failover"
	}
	if o.pgbouncer {
		extra += " -pgbouncer"
	}
	if o.outage > 0 {
		extra += " -outage " + o.outage.String()
	}
	return fmt.Sprintf("go run ./chaos -seed %d -duration %s -events %d -relays %d -producers %d -lease %s -publish-timeout %s -batch %d -concurrency %d -max-attempts %d -fault-every %s -pg-restarts %d -poison %d%s",
		o.seed, o.duration, o.events, o.relays, o.producers, o.lease, o.publishTimeout, o.batch, o.concurrency, o.maxAttempts, o.faultEvery, o.pgRestarts, o.poison, extra)
}

func summary(fg *figures) string {
	r, o := fg.res, fg.o
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	status := "PASS: every invariant holds"
	if !r.OK() {
		status = fmt.Sprintf("FAIL: %d invariants violated", len(r.Counts))
	}
	p("pgoutbox chaos run: %s", status)
	p("  seed                     %d", o.seed)
	p("  reproduce                %s", reproduce(o))
	p("  setup                    %d relay processes (pgoutbox run --publisher http, role %s), %d producers (role %s),", o.relays, relayUser, o.producers, producerUser)
	if o.pgbouncer {
		p("                           producers and relays through PgBouncer %s (transaction mode), relays' LISTEN direct", fg.pgbouncerVersion)
	}
	p("                           lease %s, publish timeout %s, batch %d, concurrency %d, max attempts %d; PostgreSQL %s, %s, %d CPUs",
		o.lease, o.publishTimeout, o.batch, o.concurrency, o.maxAttempts, fg.pgVersion, runtime.Version(), runtime.NumCPU())
	p("  fault window             %s; whole run %s", fg.faultWindow, fg.total.Round(time.Second))
	if o.failover {
		if f := fg.failover; f != nil {
			p("  failover                 primary stopped hard (pg_ctl stop -m immediate) %s into the window; synchronous standby", f.at.Round(time.Second))
			p("                           (synchronous_standby_names = '%s', synchronous_commit = on) promoted %s after it was down (pg_ctl promote);",
				standbyName, f.promotedIn.Round(time.Millisecond))
			p("                           first relay write on the new primary %s after the old one was down, %d audited writes there;",
				f.firstWriteIn.Round(time.Millisecond), f.writesAfter)
			p("                           everyone connects through host=127.0.0.1,127.0.0.1 target_session_attrs=read-write; new primary: %s", f.newPrimary)
		} else {
			p("  failover                 DID NOT HAPPEN")
		}
	}
	if f := fg.outage; f != nil {
		p("  receiver outage          %s", strings.Join(f.lines(), "\n                           "))
	} else if o.outage > 0 {
		p("  receiver outage          DID NOT HAPPEN")
	}
	p("  events committed         %d  (%d ordered in %d aggregates; %d transactions with unknown commit outcome: %d committed, %d not)",
		r.Events, r.OrderedEvents, r.Aggregate, fg.uncertain, r.UncertainCommitted, r.UncertainRolledBack)
	p("  rolled back              %d transactions/savepoints, %d events; delivered: %d", fg.rolledBackTx, fg.rbEvents, r.RolledBackDelivered)
	p("  done / dead              %d / %d  (dead: %s)", r.Done, r.Dead, joinCounts(r.DeadBy))
	p("  lost                     %d", r.Lost)
	p("  order violations         %d", r.OrderViolations)
	p("  by version               %d of %d versioned ordered events first delivered before a lower version of their aggregate", r.VersionViolations, r.VersionedEvents)
	p("  fencing violations       %d  (%d audited updates, %d claims, %d lease takeovers, %d head hand-offs)", r.FencingViolations, fg.auditRows, r.Claims, r.Recoveries, r.Requeues)
	p("  duplicates               %d  (%s)", r.Duplicates, joinCounts(r.DuplicatesBy))
	answers := map[string]int{}
	for code, n := range r.AnswersBy {
		name := fmt.Sprint(code)
		if code == 0 {
			name = "none (poison)"
		}
		answers[name] = n
	}
	p("  arrivals at receiver     %d, accepted %d  (answers: %s)", r.Arrivals, r.Accepted, joinCounts(answers))
	faults := map[string]int{}
	for k, v := range fg.faults {
		faults[k] = v
	}
	faults["slow answer (> lease)"] = fg.slow
	receiverFaults := map[string]int{"503": r.AnswersBy[503], "500": r.AnswersBy[500], "429": r.AnswersBy[429], "4xx permanent": r.AnswersBy[422], "425 defer": r.AnswersBy[425]}
	p("  faults                   %s", joinCounts(faults))
	p("  receiver answers         %s (on purpose, by the event's fate)", joinCounts(receiverFaults))
	restarts, byUs, other := 0, 0, map[string]int{}
	for _, ex := range fg.exits {
		if ex.Final {
			continue
		}
		restarts++
		switch {
		case ex.ByUs:
			byUs++
		case ex.Code == 1:
			other["exit 1 (startup check: PostgreSQL not accepting connections yet)"]++
		default:
			other[fmt.Sprintf("exit %d %s", ex.Code, ex.Signal)]++
		}
	}
	p("  relay restarts           %d  (killed by the suite %d; other exits: %s)", restarts, byUs, joinCounts(other))
	if fg.drained {
		p("  time to drain            %s after the last fault", fg.drain.Round(100*time.Millisecond))
	} else {
		p("  time to drain            did not drain within %s", o.drainTimeout)
	}
	p("  producer retries         %d transactions failed and were retried (database restarts, connection loss)", fg.prodErrors)
	p("  secrets in relay logs    %d  (database passwords, HMAC secret)", sum(fg.secretHits))
	p("  relay warnings           %s", joinCounts(fg.logWarnings))
	var roleLines []string
	for _, rc := range fg.roles {
		mark := "ok  "
		switch {
		case !rc.OK:
			mark = "FAIL"
		}
		line := mark + "  " + rc.What
		if !rc.OK {
			line += " — " + rc.Note
		}
		roleLines = append(roleLines, line)
	}
	p("  least-privilege roles    %s", strings.Join(roleLines, "\n                           "))
	return b.String()
}

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

const (
	reliabilityIntro = `# Reliability

Figures of pgoutbox's fault-injection suite (` + "`chaos/`" + `): a throwaway
PostgreSQL, several ` + "`pgoutbox run --publisher http`" + ` processes running as the
least-privilege relay role of ` + "`docs/roles.sql`" + `, producers writing events in
business transactions as the producer role, and faults on a seeded schedule.
The suite exits non-zero when any invariant fails. See the end of this file
for what is checked and how.

`
	longBegin  = "<!-- chaos:long:begin -->"
	longEnd    = "<!-- chaos:long:end -->"
	shortBegin = "<!-- chaos:short:begin -->"
	shortEnd   = "<!-- chaos:short:end -->"

	failoverIntro = `A second cluster streams from the suite's primary (` + "`pg_basebackup -R`" + `) as a
synchronous standby; relays, producers and the suite connect through a
multi-host URL (` + "`target_session_attrs=read-write`" + `). Mid-run the primary is
stopped hard and the standby promoted; the other faults run as in
` + "`make chaos`" + `, without PostgreSQL restarts.

`
	failoverBegin = "<!-- chaos:failover:begin -->"
	failoverEnd   = "<!-- chaos:failover:end -->"
)

// writeReliability replaces the section's part of path (creating the file
// with both sections when it does not exist).
func writeReliability(path, section string, fg *figures, text string) error {
	old, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		return err
	}
	doc := string(old)
	if !strings.Contains(doc, longBegin) || !strings.Contains(doc, shortBegin) {
		doc = reliabilityIntro +
			"## Long run (≥ 30 minutes of faults): `make chaos-long`\n\n" + longBegin + "\n(not recorded yet)\n" + longEnd + "\n\n" +
			"## Short run (CI, ≤ 9 minutes): `make chaos`\n\n" + shortBegin + "\n(not recorded yet)\n" + shortEnd + "\n"
	}
	if !strings.Contains(doc, failoverBegin) {
		doc = strings.TrimRight(doc, "\n") + "\n\n## Failover run (synchronous standby promoted mid-run): `make chaos-failover`\n\n" +
			failoverIntro +
			failoverBegin + "\n(not recorded yet)\n" + failoverEnd + "\n"
	}
	begin, end := shortBegin, shortEnd
	switch section {
	case "long":
		begin, end = longBegin, longEnd
	case "failover":
		begin, end = failoverBegin, failoverEnd
	}
	i := strings.Index(doc, begin)
	j := strings.Index(doc, end)
	if i < 0 || j < i {
		return fmt.Errorf("%s: markers %s / %s out of order", path, begin, end)
	}
	body := fmt.Sprintf("Recorded %s. Reproduce with:\n\n```sh\n%s\n```\n\n```\n%s```\n",
		time.Now().UTC().Format("2006-01-02 15:04 MST"), reproduce(fg.o), text)
	doc = doc[:i+len(begin)] + "\n" + body + doc[j:]
	return os.WriteFile(path, []byte(doc), 0o644)
}
