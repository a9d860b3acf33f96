package queries_test

// One test per row of the seed's section 7 table, at the query level.

import (
	"context"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// 4 workers claim 200 rows at the same time: 200 distinct ids, no duplicates.
func TestClaim_FourConcurrentClaimersGetDistinctRows(t *testing.T) {
	t.Parallel()
	b := setup(t)
	want := b.seed(t, 200, "a")

	var (
		mu  sync.Mutex
		got []int64
		wg  sync.WaitGroup
	)
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				rows, err := claimWith(context.Background(), b.q, "w", 7, time.Minute, 12)
				if err != nil {
					t.Error(err)
					return
				}
				if len(rows) == 0 {
					return
				}
				mu.Lock()
				for _, r := range rows {
					got = append(got, r.ID)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	sort.Slice(got, func(i, j int) bool { return got[i] < got[j] })
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("claimed ids (-want +got):\n%s", diff)
	}
}

// The broken dispatcher (SELECT ... FOR UPDATE SKIP LOCKED, COMMIT, then
// publish) publishes every message twice when a second worker runs during
// the first one's publish: row locks end at COMMIT.
func TestBrokenDispatcher_PublishesEachMessageTwice(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.seed(t, 3, "a")
	ctx := context.Background()
	rec := newRecorder()

	brokenClaim := func() []int64 {
		tx, err := b.pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx) //nolint:errcheck
		rows, err := tx.Query(ctx, `SELECT id FROM outbox WHERE status = 'pending' ORDER BY id LIMIT 50 FOR UPDATE SKIP LOCKED`)
		if err != nil {
			t.Fatal(err)
		}
		var ids []int64
		for rows.Next() {
			var id int64
			if err := rows.Scan(&id); err != nil {
				t.Fatal(err)
			}
			ids = append(ids, id)
		}
		if err := tx.Commit(ctx); err != nil { // the locks end here
			t.Fatal(err)
		}
		return ids
	}
	publishAndMark := func(ids []int64) {
		for _, id := range ids {
			_ = rec.publish(ctx, id, "", nil)
			if _, err := b.pool.Exec(ctx, `UPDATE outbox SET status = 'done', done_at = now() WHERE id = $1`, id); err != nil {
				t.Fatal(err)
			}
		}
	}

	a := brokenClaim()    // worker A claims and commits, then stalls in publish
	bIDs := brokenClaim() // worker B runs meanwhile and gets the same rows
	publishAndMark(a)     // A's publish completes
	publishAndMark(bIDs)  // B publishes the same messages again
	if diff := cmp.Diff(a, bIDs); diff != "" {
		t.Fatalf("B should have claimed A's rows (-A +B):\n%s", diff)
	}
	for _, id := range a {
		if rec.count[id] != 2 {
			t.Errorf("message %d published %d times, want 2 (the failure the lease design fixes)", id, rec.count[id])
		}
	}
	// The lease claim does not: while A holds the lease, B gets nothing.
	b.seed(t, 3, "b")
	if got := b.claim(t, "A", 50, time.Minute, 12); len(got) != 3 {
		t.Fatalf("A claimed %d, want 3", len(got))
	}
	if got := b.claim(t, "B", 50, time.Minute, 12); len(got) != 0 {
		t.Fatalf("B claimed %d rows under A's lease, want 0", len(got))
	}
}

// 4 workers run dispatch_once over 100 rows: each published once, all done.
func TestDispatchOnce_FourWorkersPublishEachMessageOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := b.seed(t, 100, "a")
	rec := newRecorder()

	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				n, lost, err := dispatchOnce(context.Background(), b.q, rec.publish, "w", 10, time.Minute, 12)
				if err != nil {
					t.Error(err)
					return
				}
				if lost != 0 {
					t.Errorf("lost %d leases without any expiry", lost)
				}
				if n == 0 {
					return
				}
			}
		}()
	}
	wg.Wait()
	for _, id := range ids {
		if rec.count[id] != 1 {
			t.Errorf("message %d published %d times, want 1", id, rec.count[id])
		}
	}
	if got := b.countStatus(t, "done"); got != 100 {
		t.Fatalf("done = %d, want 100", got)
	}
}

