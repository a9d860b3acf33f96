package main

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"
)

// This file is the invariant checker: a pure function from the full history
// of a run (final table, audit of every UPDATE, every HTTP arrival at the
// receiver, what the producers committed and rolled back, the faults) to the
// figures and the list of violations. check_test.go feeds it synthetic
// histories that break each invariant.

// Fates the producers assign to events (header x-chaos-fate); the receiver
// answers accordingly.
const (
	FateOK      = "ok"      // 200
	Fate503     = "503x1"   // 503 on the first arrival, then 200
	Fate503x2   = "503x2"   // 503 on the first two arrivals, then 200
	Fate429     = "429x1"   // 429 + Retry-After: 1 on the first arrival, then 200
	FateDefer   = "deferx1" // 425 + Retry-After: 1 (business defer) on the first arrival, then 200
	FateSlow    = "slow"    // first arrival answered after longer than the lease (the relay times out), then 200
	FatePerm    = "perm"    // 422 always: permanent, dead after one attempt
	FateExhaust = "exhaust" // 500 always: a failure of the message, dead when attempts are exhausted
	FatePoison  = "poison"  // the receiver SIGKILLs the relay that delivers it: dead at max attempts via the reap
	FateBomb    = "bomb"    // a number bomb inserted by plain SQL: no query can return it; dead via the isolation path, never delivered
)

// bombError is what the isolation path writes into last_error (with the SQLSTATE).
const bombError = "the database cannot return this message (SQLSTATE 54000"

// reapError is what OutboxReap writes into last_error.
const reapError = "lease expired after max attempts"

// Row is the final state of one committed outbox row.
type Row struct {
	ID           int64
	Tx           string // producer transaction tag (x-chaos-tx)
	AggregateID  string
	Ordered      bool
	Seq          int64 // commit position (outbox.seq); 0 = unsequenced
	Status       string
	Attempts     int
	LeaseVersion int64
	LastError    string
	Fate         string
	Version      int64 // versioned producers: the aggregate's version the event carries; 0 = not versioned
	Part         int   // versioned producers: 1 or 2 within the version
}

// Delivery is one HTTP arrival at the receiver.
type Delivery struct {
	ID     int64
	Relay  string    // relay slot that sent it (from the URL path), e.g. "relay-3"
	At     time.Time // arrival (handler start)
	Status int       // what the receiver answered; 0 = no answer (poison: the sender was killed)
	Tx     string    // x-chaos-tx header as received
}

// Accepted reports whether the receiver took the delivery (2xx).
func (d Delivery) Accepted() bool { return d.Status >= 200 && d.Status <= 299 }

// Transition is one audited UPDATE of an outbox row (chaos database only).
type Transition struct {
	ID                       int64
	OldStatus, NewStatus     string
	OldLV, NewLV             int64
	OldAttempts, NewAttempts int
	OldOwner, NewOwner       string
	App                      string // application_name of the writing session (= relay owner)
	NewLastError             string
	At                       time.Time
}

func (t Transition) isClaim() bool { return t.NewStatus == "processing" && t.NewLV != t.OldLV }

// Fault is one injected fault.
type Fault struct {
	Kind       string // kill, pause, terminate, pgrestart, poison-kill
	Relay      string // slot, "" = every relay / the server
	Start, End time.Time
}

// History is everything the checker looks at.
type History struct {
	MaxAttempts int
	Rows        []Row
	// CommittedTx: transactions whose COMMIT succeeded -> events written.
	CommittedTx map[string]int
	// RolledBackTx: transactions (or savepoints) that rolled back, including
	// those that failed before COMMIT. Their events must never exist or arrive.
	RolledBackTx []string
	// UncertainTx: COMMIT returned an error (connection lost): either all
	// of their events exist or none (atomicity), never delivered if none.
	UncertainTx map[string]int
	Deliveries  []Delivery
	Audit       []Transition
	Faults      []Fault
	// AuditByApp is false when the writers' application_name is not
	// recorded (then the owner-of-the-write check is skipped).
	AuditByApp bool
}

