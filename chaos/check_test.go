package main

import (
	"net/http"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

// clean is a consistent history: tx1 commits three ordered events of
// aggregate A and one unordered event; tx2 rolls back; one event is
// permanent (dead), one is the poison message (reaped at max attempts), one
// was duplicated by a takeover after relay-2 was paused.
func clean() History {
	h := History{
		MaxAttempts:  3,
		AuditByApp:   true,
		CommittedTx:  map[string]int{"tx1": 4, "tx3": 2, "tx4": 1},
		RolledBackTx: []string{"tx2"},
		UncertainTx:  map[string]int{},
		Rows: []Row{
			{ID: 1, Tx: "tx1", AggregateID: "A", Ordered: true, Seq: 10, Status: "done", Attempts: 1, LeaseVersion: 1, Fate: FateOK, Version: 1, Part: 1},
			{ID: 2, Tx: "tx1", AggregateID: "A", Ordered: true, Seq: 11, Status: "done", Attempts: 1, LeaseVersion: 1, Fate: FateOK, Version: 1, Part: 2},
			{ID: 3, Tx: "tx1", AggregateID: "A", Ordered: true, Seq: 12, Status: "done", Attempts: 2, LeaseVersion: 2, Fate: Fate503, Version: 2, Part: 1},
			{ID: 4, Tx: "tx1", AggregateID: "u", Status: "done", Attempts: 2, LeaseVersion: 2, Fate: FateOK},
			{ID: 6, Tx: "tx3", AggregateID: "v", Status: "dead", Attempts: 1, LeaseVersion: 1, Fate: FatePerm, LastError: "permanent: 422"},
			{ID: 7, Tx: "tx3", AggregateID: "w", Status: "dead", Attempts: 3, LeaseVersion: 3, Fate: FatePoison, LastError: reapError + " (worker crash?)"},
			{ID: 8, Tx: "tx4", AggregateID: "x", Status: "done", Attempts: 1, LeaseVersion: 1, Fate: FateOK},
		},
		Deliveries: []Delivery{
			{ID: 1, Relay: "relay-1", At: at(100), Status: 200, Tx: "tx1"},
			{ID: 2, Relay: "relay-1", At: at(200), Status: 200, Tx: "tx1"},
			{ID: 3, Relay: "relay-1", At: at(300), Status: 503, Tx: "tx1"},
			{ID: 3, Relay: "relay-3", At: at(400), Status: 200, Tx: "tx1"},
			{ID: 4, Relay: "relay-2", At: at(100), Status: 200, Tx: "tx1"},
			{ID: 4, Relay: "relay-1", At: at(5000), Status: 200, Tx: "tx1"},
			{ID: 6, Relay: "relay-1", At: at(100), Status: 422, Tx: "tx3"},
			{ID: 7, Relay: "relay-1", At: at(100), Status: 0, Tx: "tx3"},
			{ID: 7, Relay: "relay-2", At: at(3000), Status: 0, Tx: "tx3"},
			{ID: 7, Relay: "relay-3", At: at(6000), Status: 0, Tx: "tx3"},
			{ID: 8, Relay: "relay-4", At: at(100), Status: 200, Tx: "tx4"},
		},
		Faults: []Fault{{Kind: "pause", Relay: "relay-2", Start: at(150), End: at(4500)}},
	}
	claim := func(id int64, lv int64, from, owner string, ms int) Transition {
		return Transition{ID: id, OldStatus: from, NewStatus: "processing", OldLV: lv - 1, NewLV: lv, OldAttempts: int(lv - 1), NewAttempts: int(lv),
			NewOwner: owner + "/00c0ffee00c0ffee.7", App: owner, At: at(ms)} // lease_owner as the dispatcher writes it
	}
	fin := func(id int64, lv int64, to, owner string, ms int) Transition {
		return Transition{ID: id, OldStatus: "processing", NewStatus: to, OldLV: lv, NewLV: lv, OldAttempts: int(lv), NewAttempts: int(lv),
			OldOwner: owner + "/00c0ffee00c0ffee.7", App: owner, At: at(ms)}
	}
	h.Audit = []Transition{
		claim(1, 1, "pending", "relay-1.1", 90), fin(1, 1, "done", "relay-1.1", 110),
		claim(2, 1, "pending", "relay-1.1", 190), fin(2, 1, "done", "relay-1.1", 210),
		claim(3, 1, "pending", "relay-1.1", 290), fin(3, 1, "pending", "relay-1.1", 310),
		claim(3, 2, "pending", "relay-3.1", 390), fin(3, 2, "done", "relay-3.1", 410),
		// id 4: relay-2 delivered, was paused before finalizing, relay-1 took over.
		claim(4, 1, "pending", "relay-2.1", 90),
		{ID: 4, OldStatus: "processing", NewStatus: "processing", OldLV: 1, NewLV: 2, OldAttempts: 1, NewAttempts: 2,
			OldOwner: "relay-2.1", NewOwner: "relay-1.1", App: "relay-1.1", At: at(4900)},
		fin(4, 2, "done", "relay-1.1", 5010),
		claim(6, 1, "pending", "relay-1.1", 90), fin(6, 1, "dead", "relay-1.1", 110),
		claim(7, 1, "pending", "relay-1.1", 90),
		{ID: 7, OldStatus: "processing", NewStatus: "processing", OldLV: 1, NewLV: 2, OldAttempts: 1, NewAttempts: 2, OldOwner: "relay-1.1", NewOwner: "relay-2.1", App: "relay-2.1", At: at(2900)},
		{ID: 7, OldStatus: "processing", NewStatus: "processing", OldLV: 2, NewLV: 3, OldAttempts: 2, NewAttempts: 3, OldOwner: "relay-2.1", NewOwner: "relay-3.1", App: "relay-3.1", At: at(5900)},
		{ID: 7, OldStatus: "processing", NewStatus: "dead", OldLV: 3, NewLV: 3, OldAttempts: 3, NewAttempts: 3, OldOwner: "relay-3.1", App: "relay-4.1",
			NewLastError: reapError + " (worker crash?)", At: at(9000)},
		claim(8, 1, "pending", "relay-4.1", 90), fin(8, 1, "done", "relay-4.1", 110),
	}
	return h
}

func TestCheckCleanHistoryPasses(t *testing.T) {
	r := Check(clean())
	if !r.OK() {
		t.Fatalf("clean history reported violations:\n%s", r.Summary())
	}
	if r.Duplicates != 1 || r.DuplicatesBy["takeover after pause"] != 1 {
		t.Errorf("duplicates = %d %v, want 1 takeover after pause", r.Duplicates, r.DuplicatesBy)
	}
	if r.Done != 5 || r.Dead != 2 || r.Lost != 0 || r.Recoveries != 3 {
		t.Errorf("done %d dead %d lost %d recoveries %d", r.Done, r.Dead, r.Lost, r.Recoveries)
	}
}

// Each case breaks one invariant of the clean history; the checker must
// name it.
func TestCheckDetectsEachViolation(t *testing.T) {
	cases := []struct {
		name      string
		invariant string
		mutate    func(h *History)
	}{
		{"committed event missing from the table", "committed-event-missing", func(h *History) { h.CommittedTx["tx4"] = 2 }},
		{"rolled-back event present in the table", "rolled-back-event-exists", func(h *History) { h.RolledBackTx = append(h.RolledBackTx, "tx4") }},
		{"rolled-back event delivered", "rolled-back-delivered", func(h *History) {
			h.Deliveries = append(h.Deliveries, Delivery{ID: 5, Relay: "relay-1", At: at(50), Status: 200, Tx: "tx2"})
		}},
		{"uncertain transaction half there", "transaction-not-atomic", func(h *History) {
			delete(h.CommittedTx, "tx3")
			h.UncertainTx["tx3"] = 3
		}},
		{"row of an unknown transaction", "unknown-event", func(h *History) { delete(h.CommittedTx, "tx4") }},
		{"row left pending", "left-pending", func(h *History) { h.Rows[6].Status = "pending" }},
		{"row left processing", "left-processing", func(h *History) { h.Rows[6].Status = "processing" }},
		{"done but never accepted", "done-not-delivered", func(h *History) { h.Deliveries[10].Status = 503 }},
		{"permanent failure done", "dead-expected", func(h *History) { h.Rows[4].Status = "done" }},
		{"dead without reason", "dead-unexplained", func(h *History) { h.Rows[6].Status = "dead" }},
		{"poison dead before max attempts", "poison-not-reaped", func(h *History) { h.Rows[5].Attempts = 2 }},
		{"poison dead by another path", "poison-not-reaped", func(h *History) { h.Rows[5].LastError = "permanent: 422" }},
		{"more arrivals than claims", "arrivals-exceed-claims", func(h *History) {
			h.Deliveries = append(h.Deliveries, Delivery{ID: 8, Relay: "relay-4", At: at(120), Status: 503, Tx: "tx4"})
		}},
		{"duplicate without takeover", "duplicate-unexplained", func(h *History) {
			h.Rows[6].LeaseVersion = 2
			h.Deliveries = append(h.Deliveries, Delivery{ID: 8, Relay: "relay-4", At: at(120), Status: 200, Tx: "tx4"})
			h.Audit = append(h.Audit, Transition{ID: 8, OldStatus: "pending", NewStatus: "processing", OldLV: 1, NewLV: 2,
				OldAttempts: 1, NewAttempts: 2, NewOwner: "relay-4.1", App: "relay-4.1", At: at(115)})
		}},
		{"ordered event first delivered before its predecessor", "order", func(h *History) { h.Deliveries[1].At = at(50) }},
		{"ordered event delivered while its predecessor was never accepted", "order", func(h *History) {
			h.Deliveries[0].Status = 503
			h.Rows[0].Status = "dead"
			h.Rows[0].Attempts = 3
		}},
		{"order follows seq, not id", "order", func(h *History) { h.Rows[1].Seq = 9 }},
		{"versioned event first delivered before a lower version", "order-by-version", func(h *History) { h.Rows[0].Version = 3 }},
		{"lease_version decreased", "lease-version-decreased", func(h *History) { h.Audit[1].NewLV = 0 }},
		{"claim skipped a version", "claim-not-plus-one", func(h *History) {
			h.Audit[0].NewLV = 2
		}},
		{"claim without spending an attempt", "claim-not-plus-one", func(h *History) { h.Audit[0].NewAttempts = 0 }},
		{"claim of a done row", "claim-of-final-row", func(h *History) { h.Audit[2].OldStatus = "done" }},
		{"claim written by another session", "claim-by-other", func(h *History) { h.Audit[2].App = "relay-9.1" }},
		{"fenced write moved the token", "fenced-write-moved-token", func(h *History) { h.Audit[3].NewLV = 2 }},
		{"stale owner finalized", "stale-owner-write", func(h *History) { h.Audit[3].App = "relay-2.1" }},
		{"unfenced write to a pending row", "unfenced-write", func(h *History) {
			h.Audit = append(h.Audit, Transition{ID: 8, OldStatus: "pending", NewStatus: "done", OldLV: 1, NewLV: 1, At: at(111)})
		}},
		{"pending row's attempts changed without a claim", "unfenced-write", func(h *History) {
			h.Audit = append(h.Audit, Transition{ID: 8, OldStatus: "pending", NewStatus: "pending", OldLV: 1, NewLV: 1, OldAttempts: 1, NewAttempts: 0, At: at(111)})
		}},
		{"done row changed", "unfenced-write", func(h *History) {
			h.Audit = append(h.Audit, Transition{ID: 8, OldStatus: "done", NewStatus: "pending", OldLV: 1, NewLV: 1, At: at(9999)})
		}},
		{"claims missing from the audit", "audit-incomplete", func(h *History) { h.Rows[6].LeaseVersion = 2 }},
		{"row updated without any audit", "audit-incomplete", func(h *History) {
			var kept []Transition
			for _, tr := range h.Audit {
				if tr.ID != 8 {
					kept = append(kept, tr)
				}
			}
			h.Audit = kept
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := clean()
			tc.mutate(&h)
			r := Check(h)
			if r.Counts[tc.invariant] == 0 {
				t.Fatalf("violation %q not detected; got:\n%s", tc.invariant, r.Summary())
			}
		})
	}
}

// A head hand-off (migration 00005) flags a pending row and stamps its txid:
// audited as pending -> pending with nothing else changed. It is
// counted, not a violation.
func TestCheckCountsSweepRequeuesAsNoViolation(t *testing.T) {
	h := clean()
	h.Audit = append(h.Audit, Transition{ID: 8, OldStatus: "pending", NewStatus: "pending", OldLV: 1, NewLV: 1,
		OldAttempts: 1, NewAttempts: 1, App: "relay-1.1", At: at(2950)})
	r := Check(h)
	if !r.OK() || r.Requeues != 1 {
		t.Fatalf("requeues %d, want 1 and no violation:\n%s", r.Requeues, r.Summary())
	}
}

func TestCheckCountsLostAndOrder(t *testing.T) {
	h := clean()
	h.Rows[6].Status = "pending"
	h.Deliveries[1].At = at(50)
	r := Check(h)
	if r.Lost != 1 || r.OrderViolations != 1 {
		t.Fatalf("lost %d order %d, want 1 and 1:\n%s", r.Lost, r.OrderViolations, r.Summary())
	}
}

func TestCheckExplainsLostAnswer(t *testing.T) {
	// The receiver accepted, the relay timed out and rescheduled; the next
	// claim delivered again: a duplicate explained by the lost answer.
	h := clean()
	h.Rows[6].LeaseVersion, h.Rows[6].Attempts = 2, 2
	h.Deliveries = append(h.Deliveries, Delivery{ID: 8, Relay: "relay-1", At: at(3000), Status: 200, Tx: "tx4"})
	var kept []Transition
	for _, tr := range h.Audit {
		if tr.ID != 8 {
			kept = append(kept, tr)
		}
	}
	h.Audit = append(kept,
		Transition{ID: 8, OldStatus: "pending", NewStatus: "processing", OldLV: 0, NewLV: 1, NewAttempts: 1, NewOwner: "relay-4.1", App: "relay-4.1", At: at(90)},
		Transition{ID: 8, OldStatus: "processing", NewStatus: "pending", OldLV: 1, NewLV: 1, OldAttempts: 1, NewAttempts: 1, OldOwner: "relay-4.1", App: "relay-4.1", At: at(1100)},
		Transition{ID: 8, OldStatus: "pending", NewStatus: "processing", OldLV: 1, NewLV: 2, OldAttempts: 1, NewAttempts: 2, NewOwner: "relay-1.1", App: "relay-1.1", At: at(2990)},
		Transition{ID: 8, OldStatus: "processing", NewStatus: "done", OldLV: 2, NewLV: 2, OldAttempts: 2, NewAttempts: 2, OldOwner: "relay-1.1", App: "relay-1.1", At: at(3010)},
	)
	r := Check(h)
	if !r.OK() {
		t.Fatalf("violations:\n%s", r.Summary())
	}
	if r.DuplicatesBy["answer lost (publish timed out after the receiver accepted)"] != 1 {
		t.Fatalf("duplicates by cause: %v", r.DuplicatesBy)
	}
}

func TestAnswer(t *testing.T) {
	cases := []struct {
		fate   string
		n      int
		status int
		slow   bool
	}{
		{FateOK, 1, http.StatusOK, false},
		{Fate503, 1, 503, false}, {Fate503, 2, 200, false},
		{Fate503x2, 2, 503, false}, {Fate503x2, 3, 200, false},
		{Fate429, 1, 429, false}, {FateDefer, 1, 425, false}, {FateDefer, 2, 200, false},
		{FateSlow, 1, 503, true}, {FateSlow, 2, 200, false},
		{FatePerm, 5, 422, false}, {FateExhaust, 9, 500, false},
	}
	for _, c := range cases {
		status, _, slow := answer(c.fate, c.n)
		if status != c.status || slow != c.slow {
			t.Errorf("answer(%s, %d) = %d slow %v, want %d slow %v", c.fate, c.n, status, slow, c.status, c.slow)
		}
	}
}

func TestScheduleIsSeeded(t *testing.T) {
	o := options{duration: 2 * time.Minute, relays: 4, lease: 2 * time.Second, faultEvery: 3 * time.Second, pgRestarts: 1, poison: 1}
	a, b := schedule(42, o), schedule(42, o)
	if len(a) == 0 || len(a) != len(b) {
		t.Fatalf("schedules differ in length: %d %d", len(a), len(b))
	}
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("entry %d differs: %+v vs %+v", i, a[i], b[i])
		}
	}
	kinds := map[string]int{}
	for _, f := range a {
		kinds[f.Kind]++
		if f.Kind == "pause" && f.Dur <= o.lease {
			t.Errorf("pause of %s is not longer than the lease", f.Dur)
		}
	}
	for _, k := range []string{"kill", "pause", "terminate", "pgrestart", "poison"} {
		if kinds[k] == 0 {
			t.Errorf("no %s in the schedule: %v", k, kinds)
		}
	}
	if c := schedule(43, o); len(c) == len(a) && c[0] == a[0] {
		t.Errorf("seed 43 gave the same schedule start as seed 42")
	}
}