// A worker claims and stops (a crash): while its lease runs nobody else can
// claim; once it expires another worker re-claims with lease_version + 1, and
// the crashed worker's late MarkDone is fenced off (0 rows).
func TestCrashedWorker_LeaseExpiresAndStaleFinalizeIsFenced(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.seed(t, 1, "a")

	as := b.claim(t, "A", 10, 200*time.Millisecond, 12)
	if len(as) != 1 {
		t.Fatalf("A claimed %d, want 1", len(as))
	}
	if got := b.claim(t, "B", 10, 30*time.Second, 12); len(got) != 0 {
		t.Fatalf("B claimed %v during A's lease", got)
	}
	b.waitLeasesExpired(t)
	bs := b.claim(t, "B", 10, 30*time.Second, 12)
	if len(bs) != 1 {
		t.Fatalf("B claimed %d after expiry, want 1", len(bs))
	}
	a, bb := as[0], bs[0]
	if bb.ID != a.ID || bb.LeaseVersion != a.LeaseVersion+1 || bb.Attempts != 2 {
		t.Fatalf("B got %+v, want id %d, lease_version %d, attempts 2", bb, a.ID, a.LeaseVersion+1)
	}
	if b.markDone(t, a) {
		t.Fatal("stale MarkDone by A succeeded; the fencing token must reject it")
	}
	if !b.markDone(t, bb) {
		t.Fatal("MarkDone by the current owner B failed")
	}
	if r := b.row(t, a.ID); r.Status != "done" || r.LeaseVersion != bb.LeaseVersion {
		t.Fatalf("row = %+v, want done at lease_version %d", r, bb.LeaseVersion)
	}
}

// The lease expired but nobody took over: the original worker's MarkDone
// still succeeds (the generation decides, not the clock).
func TestExpiredLeaseNotTakenOver_OriginalFinalizeSucceeds(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.seed(t, 1, "a")
	as := b.claim(t, "A", 10, 100*time.Millisecond, 12)
	b.waitLeasesExpired(t)
	if !b.markDone(t, as[0]) {
		t.Fatal("MarkDone after expiry without takeover should succeed")
	}
	if r := b.row(t, as[0].ID); r.Status != "done" {
		t.Fatalf("status = %s, want done", r.Status)
	}
}

// A retryable failure three times with max attempts 3: pending (attempts 1),
// pending (attempts 2), dead (attempts 3).
func TestRetryableThreeTimes_EndsDeadAtMaxAttempts(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.seed(t, 1, "a")[0]
	failing := func(context.Context, int64, string, []byte) error { return retryableErr{"503 from broker"} }

	want := []row{
		{Status: "pending", Attempts: 1},
		{Status: "pending", Attempts: 2},
		{Status: "dead", Attempts: 3},
	}
	for i, w := range want {
		// the backoff is at most 10 ms in this test; wait for it
		deadline := time.Now().Add(5 * time.Second)
		for {
			n, _, err := dispatchOnce(context.Background(), b.q, failing, "w", 10, time.Minute, 3)
			if err != nil {
				t.Fatal(err)
			}
			if n == 1 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("round %d: message never became claimable", i+1)
			}
			time.Sleep(5 * time.Millisecond)
		}
		got := b.row(t, id)
		if got.Status != w.Status || got.Attempts != w.Attempts {
			t.Fatalf("round %d: got %s attempts=%d, want %s attempts=%d", i+1, got.Status, got.Attempts, w.Status, w.Attempts)
		}
		if got.LastError == nil || *got.LastError == "" {
			t.Fatalf("round %d: last_error not recorded", i+1)
		}
	}
}

// A business defer: pending again, attempts refunded to 0, available_at moved
// into the future.
func TestDefer_RefundsTheAttemptAndMovesAvailableAt(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.seed(t, 1, "a")[0]
	deferring := func(context.Context, int64, string, []byte) error {
		return deferErr{delay: time.Hour, reason: "customer account not created yet"}
	}
	if n, _, err := dispatchOnce(context.Background(), b.q, deferring, "w", 10, time.Minute, 3); err != nil || n != 1 {
		t.Fatalf("dispatch: n=%d err=%v", n, err)
	}
	got := b.row(t, id)
	if got.Status != "pending" || got.Attempts != 0 || got.Available {
		t.Fatalf("got %+v, want pending, attempts 0, available_at in the future", got)
	}
	if got.LeaseOwner != nil {
		t.Fatalf("lease_owner = %q, want NULL after release", *got.LeaseOwner)
	}
	if rows := b.claim(t, "w", 10, time.Minute, 3); len(rows) != 0 {
		t.Fatalf("deferred message claimed before its time: %v", rows)
	}
}