// Result holds the figures and the violations.
type Result struct {
	Events, Done, Dead       int
	DeadBy                   map[string]int
	Arrivals, Accepted       int
	AnswersBy                map[int]int
	Duplicates               int
	DuplicatesBy             map[string]int
	Lost                     int
	OrderViolations          int
	VersionViolations        int // versioned aggregates: first delivered before an event with a lower version
	VersionedEvents          int
	FencingViolations        int
	RolledBackDelivered      int
	Claims, Recoveries       int
	Requeues                 int // pending rows flagged head and stamped (hand-off, resolve, repair): no delivery state change
	UncertainCommitted       int
	UncertainRolledBack      int
	OrderedEvents, Aggregate int

	Violations map[string][]string // invariant -> examples (at most 5 kept)
	Counts     map[string]int      // invariant -> number of violations
}

// OK reports whether every invariant held.
func (r *Result) OK() bool { return len(r.Counts) == 0 }

func (r *Result) fail(invariant, format string, args ...any) {
	if r.Counts == nil {
		r.Counts = map[string]int{}
		r.Violations = map[string][]string{}
	}
	r.Counts[invariant]++
	if len(r.Violations[invariant]) < 5 {
		r.Violations[invariant] = append(r.Violations[invariant], fmt.Sprintf(format, args...))
	}
}

// Summary lists the violations, one invariant per line.
func (r *Result) Summary() string {
	if r.OK() {
		return "all invariants hold"
	}
	var b strings.Builder
	keys := make([]string, 0, len(r.Counts))
	for k := range r.Counts {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, "%s: %d (e.g. %s)\n", k, r.Counts[k], strings.Join(r.Violations[k], "; "))
	}
	return b.String()
}

