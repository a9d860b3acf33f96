package queries_test

// The guarantees this project adds beyond the seed's table, and the article
// the seed grew from (003): concurrent claims in open transactions.

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5"

	"github.com/pgoutbox/pgoutbox/db"
	"github.com/pgoutbox/pgoutbox/db/opsdb"
)

// Two transactions claim at the same time, both still open: they get
// different rows. Rolling both back returns every row to claimable.
func TestClaim_TwoOpenTransactionsGetDifferentRowsAndRollbackRestoresAll(t *testing.T) {
	t.Parallel()
	b := setup(t)
	all := b.seed(t, 3, "a")
	ctx := context.Background()

	txA, err := b.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer txA.Rollback(ctx) //nolint:errcheck
	txB, err := b.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer txB.Rollback(ctx) //nolint:errcheck
	claimIn := func(tx pgx.Tx) []int64 {
		rows, err := claimPendingWith(ctx, db.New(tx), "x", 1, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		var out []int64
		for _, r := range rows {
			out = append(out, r.ID)
		}
		return out
	}
	a, bb := claimIn(txA), claimIn(txB)
	if diff := cmp.Diff([]int64{all[0]}, a); diff != "" {
		t.Fatalf("A (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]int64{all[1]}, bb); diff != "" {
		t.Fatalf("B skipped A's locked row and should get the next (-want +got):\n%s", diff)
	}
	if err := txB.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := txA.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if got := ids(b.claim(t, "c", 10, time.Minute, 12)); !cmp.Equal(all, got) {
		t.Fatalf("after rollback claimable = %v, want %v", got, all)
	}
}

// MarkDoneMany finalizes, in one statement, only the rows whose
// lease_version still matches; it returns exactly those ids.
func TestMarkDoneMany_FinalizesOnlyRowsWhoseVersionMatches(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.seed(t, 4, "a")
	cs := b.claim(t, "w", 10, time.Minute, 12)
	ctx := context.Background()
	// Row 1 is taken over: its lease_version moves on.
	if _, err := b.pool.Exec(ctx, `UPDATE outbox SET lease_version = lease_version + 1 WHERE id = $1`, cs[1].ID); err != nil {
		t.Fatal(err)
	}
	// Row 3 was reaped to dead meanwhile.
	if _, err := b.pool.Exec(ctx, `UPDATE outbox SET status = 'dead', lease_owner = NULL, lease_until = NULL WHERE id = $1`, cs[3].ID); err != nil {
		t.Fatal(err)
	}
	var idsArg, versions []int64
	var owners []string
	for _, c := range cs {
		idsArg = append(idsArg, c.ID)
		versions = append(versions, c.LeaseVersion)
		owners = append(owners, c.Owner)
	}
	done, err := b.q.OutboxMarkDoneMany(ctx, db.OutboxMarkDoneManyParams{Ids: idsArg, LeaseVersions: versions, LeaseOwners: owners})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(done)
	if diff := cmp.Diff([]int64{cs[0].ID, cs[2].ID}, done); diff != "" {
		t.Fatalf("finalized (-want +got):\n%s", diff)
	}
	if r := b.row(t, cs[1].ID); r.Status != "processing" {
		t.Fatalf("taken-over row = %s, want still processing for its new owner", r.Status)
	}
	if r := b.row(t, cs[3].ID); r.Status != "dead" {
		t.Fatalf("reaped row = %s, want dead untouched", r.Status)
	}
}

// ExtendLease by a stale version changes nothing; by the owner it moves
// lease_until forward.
func TestExtendLease_StaleVersionChangesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.seed(t, 1, "a")
	c := b.claim(t, "w", 1, time.Second, 12)[0]
	ctx := context.Background()
	leaseUntil := func() time.Time {
		var u time.Time
		if err := b.pool.QueryRow(ctx, `SELECT lease_until FROM outbox WHERE id = $1`, c.ID).Scan(&u); err != nil {
			t.Fatal(err)
		}
		return u
	}
	before := leaseUntil()
	n, err := b.q.OutboxExtendLease(ctx, db.OutboxExtendLeaseParams{ID: c.ID, LeaseVersion: c.LeaseVersion - 1, LeaseOwner: c.Owner, Lease: time.Hour})
	if err != nil || n != 0 {
		t.Fatalf("stale extend: n=%d err=%v, want 0 rows", n, err)
	}
	if got := leaseUntil(); !got.Equal(before) {
		t.Fatalf("stale extend moved lease_until from %v to %v", before, got)
	}
	n, err = b.q.OutboxExtendLease(ctx, db.OutboxExtendLeaseParams{ID: c.ID, LeaseVersion: c.LeaseVersion, LeaseOwner: c.Owner, Lease: time.Hour})
	if err != nil || n != 1 {
		t.Fatalf("owner extend: n=%d err=%v, want 1 row", n, err)
	}
	if got := leaseUntil(); got.Sub(before) < 50*time.Minute {
		t.Fatalf("owner extend moved lease_until only by %v", got.Sub(before))
	}
}

// Every write after a claim is fenced: a stale lease_version changes nothing
// for a retry, a defer, a dead or a hand-back (release) either.
func TestFencedWrites_StaleVersionChangesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.seed(t, 1, "a")
	c := b.claim(t, "w", 1, time.Minute, 12)[0]
	ctx := context.Background()
	stale := c.LeaseVersion - 1
	old := c
	old.LeaseVersion = stale
	for _, outcome := range []string{"retry", "dead", "defer", "release"} {
		if got, err := finalizeOne(ctx, b.q, old, outcome, 0, "x", time.Hour); err != nil || got != "" {
			t.Fatalf("%s: wrote %q, err=%v; want nothing written", outcome, got, err)
		}
	}
	if r := b.row(t, c.ID); r.Status != "processing" || r.Attempts != 1 || r.LeaseVersion != c.LeaseVersion {
		t.Fatalf("row changed by stale writes: %+v", r)
	}
}

