package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"
)

// The receiver outage (-outage): in the middle of the fault window the
// receiver refuses every connection (a TCP proxy in front of it resets
// them) for o.outage, while the producers keep writing; then it is back.
// The relays must spend no attempt on it and bury nothing because of it,
// and deliver what waited once it is back. Relay faults and PostgreSQL
// restarts planned after its start move after its end, so that what the
// outage costs is measured on its own.

// outageFigures is what the outage cost.
type outageFigures struct {
	start, end time.Time
	waiting    []int64 // events open (pending or processing) when the receiver came back

	firstAccepted time.Duration // the receiver back -> its first 2xx
	drained99     time.Duration // the receiver back -> 99% of the waiting events that ended done accepted
	drained       time.Duration // the receiver back -> the last waiting event that ended done accepted
	undelivered   int           // waiting events that ended done without being accepted after it
	netAttempts   int           // attempts spent during the outage: claims minus refunds
	claims        int           // claims during the outage (probes, and claims before the breakers opened)
	deadByOutage  int           // dead rows whose last error is the receiver being unavailable
}

// withOutage adds the outage to plan, at the middle of the fault window, and
// moves every fault planned from then on to after it.
func withOutage(plan []plannedFault, o options) []plannedFault {
	if o.outage <= 0 {
		return plan
	}
	at := o.duration / 2
	for i := range plan {
		if plan[i].At >= at {
			plan[i].At += o.outage
		}
	}
	return append(plan, plannedFault{At: at, Kind: "outage", Slot: -1, Dur: o.outage})
}

// receiverDown takes the receiver down for d, then records which events
// waited and brings it back.
func (in *injector) receiverDown(ctx context.Context, d time.Duration) {
	s := time.Now()
	in.log("! receiver down: every connection refused for %s", d)
	in.receiverProxy.Down()
	select {
	case <-time.After(d):
	case <-ctx.Done():
	}
	var waiting []int64
	qctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	rows, err := in.e.admin.Query(qctx, `SELECT id FROM outbox WHERE status IN ('pending', 'processing')`)
	if err == nil {
		for rows.Next() {
			var id int64
			if rows.Scan(&id) == nil {
				waiting = append(waiting, id)
			}
		}
		rows.Close()
	}
	cancel()
	in.receiverProxy.Up()
	end := time.Now()
	in.log("! receiver back after %s: %d events waiting", end.Sub(s).Round(time.Second), len(waiting))
	in.fleet.record(Fault{Kind: "outage", Start: s, End: end})
	in.mu.Lock()
	in.outage = &outageFigures{start: s, end: end, waiting: waiting}
	in.mu.Unlock()
	in.ended(end)
}

// measure fills in the figures from the run's history and fails the checks
// an outage must pass.
func (f *outageFigures) measure(h History, r *Result) {
	accepted := map[int64]time.Time{}
	for _, d := range h.Deliveries {
		if d.Status/100 != 2 || d.At.Before(f.end) {
			continue
		}
		if t, ok := accepted[d.ID]; !ok || d.At.Before(t) {
			accepted[d.ID] = d.At
		}
		if f.firstAccepted == 0 || d.At.Sub(f.end) < f.firstAccepted {
			f.firstAccepted = d.At.Sub(f.end)
		}
	}
	done := map[int64]bool{}
	for _, row := range h.Rows {
		done[row.ID] = row.Status == "done"
	}
	var after []time.Duration
	for _, id := range f.waiting {
		if !done[id] {
			continue // dead by its fate (or lost: the checks report it)
		}
		t, ok := accepted[id]
		if !ok {
			f.undelivered++
			continue
		}
		after = append(after, t.Sub(f.end))
	}
	if len(after) > 0 {
		slices.Sort(after)
		f.drained, f.drained99 = after[len(after)-1], after[(len(after)*99+99)/100-1]
	}
	for _, t := range h.Audit {
		if t.At.Before(f.start) || t.At.After(f.end) {
			continue
		}
		switch {
		case t.isClaim():
			f.claims++
			f.netAttempts++
		case t.OldStatus == "processing" && t.NewAttempts == t.OldAttempts-1:
			f.netAttempts-- // handed back, attempt refunded
		}
	}
	for _, row := range h.Rows {
		// A message whose fate is to die (exhaust: 500 until its attempts
		// run out, at exactly MaxAttempts, which the main checks hold it
		// to) may have its last attempt time out on a busy machine while
		// other publishes get through: the relay counts that against the
		// message, and it dies of its fate, not of the outage.
		if row.Status == "dead" && isUnavailableError(row.LastError) && !diesByFate(row.Fate) {
			f.deadByOutage++
			r.fail("dead-by-outage", "id %d (fate %s) is dead because the receiver was unavailable: %s", row.ID, row.Fate, row.LastError)
		}
	}
}

// diesByFate reports a fate that ends dead whatever the receiver's health.
func diesByFate(fate string) bool {
	switch fate {
	case FatePerm, FateExhaust, FatePoison, FateBomb:
		return true
	}
	return false
}

// isUnavailableError reports a last_error that says the receiver could not
// be reached (the outage), not that it refused the message.
func isUnavailableError(lastError string) bool {
	return strings.Contains(lastError, "unavailable: webhook: post to") ||
		strings.Contains(lastError, "connection refused") || strings.Contains(lastError, "connection reset")
}

// lines are the figures for the summary.
func (f *outageFigures) lines() []string {
	drain := fmt.Sprintf("%d of them done without an accepted delivery after it", f.undelivered)
	if f.undelivered == 0 {
		drain = fmt.Sprintf("the first %s after it was back, 99%% after %s, the last after %s (retries of failing fates)",
			f.firstAccepted.Round(100*time.Millisecond), f.drained99.Round(100*time.Millisecond), f.drained.Round(100*time.Millisecond))
	}
	return []string{
		fmt.Sprintf("receiver refused every connection for %s, %d events waiting when it came back;", f.end.Sub(f.start).Round(time.Second), len(f.waiting)),
		fmt.Sprintf("%d claims during it, %d attempts spent net (claims minus refunds), %d dead because of it;", f.claims, f.netAttempts, f.deadByOutage),
		"waiting events that ended done, delivered: " + drain,
	}
}
