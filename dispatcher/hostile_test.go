package dispatcher_test

import (
	"context"
	"errors"
	"math"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/pgoutbox/db"
	"github.com/pgoutbox/pgoutbox/dispatcher"
	"github.com/pgoutbox/pgoutbox/internal/pgtest"
	"github.com/pgoutbox/pgoutbox/internal/tcpproxy"
)

// Issue 12, items 1-5, 7, 8: hostile input and hostile networks.

// bombPayload is an 81 KB JSON array of numbers numeric keeps as 131,072
// digits each: jsonb stores it in a few KB, but its text form is over 1 GB,
// which no query can return (54000).
func bombPayload() string {
	n := 81 * 1024 / len("1e131071,")
	return "[" + strings.TrimSuffix(strings.Repeat("1e131071,", n), ",") + "]"
}

func TestEnqueue_RefusesNumbersNumericCannotHoldOrThatExpandPastTheLimit(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	for _, c := range []struct {
		payload string
		ok      bool
	}{
		{`1e131072`, false},          // 131,073 digits before the point: 22003 today
		{`1e-16384`, false},          // 16,384 digits after the point: 22003 today
		{`[1.5e-16383]`, false},      // scale 16,384
		{`{"a":-1E+131072}`, false},  // signed, capital E
		{`1e999999999999999`, false}, // exponent out of range
		{bombPayload(), false},       // within numeric, but renders to > 1 GB
		{`1e131071`, true},           // the largest numeric: 131,072 digits
		{`1e-16383`, true},           // the smallest scale
		{`{"n":0.000e-3,"m":-0}`, true},
		{`[12.5e-3, 100e-2, 1E2]`, true},
	} {
		tx, err := b.pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		_, err = dispatcher.Enqueue(ctx, tx, dispatcher.Event{AggregateType: "t", AggregateID: "a", EventType: "e", Payload: []byte(c.payload)})
		short := c.payload[:min(len(c.payload), 40)]
		switch {
		case c.ok && err != nil:
			t.Errorf("%s: %v, want it stored", short, err)
		case !c.ok && !errors.Is(err, dispatcher.ErrInvalidEvent):
			t.Errorf("%s: err = %v, want ErrInvalidEvent before any SQL", short, err)
		}
		if _, err := tx.Exec(ctx, "SELECT 1"); err != nil {
			t.Errorf("%s: the caller's transaction is unusable: %v", short, err)
		}
		_ = tx.Rollback(ctx)
	}
	// The bound is the text form PostgreSQL renders, not the input's size:
	// 1e1000 (6 bytes) renders to 1001 characters.
	p := dispatcher.NewProducer(dispatcher.ProducerConfig{MaxPayloadBytes: 1000})
	tx, err := b.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	if _, err := p.Enqueue(ctx, tx, dispatcher.Event{AggregateType: "t", AggregateID: "a", EventType: "e", Payload: []byte(`1e1000`)}); !errors.Is(err, dispatcher.ErrInvalidEvent) {
		t.Fatalf("1e1000 with a 1000-byte limit: %v, want ErrInvalidEvent", err)
	}
	if _, err := p.Enqueue(ctx, tx, dispatcher.Event{AggregateType: "t", AggregateID: "a", EventType: "e", Payload: []byte(`1e998`)}); err != nil {
		t.Fatalf("1e998 (999 characters) with a 1000-byte limit: %v", err)
	}
}