// A defer past the maximum age (database clock, from created_at) goes to
// dead instead of waiting forever; within it, back to pending refunded.
func TestDefer_PastMaxAgeGoesDead(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.seed(t, 2, "a")
	cs := b.claim(t, "w", 2, time.Minute, 12)
	ctx := context.Background()
	if _, err := b.pool.Exec(ctx, `UPDATE outbox SET created_at = now() - interval '2 days' WHERE id = $1`, cs[0].ID); err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{"dead", "pending"} {
		got, err := finalizeOne(ctx, b.q, cs[i], "defer", time.Minute, "waiting for customer", 24*time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Fatalf("message %d: status %s, want %s", i, got, want)
		}
	}
	if r := b.row(t, cs[0].ID); !strings.HasPrefix(*r.LastError, "deferred past max age") || r.Attempts != 0 {
		t.Fatalf("dead row: %+v", r)
	}
}

// last_error is truncated in SQL to 500 characters by the batch writer, for
// one row alone and for several.
func TestLastError_TruncatedTo500Characters(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.seed(t, 2, "a")
	cs := b.claim(t, "w", 2, time.Minute, 12)
	long := strings.Repeat("é", 2000)
	if got, err := finalizeOne(context.Background(), b.q, cs[0], "dead", 0, long, 0); err != nil || got != "dead" {
		t.Fatalf("wrote %q, err=%v", got, err)
	}
	b.finalizeMany(t, cs[1:], []string{"dead"}, []time.Duration{0}, []string{long}, true)
	for _, c := range cs {
		if got := len([]rune(*b.row(t, c.ID).LastError)); got != 500 {
			t.Fatalf("id %d: last_error has %d characters, want 500", c.ID, got)
		}
	}
}

// Releasing claimed-but-unstarted messages refunds the attempt and makes them
// claimable again at once.
func TestReleaseMany_HandsBackWithAttemptRefunded(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.seed(t, 3, "a")
	cs := b.claim(t, "w", 3, time.Minute, 12)
	idsArg := ids(cs)
	outcomes := []string{"release", "release", "release"}
	got := b.finalizeMany(t, cs, outcomes, make([]time.Duration, 3), make([]string, 3), true)
	if diff := cmp.Diff(idsArg, got.Ids); diff != "" {
		t.Fatalf("released (-want +got):\n%s", diff)
	}
	again := b.claim(t, "v", 3, time.Minute, 12)
	if diff := cmp.Diff(idsArg, ids(again)); diff != "" {
		t.Fatalf("re-claim (-want +got):\n%s", diff)
	}
	for _, c := range again {
		if c.Attempts != 1 {
			t.Fatalf("attempts = %d after release and re-claim, want 1", c.Attempts)
		}
	}
}

