package dispatcher_test

// The seed's dispatcher rows, end to end through the dispatcher API.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5"

	"github.com/pgoutbox/pgoutbox/db"
	"github.com/pgoutbox/pgoutbox/dispatcher"
)

// 4 dispatchers × 1,000 messages, no faults: each published exactly once,
// all done.
func TestDispatchers_FourShareTheTableAndPublishEachMessageOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var ids []int64
	for a := 0; a < 10; a++ {
		ids = append(ids, b.enqueue(t, 100, fmt.Sprintf("agg-%d", a), false)...)
	}
	rec := newRecorder(nil)
	var ds []*dispatcher.Dispatcher
	for i := 0; i < 4; i++ {
		d, _ := b.start(t, rec, fast(dispatcher.Config{Batch: 20, Concurrency: 4}))
		ds = append(ds, d)
	}
	waitFor(t, 60*time.Second, "1000 done", func() bool { return b.count(t, "status = 'done'") == 1000 })
	// The counters move once each finalize statement has returned, just
	// after its rows are visible.
	waitFor(t, 30*time.Second, "1000 counted published", func() bool {
		var n int64
		for _, d := range ds {
			n += d.Stats().Published
		}
		return n >= 1000
	})
	for _, id := range ids {
		if n := rec.count(id); n != 1 {
			t.Fatalf("message %d published %d times, want 1", id, n)
		}
	}
	var published, lost int64
	for _, d := range ds {
		published += d.Stats().Published
		lost += d.Stats().LeaseLost
	}
	if published != 1000 || lost != 0 {
		t.Fatalf("stats: published %d, lease lost %d; want 1000, 0", published, lost)
	}
}

// A publisher slower than the lease (it ignores its context, like a GC pause):
// another dispatcher takes the message over; the stale worker's finalize is
// rejected; the row is done once and the message was published twice.
func TestSlowPublisher_TakeoverFencesTheStaleFinalize(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.enqueue(t, 1, "a", false)[0]
	var first atomic.Bool
	takenOver := make(chan struct{})
	slowOnce := func(ctx context.Context, m dispatcher.Message) error {
		if first.CompareAndSwap(false, true) {
			// Longer than the lease, ignoring ctx (like a GC pause): it
			// returns only once the other dispatcher has taken the message
			// over, published it and finalized it.
			<-takenOver
			for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); {
				var done bool
				if err := b.pool.QueryRow(context.Background(), "SELECT status = 'done' FROM outbox WHERE id = $1", m.OutboxID).Scan(&done); err == nil && done {
					break
				}
				time.Sleep(5 * time.Millisecond) // polling a condition
			}
			return nil
		}
		close(takenOver)
		return nil
	}
	rec := newRecorder(slowOnce)
	var lostMu sync.Mutex
	var lost []int64
	cfg := fast(dispatcher.Config{Lease: 500 * time.Millisecond, PublishTimeout: 200 * time.Millisecond,
		OnLeaseLost: func(id, v int64) { lostMu.Lock(); lost = append(lost, id); lostMu.Unlock() }})
	a, _ := b.start(t, rec, cfg)
	waitFor(t, 30*time.Second, "A to start the slow publish", first.Load)
	bd, _ := b.start(t, rec, cfg)
	waitFor(t, 30*time.Second, "two publishes", func() bool { return rec.count(id) == 2 })
	waitFor(t, 30*time.Second, "the stale finalize to be rejected", func() bool {
		lostMu.Lock()
		defer lostMu.Unlock()
		return len(lost) == 1
	})
	if s := b.state(t, id); s.Status != "done" || s.Attempts != 2 {
		t.Fatalf("row = %+v, want done after 2 attempts", s)
	}
	if got := a.Stats().LeaseLost + bd.Stats().LeaseLost; got != 1 {
		t.Fatalf("lease lost = %d, want 1", got)
	}
	waitFor(t, 30*time.Second, "the takeover's finalize counted", func() bool { return a.Stats().Published+bd.Stats().Published >= 1 })
	if got := a.Stats().Published + bd.Stats().Published; got != 1 {
		t.Fatalf("finalized done = %d, want exactly 1", got)
	}
}