// Check verifies the invariants over h.
func Check(h History) *Result {
	r := &Result{DeadBy: map[string]int{}, DuplicatesBy: map[string]int{}, AnswersBy: map[int]int{}}

	rows := make(map[int64]*Row, len(h.Rows))
	byTx := map[string][]*Row{}
	for i := range h.Rows {
		row := &h.Rows[i]
		rows[row.ID] = row
		byTx[row.Tx] = append(byTx[row.Tx], row)
	}
	r.Events = len(h.Rows)

	// 1. Transactions: committed ones are all there, rolled-back ones are
	// not, uncertain ones are all-or-nothing.
	for tx, n := range h.CommittedTx {
		if got := len(byTx[tx]); got != n {
			r.fail("committed-event-missing", "tx %s committed %d events, table has %d", tx, n, got)
			if got < n {
				r.Lost += n - got
			}
		}
	}
	rolledBack := map[string]bool{}
	for _, tx := range h.RolledBackTx {
		rolledBack[tx] = true
		if got := len(byTx[tx]); got != 0 {
			r.fail("rolled-back-event-exists", "tx %s rolled back but %d of its events are in the table", tx, got)
		}
	}
	for tx, n := range h.UncertainTx {
		switch got := len(byTx[tx]); got {
		case 0:
			r.UncertainRolledBack++
			rolledBack[tx] = true
		case n:
			r.UncertainCommitted++
		default:
			r.fail("transaction-not-atomic", "tx %s (commit outcome unknown) wrote %d events, table has %d", tx, n, got)
		}
	}
	for tx := range byTx {
		_, c := h.CommittedTx[tx]
		_, u := h.UncertainTx[tx]
		if !c && !u {
			r.fail("unknown-event", "table has events of tx %q that no producer committed", tx)
		}
	}

	// Deliveries per id.
	type dstat struct {
		arrivals, accepted        int
		firstArrival, firstAccept time.Time
	}
	ds := map[int64]*dstat{}
	for _, d := range h.Deliveries {
		r.Arrivals++
		r.AnswersBy[d.Status]++
		row := rows[d.ID]
		if row == nil || rolledBack[d.Tx] {
			r.RolledBackDelivered++
			r.fail("rolled-back-delivered", "id %d (tx %q) reached the receiver but was never committed", d.ID, d.Tx)
			continue
		}
		s := ds[d.ID]
		if s == nil {
			s = &dstat{}
			ds[d.ID] = s
		}
		s.arrivals++
		if s.firstArrival.IsZero() || d.At.Before(s.firstArrival) {
			s.firstArrival = d.At
		}
		if d.Accepted() {
			r.Accepted++
			s.accepted++
			if s.firstAccept.IsZero() || d.At.Before(s.firstAccept) {
				s.firstAccept = d.At
			}
		}
	}

	// Audit per id, in time order.
	audit := map[int64][]Transition{}
	for _, t := range h.Audit {
		audit[t.ID] = append(audit[t.ID], t)
	}
	for id := range audit {
		slices.SortStableFunc(audit[id], func(a, b Transition) int {
			if c := a.At.Compare(b.At); c != 0 {
				return c
			}
			return cmp.Compare(a.NewLV, b.NewLV)
		})
	}

	// 2. Final states, dead reasons, delivery of done rows.
	for _, row := range h.Rows {
		s := ds[row.ID]
		if s == nil {
			s = &dstat{}
		}
		switch row.Status {
		case "done":
			r.Done++
			if s.accepted == 0 {
				r.Lost++
				r.fail("done-not-delivered", "id %d is done but the receiver never accepted it", row.ID)
			}
			if diesByFate(row.Fate) {
				r.fail("dead-expected", "id %d (fate %s) is done, expected dead", row.ID, row.Fate)
			}
		case "dead":
			r.Dead++
			switch {
			case row.Fate == FatePerm:
				r.DeadBy["permanent (4xx)"]++
				if s.arrivals == 0 {
					r.fail("dead-unexplained", "id %d (permanent) is dead but never reached the receiver", row.ID)
				}
			case row.Fate == FateExhaust:
				r.DeadBy["retries exhausted (5xx)"]++
				if row.Attempts != h.MaxAttempts {
					r.fail("dead-unexplained", "id %d (exhaust) is dead after %d attempts, max %d", row.ID, row.Attempts, h.MaxAttempts)
				}
			case row.Fate == FateBomb:
				r.DeadBy["number bomb (unreadable row, isolation path)"]++
				if s.arrivals != 0 || !strings.HasPrefix(row.LastError, bombError) {
					r.fail("bomb-not-isolated", "bomb id %d is dead after %d arrivals with last_error %q", row.ID, s.arrivals, row.LastError)
				}
			case row.Fate == FatePoison:
				r.DeadBy["poison (reaped at max attempts)"]++
				if row.Attempts != h.MaxAttempts || !strings.HasPrefix(row.LastError, reapError) {
					r.fail("poison-not-reaped", "poison id %d is dead with attempts %d (max %d), last_error %q", row.ID, row.Attempts, h.MaxAttempts, row.LastError)
				}
			case row.Attempts >= h.MaxAttempts:
				// Every attempt was spent by faults (crashes, timeouts,
				// retryable answers): an exhausted retry too.
				r.DeadBy["attempts exhausted by faults"]++
			default:
				r.fail("dead-unexplained", "id %d (fate %s) is dead after %d of %d attempts: %s", row.ID, row.Fate, row.Attempts, h.MaxAttempts, row.LastError)
			}
		default:
			r.Lost++
			r.fail("left-"+row.Status, "id %d (fate %s, ordered %v) is still %s", row.ID, row.Fate, row.Ordered, row.Status)
		}
		// 3. Each claim publishes at most once.
		if int64(s.arrivals) > row.LeaseVersion {
			r.fail("arrivals-exceed-claims", "id %d arrived %d times but was claimed %d times", row.ID, s.arrivals, row.LeaseVersion)
		}

		// 4. Duplicates, each explained by the audit.
		if s.accepted > 1 {
			dups := s.accepted - 1
			r.Duplicates += dups
			cause := duplicateCause(audit[row.ID], s.firstAccept, h.Faults)
			if cause == "" {
				r.fail("duplicate-unexplained", "id %d accepted %d times with no takeover or lost answer in its history", row.ID, s.accepted)
				cause = "unexplained"
			}
			r.DuplicatesBy[cause] += dups
		}
	}

	// 5. Ordered aggregates: the first arrival of every event comes after
	// the first accepted arrival of every earlier event of the aggregate,
	// in seq (commit) order.
	aggs := map[string][]*Row{}
	for i := range h.Rows {
		if row := &h.Rows[i]; row.Ordered {
			aggs[row.AggregateID] = append(aggs[row.AggregateID], row)
			r.OrderedEvents++
		}
	}
	r.Aggregate = len(aggs)
	// checkOrder walks one aggregate's rows in their required order.
	checkOrder := func(agg string, list []*Row, kind string, count *int) {
		var prevAccept time.Time // latest first-accept of the earlier events
		var blocker int64        // an earlier event never accepted
		for _, row := range list {
			s := ds[row.ID]
			if s != nil && s.arrivals > 0 {
				switch {
				case blocker != 0:
					*count++
					r.fail(kind, "aggregate %s: id %d arrived although earlier id %d was never accepted", agg, row.ID, blocker)
				case !prevAccept.IsZero() && !s.firstArrival.After(prevAccept):
					*count++
					r.fail(kind, "aggregate %s: id %d (version %d/%d) first arrived %s before an earlier event was first accepted",
						agg, row.ID, row.Version, row.Part, prevAccept.Sub(s.firstArrival))
				}
			}
			if s == nil || s.accepted == 0 {
				if blocker == 0 {
					blocker = row.ID
				}
				continue
			}
			if s.firstAccept.After(prevAccept) {
				prevAccept = s.firstAccept
			}
		}
	}
	for agg, list := range aggs {
		slices.SortFunc(list, func(a, b *Row) int {
			if c := cmp.Compare(a.Seq, b.Seq); c != 0 {
				return c
			}
			return cmp.Compare(a.ID, b.ID)
		})
		checkOrder(agg, list, "order", &r.OrderViolations)
	}
	// 5b. Versioned aggregates: the same in (version, part) order, the order
	// the producers' own UPDATE ... RETURNING v established. This is the
	// independent check of commit order: it does not trust seq.
	for agg, list := range aggs {
		var versioned []*Row
		for _, row := range list {
			if row.Version > 0 {
				versioned = append(versioned, row)
			}
		}
		if len(versioned) == 0 {
			continue
		}
		r.VersionedEvents += len(versioned)
		slices.SortFunc(versioned, func(a, b *Row) int {
			if c := cmp.Compare(a.Version, b.Version); c != 0 {
				return c
			}
			return cmp.Compare(a.Part, b.Part)
		})
		checkOrder(agg, versioned, "order-by-version", &r.VersionViolations)
	}

	// 6. Fencing, from the audit of every UPDATE.
	for id, ts := range audit {
		row := rows[id]
		claims := 0
		for _, t := range ts {
			if t.NewLV < t.OldLV {
				r.FencingViolations++
				r.fail("lease-version-decreased", "id %d: lease_version %d -> %d", id, t.OldLV, t.NewLV)
			}
			switch {
			case t.isClaim():
				claims++
				r.Claims++
				if t.OldStatus == "processing" {
					r.Recoveries++
				}
				if t.NewLV != t.OldLV+1 || t.NewAttempts != t.OldAttempts+1 {
					r.FencingViolations++
					r.fail("claim-not-plus-one", "id %d: claim moved lease_version %d -> %d, attempts %d -> %d", id, t.OldLV, t.NewLV, t.OldAttempts, t.NewAttempts)
				}
				if t.OldStatus != "pending" && t.OldStatus != "processing" {
					r.FencingViolations++
					r.fail("claim-of-final-row", "id %d: claimed from status %s", id, t.OldStatus)
				}
				if h.AuditByApp && t.App != relayOf(t.NewOwner) {
					r.FencingViolations++
					r.fail("claim-by-other", "id %d: claim for %s written by %s", id, t.NewOwner, t.App)
				}
			case t.OldStatus == "processing":
				// Finalize, reschedule, defer, release, extension, reap:
				// fenced writes never move the token.
				if t.NewLV != t.OldLV {
					r.FencingViolations++
					r.fail("fenced-write-moved-token", "id %d: %s -> %s moved lease_version %d -> %d", id, t.OldStatus, t.NewStatus, t.OldLV, t.NewLV)
				}
				reap := t.NewStatus == "dead" && strings.HasPrefix(t.NewLastError, reapError)
				if h.AuditByApp && !reap && t.App != relayOf(t.OldOwner) {
					r.FencingViolations++
					r.fail("stale-owner-write", "id %d: %s -> %s (lease_version %d) owned by %s but written by %s", id, t.OldStatus, t.NewStatus, t.OldLV, t.OldOwner, t.App)
				}
			case t.OldStatus == "pending" && t.NewStatus == "pending" && t.NewLV == t.OldLV && t.NewAttempts == t.OldAttempts:
				// A pending row flagged head and stamped with a txid (the
				// hand-off when the head before it is done, OutboxRepairHeads;
				// migration 00005): no delivery state changes.
				r.Requeues++
			default:
				// pending/done/dead rows change only through a claim (no
				// operator redrive runs during chaos).
				r.FencingViolations++
				r.fail("unfenced-write", "id %d: %s -> %s without a claim (lease_version %d -> %d)", id, t.OldStatus, t.NewStatus, t.OldLV, t.NewLV)
			}
		}
		if row != nil && int64(claims) != row.LeaseVersion {
			r.fail("audit-incomplete", "id %d: lease_version %d but %d claims audited", id, row.LeaseVersion, claims)
		}
	}
	for _, row := range h.Rows {
		if row.LeaseVersion > 0 && len(audit[row.ID]) == 0 {
			r.fail("audit-incomplete", "id %d: lease_version %d but no audited update", row.ID, row.LeaseVersion)
		}
	}
	return r
}