// An expired lease is re-claimed in isolation: the claim that finds one
// returns only that row, so a poison message's crashes cost its batch-mates
// at most the first attempt.
func TestClaim_ExpiredLeaseIsReclaimedAlone(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.seed(t, 5, "a")
	first := b.claim(t, "crashy", 2, 50*time.Millisecond, 12) // dies holding 2
	b.waitLeasesExpired(t)
	got := b.claim(t, "w", 10, time.Minute, 12)
	if len(got) != 1 || got[0].ID != first[0].ID || got[0].Attempts != 2 {
		t.Fatalf("claim after expiry = %+v, want only message %d at attempts 2", got, first[0].ID)
	}
	got = b.claim(t, "w", 10, time.Minute, 12)
	if len(got) != 1 || got[0].ID != first[1].ID {
		t.Fatalf("second claim = %+v, want only message %d", got, first[1].ID)
	}
	if got = b.claim(t, "w", 10, time.Minute, 12); len(got) != 3 {
		t.Fatalf("third claim = %+v, want the 3 never-claimed messages", got)
	}
}

// The operator's dead-letter queries: keyset-paged listing with filters,
// redrive (fresh start), skip (skipped, reason kept), and nothing for non-dead ids.
func TestDeadLetter_ListRedriveSkip(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.seed(t, 5, "a")
	cs := b.claim(t, "w", 5, time.Minute, 12)
	ctx := context.Background()
	for _, c := range cs[:4] {
		if got, err := finalizeOne(ctx, b.q, c, "dead", 0, "422", 0); err != nil || got != "dead" {
			t.Fatal(got, err)
		}
	}
	var listed []int64
	after := int64(0)
	for {
		page, err := b.ops.OutboxListDead(ctx, opsdb.OutboxListDeadParams{AfterID: after, Limit: 3})
		if err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 {
			break
		}
		for _, r := range page {
			listed = append(listed, r.ID)
		}
		after = page[len(page)-1].ID
	}
	if diff := cmp.Diff(ids(cs[:4]), listed); diff != "" {
		t.Fatalf("dead list (-want +got):\n%s", diff)
	}
	other := "Other"
	if page, err := b.ops.OutboxListDead(ctx, opsdb.OutboxListDeadParams{Limit: 10, EventType: &other}); err != nil || len(page) != 0 {
		t.Fatalf("filter by event type: %v %v", page, err)
	}
	if n, err := b.ops.OutboxRedriveDead(ctx, cs[0].ID); err != nil || n != 1 {
		t.Fatal(n, err)
	}
	if r := b.row(t, cs[0].ID); r.Status != "pending" || r.Attempts != 0 || !r.Available {
		t.Fatalf("redriven: %+v", r)
	}
	reason := "customer deleted"
	if n, err := b.ops.OutboxSkipDead(ctx, opsdb.OutboxSkipDeadParams{ID: cs[1].ID, Reason: &reason}); err != nil || n != 1 {
		t.Fatal(n, err)
	}
	if r := b.row(t, cs[1].ID); r.Status != "skipped" || *r.LastError != "skipped: customer deleted | 422" {
		t.Fatalf("skipped: %+v %q", r, *r.LastError)
	}
	// not dead: nothing changes
	if n, err := b.ops.OutboxRedriveDead(ctx, cs[4].ID); err != nil || n != 0 {
		t.Fatalf("redrive of a processing row: n=%d err=%v", n, err)
	}
	if n, err := b.ops.OutboxSkipDead(ctx, opsdb.OutboxSkipDeadParams{ID: 999999}); err != nil || n != 0 {
		t.Fatalf("skip of a missing id: n=%d err=%v", n, err)
	}
}