// The heartbeat keeps a publish that outlasts the lease from being taken over.
func TestHeartbeat_KeepsALongPublishFromBeingTakenOver(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.enqueue(t, 1, "a", false)[0]
	ctx := context.Background()
	// The publish lasts until the database clock is past twice the lease
	// it was claimed with: without extensions, the other dispatcher (which
	// looks for expired leases every 10ms) would have taken it over. The
	// lease is 3s and the heartbeat every 100ms, so an extension may be
	// late by seconds on a busy machine and still arrive in time.
	slow := func(pctx context.Context, m dispatcher.Message) error {
		var until time.Time
		if err := b.pool.QueryRow(ctx, `SELECT lease_until + (lease_until - now()) FROM outbox WHERE id = $1`, m.OutboxID).Scan(&until); err != nil {
			return err
		}
		for {
			var past bool
			if err := b.pool.QueryRow(ctx, `SELECT now() > $1`, until).Scan(&past); err != nil {
				return err
			}
			if past {
				return nil
			}
			select {
			case <-pctx.Done():
				return pctx.Err()
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
	rec := newRecorder(slow)
	cfg := fast(dispatcher.Config{Lease: 3 * time.Second, HeartbeatInterval: 100 * time.Millisecond, PublishTimeout: 30 * time.Second})
	a, _ := b.start(t, rec, cfg)
	c, _ := b.start(t, rec, cfg)
	waitFor(t, 60*time.Second, "done", func() bool { return b.state(t, id).Status == "done" })
	if n := rec.count(id); n != 1 {
		t.Fatalf("published %d times, want 1", n)
	}
	if s := b.state(t, id); s.Attempts != 1 {
		t.Fatalf("attempts = %d, want 1 (never taken over)", s.Attempts)
	}
	if hb := a.Stats().Heartbeats + c.Stats().Heartbeats; hb < 2 {
		t.Fatalf("heartbeats = %d, want the lease extended repeatedly", hb)
	}
}

// A failed heartbeat (lease taken over) cancels the publish's context.
func TestHeartbeat_LostLeaseCancelsThePublish(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.enqueue(t, 1, "a", false)[0]
	cancelled := make(chan error, 1)
	pub := dispatcher.PublisherFunc(func(ctx context.Context, m dispatcher.Message) error {
		<-ctx.Done()
		cancelled <- context.Cause(ctx)
		return ctx.Err()
	})
	_, _ = b.start(t, pub, fast(dispatcher.Config{Lease: 2 * time.Second, HeartbeatInterval: 100 * time.Millisecond, PublishTimeout: 30 * time.Second}))
	waitFor(t, 30*time.Second, "claim", func() bool { return b.state(t, id).Status == "processing" })
	// Another worker takes the lease over.
	if _, err := b.pool.Exec(context.Background(), `UPDATE outbox SET lease_version = lease_version + 1 WHERE id = $1`, id); err != nil {
		t.Fatal(err)
	}
	select {
	case cause := <-cancelled:
		if !errors.Is(cause, dispatcher.ErrLeaseLost) {
			t.Fatalf("publish cancelled with cause %v, want ErrLeaseLost", cause)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("publish was not cancelled after the lease was lost")
	}
}

// Each failure class lands in the right state with the right attempts.
func TestOutcomes_EachClassLandsInTheRightState(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		err    func(attempt int) error
		cfg    dispatcher.Config
		want   state
		status string
	}{
		{"retryable then success", func(a int) error {
			if a < 3 {
				return dispatcher.Retryable(errors.New("503"))
			}
			return nil
		}, dispatcher.Config{}, state{Status: "done", Attempts: 3}, ""},
		{"retryable exhausted", func(int) error { return dispatcher.Retryable(errors.New("503 again")) },
			dispatcher.Config{MaxAttempts: 3}, state{Status: "dead", Attempts: 3, LastError: "retries exhausted after 3 attempts: retryable: 503 again"}, ""},
		{"defer", func(int) error { return dispatcher.Defer(time.Hour, "customer not created yet") },
			dispatcher.Config{}, state{Status: "pending", Attempts: 0, LastError: "deferred: customer not created yet"}, ""},
		{"defer past max age", func(int) error { return dispatcher.Defer(time.Hour, "still waiting") },
			dispatcher.Config{MaxDeferAge: time.Nanosecond}, state{Status: "dead", Attempts: 0, LastError: "deferred past max age: still waiting"}, ""},
		{"permanent", func(int) error { return dispatcher.Permanent(errors.New("422 invalid")) },
			dispatcher.Config{}, state{Status: "dead", Attempts: 1, LastError: "permanent: 422 invalid"}, ""},
		{"unclassified as retryable", func(a int) error {
			if a == 1 {
				return errors.New("boom")
			}
			return nil
		}, dispatcher.Config{UnclassifiedErrors: dispatcher.UnclassifiedAsRetryable}, state{Status: "done", Attempts: 2}, ""},
		{"unclassified as permanent", func(int) error { return errors.New("boom") },
			dispatcher.Config{UnclassifiedErrors: dispatcher.UnclassifiedAsPermanent}, state{Status: "dead", Attempts: 1, LastError: "unclassified: boom"}, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			id := b.enqueue(t, 1, "a", false)[0]
			pub := dispatcher.PublisherFunc(func(ctx context.Context, m dispatcher.Message) error { return c.err(m.Attempt) })
			_, stop := b.start(t, pub, fast(c.cfg))
			waitFor(t, 30*time.Second, c.want.Status, func() bool {
				s := b.state(t, id)
				return s.Status == c.want.Status && s.Attempts == c.want.Attempts && s.LastError == c.want.LastError
			})
			stop()
			got := b.state(t, id)
			got.Available = false
			if diff := cmp.Diff(c.want, got); diff != "" {
				t.Fatalf("(-want +got):\n%s", diff)
			}
		})
	}
}

// A panic inside Publish, and by default an unclassified error, are treated
// as a crash of that message: no finalize, attempt spent, the lease recovers
// it (in isolation), and the dispatcher keeps serving the other messages.
func TestPanicAndUnclassified_TreatedAsCrashOfThatMessage(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"panic", "unclassified"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			ids := b.enqueue(t, 3, "a", false)
			bad := ids[1]
			pub := newRecorder(func(ctx context.Context, m dispatcher.Message) error {
				if m.OutboxID == bad && m.Attempt == 1 {
					if name == "panic" {
						panic("nil map write")
					}
					return errors.New("unexpected EOF")
				}
				return nil
			})
			d, _ := b.start(t, pub, fast(dispatcher.Config{Lease: 300 * time.Millisecond, PublishTimeout: 100 * time.Millisecond}))
			waitFor(t, 30*time.Second, "all done", func() bool { return b.count(t, "status = 'done'") == 3 })
			if s := b.state(t, bad); s.Attempts != 2 {
				t.Fatalf("bad message attempts = %d, want 2 (crash, then recovered)", s.Attempts)
			}
			st := d.Stats()
			if name == "panic" && st.Panics != 1 || name == "unclassified" && st.Unclassified != 1 {
				t.Fatalf("stats = %+v", st)
			}
			if st.Recovered != 1 {
				t.Fatalf("recovered = %d, want 1", st.Recovered)
			}
		})
	}
}