// A number bomb inserted by plain SQL (bypassing Enqueue's validation) made
// every claim fail with 54000: nothing else was published. The claim now
// falls back to the isolation path: the bomb goes to dead with its SQLSTATE
// in last_error and every healthy message is delivered.
func TestClaim_RowThatCannotBeReturnedGoesDeadAndEverythingElseFlows(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	var bomb int64
	if err := b.pool.QueryRow(ctx, `INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
		VALUES ('t', 'bomb', 'Bomb', $1::jsonb) RETURNING id`, bombPayload()).Scan(&bomb); err != nil {
		t.Fatal(err)
	}
	ids := b.enqueue(t, 10, "a", false)
	rec := newRecorder(nil)
	start := time.Now()
	// Rendering the bomb takes about 15 s of server CPU; on a loaded machine
	// more than the default ClaimTimeout (30 s), and a read that runs out of
	// it is retried, not taken for the row's fault (readClaimed). The
	// timeout here lets the render finish, so the bomb dies of its own
	// SQLSTATE.
	d, _ := b.start(t, rec, fast(dispatcher.Config{Lease: time.Minute, PublishTimeout: 5 * time.Second, ClaimTimeout: 5 * time.Minute}))
	waitFor(t, 3*time.Minute, "10 healthy messages delivered", func() bool { return b.count(t, "status = 'done'") == 10 })
	t.Logf("healthy messages delivered %s after the dispatcher started (the bomb is rendered twice: once by the failing claim, once by its own read)", time.Since(start).Round(time.Millisecond))
	waitFor(t, 5*time.Minute, "the bomb dead", func() bool { return b.state(t, bomb).Status == "dead" })
	s := b.state(t, bomb)
	if !strings.Contains(s.LastError, "54000") || !strings.Contains(s.LastError, "cannot return") {
		t.Fatalf("bomb last_error = %q, want the SQLSTATE and why", s.LastError)
	}
	if rec.count(bomb) != 0 {
		t.Fatal("the bomb was published")
	}
	for _, id := range ids {
		if st := b.state(t, id); st.Status != "done" {
			t.Fatalf("healthy message %d = %+v, want done", id, st)
		}
	}
	if st := d.Stats(); st.Isolations == 0 || st.Unreadable != 1 {
		t.Fatalf("stats = isolations %d, unreadable %d; want the isolation path taken and 1 unreadable", st.Isolations, st.Unreadable)
	}
}

// A publisher error that is not valid UTF-8 and contains NUL (a Latin-1
// error page) made the fenced write fail with 22021 and be retried for ever:
// with Concurrency 1, 0 of 20 healthy messages were published.
func TestPublisherError_InvalidUTF8AndNULDoNotWedgeTheDispatcher(t *testing.T) {
	t.Parallel()
	b := setup(t)
	bad := b.enqueue(t, 2, "bad", false)
	ids := b.enqueue(t, 20, "a", false)
	latin1 := "r\xe9ponse invalide \x00 (\xab serveur \xbb)" + strings.Repeat("\xe9", 600)
	rec := newRecorder(func(ctx context.Context, m dispatcher.Message) error {
		switch m.OutboxID {
		case bad[0]:
			return dispatcher.Permanent(errors.New(latin1))
		case bad[1]:
			if m.Attempt == 1 {
				return dispatcher.Retryable(errors.New(latin1))
			}
		}
		return nil
	})
	started := time.Now()
	b.start(t, rec, fast(dispatcher.Config{Concurrency: 1}))
	waitFor(t, 30*time.Second, "20 healthy messages and the retried one published", func() bool {
		return rec.count(bad[1]) == 1 && b.count(t, "status = 'done'") == 21
	})
	t.Logf("21 messages done %s after start", time.Since(started).Round(time.Millisecond))
	waitFor(t, 30*time.Second, "the permanent failure dead", func() bool { return b.state(t, bad[0]).Status == "dead" })
	s := b.state(t, bad[0])
	if !strings.HasPrefix(s.LastError, "permanent: r\uFFFDponse invalide  (") || strings.ContainsRune(s.LastError, 0) {
		t.Fatalf("last_error = %q, want the text made valid (U+FFFD for invalid bytes, NUL removed)", s.LastError)
	}
	if n := len([]rune(s.LastError)); n > 500 {
		t.Fatalf("last_error has %d characters, want at most 500", n)
	}
	for _, id := range ids {
		if rec.count(id) != 1 {
			t.Fatalf("message %d published %d times", id, rec.count(id))
		}
	}
}