// relayOf is the relay (its --owner, which is also its application_name)
// that wrote a lease_owner: the dispatcher writes "<owner>/<run id>.<claim
// number>", unique to each claim.
func relayOf(leaseOwner string) string {
	if i := strings.LastIndex(leaseOwner, "/"); i >= 0 {
		return leaseOwner[:i]
	}
	return leaseOwner
}

// duplicateCause explains why an id was accepted more than once: some claim
// generation published it and did not finalize it done, so another claim
// published it again. Either the lease was taken over while processing (a
// recovery claim: the owner was killed, paused, cut off from the database,
// or just late), or the owner rescheduled it after the receiver had accepted
// (the answer was lost: the publish timed out). "" = no explanation.
func duplicateCause(ts []Transition, firstAccept time.Time, faults []Fault) string {
	for _, t := range ts {
		if t.isClaim() && t.OldStatus == "processing" {
			return "takeover after " + faultAround(t.OldOwner, t.At, faults)
		}
	}
	for _, t := range ts {
		if t.OldStatus == "processing" && t.NewStatus == "pending" && !t.At.Before(firstAccept.Add(-time.Second)) {
			return "answer lost (publish timed out after the receiver accepted)"
		}
	}
	return ""
}

// faultAround names the fault that most plausibly hit owner (a relay
// "relay-N.G") shortly before its lease was taken over at at.
func faultAround(owner string, at time.Time, faults []Fault) string {
	slot, _, _ := strings.Cut(owner, ".")
	best, bestEnd := "", time.Time{}
	for _, f := range faults {
		if f.Relay != "" && f.Relay != slot {
			continue
		}
		// The fault must have started before the takeover, and not long
		// before it (a lease is seconds; allow a generous window).
		if f.Start.After(at) || at.Sub(f.End) > 30*time.Second {
			continue
		}
		if f.End.After(bestEnd) || best == "" {
			best, bestEnd = f.Kind, f.End
		}
	}
	if best == "" {
		return "lease expiry (slow publish or finalize)"
	}
	return best
}
