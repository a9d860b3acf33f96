package dispatcher_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgoutbox/pgoutbox/db/opsdb"
	"github.com/pgoutbox/pgoutbox/dispatcher"
	"github.com/pgoutbox/pgoutbox/migrations"
)

// A database one migration behind this build holds events in every state a
// running outbox has: pending, leased by a relay that crashed, retrying,
// deferred, dead with its attempt history, done, skipped, ordered aggregates
// in mid-sequence (a delivered head, a leased head, a dead head blocking its
// aggregate), and ordered rows restored from another cluster, not yet
// sequenced. It is upgraded with the migrations while producers keep
// writing, then a relay of this build runs: every undelivered event is
// delivered once, ordered ones in their producers' commit order; the dead
// head still blocks its aggregate; done, dead and skipped rows and the
// attempt history read as before.
func TestUpgrade_FromThePreviousMigrationWhileProducersWriteLosesNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	m, err := migrations.FromPool(b.pool)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	from := migrations.Latest() - 1
	if _, err := m.DownTo(ctx, from); err != nil {
		t.Fatalf("down to %d: %v", from, err)
	}

	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := b.pool.Exec(ctx, sql, args...); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	one := func(agg string, ordered bool) int64 { t.Helper(); return b.enqueue(t, 1, agg, ordered)[0] }
	many := func(n int, agg string, ordered bool) []int64 {
		t.Helper()
		var ids []int64
		for i := 0; i < n; i++ { // one transaction each: commit order = id order
			ids = append(ids, one(agg, ordered))
		}
		return ids
	}
	var deliver []int64 // every event the relay must publish

	// Unordered, in every state.
	deliver = append(deliver, b.enqueue(t, 20, "pending", false)...)
	leased := b.enqueue(t, 5, "leased", false)
	exec(`UPDATE outbox SET status = 'processing', lease_owner = 'crashed-relay', lease_until = now() + interval '1 second',
	      lease_version = lease_version + 1, attempts = attempts + 1 WHERE id = ANY ($1)`, leased)
	retrying := b.enqueue(t, 5, "retrying", false)
	exec(`UPDATE outbox SET attempts = 2, lease_version = 2, available_at = now() + interval '500 milliseconds',
	      last_error = 'connection refused' WHERE id = ANY ($1)`, retrying)
	deferred := b.enqueue(t, 5, "deferred", false)
	exec(`UPDATE outbox SET available_at = now() + interval '700 milliseconds', lease_version = 1 WHERE id = ANY ($1)`, deferred)
	deliver = append(append(append(deliver, leased...), retrying...), deferred...)
	dead := b.enqueue(t, 3, "dead", false)
	exec(`UPDATE outbox SET status = 'dead', attempts = 5, lease_version = 5, last_error = 'permanent: 400' WHERE id = ANY ($1)`, dead)
	exec(`INSERT INTO outbox_attempts (message_id, slot, n, kind, attempt, error)
	      SELECT d, s, s, CASE WHEN s = 5 THEN 'dead' ELSE 'retry' END, s, 'failure ' || s
	        FROM unnest($1::bigint[]) AS d, generate_series(1, 5) AS s`, dead)
	done := b.enqueue(t, 10, "done", false)
	exec(`UPDATE outbox SET status = 'done', attempts = 1, lease_version = 1, done_at = now() WHERE id = ANY ($1)`, done)
	skipped := b.enqueue(t, 2, "skipped", false)
	exec(`UPDATE outbox SET status = 'skipped', attempts = 5, lease_version = 5, done_at = now(),
	      last_error = 'skipped: by hand' WHERE id = ANY ($1)`, skipped)

	// Ordered aggregates in mid-sequence.
	mid := many(4, "mid", true)
	exec(`UPDATE outbox SET status = 'done', attempts = 1, lease_version = 1, done_at = now() WHERE id = $1`, mid[0])
	held := many(3, "held", true)
	exec(`UPDATE outbox SET status = 'processing', lease_owner = 'crashed-relay', lease_until = now() + interval '1 second',
	      lease_version = 1, attempts = 1 WHERE id = $1`, held[0])
	blocked := many(2, "blocked", true)
	exec(`UPDATE outbox SET status = 'dead', attempts = 5, lease_version = 5, last_error = 'permanent: 422' WHERE id = $1`, blocked[0])
	// Restored from another cluster: written with triggers off, unsequenced.
	var restored []int64
	err = pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SET LOCAL session_replication_role = replica"); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload, ordered)
			SELECT 'order', a, 'E', '{}', true FROM unnest(ARRAY['mid', 'restored', 'restored']) AS a RETURNING id`)
		if err != nil {
			return err
		}
		restored, err = pgx.CollectRows(rows, pgx.RowTo[int64])
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	wantOrder := map[string][]int64{
		"mid":      append(slices.Clone(mid[1:]), restored[0]),
		"held":     held,
		"restored": restored[1:],
	}
	deliver = append(append(append(deliver, mid[1:]...), held...), restored...)

	// Producers keep writing through the upgrade: unordered, and ordered into
	// aggregates of their own (one producer per aggregate, so its commit
	// order is the order it wrote in).
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	produced := map[string][]int64{}
	for p := 0; p < 3; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				agg, ordered := fmt.Sprintf("live-%d", p), p > 0
				tx, err := b.pool.Begin(ctx)
				if err != nil {
					t.Error(err)
					return
				}
				id, err := dispatcher.Enqueue(ctx, tx, dispatcher.Event{AggregateType: "order", AggregateID: agg,
					EventType: "OrderEvent", Payload: []byte(fmt.Sprintf(`{"n":%d}`, i)), Ordered: ordered})
				if err == nil {
					err = tx.Commit(ctx)
				}
				if err != nil {
					_ = tx.Rollback(ctx)
					t.Errorf("producer %d during the upgrade: %v", p, err)
					return
				}
				mu.Lock()
				produced[agg] = append(produced[agg], id)
				mu.Unlock()
			}
		}()
	}
	waitFor(t, 10*time.Second, "producers writing", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(produced["live-0"]) > 20 && len(produced["live-2"]) > 20
	})
	if _, err := m.Up(ctx); err != nil {
		close(stop)
		wg.Wait()
		t.Fatalf("up from %d while producers write: %v", from, err)
	}
	if v, err := m.Version(ctx); err != nil || v != migrations.Latest() {
		t.Fatalf("version %d (%v) after up, want %d", v, err, migrations.Latest())
	}
	mu.Lock()
	before := len(produced["live-0"]) + len(produced["live-1"]) + len(produced["live-2"])
	mu.Unlock()
	waitFor(t, 10*time.Second, "producers writing after the upgrade", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(produced["live-0"])+len(produced["live-1"])+len(produced["live-2"]) > before+30
	})
	close(stop)
	wg.Wait()
	for agg, ids := range produced {
		deliver = append(deliver, ids...)
		if agg != "live-0" {
			wantOrder[agg] = ids
		}
	}

	rec := newRecorder(nil)
	d, _ := b.start(t, rec, fast(dispatcher.Config{}))
	missing := func() (ids []int64) {
		for _, id := range deliver {
			if rec.count(id) == 0 {
				ids = append(ids, id)
			}
		}
		return ids
	}
	for deadline := time.Now().Add(60 * time.Second); len(missing()) > 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("after 60 s, %d of the %d undelivered events were not delivered: %v", len(missing()), len(deliver), missing())
		}
	}
	// A moment more for anything that should not be delivered to show up.
	time.Sleep(300 * time.Millisecond)
	for _, id := range deliver {
		if n := rec.count(id); n != 1 {
			t.Errorf("event %d published %d times, want once", id, n)
		}
	}
	if n := rec.published(); n != len(deliver) {
		t.Errorf("%d publishes, want %d (the undelivered events, once each)", n, len(deliver))
	}
	rec.mu.Lock()
	for agg, want := range wantOrder {
		if got := rec.order[agg]; !slices.Equal(got, want) {
			t.Errorf("aggregate %s published as %v, want commit order %v", agg, got, want)
		}
	}
	if got := rec.order["blocked"]; len(got) != 0 {
		t.Errorf("aggregate blocked behind its dead head published %v, want nothing", got)
	}
	rec.mu.Unlock()
	if s := b.state(t, blocked[1]); s.Status != "pending" {
		t.Errorf("the event behind the dead head is %s, want pending", s.Status)
	}

	for _, c := range []struct {
		status string
		ids    []int64
	}{{"dead", dead}, {"dead", blocked[:1]}, {"done", done}, {"done", mid[:1]}, {"skipped", skipped}} {
		if n := b.count(t, "id = ANY ($1) AND status = $2", c.ids, c.status); n != len(c.ids) {
			t.Errorf("%d of %v are %s after the upgrade, want all", n, c.ids, c.status)
		}
	}
	for _, id := range dead {
		h, err := opsdb.New(b.pool).OutboxAttemptHistory(ctx, id)
		if err != nil || len(h) != 5 || h[0].Kind != "dead" || h[0].Error == nil || *h[0].Error != "failure 5" {
			t.Errorf("attempt history of dead %d after the upgrade: %d entries (%v), want 5, newest the death", id, len(h), err)
		}
	}
	if st := d.Stats(); st.Repaired < int64(len(restored)) {
		t.Errorf("Stats().Repaired = %d, want the %d restored rows", st.Repaired, len(restored))
	}
}
