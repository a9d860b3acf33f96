package dispatcher_test

import (
	"context"
	"testing"
	"time"

	"github.com/pgoutbox/pgoutbox/dispatcher"
)

// The recovery lane reads expired leases from a cursor (the previous pass's
// database time, minus a margin), so a pass does not step over the dead
// index entries of every claim made under a long-held snapshot. A row whose
// lease expired while another transaction held it (SKIP LOCKED passes it)
// is behind the cursor once that transaction rolls back: the pass that
// reads from the start, once per SweepInterval, recovers it.
func TestRecovery_ExpiredLeaseLockedDuringPassesIsRecoveredByTheFullPass(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	ids := b.enqueue(t, 1, "a", false)
	if _, err := b.pool.Exec(ctx, `UPDATE outbox SET status = 'processing', lease_owner = 'gone/1.1', lease_version = 1,
		attempts = 1, lease_until = now() - interval '1 minute' WHERE id = $1`, ids[0]); err != nil {
		t.Fatal(err)
	}
	other, err := b.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Rollback(ctx) //nolint:errcheck
	if _, err := other.Exec(ctx, `SELECT id FROM outbox WHERE id = $1 FOR UPDATE`, ids[0]); err != nil {
		t.Fatal(err)
	}
	rec := newRecorder(nil)
	d, _ := b.start(t, rec, fast(dispatcher.Config{ReapInterval: 20 * time.Millisecond, SweepInterval: 2 * time.Second}))
	// Passes run while the row is locked and the cursor moves past its lease
	// (on a machine too busy to run one meanwhile, the first pass after the
	// rollback reads from the start and the test proves less, never fails).
	time.Sleep(500 * time.Millisecond)
	if rec.count(ids[0]) != 0 {
		t.Fatal("the locked row was recovered while another transaction held it")
	}
	if err := other.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 15*time.Second, "the expired lease behind the cursor", func() bool { return rec.count(ids[0]) == 1 })
	if got := d.Stats().Recovered; got != 1 {
		t.Fatalf("Stats().Recovered = %d, want 1", got)
	}
}
