package queries_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/pgoutbox/pgoutbox/db"
	"github.com/pgoutbox/pgoutbox/db/opsdb"
)

func (b *bundle) history(t *testing.T, id int64) []*opsdb.OutboxAttemptHistoryRow {
	t.Helper()
	h, err := b.ops.OutboxAttemptHistory(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func (b *bundle) historyRows(t *testing.T) int {
	t.Helper()
	var n int
	if err := b.pool.QueryRow(context.Background(), `SELECT count(*) FROM outbox_attempts`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// Each failed publish gets a history entry in the batch writer's statement,
// with its claim, attempt, error and the receiver's answer; a delivered row
// and a row handed back unstarted get none, and a row whose lease was lost
// gets none either (the entry is fenced like the outcome).
func TestAttemptHistory_WrittenWithTheFailureFenced(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.seed(t, 5, "a")
	cs := b.claim(t, "w", 5, time.Minute, 12)
	if _, err := b.pool.Exec(context.Background(), `UPDATE outbox SET lease_version = lease_version + 1 WHERE id = $1`, cs[4].ID); err != nil {
		t.Fatal(err)
	}
	p := db.OutboxFinalizeManyParams{
		Outcomes:    []string{"done", "retry", "dead", "release", "retry"},
		Errors:      []string{"", "webhook: receiver answered 500", "webhook: receiver answered 422", "", "lost"},
		History:     []string{"", "retry", "dead", "", "retry"},
		Answers:     []string{"", "HTTP 500 Internal Server Error: boom", "HTTP 422 Unprocessable Entity: {\"bad\":1}", "", ""},
		MaxDeferAge: time.Hour, UnorderedOnly: true,
	}
	for _, c := range cs {
		p.Ids, p.LeaseVersions, p.LeaseOwners = append(p.Ids, c.ID), append(p.LeaseVersions, c.LeaseVersion), append(p.LeaseOwners, c.Owner)
		p.DelaysUs = append(p.DelaysUs, 0)
	}
	if _, err := b.q.OutboxFinalizeMany(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	if n := b.historyRows(t); n != 2 {
		t.Fatalf("history rows = %d, want 2 (the retry and the dead)", n)
	}
	h := b.history(t, cs[1].ID)
	if len(h) != 1 || h[0].N != 1 || h[0].Kind != "retry" || h[0].Attempt != 1 || *h[0].Actor != cs[1].Owner ||
		*h[0].Error != "webhook: receiver answered 500" || *h[0].Answer != "HTTP 500 Internal Server Error: boom" {
		t.Fatalf("history of the retried message: %+v", h[0])
	}
	h = b.history(t, cs[2].ID)
	if len(h) != 1 || h[0].Kind != "dead" || *h[0].Answer != `HTTP 422 Unprocessable Entity: {"bad":1}` {
		t.Fatalf("history of the dead message: %+v", h)
	}
}

// The history keeps the last 20 entries of a message, numbered over its
// whole life: a redrive (attempts back to 0) loses no count, and the 25th
// failure overwrites the 5th.
func TestAttemptHistory_KeepsTheLast20AndCountsThemAll(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := b.seed(t, 1, "a")
	ctx := context.Background()
	for i := 1; i <= 25; i++ {
		cs := b.claim(t, "w", 1, time.Minute, 100)
		if len(cs) != 1 {
			t.Fatalf("round %d: claimed %d", i, len(cs))
		}
		outcome := "retry"
		if i == 10 {
			outcome = "dead"
		}
		if _, err := b.q.OutboxFinalizeMany(ctx, db.OutboxFinalizeManyParams{
			Ids: []int64{cs[0].ID}, LeaseVersions: []int64{cs[0].LeaseVersion}, LeaseOwners: []string{cs[0].Owner},
			Outcomes: []string{outcome}, DelaysUs: []int64{0}, Errors: []string{"boom"}, History: []string{outcome}, Answers: []string{""},
			MaxDeferAge: time.Hour, UnorderedOnly: true,
		}); err != nil {
			t.Fatal(err)
		}
		if i == 10 {
			if n, err := b.ops.OutboxRedriveDead(ctx, ids[0]); err != nil || n != 1 {
				t.Fatalf("redrive: %d, %v", n, err)
			}
		}
	}
	h := b.history(t, ids[0])
	if len(h) != 20 || h[0].N != 25 || h[19].N != 6 {
		t.Fatalf("history: %d entries, newest %d, oldest %d; want 20, 25, 6", len(h), h[0].N, h[len(h)-1].N)
	}
	if h[0].Attempt != 15 {
		t.Errorf("the 25th entry's attempt = %d, want 15 (attempts restarted at the redrive after the 10th)", h[0].Attempt)
	}
	if h[15].N != 10 || h[15].Kind != "dead" {
		t.Errorf("entry 10: %+v, want kind dead", h[15])
	}
	if n := b.historyRows(t); n != 20 {
		t.Errorf("rows = %d, want 20", n)
	}
}

// A done message is delivered again on request with its id (the
// idempotency key) unchanged and a 'redeliver' entry naming who asked;
// ordered, undelivered and missing ids are reported and left alone.
func TestRedeliverDone_UnorderedOnly(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	b.seed(t, 2, "a")
	ordered := b.seedOrdered(t, 1, "o")
	cs := b.claim(t, "w", 2, time.Minute, 12)
	for _, c := range cs {
		b.markDone(t, c)
	}
	oc := b.claimOrdered(t, "w", 1)
	b.markDone(t, oc[0])
	pendingID := b.seed(t, 1, "p")[0]
	got, err := b.ops.OutboxRedeliverDone(ctx, opsdb.OutboxRedeliverDoneParams{Ids: []int64{cs[0].ID, ordered[0], pendingID, 999999, cs[0].ID}, Actor: "ops"})
	if err != nil {
		t.Fatal(err)
	}
	want := map[int64]string{cs[0].ID: "redelivered", ordered[0]: "ordered", pendingID: "pending", 999999: "missing"}
	if len(got) != len(want) {
		t.Fatalf("results: %+v", got)
	}
	for _, r := range got {
		if want[r.ID] != r.Result {
			t.Errorf("id %d: %s, want %s", r.ID, r.Result, want[r.ID])
		}
	}
	if r := b.row(t, cs[0].ID); r.Status != "pending" {
		t.Errorf("redelivered row: %+v", r)
	}
	h := b.history(t, cs[0].ID)
	if len(h) != 1 || h[0].Kind != "redeliver" || *h[0].Actor != "ops" || h[0].Attempt != 1 {
		t.Errorf("history: %+v", h)
	}
	again := b.claim(t, "w2", 5, time.Minute, 12)
	claimedIDs := map[int64]bool{}
	for _, c := range again {
		claimedIDs[c.ID] = true
	}
	if !claimedIDs[cs[0].ID] || claimedIDs[cs[1].ID] {
		t.Fatalf("claimed after redeliver: %+v; want %d and not %d", again, cs[0].ID, cs[1].ID)
	}
}

// Redeliveries keep a ring of their own: the last 5, whatever the
// failures do.
func TestRedeliverDone_KeepsTheLast5Redeliveries(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	id := b.seed(t, 1, "a")[0]
	for i := 1; i <= 7; i++ {
		cs := b.claim(t, "w", 1, time.Minute, 100)
		if len(cs) != 1 {
			t.Fatalf("round %d: claimed %d", i, len(cs))
		}
		b.markDone(t, cs[0])
		got, err := b.ops.OutboxRedeliverDone(ctx, opsdb.OutboxRedeliverDoneParams{Ids: []int64{id}, Actor: fmt.Sprintf("ops-%d", i)})
		if err != nil || len(got) != 1 || got[0].Result != "redelivered" {
			t.Fatalf("round %d: %+v, %v", i, got, err)
		}
	}
	h := b.history(t, id)
	if len(h) != 5 || *h[0].Actor != "ops-7" || h[0].N != 7 || *h[4].Actor != "ops-3" {
		t.Fatalf("history: %d entries, newest %+v, oldest %+v; want 5, ops-7 (claim 7) to ops-3", len(h), h[0], h[len(h)-1])
	}
}
