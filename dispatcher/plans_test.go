package dispatcher_test

import (
	"context"
	"testing"
	"time"

	"github.com/pgoutbox/pgoutbox/dispatcher"
)

// The statistics say the outbox is empty (it was analyzed empty, as after a
// purge or on a new table), the dispatcher claims on it many times, then the
// table fills. Its claims and finalizes must keep using the indexes: a
// generic plan cached from the empty statistics would scan the whole table
// on every claim (measured in the sustained benchmark: 150 ms for a claim of
// 1,040 rows). pg_stat_user_tables counts the rows sequential scans of
// outbox read (rows, not scans: a scan of the empty table is fine, and
// backends report their counts up to seconds late).
func TestPlans_QueriesKeepUsingIndexesAfterTheTableWasAnalyzedEmpty(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	if _, err := b.pool.Exec(ctx, "ANALYZE outbox"); err != nil {
		t.Fatal(err)
	}
	rec := newRecorder(nil)
	d, _ := b.start(t, rec, fast(dispatcher.Config{PollInterval: 5 * time.Millisecond, Batch: 20, StatsInterval: -1}))
	// Well over the five executions after which PostgreSQL considers a
	// generic plan, on the empty table: each idle wait follows a claim
	// pass that found nothing.
	waitFor(t, 30*time.Second, "20 empty claim passes", func() bool { return d.Stats().IdleWaits+d.Stats().WakePolls >= 20 })
	if _, err := b.pool.Exec(ctx, `INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload, status, done_at)
SELECT 'order', 'old-' || g, 'OrderPlaced', '{}', 'done', now() FROM generate_series(1, 50000) AS g`); err != nil {
		t.Fatal(err)
	}
	seqRead := func() int64 {
		time.Sleep(1100 * time.Millisecond) // backends flush table statistics at most once a second
		var n int64
		if err := b.pool.QueryRow(ctx, "SELECT seq_tup_read FROM pg_stat_user_tables WHERE relname = 'outbox'").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	before := seqRead()
	var ids []int64
	for i := 0; i < 20; i++ {
		ids = append(ids, b.enqueue(t, 10, "a", false)...)
	}
	waitFor(t, 30*time.Second, "200 published and finalized", func() bool { return d.Stats().Published == int64(len(ids)) })
	for _, id := range ids {
		if rec.count(id) != 1 {
			t.Fatalf("message %d published %d times", id, rec.count(id))
		}
	}
	if after := seqRead(); after != before {
		t.Fatalf("sequential scans read %d rows of outbox while the dispatcher claimed and finalized 200 messages beside 50,000 done rows; want 0", after-before)
	}
}