// Ordered mode with 4 dispatchers: per-aggregate publish order equals id order.
func TestOrdered_FourDispatchersPublishInIDOrderPerAggregate(t *testing.T) {
	t.Parallel()
	b := setup(t)
	want := map[string][]int64{}
	for round := 0; round < 5; round++ {
		for a := 0; a < 8; a++ {
			agg := fmt.Sprintf("agg-%d", a)
			want[agg] = append(want[agg], b.enqueue(t, 5, agg, true)...)
		}
	}
	jitter := func(ctx context.Context, m dispatcher.Message) error {
		time.Sleep(time.Duration(m.OutboxID%3) * time.Millisecond)
		return nil
	}
	rec := newRecorder(jitter)
	for i := 0; i < 4; i++ {
		b.start(t, rec, fast(dispatcher.Config{Batch: 10, Concurrency: 4}))
	}
	waitFor(t, 60*time.Second, "all done", func() bool { return b.count(t, "status = 'done'") == 200 })
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if diff := cmp.Diff(want, rec.order); diff != "" {
		t.Fatalf("publish order per aggregate (-id order +got):\n%s", diff)
	}
}

// Ordered and unordered messages in one table and one dispatcher.
func TestClaimAll_OrderedAndUnorderedInOneDispatcher(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.enqueue(t, 20, "ordered-agg", true)
	b.enqueue(t, 20, "free-agg", false)
	rec := newRecorder(nil)
	b.start(t, rec, fast(dispatcher.Config{}))
	waitFor(t, 30*time.Second, "all done", func() bool { return b.count(t, "status = 'done'") == 40 })
}

// With the poll interval at an hour, only NOTIFY can wake an idle dispatcher.
func TestNotify_WakesAnIdleDispatcher(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rec := newRecorder(nil)
	d, _ := b.start(t, rec, fast(dispatcher.Config{PollInterval: time.Hour, WakeWindow: 10 * time.Millisecond}))
	waitIdleAndListening(t, d)
	start := time.Now()
	id := b.enqueue(t, 1, "a", false)[0]
	waitFor(t, 30*time.Second, "publish after NOTIFY", func() bool { return rec.count(id) == 1 })
	if d.Stats().Notifications == 0 {
		t.Fatal("no notification was received")
	}
	t.Logf("enqueue commit to publish: %s", time.Since(start))
}

