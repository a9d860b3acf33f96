package dispatcher

import (
	"testing"
	"time"

	"github.com/pgoutbox/pgoutbox/db"
)

// A claim cursor belongs to the server its snapshots came from.
func TestClaimCursor_SameServer(t *testing.T) {
	t.Parallel()
	s1 := "7714848543567689896/00000001/1796205600/1796205600"
	s2 := "7714848543567689896/00000001/1796205600/1796209200" // a crash restart
	cur := claimCursor{lower: "100:100:", lowerXmax: 100, server: s1}
	open := cur
	open.upper, open.upperXmax = "150:150:", 150
	cases := []struct {
		name string
		cur  claimCursor
		pre  db.OutboxClaimSnapshotRow
		want bool
	}{
		{"a new cursor takes any server", claimCursor{}, db.OutboxClaimSnapshotRow{Xmax: 5, Server: s2}, true},
		{"same server, xmax moved on", cur, db.OutboxClaimSnapshotRow{Xmax: 120, Server: s1}, true},
		{"same server, xmax unchanged", cur, db.OutboxClaimSnapshotRow{Xmax: 100, Server: s1}, true},
		{"another server (crash restart, promotion, a copy)", cur, db.OutboxClaimSnapshotRow{Xmax: 120, Server: s2}, false},
		{"xmax went back (txids handed out again)", cur, db.OutboxClaimSnapshotRow{Xmax: 90, Server: s1}, false},
		{"xmax went back behind an open window's upper snapshot", open, db.OutboxClaimSnapshotRow{Xmax: 140, Server: s1}, false},
	}
	for _, c := range cases {
		if got := c.cur.sameServer(c.pre); got != c.want {
			t.Errorf("%s: sameServer = %v, want %v", c.name, got, c.want)
		}
	}
	// begin starts a cursor of another server over.
	got := cur.begin(db.OutboxClaimSnapshotRow{Snapshot: "7:7:", Xmax: 7, Server: s2})
	if got.lower != cursorStart || got.server != s2 || got.upper != "7:7:" || got.afterTxid != 0 {
		t.Errorf("begin on another server = %+v, want the start cursor with a window up to 7:7: on %v", got, s2)
	}
}

// A claim inside an open window reuses the snapshot that opened it; between
// windows (and before the first) a claim reads a new one.
func TestClaimCursor_OpenedWindow(t *testing.T) {
	t.Parallel()
	s1 := "7714848543567689896/00000001/1796205600/1796205600"
	at := time.Date(2026, 12, 1, 10, 1, 0, 0, time.UTC)
	pre := db.OutboxClaimSnapshotRow{Snapshot: "150:150:", Xmax: 150, At: at, Server: s1}
	if _, ok := (claimCursor{}).opened(); ok {
		t.Fatal("the zero cursor has an open window")
	}
	open := claimCursor{lower: "100:100:", lowerXmax: 100, server: s1}.begin(pre)
	got, ok := open.opened()
	if !ok || got != pre {
		t.Fatalf("opened() = %+v, %v; want the snapshot that opened the window, %+v", got, ok, pre)
	}
	rows := []windowRow{{txid: 120, id: 1, lane: "fresh"}, {txid: 121, id: 2, lane: "fresh"}}
	if got, ok := open.advance(got, rows, 2).opened(); !ok || got != pre {
		t.Errorf("after a full claim: opened() = %+v, %v; want the same window", got, ok)
	}
	closed := open.advance(got, rows, 3)
	if _, ok := closed.opened(); ok {
		t.Errorf("after a short claim the window is still open: %+v", closed)
	}
	if closed.lower != pre.Snapshot || !closed.dueAfter.Equal(at) {
		t.Errorf("after a short claim: lower %q due after %v, want %q and %v", closed.lower, closed.dueAfter, pre.Snapshot, at)
	}
}

// A window closes when its own lanes (open, fresh) come back short, even
// when due rows filled the claim: retries that keep coming due must not keep
// it open, or later transactions are never claimed. The due mark moves only
// when the due lane came back short too.
func TestClaimCursor_DueRowsDoNotKeepTheWindowOpen(t *testing.T) {
	t.Parallel()
	s1 := "7714848543567689896/00000001/1796205600/1796205600"
	before := time.Date(2026, 12, 1, 10, 0, 1, 0, time.UTC)
	at := before.Add(time.Minute)
	pre := db.OutboxClaimSnapshotRow{Snapshot: "150:150:", Xmax: 150, At: at, Server: s1}
	open := claimCursor{lower: "100:100:", lowerXmax: 100, dueAfter: before, server: s1}.begin(pre)
	fullOfDue := []windowRow{{txid: 120, id: 1, lane: "fresh"}, {txid: 90, id: 7, lane: "due"}, {txid: 91, id: 8, lane: "due"}}
	got := open.advance(pre, fullOfDue, 3)
	if _, ok := got.opened(); ok {
		t.Fatalf("a claim filled by due rows kept the window open: %+v", got)
	}
	if got.lower != pre.Snapshot || !got.dueAfter.Equal(before) {
		t.Errorf("after a claim filled by due rows: lower %q due after %v, want %q and the old mark %v", got.lower, got.dueAfter, pre.Snapshot, before)
	}
	shortDue := open.advance(pre, fullOfDue[:2], 3)
	if shortDue.lower != pre.Snapshot || !shortDue.dueAfter.Equal(at) {
		t.Errorf("after a short claim with due rows: lower %q due after %v, want %q and %v", shortDue.lower, shortDue.dueAfter, pre.Snapshot, at)
	}
	fresh := []windowRow{{txid: 120, id: 1, lane: "open"}, {txid: 121, id: 2, lane: "fresh"}}
	if _, ok := open.advance(pre, fresh, 2).opened(); !ok {
		t.Error("a claim filled by its window's own rows closed the window")
	}
}

// The recovery lane's expired-lease cursor: from the start on the first
// pass, after a server change and once per sweep interval (or sweepDuty
// times the last full pass, when that is longer); otherwise from the
// previous pass's clock minus the margin.
func TestExpiredCursor_From(t *testing.T) {
	t.Parallel()
	s1 := "7714848543567689896/00000001/1796205600/1796205600"
	at := time.Date(2026, 12, 1, 10, 1, 0, 0, time.UTC)
	clock := db.OutboxClaimSnapshotRow{At: at, Server: s1}
	var c expiredCursor
	if from := c.from(clock, time.Hour); !from.IsZero() {
		t.Fatalf("first pass from %v, want the start", from)
	}
	c.passed(clock)
	if from := c.from(clock, time.Hour); !from.Equal(at.Add(-expiredCursorMargin)) {
		t.Fatalf("second pass from %v, want %v", from, at.Add(-expiredCursorMargin))
	}
	c.passed(clock)
	if from := c.from(db.OutboxClaimSnapshotRow{At: at, Server: s1 + "2"}, time.Hour); !from.IsZero() {
		t.Fatalf("pass on another server from %v, want the start", from)
	}
	c.passed(clock)
	c.lastFull = time.Now().Add(-2 * time.Second)
	if from := c.from(clock, time.Second); !from.IsZero() {
		t.Fatalf("pass after the sweep interval from %v, want the start", from)
	}
	c.passed(clock)
	// A full pass that took long paces the next one.
	c.fullTook = time.Second
	c.lastFull = time.Now().Add(-2 * time.Second)
	if from := c.from(clock, time.Second); from.IsZero() {
		t.Fatal("a full pass 2s after one that took 1s: want the cursor (sweepDuty), got the start")
	}
}
