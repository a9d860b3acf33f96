package queries_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/pgoutbox/pgoutbox/db"
)

// OutboxClaimPassed bounded by an earlier cursor position (@since,
// @due_since) claims what the cursor passed since then: rows of
// transactions committed after @since (from its xmax, and those on its xip
// list), and rows that came due after @due_since; nothing visible in @since
// that was due by @due_since. From the start ('1:1:', the zero time) it
// claims every passed row.
func TestClaimPassed_BoundedBySince(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	snapshot := func() (string, time.Time) {
		var s string
		var at time.Time
		if err := b.pool.QueryRow(ctx, `SELECT pg_current_snapshot()::text, now()`).Scan(&s, &at); err != nil {
			t.Fatal(err)
		}
		return s, at
	}
	before := b.seed(t, 1, "before")[0] // visible in since: not swept by the bounded sweep
	late, err := b.pool.Begin(ctx)      // open at since, commits before the lower snapshot
	if err != nil {
		t.Fatal(err)
	}
	defer late.Rollback(ctx) //nolint:errcheck
	var openAtSince int64
	if err := late.QueryRow(ctx, `INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
		VALUES ('order', 'open', 'E', '{}') RETURNING id`).Scan(&openAtSince); err != nil {
		t.Fatal(err)
	}
	// A row visible in since that comes due after since's due mark (a
	// scheduled event): swept by the due part.
	scheduled := b.seed(t, 1, "scheduled")[0]
	if _, err := b.pool.Exec(ctx, `UPDATE outbox SET available_at = now() + interval '300 ms' WHERE id = $1`, scheduled); err != nil {
		t.Fatal(err)
	}
	since, dueSince := snapshot()
	if err := late.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	after := b.seed(t, 1, "after")[0]
	time.Sleep(400 * time.Millisecond) // the scheduled row comes due (database clock)
	lower, dueAfter := snapshot()

	claim := func(since string, dueSince time.Time) []int64 {
		rows, err := b.q.OutboxClaimPassed(ctx, db.OutboxClaimPassedParams{Owner: "sweep", Lease: time.Minute, MaxRows: 100,
			Snapshot: lower, Since: since, DueAfter: dueAfter, DueSince: dueSince})
		if err != nil {
			t.Fatal(err)
		}
		var ids []int64
		for _, r := range rows {
			ids = append(ids, r.ID)
		}
		slices.Sort(ids)
		return ids
	}
	got := claim(since, dueSince)
	want := []int64{openAtSince, scheduled, after}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("bounded sweep claimed %v, want %v (the open-at-since, the came-due and the later row; not %d)", got, want, before)
	}
	if got := claim("1:1:", time.Time{}); !slices.Equal(got, []int64{before}) {
		t.Fatalf("sweep from the start then claimed %v, want [%d]", got, before)
	}
}