// Rows inserted by the application's own INSERT send no NOTIFY: an idle
// relay claims them at its next poll. The same INSERT followed by
// OutboxWake in its transaction wakes the relay through LISTEN. (Both are
// published either way, by the 500 ms poll at the latest: what the test
// pins is the notification count.)
func TestNotify_PlainInsertIsClaimedAtThePollUnlessTheTransactionWakes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rec := newRecorder(nil)
	d, _ := b.start(t, rec, fast(dispatcher.Config{PollInterval: 500 * time.Millisecond, WakeWindow: 10 * time.Millisecond}))
	ctx := context.Background()
	insert := func(wake bool) int64 {
		t.Helper()
		var id int64
		err := pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
			if err := tx.QueryRow(ctx, `INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
				VALUES ('order', 'plain', 'OrderEvent', '{}') RETURNING id`).Scan(&id); err != nil {
				return err
			}
			if wake {
				return db.New(tx).OutboxWake(ctx)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return id
	}

	waitIdleAndListening(t, d)
	before := d.Stats().Notifications
	id := insert(false)
	waitFor(t, 30*time.Second, "the plain INSERT published by a poll", func() bool { return rec.count(id) == 1 })
	if n := d.Stats().Notifications; n != before {
		t.Fatalf("%d notifications for a plain INSERT, want none", n-before)
	}

	waitIdleAndListening(t, d)
	id = insert(true)
	waitFor(t, 30*time.Second, "the INSERT with OutboxWake published", func() bool { return rec.count(id) == 1 })
	waitFor(t, 30*time.Second, "the OutboxWake notification received", func() bool { return d.Stats().Notifications > before })
}

// EnqueueMany (one COPY) wakes an idle relay at COMMIT: it runs OutboxWake
// after the COPY. The poll interval is an hour, so nothing else could find
// the rows.
func TestNotify_EnqueueManyWakesAnIdleDispatcher(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rec := newRecorder(nil)
	d, _ := b.start(t, rec, fast(dispatcher.Config{PollInterval: time.Hour, WakeWindow: 10 * time.Millisecond}))
	waitIdleAndListening(t, d)
	before := d.Stats().Notifications
	b.enqueueMany(t, 50)
	waitFor(t, 30*time.Second, "the COPY's 50 events published", func() bool { return b.count(t, "status = 'done'") == 50 })
	if d.Stats().Notifications == before {
		t.Fatal("no notification was received")
	}
}

