package queries_test

// The fencing token across a failover to an asynchronous standby: the
// standby never received the last claim, so the row is back at the older
// lease_version and the next claim hands the same lease_version out again.
// The lost claim's writes must still get 0 rows: the token is the pair
// (lease_owner, lease_version), and owners differ.

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgoutbox/pgoutbox/db"
)

// loseClaim puts the row back as a standby that never received the claim
// c would have it: pending, the claim's lease_version and attempt undone.
func (b *bundle) loseClaim(t *testing.T, c claimed) {
	t.Helper()
	_, err := b.pool.Exec(context.Background(), `UPDATE outbox
		   SET status = 'pending', lease_version = lease_version - 1, attempts = attempts - 1,
		       lease_owner = NULL, lease_until = NULL
		 WHERE id = $1 AND lease_version = $2`, c.ID, c.LeaseVersion)
	if err != nil {
		t.Fatal(err)
	}
}

// fencedWrites is every write (and the fenced read) a claim's holder makes
// after the claim, run with the claim's token c. Each returns the rows it
// matched.
var fencedWrites = []struct {
	name string
	run  func(ctx context.Context, q *db.Queries, c claimed) (int64, error)
}{
	{"OutboxMarkDoneMany", func(ctx context.Context, q *db.Queries, c claimed) (int64, error) {
		ids, err := q.OutboxMarkDoneMany(ctx, db.OutboxMarkDoneManyParams{
			Ids: []int64{c.ID}, LeaseVersions: []int64{c.LeaseVersion}, LeaseOwners: []string{c.Owner}})
		return int64(len(ids)), err
	}},
	{"OutboxFinalizeMany done", finalizeManyAs("done")},
	{"OutboxFinalizeMany retry", finalizeManyAs("retry")},
	{"OutboxFinalizeMany defer", finalizeManyAs("defer")},
	{"OutboxFinalizeMany dead", finalizeManyAs("dead")},
	{"OutboxFinalizeMany release", finalizeManyAs("release")},
	{"OutboxExtendLease", func(ctx context.Context, q *db.Queries, c claimed) (int64, error) {
		return q.OutboxExtendLease(ctx, db.OutboxExtendLeaseParams{ID: c.ID, LeaseVersion: c.LeaseVersion, LeaseOwner: c.Owner, Lease: time.Hour})
	}},
	{"OutboxIsolateRead", func(ctx context.Context, q *db.Queries, c claimed) (int64, error) {
		_, err := q.OutboxIsolateRead(ctx, db.OutboxIsolateReadParams{ID: c.ID, LeaseVersion: c.LeaseVersion, LeaseOwner: c.Owner})
		if errors.Is(err, pgx.ErrNoRows) {
			return 0, nil
		}
		return 1, err
	}},
}

// finalizeManyAs is OutboxFinalizeMany writing one outcome for c.
func finalizeManyAs(outcome string) func(ctx context.Context, q *db.Queries, c claimed) (int64, error) {
	return func(ctx context.Context, q *db.Queries, c claimed) (int64, error) {
		got, err := q.OutboxFinalizeMany(ctx, db.OutboxFinalizeManyParams{
			Ids: []int64{c.ID}, LeaseVersions: []int64{c.LeaseVersion}, LeaseOwners: []string{c.Owner},
			Outcomes: []string{outcome}, DelaysUs: []int64{0}, Errors: []string{"503"}, MaxDeferAge: time.Hour})
		if err != nil {
			return 0, err
		}
		return int64(len(got.Ids)), nil
	}
}

// A claim lost in a failover (the row went back to the previous
// lease_version) is followed by a new claim with the same lease_version and
// another owner: every fenced write of the lost claim gets 0 rows and leaves
// the new claim's row exactly as it was; the same write by the new owner
// matches its row.
func TestFencedWrites_LostClaimWithSameVersionOtherOwnerGetsZeroRows(t *testing.T) {
	t.Parallel()
	for _, w := range fencedWrites {
		t.Run(w.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			b.seed(t, 1, "a")
			ctx := context.Background()
			lost := b.claim(t, "relay-a/run1.1", 1, time.Minute, 12)[0]
			b.loseClaim(t, lost)
			again := b.claim(t, "relay-b/run2.1", 1, time.Minute, 12)[0]
			if again.ID != lost.ID || again.LeaseVersion != lost.LeaseVersion {
				t.Fatalf("re-claim got id %d lease_version %d, want the lost claim's id %d and lease_version %d",
					again.ID, again.LeaseVersion, lost.ID, lost.LeaseVersion)
			}
			leaseUntil := func() time.Time {
				var u time.Time
				if err := b.pool.QueryRow(ctx, `SELECT lease_until FROM outbox WHERE id = $1`, lost.ID).Scan(&u); err != nil {
					t.Fatal(err)
				}
				return u
			}
			before, untilBefore := b.row(t, lost.ID), leaseUntil()
			n, err := w.run(ctx, b.q, lost)
			if err != nil {
				t.Fatal(err)
			}
			if n != 0 {
				t.Fatalf("%s with the lost claim's token (lease_version %d, owner %s) matched %d rows, want 0",
					w.name, lost.LeaseVersion, lost.Owner, n)
			}
			after, untilAfter := b.row(t, lost.ID), leaseUntil()
			if after.Status != "processing" || after.LeaseVersion != before.LeaseVersion || after.Attempts != before.Attempts ||
				after.LeaseOwner == nil || *after.LeaseOwner != again.Owner || after.LastError != nil || !untilAfter.Equal(untilBefore) {
				t.Fatalf("the lost claim's %s changed the new claim's row: before %+v (lease_until %v), after %+v (lease_until %v)",
					w.name, before, untilBefore, after, untilAfter)
			}
			if n, err := w.run(ctx, b.q, again); err != nil || n != 1 {
				t.Fatalf("%s by the new owner: n=%d err=%v, want 1 row", w.name, n, err)
			}
		})
	}
}