// An expired lease anywhere (a crashed peer's) made the claimer wait until
// nothing was in flight: one long publish stalled all claiming. Fresh
// messages are now claimed and published while the long publish runs, and
// the expired lease is recovered by the recovery lane meanwhile.
func TestRecovery_DoesNotWaitForPublishesInFlight(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	long := b.enqueue(t, 1, "long", false)[0]
	release := make(chan struct{})
	entered := make(chan struct{})
	var sources sync.Map // outbox id -> Message.Source
	rec := newRecorder(func(ctx context.Context, m dispatcher.Message) error {
		sources.Store(m.OutboxID, m.Source)
		if m.OutboxID == long {
			close(entered)
			select {
			case <-release:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return nil
	})
	defer close(release)
	d, _ := b.start(t, rec, fast(dispatcher.Config{Concurrency: 16, Lease: 2 * time.Second, HeartbeatInterval: 200 * time.Millisecond, PublishTimeout: time.Minute}))
	<-entered
	// Now a crashed peer's message appears: processing, lease expired, one
	// attempt spent.
	var crashed int64
	if err := b.pool.QueryRow(ctx, `INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload,
		status, attempts, lease_version, lease_owner, lease_until)
		VALUES ('order', 'crashed', 'OrderEvent', '{}', 'processing', 1, 1, 'crashed-peer', now() - interval '1 second')
		RETURNING id`).Scan(&crashed); err != nil {
		t.Fatal(err)
	}
	fresh := b.enqueue(t, 20, "fresh", false)
	enqueued := time.Now()
	waitFor(t, 30*time.Second, "20 fresh messages and the recovered one published while the long publish runs", func() bool {
		for _, id := range fresh {
			if rec.count(id) == 0 {
				return false
			}
		}
		return rec.count(crashed) == 1
	})
	t.Logf("20 fresh messages and the recovered one published %s after enqueue, the long publish still running",
		time.Since(enqueued).Round(time.Millisecond))
	if rec.count(long) != 0 {
		t.Fatal("the long publish ended early")
	}
	if s := d.Stats(); s.Recovered != 1 {
		t.Fatalf("Recovered = %d, want 1", s.Recovered)
	}
	// The recovered message keeps the idempotency key of its first delivery:
	// the same Source as every message of this outbox.
	for _, id := range append([]int64{crashed}, fresh...) {
		if src, _ := sources.Load(id); src != d.Source() {
			t.Fatalf("message %d published with Source %q, want %q", id, src, d.Source())
		}
	}
}

// A shutdown timeout cancelled the hand-back before it ran: claimed but
// unstarted messages stayed processing with their attempt spent. Now the
// final hand-back has its own deadline, and Run hands back queued jobs
// although the only worker is busy.
func TestShutdown_HandsBackUnstartedMessagesAfterTheShutdownTimeout(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := b.enqueue(t, 5, "a", false)
	entered := make(chan struct{}, 5)
	pub := dispatcher.PublisherFunc(func(ctx context.Context, m dispatcher.Message) error {
		entered <- struct{}{}
		<-ctx.Done() // a long publish that respects its context
		return ctx.Err()
	})
	// ShutdownTimeout bounds both of Run's waits: the one that runs out
	// (this publish never ends on its own) and then the one for the
	// cancelled publish to return. At 100 ms the second ran out as well once
	// in a full `make test` (-race, every package at once, 0.27 s for the
	// test): the worker was abandoned with its message processing.
	d, err := dispatcher.New(pgtest.Pool(t, b.url), pub, fast(dispatcher.Config{Concurrency: 1, Batch: 5, Lease: time.Minute,
		PublishTimeout: 30 * time.Second, ShutdownTimeout: time.Second, Logger: quietLogger(t)}))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	<-entered
	waitFor(t, 30*time.Second, "5 claimed", func() bool { return b.count(t, "status = 'processing'") == 5 })
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return")
	}
	for _, id := range ids {
		if s := b.state(t, id); s.Status != "pending" || s.Attempts != 0 || !s.Available {
			t.Fatalf("message %d = %+v after Run returned, want pending, attempt refunded, available", id, s)
		}
	}
}

// The same with a publisher that ignores its context: the worker is stuck,
// but the queued messages are handed back by Run itself.
func TestShutdown_HandsBackQueuedMessagesWhenEveryWorkerIsStuck(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := b.enqueue(t, 5, "a", false)
	stuck := make(chan struct{})
	t.Cleanup(func() { close(stuck) })
	entered := make(chan int64, 5)
	pub := dispatcher.PublisherFunc(func(ctx context.Context, m dispatcher.Message) error {
		entered <- m.OutboxID
		<-stuck
		return nil
	})
	d, err := dispatcher.New(pgtest.Pool(t, b.url), pub, fast(dispatcher.Config{Concurrency: 1, Batch: 5, Lease: time.Minute,
		PublishTimeout: 30 * time.Second, ShutdownTimeout: 100 * time.Millisecond, Logger: quietLogger(t)}))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	first := <-entered
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return")
	}
	for _, id := range ids {
		s := b.state(t, id)
		if id == first {
			if s.Status != "processing" {
				t.Fatalf("stuck message = %+v, want processing (recovered after its lease)", s)
			}
			continue
		}
		if s.Status != "pending" || s.Attempts != 0 {
			t.Fatalf("queued message %d = %+v after Run returned, want pending with its attempt refunded", id, s)
		}
	}
}