// Purge deletes only done rows older than the retention, in bounded batches.
func TestPurgeDone_BoundedAndOnlyOldDoneRows(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.seed(t, 10, "a")
	cs := b.claim(t, "w", 10, time.Minute, 12)
	ctx := context.Background()
	for _, c := range cs[:8] {
		b.markDone(t, c)
	}
	if _, err := b.pool.Exec(ctx, `UPDATE outbox SET done_at = now() - interval '8 days' WHERE id <= $1`, cs[6].ID); err != nil {
		t.Fatal(err)
	}
	var total int64
	for {
		n, err := b.ops.OutboxPurgeDone(ctx, opsdb.OutboxPurgeDoneParams{OlderThan: 7 * 24 * time.Hour, Limit: 3})
		if err != nil {
			t.Fatal(err)
		}
		if n > 3 {
			t.Fatalf("batch deleted %d rows, limit 3", n)
		}
		if n == 0 {
			break
		}
		total += n
	}
	if total != 7 {
		t.Fatalf("purged %d, want the 7 old done rows", total)
	}
	if got := b.countStatus(t, "done"); got != 1 {
		t.Fatalf("done left = %d, want the 1 recent", got)
	}
	if got := b.countStatus(t, "processing"); got != 2 {
		t.Fatalf("processing left = %d, want 2 untouched", got)
	}
}

// The monitoring queries answer the seed's section 6 questions.
func TestMonitoring_SeedQueries(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.seed(t, 6, "a")
	ctx := context.Background()
	cs := b.claim(t, "w", 3, 50*time.Millisecond, 12) // 3 processing, will expire
	if _, err := b.pool.Exec(ctx, `UPDATE outbox SET created_at = now() - interval '90 seconds' WHERE id = $1`, cs[0].ID); err != nil {
		t.Fatal(err)
	}
	b.markDone(t, cs[2])
	b.waitLeasesExpired(t)

	counts, err := b.ops.OutboxCountByStatus(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := []*opsdb.OutboxCountByStatusRow{{Status: "done", Count: 1}, {Status: "pending", Count: 3}, {Status: "processing", Count: 2}}
	if diff := cmp.Diff(want, counts); diff != "" {
		t.Fatalf("count by status (-want +got):\n%s", diff)
	}
	age, err := b.q.OutboxOldestPendingAge(ctx)
	if err != nil || age < 89 || age > 120 {
		t.Fatalf("oldest pending age = %v (err %v), want about 90 s", age, err)
	}
	exp, err := b.q.OutboxExpiredLeases(ctx)
	if err != nil || exp != 2 {
		t.Fatalf("expired leases = %d (err %v), want 2", exp, err)
	}
	hist, err := b.ops.OutboxAttemptsHistogram(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]*opsdb.OutboxAttemptsHistogramRow{{Attempts: 0, Count: 3}, {Attempts: 1, Count: 2}}, hist); diff != "" {
		t.Fatalf("attempts histogram (-want +got):\n%s", diff)
	}
	// The seed's own monitoring SQL runs unchanged against this schema.
	for _, q := range []string{
		`SELECT status, count(*) FROM outbox GROUP BY status`,
		`SELECT now() - min(created_at) AS oldest_pending_age FROM outbox WHERE status IN ('pending', 'processing')`,
		`SELECT count(*) AS expired_leases FROM outbox WHERE status = 'processing' AND lease_until < now()`,
		`SELECT attempts, count(*) FROM outbox WHERE status IN ('pending', 'processing') GROUP BY attempts ORDER BY attempts`,
		`SELECT id, aggregate_id, event_type, attempts, last_error, created_at FROM outbox WHERE status = 'dead' ORDER BY id`,
		`DELETE FROM outbox WHERE status = 'done' AND done_at < now() - interval '7 days'`,
	} {
		if _, err := b.pool.Exec(ctx, q); err != nil {
			t.Fatalf("seed SQL %q: %v", q, err)
		}
	}
}

