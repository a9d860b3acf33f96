package inbox_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/pgoutbox/inbox"
)

func TestProcess_DuplicateIsAcknowledgedWithoutRunningTheHandler(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	for _, m := range []inbox.Message{unordered(1), ordered("a", 2, 10, 0)} {
		b.wantOutcome(t, m, inbox.Processed)
		b.wantOutcome(t, m, inbox.Duplicate)
		b.wantOutcome(t, m, inbox.Duplicate)
	}
	if got, want := b.effects(t), []string{"1", "2"}; !slices.Equal(got, want) {
		t.Fatalf("handler committed %v, want %v", got, want)
	}
	if n := queryInt(t, b.pool, `SELECT sum(deliveries) FROM inbox`); n != 6 {
		t.Fatalf("deliveries recorded: %d, want 6", n)
	}
	if s := b.ib.Stats(); s.Processed != 2 || s.Duplicates != 4 {
		t.Fatalf("stats %+v", s)
	}
}

// The same id from two sources is two events.
func TestProcess_SameIDFromAnotherSourceIsAnotherEvent(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	m := unordered(1)
	b.wantOutcome(t, m, inbox.Processed)
	m.Source = "urn:test:other"
	b.wantOutcome(t, m, inbox.Processed)
}

func TestProcess_HandlerErrorRollsBackHandlerAndRecord(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	boom := errors.New("downstream unavailable")
	for _, m := range []inbox.Message{unordered(1), ordered("a", 2, 10, 0)} {
		b.failFor(m.ID, boom)
		if _, err := b.ib.Process(context.Background(), m); !errors.Is(err, boom) {
			t.Fatalf("Process(%s) error = %v, want the handler's", m.ID, err)
		}
		if n := queryInt(t, b.pool, `SELECT count(*) FROM inbox WHERE id = $1`, m.ID); n != 0 {
			t.Fatalf("a failed event left its inbox record")
		}
		b.failFor(m.ID, nil)
		b.wantOutcome(t, m, inbox.Processed) // the redelivery
	}
	if got := b.effects(t); !slices.Equal(got, []string{"1", "2"}) {
		t.Fatalf("effects %v: the failed runs' writes were not rolled back", got)
	}
}