// With every open connection blackholed (frozen: no reply, no error) the
// dispatcher published 0 of 10 new messages in 20 s and counted 0 database
// errors. Every database call now has a deadline: frozen connections are
// given up, new ones work, and the errors are counted.
func TestBlackholedConnections_DispatcherRecoversWithinItsTimeouts(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cfg, err := pgxpool.ParseConfig(b.url)
	if err != nil {
		t.Fatal(err)
	}
	proxy := tcpproxy.Start(t, net.JoinHostPort(cfg.ConnConfig.Host, strconv.Itoa(int(cfg.ConnConfig.Port))))
	host, port, _ := net.SplitHostPort(proxy.Addr())
	p, _ := strconv.Atoi(port)
	cfg.ConnConfig.Host, cfg.ConnConfig.Port = host, uint16(p)
	cfg.MaxConns = 8
	viaProxy, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(viaProxy.Close)
	t.Cleanup(proxy.Down) // reset the frozen connections before the pool closes them

	rec := newRecorder(nil)
	d, err := dispatcher.New(viaProxy, rec, fast(dispatcher.Config{
		ClaimTimeout: 500 * time.Millisecond, WriteTimeout: 500 * time.Millisecond, ListenPing: 300 * time.Millisecond,
		Logger: quietLogger(t),
	}))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	t.Cleanup(func() {
		stopAt := time.Now()
		cancel()
		<-done
		t.Logf("Run returned %s after cancel", time.Since(stopAt).Round(time.Millisecond))
	})
	before := b.enqueue(t, 5, "before", false)
	waitFor(t, 30*time.Second, "5 published before the blackhole", func() bool { return rec.published() == 5 })
	proxy.Blackhole()
	frozenAt := time.Now()
	after := b.enqueue(t, 10, "after", false) // through the test's own pool
	waitFor(t, 60*time.Second, "10 new messages published after the blackhole", func() bool {
		return b.count(t, "status = 'done'") == len(before)+len(after)
	})
	t.Logf("10 messages published and finalized %s after the blackhole (%d connections frozen)",
		time.Since(frozenAt).Round(time.Millisecond), proxy.Frozen())
	// A frozen call is counted once its deadline passes, which on a busy
	// machine can be after the new messages went through on new
	// connections: wait for it.
	waitFor(t, 30*time.Second, "a database error counted for the frozen connections", func() bool {
		return d.Stats().DBErrors > 0
	})
}

// MaxAttempts above int32 wrapped to -1 (one failure sent a message to
// dead); every narrowed integer setting is range-checked now.
func TestNew_RefusesIntegerSettingsThatWouldBeNarrowed(t *testing.T) {
	t.Parallel()
	pool, err := pgxpool.New(context.Background(), "postgres://127.0.0.1:1/x") // lazy: never dialled
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	pub := dispatcher.PublisherFunc(func(context.Context, dispatcher.Message) error { return nil })
	for _, c := range []struct {
		cfg  dispatcher.Config
		want string
	}{
		{dispatcher.Config{MaxAttempts: math.MaxInt32 + 1}, "MaxAttempts"},
		{dispatcher.Config{MaxAttempts: math.MaxInt}, "MaxAttempts"},
		{dispatcher.Config{Batch: math.MaxInt32 + 1}, "Batch"},
		{dispatcher.Config{Concurrency: math.MaxInt}, "Concurrency"},
		{dispatcher.Config{FinalizeBatch: math.MaxInt32 + 1}, "FinalizeBatch"},
		{dispatcher.Config{ClaimTimeout: -time.Second}, "ClaimTimeout"},
		{dispatcher.Config{WriteTimeout: -time.Second}, "WriteTimeout"},
		{dispatcher.Config{ListenPing: -time.Second}, "ListenPing"},
		{dispatcher.Config{ShutdownFlush: -time.Second}, "ShutdownFlush"},
	} {
		_, err := dispatcher.New(pool, pub, c.cfg)
		if !errors.Is(err, dispatcher.ErrInvalidConfig) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want ErrInvalidConfig naming %s", c.want, err, c.want)
		}
	}
	if _, err := dispatcher.New(pool, pub, dispatcher.Config{MaxAttempts: math.MaxInt32}); err != nil {
		t.Fatalf("MaxAttempts = MaxInt32 must be valid: %v", err)
	}
}