// A commit that sent no NOTIFY (an INSERT of the application's own, without
// OutboxWake) becomes visible right after the dispatcher has claimed for
// another transaction's notification. It is still published promptly: after
// each notification the dispatcher keeps claiming through its wake window.
// The poll interval is an hour, so nothing else could find it.
func TestNotify_SkippedNotifyIsClaimedInsideTheWakeWindow(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rec := newRecorder(nil)
	// The wake window is long here: the test's own commit follows the
	// notification by however long a busy machine takes to run the next
	// few statements, and it must land inside the window. The claims inside
	// the window come at doubling intervals, so a commit that lands T after
	// the notification is claimed by about 2T.
	d, _ := b.start(t, rec, fast(dispatcher.Config{PollInterval: time.Hour, WakeWindow: 30 * time.Second}))
	ctx := context.Background()
	// Listening (the wake window its connect opened restarts at the
	// stand-in's notification below).
	waitFor(t, 30*time.Second, "LISTEN registered", func() bool { return d.Stats().Listens > 0 })
	// The test listens too, to see every notification sent from here on.
	watch, err := pgx.Connect(ctx, b.url)
	if err != nil {
		t.Fatal(err)
	}
	defer watch.Close(ctx)
	if _, err := watch.Exec(ctx, "LISTEN outbox"); err != nil {
		t.Fatal(err)
	}

	// Another transaction's notification reaches the dispatcher, which
	// claims (nothing yet) ...
	before := d.Stats().Notifications
	if _, err := b.pool.Exec(ctx, "SELECT pg_notify('outbox', '')"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "notification received", func() bool { return d.Stats().Notifications > before })
	// ... then this commit lands, without a NOTIFY of its own.
	var id int64
	if err := b.pool.QueryRow(ctx, `INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
		VALUES ('order', 'w', 'OrderEvent', '{}') RETURNING id`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	waitFor(t, 30*time.Second, "publish of the commit that skipped its NOTIFY", func() bool { return rec.count(id) == 1 })
	t.Logf("commit to publish: %s", time.Since(start))
	// Notifications arrive in commit order: a marker sent now comes after
	// any the commit sent. Everything before the marker is counted.
	if _, err := b.pool.Exec(ctx, "SELECT pg_notify('outbox', 'end-of-test')"); err != nil {
		t.Fatal(err)
	}
	var got int
	for {
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		n, err := watch.WaitForNotification(wctx)
		cancel()
		if err != nil {
			t.Fatalf("waiting for the marker notification: %v", err)
		}
		if n.Payload == "end-of-test" {
			break
		}
		got++
	}
	if got != 1 {
		t.Fatalf("%d notifications, want only the stand-in's (the plain INSERT sends none)", got)
	}
	// Counted as the claimer goes idle inside the window: on a busy machine
	// the round that found the commit can be the first after the
	// notification, and the first idle wait comes a round or two after the
	// publish.
	waitFor(t, 30*time.Second, "claims inside a wake window counted", func() bool { return d.Stats().WakePolls > 0 })
}

// Shutdown hands back claimed-but-unstarted messages at once (fenced, attempt
// refunded) instead of leaving them to lease expiry, and lets the publish in
// flight finish.
func TestShutdown_HandsBackUnstartedClaimsImmediately(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.enqueue(t, 10, "a", false)
	started := make(chan struct{})
	release := make(chan struct{})
	var once sync.Once
	pub := newRecorder(func(ctx context.Context, m dispatcher.Message) error {
		once.Do(func() { close(started) })
		<-release
		return nil
	})
	_, stop := b.start(t, pub, fast(dispatcher.Config{Batch: 10, Concurrency: 1, Lease: time.Hour, PublishTimeout: time.Minute}))
	<-started
	waitFor(t, 30*time.Second, "10 claimed", func() bool { return b.count(t, "status = 'processing'") == 10 })
	// The publish in flight finishes only once shutdown has handed the 9
	// others back: it is still running when shutdown starts.
	go func() {
		defer close(release)
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); {
			var n int
			if err := b.pool.QueryRow(context.Background(), "SELECT count(*) FROM outbox WHERE status = 'pending'").Scan(&n); err != nil || n == 9 {
				return
			}
			time.Sleep(5 * time.Millisecond) // polling a condition
		}
	}()
	stop()
	if n := b.count(t, "status = 'done'"); n != 1 {
		t.Fatalf("done = %d, want the 1 publish in flight finished and finalized", n)
	}
	if n := b.count(t, "status = 'pending' AND attempts = 0 AND lease_owner IS NULL AND available_at <= now()"); n != 9 {
		t.Fatalf("handed back = %d, want 9 pending, attempt refunded, available now (lease was an hour)", n)
	}
}

// A dropped connection (pg_terminate_backend) mid-run loses nothing.
func TestDroppedConnections_LoseNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for a := 0; a < 10; a++ {
		b.enqueue(t, 100, fmt.Sprintf("a%d", a), a%2 == 0)
	}
	rec := newRecorder(func(ctx context.Context, m dispatcher.Message) error {
		time.Sleep(200 * time.Microsecond)
		return nil
	})
	d, _ := b.start(t, rec, fast(dispatcher.Config{Batch: 10, Lease: 2 * time.Second, PublishTimeout: 500 * time.Millisecond}))
	waitFor(t, 30*time.Second, "some progress", func() bool { return rec.published() > 50 })
	ctx := context.Background()
	var dbname string
	if err := b.pool.QueryRow(ctx, "SELECT current_database()").Scan(&dbname); err != nil {
		t.Fatal(err)
	}
	killer := pgPool(t, b)
	for i := 0; i < 3; i++ {
		if _, err := killer.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
			WHERE datname = $1 AND pid <> pg_backend_pid()`, dbname); err != nil {
			t.Fatal(err)
		}
		// The next kill (and the test's own queries, on the same pool) after
		// the dispatcher has met the dead connections, reconnected and made
		// progress again.
		done := rec.published()
		waitFor(t, 30*time.Second, "progress after the kill", func() bool { return rec.published() > done+20 })
	}
	// Counted on the killer's connection: the test pool may still hold
	// connections that were killed and that nobody has used since.
	waitFor(t, 60*time.Second, "all 1000 done", func() bool {
		var n int
		if err := killer.QueryRow(ctx, "SELECT count(*) FROM outbox WHERE status = 'done'").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == 1000
	})
	if d.Stats().DBErrors == 0 {
		t.Log("note: no database error was observed by the dispatcher")
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.counts) != 1000 {
		t.Fatalf("distinct messages published = %d, want 1000", len(rec.counts))
	}
}