// A permanent failure goes straight to dead.
func TestPermanent_GoesStraightToDead(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.seed(t, 1, "a")[0]
	rejecting := func(context.Context, int64, string, []byte) error { return permanentErr{"422 invalid payload"} }
	if n, _, err := dispatchOnce(context.Background(), b.q, rejecting, "w", 10, time.Minute, 3); err != nil || n != 1 {
		t.Fatalf("dispatch: n=%d err=%v", n, err)
	}
	got := b.row(t, id)
	if got.Status != "dead" || got.Attempts != 1 || got.LastError == nil || *got.LastError != "422 invalid payload" {
		t.Fatalf("got %+v, want dead after 1 attempt with the error kept", got)
	}
}

// Claiming without finalizing three times (a worker that crashes every time)
// with max attempts 3: dead at attempts 3 via the reap, never claimed again.
func TestClaimWithoutFinalizeThreeTimes_ReapedDeadAtMaxAttempts(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.seed(t, 1, "a")[0]
	for i := 1; i <= 3; i++ {
		got := b.claim(t, "crashy", 10, 50*time.Millisecond, 3)
		if len(got) != 1 || got[0].Attempts != int32(i) {
			t.Fatalf("crash %d: claimed %+v, want the message at attempts %d", i, got, i)
		}
		b.waitLeasesExpired(t) // the worker died; its lease runs out
	}
	if got := b.claim(t, "w", 10, time.Minute, 3); len(got) != 0 {
		t.Fatalf("claimed again after max attempts: %+v", got)
	}
	got := b.row(t, id)
	if got.Status != "dead" || got.Attempts != 3 {
		t.Fatalf("got %+v, want dead at attempts 3", got)
	}
	if *got.LastError != "lease expired after max attempts (worker crash?)" {
		t.Fatalf("last_error = %q", *got.LastError)
	}
}

// Ordered claim: aggregates X (3 rows) and Y (2 rows). The first claim gets
// only the heads; the next head becomes claimable once its predecessor is done.
func TestOrderedClaim_OnlyHeadsThenNextAfterDone(t *testing.T) {
	t.Parallel()
	b := setup(t)
	x := b.seedOrdered(t, 3, "X")
	y := b.seedOrdered(t, 2, "Y")

	first := claimOrderedN(t, b, 2)
	if diff := cmp.Diff([]int64{x[0], y[0]}, ids(first)); diff != "" {
		t.Fatalf("first claim (-want +got):\n%s", diff)
	}
	if got := b.claimOrdered(t, "w", 50); len(got) != 0 {
		t.Fatalf("second claim while heads are in flight: %v", got)
	}
	b.markDone(t, first[0]) // X's head done
	next := claimOrderedN(t, b, 1)
	if diff := cmp.Diff([]int64{x[1]}, ids(next)); diff != "" {
		t.Fatalf("after X head done (-want +got):\n%s", diff)
	}
}

// Ordered claim: one aggregate with 30 rows, 4 workers at once: the finalize
// order equals the id order.
func TestOrderedClaim_FourWorkersFinalizeInIDOrder(t *testing.T) {
	t.Parallel()
	b := setup(t)
	want := b.seedOrdered(t, 30, "A")
	var (
		mu    sync.Mutex
		order []int64
		wg    sync.WaitGroup
	)
	deadline := time.Now().Add(30 * time.Second)
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := context.Background()
			for time.Now().Before(deadline) {
				rows, err := claimOrderedWith(ctx, b.q, "w", 10)
				if err != nil {
					t.Error(err)
					return
				}
				for _, r := range rows {
					mu.Lock() // finalize and record atomically, as the order witness
					n, err := markDoneOne(ctx, b.q, r)
					if err == nil && n == 1 {
						order = append(order, r.ID)
					}
					done := len(order)
					mu.Unlock()
					if err != nil {
						t.Error(err)
						return
					}
					if done == len(want) {
						return
					}
				}
				mu.Lock()
				done := len(order)
				mu.Unlock()
				if done == len(want) {
					return
				}
			}
		}()
	}
	wg.Wait()
	if diff := cmp.Diff(want, order); diff != "" {
		t.Fatalf("finalize order (-id order +got):\n%s", diff)
	}
}

func ids(cs []claimed) []int64 {
	out := make([]int64, len(cs))
	for i, c := range cs {
		out[i] = c.ID
	}
	return out
}