// The reap buried a message whose owner had delivered it and was only late
// to finalize. With the grace period, the owner's fenced finalize wins.
func TestReap_LeavesALateOwnerItsGracePeriod(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	id := b.enqueue(t, 1, "a", false)[0]
	pub := dispatcher.PublisherFunc(func(pctx context.Context, m dispatcher.Message) error {
		// Delivered; then the owner is late: it finalizes only once its
		// lease has been expired for 300ms on the database clock, through
		// dozens of reaps (ReapInterval is 10ms), as when the database is
		// briefly unreachable.
		for {
			var late bool
			if err := b.pool.QueryRow(ctx, `SELECT lease_until < now() - interval '300 milliseconds' FROM outbox WHERE id = $1`, m.OutboxID).Scan(&late); err != nil {
				return dispatcher.Retryable(err)
			}
			if late {
				return nil
			}
			time.Sleep(5 * time.Millisecond)
		}
	})
	lost := make(chan int64, 1)
	_, _ = b.start(t, pub, fast(dispatcher.Config{
		MaxAttempts: 1, Lease: 200 * time.Millisecond, PublishTimeout: 100 * time.Millisecond,
		ReapGrace:   20 * time.Second, // far longer than the late finalize takes, even on a busy machine
		OnLeaseLost: func(id, _ int64) { lost <- id },
	}))
	waitFor(t, 30*time.Second, "the message finalized", func() bool {
		s := b.state(t, id).Status // one read: a hand-back between two reads made the test see "pending" as final
		return s != "pending" && s != "processing"
	})
	if s := b.state(t, id); s.Status != "done" {
		t.Fatalf("delivered message = %+v, want done (the reap must leave the late owner its grace)", s)
	}
	select {
	case id := <-lost:
		t.Fatalf("lease of %d lost", id)
	default:
	}

	// The query itself: a row expired 1s ago is left alone within a 5s
	// grace and reaped without one.
	// Inserted as processing at once: enqueued as pending, the running
	// dispatcher could claim it before it was made to look expired.
	if _, err := b.pool.Exec(ctx, `INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload,
		status, attempts, lease_version, lease_owner, lease_until)
		VALUES ('order', 'b', 'OrderEvent', '{}', 'processing', 1, 1, 'late', now() - interval '1 second')`); err != nil {
		t.Fatal(err)
	}
	q := db.New(b.pool)
	if n, err := q.OutboxReap(ctx, db.OutboxReapParams{Grace: 5 * time.Second, MaxAttempts: 1}); err != nil || n != 0 {
		t.Fatalf("reap within the grace: %d rows, %v; want 0", n, err)
	}
	if n, err := q.OutboxReap(ctx, db.OutboxReapParams{Grace: 0, MaxAttempts: 1}); err != nil || n != 1 {
		t.Fatalf("reap without grace: %d rows, %v; want 1", n, err)
	}
}

// The same for an ordered bomb: the ordered claim falls back to the
// isolation path too; the bomb is dead (and, as any dead head, blocks only
// its own aggregate), other aggregates flow.
func TestClaimOrdered_RowThatCannotBeReturnedGoesDeadAndOtherAggregatesFlow(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	var bomb int64
	if err := b.pool.QueryRow(ctx, `INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload, ordered)
		VALUES ('t', 'bomb', 'Bomb', $1::jsonb, true) RETURNING id`, bombPayload()).Scan(&bomb); err != nil {
		t.Fatal(err)
	}
	behind := b.enqueue(t, 2, "bomb", true)
	ids := append(b.enqueue(t, 5, "a", true), b.enqueue(t, 5, "b", true)...)
	rec := newRecorder(nil)
	b.start(t, rec, fast(dispatcher.Config{Lease: time.Minute, PublishTimeout: 5 * time.Second, Claim: dispatcher.ClaimOrderedOnly,
		ClaimTimeout: 5 * time.Minute})) // as in TestClaim_RowThatCannotBeReturnedGoesDeadAndEverythingElseFlows
	waitFor(t, 3*time.Minute, "10 ordered messages of other aggregates delivered", func() bool {
		return b.count(t, "status = 'done'") == len(ids)
	})
	waitFor(t, 5*time.Minute, "the bomb dead", func() bool { return b.state(t, bomb).Status == "dead" })
	if s := b.state(t, bomb); !strings.Contains(s.LastError, "54000") {
		t.Fatalf("bomb last_error = %q", s.LastError)
	}
	for _, id := range behind {
		if s := b.state(t, id); s.Status != "pending" {
			t.Fatalf("message %d behind the dead bomb = %+v, want pending (blocked by its dead head)", id, s)
		}
	}
	for _, agg := range []string{"a", "b"} {
		order := rec.order[agg]
		for i := 1; i < len(order); i++ {
			if order[i] < order[i-1] {
				t.Fatalf("aggregate %s published out of order: %v", agg, order)
			}
		}
	}
}