func TestProcess_HandlerPanicRollsBack(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	ib, err := inbox.New(inbox.Config{DB: pool, Handler: func(ctx context.Context, tx pgx.Tx, d inbox.Delivery) error {
		if _, err := tx.Exec(ctx, `INSERT INTO effects (id) VALUES ($1)`, d.ID); err != nil {
			return err
		}
		panic("bug")
	}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ib.Process(context.Background(), unordered(1)); !errors.Is(err, inbox.ErrHandlerPanic) {
		t.Fatalf("error = %v, want ErrHandlerPanic", err)
	}
	if n := queryInt(t, pool, `SELECT (SELECT count(*) FROM inbox) + (SELECT count(*) FROM effects)`); n != 0 {
		t.Fatalf("%d rows left after a panic", n)
	}
}

// waitLockWaiters waits until n sessions of the database wait for a lock.
func waitLockWaiters(t *testing.T, pool *pgxpool.Pool, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		got := queryInt(t, pool, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`)
		if got >= int64(n) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d sessions wait for a lock after 30s, want %d", got, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Two consumers receive the same message at once: the second waits for the
// first's transaction and finds a duplicate; the handler runs once.
func TestProcess_TwoConsumersRacingOnOneMessageProcessItOnce(t *testing.T) {
	t.Parallel()
	for _, m := range []inbox.Message{unordered(1), ordered("a", 2, 10, 0)} {
		t.Run(m.Type, func(t *testing.T) {
			t.Parallel()
			pool := newPool(t)
			entered, release := make(chan struct{}), make(chan struct{})
			var once sync.Once
			var runs sync.Map
			handler := func(ctx context.Context, tx pgx.Tx, d inbox.Delivery) error {
				if _, err := tx.Exec(ctx, `INSERT INTO effects (id) VALUES ($1)`, d.ID); err != nil {
					return err
				}
				runs.Store(d.ID, true)
				once.Do(func() { close(entered) })
				<-release
				return nil
			}
			var consumers [2]*inbox.Inbox
			for i := range consumers {
				ib, err := inbox.New(inbox.Config{DB: pool, Handler: handler})
				if err != nil {
					t.Fatal(err)
				}
				consumers[i] = ib
			}
			outs := make(chan inbox.Outcome, 2)
			errs := make(chan error, 2)
			run := func(ib *inbox.Inbox) {
				out, err := ib.Process(context.Background(), m)
				outs <- out
				errs <- err
			}
			go run(consumers[0])
			<-entered
			go run(consumers[1])
			waitLockWaiters(t, pool, 1) // the second consumer waits for the first
			close(release)
			got := []inbox.Outcome{<-outs, <-outs}
			for range 2 {
				if err := <-errs; err != nil {
					t.Fatal(err)
				}
			}
			slices.Sort(got)
			if want := []inbox.Outcome{inbox.Processed, inbox.Duplicate}; !slices.Equal(got, want) {
				t.Fatalf("outcomes %v, want %v", got, want)
			}
			if n := queryInt(t, pool, `SELECT count(*) FROM effects`); n != 1 {
				t.Fatalf("handler committed %d times, want 1", n)
			}
		})
	}
}

// Many consumers, many copies of every event, events of one aggregate
// spread among them in any order: each event is processed once, in
// position order.
func TestProcess_ManyConsumersManyCopiesOnceEachInOrder(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	const events = 40
	var msgs []inbox.Message
	var prev int64
	for i := 1; i <= events; i++ {
		seq := int64(i * 3) // positions of one aggregate are not consecutive
		msgs = append(msgs, ordered("agg", i, seq, prev))
		prev = seq
	}
	var wg sync.WaitGroup
	for c := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Each consumer gets every event twice, in its own order.
			order := slices.Clone(msgs)
			if c%2 == 1 {
				slices.Reverse(order)
			}
			for _, m := range append(order, order...) {
				if _, err := b.ib.Process(context.Background(), m); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	got := b.effects(t)
	if len(got) != events {
		t.Fatalf("handler committed %d events, want %d: %v", len(got), events, got)
	}
	for i, id := range got {
		if id != msgs[i].ID {
			t.Fatalf("effects out of order at %d: %v", i, got)
		}
	}
	if n := queryInt(t, b.pool, `SELECT count(*) FROM inbox WHERE status <> 'processed'`); n != 0 {
		t.Fatalf("%d records not processed", n)
	}
}

// A redelivered older event: its successor arrives first and is parked; the
// predecessor's arrival processes both, in order.
func TestProcess_EarlyEventIsParkedUntilItsPredecessorIsProcessed(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.wantOutcome(t, ordered("a", 1, 5, 0), inbox.Processed)
	b.wantOutcome(t, ordered("a", 3, 12, 9), inbox.Parked)
	b.wantOutcome(t, ordered("a", 2, 9, 5), inbox.Processed)
	b.wantOutcome(t, ordered("a", 3, 12, 9), inbox.Duplicate)
	if got := b.effects(t); !slices.Equal(got, []string{"1", "2", "3"}) {
		t.Fatalf("effects %v, want 1 2 3", got)
	}
	last := b.calls[len(b.calls)-1]
	if !last.Parked || last.Gap != nil || string(last.Data) != `{"n":3}` || last.Headers["tenant"] != "t1" || last.Type != "Changed" {
		t.Fatalf("released delivery %+v: want the parked event as received", last)
	}
	if s := b.ib.Stats(); s.Parked != 1 || s.Released != 1 || s.Gaps != 0 {
		t.Fatalf("stats %+v", s)
	}
	if n := queryInt(t, b.pool, `SELECT count(*) FROM inbox WHERE payload IS NOT NULL`); n != 0 {
		t.Fatalf("a released event kept its payload")
	}
}

// The first event of an aggregate waits for nothing; a later one, first
// seen, waits for its predecessor.
func TestProcess_FirstEventOfAnAggregateWithAPredecessorWaits(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.wantOutcome(t, ordered("a", 2, 9, 5), inbox.Parked)
	b.wantOutcome(t, ordered("a", 1, 5, 0), inbox.Processed)
	if got := b.effects(t); !slices.Equal(got, []string{"1", "2"}) {
		t.Fatalf("effects %v", got)
	}
}

// The outbox skipped the predecessor (and says which position it delivered
// last): the event is processed with a gap, at once, never waiting.
func TestProcess_SkippedPredecessorIsReportedAsAGapNotAHang(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.wantOutcome(t, ordered("a", 1, 5, 0), inbox.Processed)
	m := ordered("a", 4, 20, 12) // 9 and 12 were skipped; 5 was delivered
	m.Position.Skipped, m.Position.Sent = true, 5
	b.wantOutcome(t, m, inbox.Processed)
	want := inbox.Gap{Source: src, AggregateID: "a", After: 5, Before: 20, Missing: 12, Reason: inbox.GapSkipped}
	if len(b.gaps) != 1 || b.gaps[0] != want {
		t.Fatalf("gaps %+v, want %+v", b.gaps, want)
	}
	if d := b.calls[1]; d.Gap == nil || *d.Gap != want {
		t.Fatalf("delivery gap %+v, want %+v", d.Gap, want)
	}
	if n := queryInt(t, b.pool, `SELECT count(*) FROM inbox_gaps WHERE reason = 'skipped' AND after_seq = 5 AND before_seq = 20 AND missing_seq = 12`); n != 1 {
		t.Fatalf("gap not recorded")
	}
	// A skip whose delivered predecessor has not arrived yet still waits
	// for it.
	m2 := ordered("a", 6, 40, 35)
	m2.Position.Skipped, m2.Position.Sent = true, 30
	b.wantOutcome(t, m2, inbox.Parked)
	b.wantOutcome(t, ordered("a", 5, 30, 20), inbox.Processed)
	if got := b.effects(t); !slices.Equal(got, []string{"1", "4", "5", "6"}) {
		t.Fatalf("effects %v", got)
	}
}

// An event the outbox published but then counted as failed (its publish
// timed out after all), skipped afterwards: the consumer already has it, so
// the next event is no gap.
func TestProcess_SkippedPredecessorThatArrivedAnywayIsNoGap(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.wantOutcome(t, ordered("a", 1, 5, 0), inbox.Processed)
	b.wantOutcome(t, ordered("a", 2, 9, 5), inbox.Processed)
	m := ordered("a", 3, 12, 9)
	m.Position.Skipped, m.Position.Sent = true, 5
	b.wantOutcome(t, m, inbox.Processed)
	if len(b.gaps) != 0 {
		t.Fatalf("gaps %+v, want none", b.gaps)
	}
}

// ageParked makes every parked event look older than any bound (the bound
// is compared on the database clock).
func ageParked(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	exec(t, pool, `UPDATE inbox SET received_at = received_at - interval '1 day' WHERE status = 'parked'`)
}

// A predecessor that never arrives: the sweep past MaxParkedAge declares
// the gap and processes what waited, in order; the predecessor arriving
// afterwards is late and not processed.
func TestSweep_MissingPredecessorBecomesATimeoutGapAfterMaxParkedAge(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *inbox.Config) { c.MaxParkedAge = time.Minute })
	b.wantOutcome(t, ordered("a", 1, 5, 0), inbox.Processed)
	b.wantOutcome(t, ordered("a", 3, 12, 9), inbox.Parked)
	b.wantOutcome(t, ordered("a", 4, 15, 12), inbox.Parked)
	if err := b.ib.Sweep(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := b.effects(t); !slices.Equal(got, []string{"1"}) {
		t.Fatalf("effects %v before the bound", got)
	}
	if s := b.ib.Stats(); s.ParkedNow != 2 {
		t.Fatalf("parked gauge %d, want 2", s.ParkedNow)
	}
	ageParked(t, b.pool)
	if err := b.ib.Sweep(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := b.effects(t); !slices.Equal(got, []string{"1", "3", "4"}) {
		t.Fatalf("effects %v after the bound, want 1 3 4", got)
	}
	want := inbox.Gap{Source: src, AggregateID: "a", After: 5, Before: 12, Missing: 9, Reason: inbox.GapTimeout}
	if len(b.gaps) != 1 || b.gaps[0] != want {
		t.Fatalf("gaps %+v, want %+v", b.gaps, want)
	}
	b.wantOutcome(t, ordered("a", 2, 9, 5), inbox.Late)
	if got := b.effects(t); len(got) != 3 {
		t.Fatalf("a late event was processed: %v", got)
	}
	if s := b.ib.Stats(); s.Late != 1 || s.Gaps != 1 || s.Released != 2 {
		t.Fatalf("stats %+v", s)
	}
}

func TestProcess_TooManyParkedEventsBecomeAnOverflowGap(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *inbox.Config) { c.MaxParked = 2 })
	b.wantOutcome(t, ordered("a", 2, 9, 5), inbox.Parked)
	b.wantOutcome(t, ordered("a", 3, 12, 9), inbox.Parked)
	if len(b.effects(t)) != 0 {
		t.Fatal("processed within the bound")
	}
	b.wantOutcome(t, ordered("a", 4, 15, 12), inbox.Parked) // the third: over the bound
	if got := b.effects(t); !slices.Equal(got, []string{"2", "3", "4"}) {
		t.Fatalf("effects %v, want 2 3 4", got)
	}
	if len(b.gaps) != 1 || b.gaps[0].Reason != inbox.GapOverflow || b.gaps[0].Missing != 5 {
		t.Fatalf("gaps %+v", b.gaps)
	}
}

// A predecessor that arrived but whose handler keeps failing is not
// missing: the events behind it wait, past the bound, as long as it fails.
func TestSweep_FailingPredecessorIsWaitedForNotDeclaredMissing(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *inbox.Config) { c.MaxParkedAge = time.Minute })
	b.wantOutcome(t, ordered("a", 1, 5, 0), inbox.Processed)
	b.failFor("2", errors.New("downstream unavailable"))
	if _, err := b.ib.Process(context.Background(), ordered("a", 2, 9, 5)); err == nil {
		t.Fatal("want the handler's error")
	}
	b.wantOutcome(t, ordered("a", 3, 12, 9), inbox.Parked)
	ageParked(t, b.pool)
	if err := b.ib.Sweep(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := b.effects(t); !slices.Equal(got, []string{"1"}) || len(b.gaps) != 0 {
		t.Fatalf("effects %v, gaps %+v: a failing predecessor was treated as missing", got, b.gaps)
	}
	// Once its failure is older than the bound, it counts as missing.
	exec(t, b.pool, `UPDATE inbox_aggregates SET failing_at = failing_at - interval '1 day'`)
	b.failFor("2", nil)
	if err := b.ib.Sweep(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(b.gaps) != 1 || b.gaps[0].Reason != inbox.GapTimeout {
		t.Fatalf("gaps %+v", b.gaps)
	}
}

// The predecessor recovers: it is processed, then what waited behind it.
func TestProcess_RecoveredPredecessorReleasesWhatWaited(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.failFor("1", errors.New("downstream unavailable"))
	if _, err := b.ib.Process(context.Background(), ordered("a", 1, 5, 0)); err == nil {
		t.Fatal("want the handler's error")
	}
	b.wantOutcome(t, ordered("a", 2, 9, 5), inbox.Parked)
	b.failFor("1", nil)
	b.wantOutcome(t, ordered("a", 1, 5, 0), inbox.Processed)
	if got := b.effects(t); !slices.Equal(got, []string{"1", "2"}) {
		t.Fatalf("effects %v", got)
	}
	if n := queryInt(t, b.pool, `SELECT count(*) FROM inbox_aggregates WHERE failing_seq IS NOT NULL`); n != 0 {
		t.Fatal("the failure mark outlived the success")
	}
}

// A released event whose handler fails stays parked, keeps its turn (what
// is behind it waits), and the next sweep processes it.
func TestSweep_RetriesAParkedEventWhoseHandlerFailed(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.wantOutcome(t, ordered("a", 2, 9, 5), inbox.Parked)
	b.wantOutcome(t, ordered("a", 3, 12, 9), inbox.Parked)
	b.failFor("2", errors.New("downstream unavailable"))
	b.wantOutcome(t, ordered("a", 1, 5, 0), inbox.Processed) // releasing 2 fails: not an error of 1
	if got := b.effects(t); !slices.Equal(got, []string{"1"}) {
		t.Fatalf("effects %v", got)
	}
	if n := queryInt(t, b.pool, `SELECT attempts FROM inbox WHERE id = '2' AND status = 'parked' AND last_error LIKE '%downstream unavailable%'`); n != 1 {
		t.Fatalf("attempts %d", n)
	}
	b.failFor("2", nil)
	if err := b.ib.Sweep(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := b.effects(t); !slices.Equal(got, []string{"1", "2", "3"}) {
		t.Fatalf("effects %v", got)
	}
}

// A consumer that receives only some event types opts out of the gap
// check: nothing waits, and order still holds.
func TestProcess_GapIgnoreProcessesAtOnceAndRefusesOlderEvents(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *inbox.Config) { c.Gaps = inbox.GapIgnore })
	b.wantOutcome(t, ordered("a", 3, 12, 9), inbox.Processed)
	b.wantOutcome(t, ordered("a", 2, 9, 5), inbox.Late)
	b.wantOutcome(t, ordered("a", 5, 20, 15), inbox.Processed)
	if got := b.effects(t); !slices.Equal(got, []string{"3", "5"}) || len(b.gaps) != 0 {
		t.Fatalf("effects %v gaps %v", got, b.gaps)
	}
}

func TestProcess_StartAtFirstSeenStartsAnAggregateWithAGap(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *inbox.Config) { c.StartAtFirstSeen = true })
	b.wantOutcome(t, ordered("a", 3, 12, 9), inbox.Processed)
	b.wantOutcome(t, ordered("a", 5, 20, 15), inbox.Parked) // known aggregates still wait
	if len(b.gaps) != 1 || b.gaps[0].Reason != inbox.GapStart || b.gaps[0].Missing != 9 || b.gaps[0].After != 0 {
		t.Fatalf("gaps %+v", b.gaps)
	}
}

// Retention: finished records older than Retention go, parked ones stay;
// a redelivered ordered event whose record was purged is still refused.
func TestPurge_DeletesOldFinishedRecordsKeepsParkedAndPositions(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *inbox.Config) { c.Retention = time.Hour; c.PurgeBatch = 2 })
	b.wantOutcome(t, unordered(100), inbox.Processed)
	for i := 1; i <= 5; i++ {
		b.wantOutcome(t, ordered("a", i, int64(i*10), int64((i-1)*10)), inbox.Processed)
	}
	b.wantOutcome(t, ordered("a", 7, 70, 60), inbox.Parked)
	exec(t, b.pool, `UPDATE inbox SET processed_at = processed_at - interval '2 hours', received_at = received_at - interval '2 hours'`)
	b.wantOutcome(t, unordered(101), inbox.Processed) // recent: kept
	n, err := b.ib.Purge(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if n != 6 {
		t.Fatalf("purged %d, want 6", n)
	}
	if got := queryInt(t, b.pool, `SELECT count(*) FROM inbox`); got != 2 {
		t.Fatalf("%d records left, want the parked one and the recent one", got)
	}
	b.wantOutcome(t, ordered("a", 3, 30, 20), inbox.Late)
	if got := len(b.effects(t)); got != 7 {
		t.Fatalf("%d effects, want 7", got)
	}
}