// The claim of pending rows never takes an expired lease: those are the
// recovery lane's, one at a time (OutboxClaimExpired).
func TestClaim_PendingClaimSkipsExpiredLeases(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.seed(t, 3, "a")
	first := b.claim(t, "crashy", 1, 50*time.Millisecond, 12)
	b.waitLeasesExpired(t)
	rows, err := claimPendingWith(context.Background(), b.q, "busy", 10, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 2 {
		t.Fatalf("claimed %d, want the 2 pending rows only", len(rows))
	}
	for _, r := range rows {
		if r.ID == first[0].ID {
			t.Fatalf("expired lease %d claimed by the pending claim", r.ID)
		}
	}
	got := b.claim(t, "idle", 10, time.Minute, 12)
	if len(got) != 1 || got[0].ID != first[0].ID {
		t.Fatalf("idle claim = %+v, want the expired lease %d", got, first[0].ID)
	}
}

// OutboxClaimWindow and OutboxIsolateClaim are first-come by (txid, id): the
// oldest transaction's rows first, in insertion order, even where a younger
// transaction committed rows with lower ids first; a message made pending
// again (here a retry) carries its retry's txid and queues behind the rows
// already waiting. Each claim of one row takes the next in that order, and
// a claim of many returns them in it.
func TestClaim_FirstComeByTransactionThenInsertionOrder(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	retried := b.seed(t, 1, "r")[0]
	cs := b.claim(t, "w", 1, time.Minute, 12)
	if len(cs) != 1 || cs[0].ID != retried {
		t.Fatalf("first claim %+v, want %d", cs, retried)
	}
	older, err := b.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer older.Rollback(ctx) //nolint:errcheck
	// Its txid, taken before the younger transaction's.
	if _, err := older.Exec(ctx, `SELECT pg_current_xact_id()`); err != nil {
		t.Fatal(err)
	}
	ins := func(tx pgx.Tx, agg string) int64 {
		t.Helper()
		var id int64
		if err := tx.QueryRow(ctx, `INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
		    VALUES ('order', $1, 'OrderEvent', '{}') RETURNING id`, agg).Scan(&id); err != nil {
			t.Fatal(err)
		}
		return id
	}
	younger, err := b.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer younger.Rollback(ctx) //nolint:errcheck
	y1, y2 := ins(younger, "y"), ins(younger, "y")
	if err := younger.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	o1, o2 := ins(older, "o"), ins(older, "o")
	if err := older.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	// The first message fails once and is rescheduled with no delay:
	// pending again, with the txid of its retry.
	if got, err := finalizeOne(ctx, b.q, claimed{ID: retried, LeaseVersion: cs[0].LeaseVersion, Owner: "w"}, "retry", 0, "boom", 0); err != nil || got != "pending" {
		t.Fatalf("retry: %q, %v", got, err)
	}
	if !(y1 < y2 && y2 < o1 && o1 < o2 && retried < y1) {
		t.Fatalf("setup: ids retried %d, younger %d %d, older %d %d", retried, y1, y2, o1, o2)
	}
	want := []int64{o1, o2, y1, y2, retried}

	// One claim of all, rolled back: returned in claim order.
	tx, err := b.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	rows, err := claimPendingWith(ctx, db.New(tx), "x", 10, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	var all []int64
	for _, r := range rows {
		all = append(all, r.ID)
	}
	if diff := cmp.Diff(want, all); diff != "" {
		t.Fatalf("OutboxClaimWindow of 10, rows in returned order (-want +got):\n%s", diff)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	// One row at a time, alternating the two claims.
	var got []int64
	for i := range want {
		if i%2 == 0 {
			rs, err := claimPendingWith(ctx, b.q, "x", 1, time.Minute)
			if err != nil || len(rs) != 1 {
				t.Fatalf("claim %d: %d rows, %v", i, len(rs), err)
			}
			got = append(got, rs[0].ID)
		} else {
			rs, err := b.q.OutboxIsolateClaim(ctx, db.OutboxIsolateClaimParams{Owner: "x", Batch: 1, Lease: time.Minute})
			if err != nil || len(rs) != 1 {
				t.Fatalf("isolate claim %d: %d rows, %v", i, len(rs), err)
			}
			got = append(got, rs[0].ID)
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("claim order (-want +got):\n%s", diff)
	}
}
