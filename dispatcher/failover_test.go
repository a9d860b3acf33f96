package dispatcher_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/pgoutbox/dispatcher"
	"github.com/pgoutbox/pgoutbox/internal/pgcluster"
	"github.com/pgoutbox/pgoutbox/migrations"
)

// gatedPublisher records every delivery and holds each one until the test
// opens its gate (or the publish context ends).
type gatedPublisher struct {
	mu      sync.Mutex
	arrived []chan struct{} // gate of the i-th delivery
	notify  chan int        // index of each delivery, as it arrives
}

func newGatedPublisher() *gatedPublisher { return &gatedPublisher{notify: make(chan int, 16)} }

func (p *gatedPublisher) Publish(ctx context.Context, _ dispatcher.Message) error {
	gate := make(chan struct{})
	p.mu.Lock()
	p.arrived = append(p.arrived, gate)
	i := len(p.arrived) - 1
	p.mu.Unlock()
	p.notify <- i
	select {
	case <-gate:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (p *gatedPublisher) open(i int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	close(p.arrived[i])
}

func (p *gatedPublisher) next(t *testing.T, timeout time.Duration, what string) int {
	t.Helper()
	select {
	case i := <-p.notify:
		return i
	case <-time.After(timeout):
		t.Fatalf("timed out after %s waiting for %s", timeout, what)
		return -1
	}
}

// outboxRow is the delivery state of one row on one server.
type outboxRow struct {
	status       string
	leaseVersion int64
	owner        string
}

func readRow(ctx context.Context, url string, id int64) (outboxRow, error) {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return outboxRow{}, err
	}
	defer conn.Close(ctx)
	var r outboxRow
	err = conn.QueryRow(ctx, `SELECT status, lease_version, coalesce(lease_owner, '') FROM outbox WHERE id = $1`, id).
		Scan(&r.status, &r.leaseVersion, &r.owner)
	return r, err
}

// A real failover to an asynchronous standby that never received the last
// claim: the standby's WAL receiver is stopped, the dispatcher claims a
// message on the primary (lease_version 1) and starts publishing it, the
// primary is stopped hard and the standby promoted. The dispatcher reaches
// the new primary through a multi-host URL and claims the message again —
// with the same lease_version 1, since the new primary never saw the first
// claim. When the first publish then finishes, its fenced finalize must
// change nothing (lease lost): the token is (lease_owner, lease_version) and
// each claim writes its own lease_owner. Fenced on lease_version alone, the
// lost claim would mark the row done under the new claim's feet. The same
// Dispatcher re-claims here on purpose: an owner unique per process would
// not tell its two claims apart.
func TestFailover_LostClaimOnAsyncStandbyCannotFinalize(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	primary, err := pgcluster.Start(ctx, pgcluster.Options{Settings: map[string]string{
		"fsync": "off", "max_connections": "50", "wal_level": "replica"}})
	if err != nil {
		t.Fatalf("start a throwaway primary (needs the PostgreSQL server binaries): %v", err)
	}
	t.Cleanup(func() { _ = primary.Stop() })
	ppool, err := pgxpool.New(ctx, primary.URL())
	if err != nil {
		t.Fatal(err)
	}
	m, err := migrations.FromPool(ppool)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Up(ctx); err != nil {
		t.Fatal(err)
	}
	m.Close()
	tx, err := ppool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	id, err := dispatcher.Enqueue(ctx, tx, dispatcher.Event{AggregateType: "order", AggregateID: "o-1",
		EventType: "OrderPlaced", Payload: []byte(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	ppool.Close()

	// The standby starts from a base backup that holds the message; then its
	// WAL receiver is stopped, so nothing later reaches it.
	standby := detachedStandby(t, primary)

	// The relay's view: both servers, whichever accepts writes.
	url := fmt.Sprintf("postgres://postgres@127.0.0.1:%d,127.0.0.1:%d/postgres?sslmode=disable&target_session_attrs=read-write&connect_timeout=2",
		primary.Port(), standby.Port())
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	pub := newGatedPublisher()
	lost := make(chan int64, 4)
	d, err := dispatcher.New(pool, pub, dispatcher.Config{
		Owner: "relay", Batch: 1, Concurrency: 2, Lease: time.Minute, PublishTimeout: 50 * time.Second,
		PollInterval: 50 * time.Millisecond, ClaimTimeout: 2 * time.Second, WriteTimeout: 2 * time.Second,
		Claim: dispatcher.ClaimUnorderedOnly, Logger: quietLogger(t),
		// The lost claim's row lies behind the claim cursor (it was handed
		// out before the failover): the sweep brings it back (30s by default).
		SweepInterval: 500 * time.Millisecond,
		OnLeaseLost:   func(outboxID, leaseVersion int64) { lost <- leaseVersion },
	})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- d.Run(runCtx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("Run did not return within 30s of cancel")
		}
	})

	first := pub.next(t, 30*time.Second, "the first delivery (claim on the primary)")
	onPrimary, err := readRow(ctx, primary.URL(), id)
	if err != nil {
		t.Fatal(err)
	}
	onStandby, err := readRow(ctx, standby.URL(), id)
	if err != nil {
		t.Fatal(err)
	}
	if onPrimary.status != "processing" || onPrimary.leaseVersion != 1 || onStandby.status != "pending" || onStandby.leaseVersion != 0 {
		t.Fatalf("before the failover: primary has %+v, standby %+v; want the claim (lease_version 1) on the primary only",
			onPrimary, onStandby)
	}

	if err := primary.Kill(ctx); err != nil {
		t.Fatal(err)
	}
	if err := standby.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	promoted := time.Now()
	second := pub.next(t, 60*time.Second, "the second delivery (claim on the promoted standby)")
	t.Logf("re-claimed on the new primary %s after the promotion", time.Since(promoted).Round(time.Millisecond))
	reclaimed, err := readRow(ctx, standby.URL(), id)
	if err != nil {
		t.Fatal(err)
	}
	if reclaimed.status != "processing" || reclaimed.leaseVersion != onPrimary.leaseVersion || reclaimed.owner == onPrimary.owner {
		t.Fatalf("after the failover the row is %+v; want processing under lease_version %d again, by another claim than %q",
			reclaimed, onPrimary.leaseVersion, onPrimary.owner)
	}

	// The lost claim's publish finishes: its finalize must not pass the fence.
	pub.open(first)
	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case v := <-lost:
			if v != onPrimary.leaseVersion {
				t.Fatalf("lease lost reported for lease_version %d, want %d", v, onPrimary.leaseVersion)
			}
		case <-time.After(10 * time.Millisecond):
			r, err := readRow(ctx, standby.URL(), id)
			if err != nil {
				t.Fatal(err)
			}
			if r != reclaimed {
				t.Fatalf("the lost claim (owner %q) changed the new claim's row: %+v -> %+v", onPrimary.owner, reclaimed, r)
			}
			if time.Now().After(deadline) {
				t.Fatal("timed out waiting for the lost claim's finalize to report its lease lost")
			}
			continue
		}
		break
	}
	if r, err := readRow(ctx, standby.URL(), id); err != nil || r != reclaimed {
		t.Fatalf("after the lost claim's finalize the row is %+v (%v), want it untouched: %+v", r, err, reclaimed)
	}

	// The new claim finishes and finalizes.
	pub.open(second)
	waitFor(t, 30*time.Second, "the new claim's finalize", func() bool {
		r, err := readRow(ctx, standby.URL(), id)
		if err != nil {
			t.Fatal(err)
		}
		return r.status == "done"
	})
	select {
	case v := <-lost:
		t.Fatalf("the new claim's finalize reported its lease lost (lease_version %d)", v)
	default:
	}
	if st := d.Stats(); st.LeaseLost != 1 {
		t.Errorf("Stats().LeaseLost = %d, want 1", st.LeaseLost)
	}
}

