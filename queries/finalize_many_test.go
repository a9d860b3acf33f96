package queries_test

import (
	"cmp"
	"context"
	"slices"
	"testing"
	"time"

	gocmp "github.com/google/go-cmp/cmp"

	"github.com/pgoutbox/pgoutbox/db"
)

// finalizeMany writes outcomes[i] for cs[i] with delays[i] and errs[i].
func (b *bundle) finalizeMany(t *testing.T, cs []claimed, outcomes []string, delays []time.Duration, errs []string, unorderedOnly bool) *db.OutboxFinalizeManyRow {
	t.Helper()
	p := db.OutboxFinalizeManyParams{Outcomes: outcomes, Errors: errs, MaxDeferAge: 24 * time.Hour, UnorderedOnly: unorderedOnly}
	for i, c := range cs {
		p.Ids = append(p.Ids, c.ID)
		p.LeaseVersions = append(p.LeaseVersions, c.LeaseVersion)
		p.LeaseOwners = append(p.LeaseOwners, c.Owner)
		p.DelaysUs = append(p.DelaysUs, delays[i].Microseconds())
	}
	got, err := b.q.OutboxFinalizeMany(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// One statement writes every outcome, each row fenced by its own token: a
// row taken over meanwhile is left alone and missing from the result.
func TestFinalizeMany_WritesEachOutcomeFenced(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.seed(t, 8, "a")
	cs := b.claim(t, "w", 8, time.Minute, 12)
	ctx := context.Background()
	if _, err := b.pool.Exec(ctx, `UPDATE outbox SET last_error = 'earlier' WHERE id = $1`, cs[5].ID); err != nil {
		t.Fatal(err)
	}
	if _, err := b.pool.Exec(ctx, `UPDATE outbox SET created_at = now() - interval '2 days' WHERE id = $1`, cs[3].ID); err != nil {
		t.Fatal(err)
	}
	// Row 7 is taken over: its lease_version moves on.
	if _, err := b.pool.Exec(ctx, `UPDATE outbox SET lease_version = lease_version + 1 WHERE id = $1`, cs[7].ID); err != nil {
		t.Fatal(err)
	}
	hour := time.Hour
	got := b.finalizeMany(t, cs,
		[]string{"done", "retry", "defer", "defer", "dead", "release", "release", "done"},
		[]time.Duration{0, hour, hour, hour, 0, 0, hour, 0},
		[]string{"", "500 boom", "not yet", "not yet", "422 bad", "", "503 down", ""}, true)
	wantIDs := []int64{cs[0].ID, cs[1].ID, cs[2].ID, cs[3].ID, cs[4].ID, cs[5].ID, cs[6].ID}
	wantStatus := []string{"done", "pending", "pending", "dead", "dead", "pending", "pending"}
	type written struct {
		ID     int64
		Status string
	}
	var gotW, wantW []written
	for i := range got.Ids {
		gotW = append(gotW, written{got.Ids[i], got.Statuses[i]})
	}
	for i := range wantIDs {
		wantW = append(wantW, written{wantIDs[i], wantStatus[i]})
	}
	slices.SortFunc(gotW, func(a, b written) int { return cmp.Compare(a.ID, b.ID) })
	if diff := gocmp.Diff(wantW, gotW); diff != "" {
		t.Fatalf("written (-want +got):\n%s", diff)
	}
	str := func(p *string) string {
		if p == nil {
			return "<nil>"
		}
		return *p
	}
	cases := []struct {
		i         int
		status    string
		attempts  int32
		available bool
		lastError string
	}{
		{0, "done", 1, true, "<nil>"},
		{1, "pending", 1, false, "500 boom"},                   // attempt spent, later
		{2, "pending", 0, false, "deferred: not yet"},          // attempt refunded, later
		{3, "dead", 0, true, "deferred past max age: not yet"}, // too old to defer
		{4, "dead", 1, true, "422 bad"},
		{5, "pending", 0, true, "earlier"},   // handed back now, last_error kept
		{6, "pending", 0, false, "503 down"}, // handed back later, refunded
		{7, "processing", 1, true, "<nil>"},  // another claim's: untouched
	}
	for _, c := range cases {
		r := b.row(t, cs[c.i].ID)
		if r.Status != c.status || r.Attempts != c.attempts || r.Available != c.available || str(r.LastError) != c.lastError {
			t.Errorf("row %d: status %s attempts %d available %v last_error %q; want %s %d %v %q",
				c.i, r.Status, r.Attempts, r.Available, str(r.LastError), c.status, c.attempts, c.available, c.lastError)
		}
		if c.status != "processing" && r.LeaseOwner != nil {
			t.Errorf("row %d: lease_owner %q left set", c.i, *r.LeaseOwner)
		}
	}
	var doneAt int
	if err := b.pool.QueryRow(ctx, `SELECT count(*) FROM outbox WHERE done_at IS NOT NULL`).Scan(&doneAt); err != nil || doneAt != 1 {
		t.Fatalf("rows with done_at: %d (%v), want the one done", doneAt, err)
	}
}

// An ordered head that becomes done hands its aggregate on; one that fails
// (retry, release) stays the head and is claimed again before the next.
func TestFinalizeMany_OrderedHeadsHandOffOnlyWhenDone(t *testing.T) {
	t.Parallel()
	b := setup(t)
	a := b.seedOrdered(t, 2, "a")
	r := b.seedOrdered(t, 2, "r")
	cs := b.claimOrdered(t, "w", 10)
	if diff := gocmp.Diff([]int64{a[0], r[0]}, ids(cs)); diff != "" {
		t.Fatalf("heads (-want +got):\n%s", diff)
	}
	b.finalizeMany(t, cs, []string{"done", "retry"}, []time.Duration{0, 0}, []string{"", "500"}, false)
	next := b.claimOrdered(t, "v", 10)
	if diff := gocmp.Diff([]int64{a[1], r[0]}, ids(next)); diff != "" {
		t.Fatalf("heads after done and retry (-want +got):\n%s", diff)
	}
	b.finalizeMany(t, next, []string{"release", "release"}, []time.Duration{0, 0}, []string{"", "503"}, false)
	again := b.claimOrdered(t, "u", 10)
	if diff := gocmp.Diff([]int64{a[1], r[0]}, ids(again)); diff != "" {
		t.Fatalf("heads after hand-backs (-want +got):\n%s", diff)
	}
}