// After a failover the promoted standby hands out again the txids of the
// old primary's last transactions, which it never received: the claim
// cursor, whose snapshots came from the old primary, would count the rows of
// the new primary's first transactions as already handed out and leave them
// to the sweep (30s by default; an hour here). The cursor notices the other
// server (pg_postmaster_start_time, and an xmax that went back) and starts
// over, so events committed on the new primary go out at once, unordered
// and ordered alike.
func TestFailover_EventsCommittedOnThePromotedStandbyAreClaimedAtOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	primary, err := pgcluster.Start(ctx, pgcluster.Options{Settings: map[string]string{
		"fsync": "off", "max_connections": "50", "wal_level": "replica"}})
	if err != nil {
		t.Fatalf("start a throwaway primary (needs the PostgreSQL server binaries): %v", err)
	}
	t.Cleanup(func() { _ = primary.Stop() })
	ppool, err := pgxpool.New(ctx, primary.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ppool.Close)
	m, err := migrations.FromPool(ppool)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Up(ctx); err != nil {
		t.Fatal(err)
	}
	m.Close()

	// The standby gets the base backup and nothing after it.
	standby := detachedStandby(t, primary)

	url := fmt.Sprintf("postgres://postgres@127.0.0.1:%d,127.0.0.1:%d/postgres?sslmode=disable&target_session_attrs=read-write&connect_timeout=2",
		primary.Port(), standby.Port())
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	var mu sync.Mutex
	seen := map[string]bool{}
	pub := dispatcher.PublisherFunc(func(_ context.Context, msg dispatcher.Message) error {
		mu.Lock()
		seen[msg.AggregateID] = true
		mu.Unlock()
		return nil
	})
	delivered := func(agg string) bool {
		mu.Lock()
		defer mu.Unlock()
		return seen[agg]
	}
	d, err := dispatcher.New(pool, pub, dispatcher.Config{
		Owner: "relay", PollInterval: 50 * time.Millisecond, ClaimTimeout: 2 * time.Second, WriteTimeout: 2 * time.Second,
		Logger: quietLogger(t), SweepInterval: time.Hour, // only the cursor can find the rows in time
	})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- d.Run(runCtx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("Run did not return within 30s of cancel")
		}
	})

	// On the old primary: 100 transactions the dispatcher delivers, so both
	// cursors move 100 txids past what the standby has.
	enqueue := func(p *pgxpool.Pool, agg string, ordered bool) {
		t.Helper()
		tx, err := p.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx) //nolint:errcheck
		if _, err := dispatcher.Enqueue(ctx, tx, dispatcher.Event{AggregateType: "order", AggregateID: agg,
			EventType: "OrderPlaced", Payload: []byte(`{}`), Ordered: ordered}); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 100; i++ {
		enqueue(ppool, fmt.Sprintf("old-%d", i), i%2 == 0)
	}
	waitFor(t, 30*time.Second, "the old primary's events to be delivered", func() bool {
		for i := 0; i < 100; i++ {
			if !delivered(fmt.Sprintf("old-%d", i)) {
				return false
			}
		}
		return true
	})
	var oldXmax int64
	if err := ppool.QueryRow(ctx, "SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint").Scan(&oldXmax); err != nil {
		t.Fatal(err)
	}
	ppool.Close()

	if err := primary.Kill(ctx); err != nil {
		t.Fatal(err)
	}
	if err := standby.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	npool, err := pgxpool.New(ctx, standby.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(npool.Close)
	promoted := time.Now()
	// The new primary's first transactions reuse the old primary's last
	// txids (the point of the test: check it, or the test proves nothing).
	var newXmax int64
	if err := npool.QueryRow(ctx, "SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint").Scan(&newXmax); err != nil {
		t.Fatal(err)
	}
	if newXmax+10 >= oldXmax {
		t.Fatalf("the promoted standby's xmax %d is not well below the old primary's %d: no txid reuse to test", newXmax, oldXmax)
	}
	for i := 0; i < 10; i++ {
		enqueue(npool, fmt.Sprintf("new-%d", i), i%2 == 0)
	}
	waitFor(t, 20*time.Second, "the events committed on the new primary to be delivered (unordered and ordered)", func() bool {
		for i := 0; i < 10; i++ {
			if !delivered(fmt.Sprintf("new-%d", i)) {
				return false
			}
		}
		return true
	})
	t.Logf("old primary xmax %d, new primary's %d; events committed after the promotion delivered %s after it",
		oldXmax, newXmax, time.Since(promoted).Round(time.Millisecond))
}

// detachedStandby starts a streaming standby of primary from a base backup
// and stops its WAL receiver at once: it holds what the primary had then
// and nothing after it (an asynchronous standby that lost the last WAL).
func detachedStandby(t *testing.T, primary *pgcluster.Cluster) *pgcluster.Cluster {
	t.Helper()
	ctx := context.Background()
	standby, err := primary.StartStandby(ctx, pgcluster.Options{Settings: map[string]string{"cluster_name": "standby"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = standby.Stop() })
	sconn, err := pgx.Connect(ctx, standby.URL())
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"ALTER SYSTEM SET primary_conninfo = ''", "SELECT pg_reload_conf()"} {
		if _, err := sconn.Exec(ctx, s); err != nil {
			t.Fatalf("detach the standby (%s): %v", s, err)
		}
	}
	waitFor(t, 30*time.Second, "the standby's WAL receiver to stop", func() bool {
		var n int
		if err := sconn.QueryRow(ctx, "SELECT count(*) FROM pg_stat_wal_receiver").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == 0
	})
	sconn.Close(ctx)
	return standby
}
