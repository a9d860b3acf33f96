package dispatcher_test

import (
	"context"
	"testing"
	"time"

	"github.com/pgoutbox/pgoutbox/dispatcher"
)

// The claim cursor passes a row that a concurrent claim holds: that claim
// takes it. When that claim rolls back instead (its process died inside the
// statement), the row is pending behind the cursor, and the recovery lane's
// sweep (OutboxRequeuePassed, every SweepInterval) puts it back in front.
func TestWindow_RowPassedWhileAnotherClaimHeldItIsDeliveredAfterTheSweep(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	ids := b.enqueue(t, 3, "a", false)
	other, err := b.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Rollback(ctx) //nolint:errcheck
	if _, err := other.Exec(ctx, `SELECT id FROM outbox WHERE id = $1 FOR UPDATE`, ids[0]); err != nil {
		t.Fatal(err)
	}
	rec := newRecorder(nil)
	d, _ := b.start(t, rec, fast(dispatcher.Config{SweepInterval: 100 * time.Millisecond}))
	waitFor(t, 10*time.Second, "the two unheld rows", func() bool { return rec.count(ids[1]) == 1 && rec.count(ids[2]) == 1 })
	if rec.count(ids[0]) != 0 {
		t.Fatal("the held row was published while another transaction held it")
	}
	if err := other.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the row the cursor passed", func() bool { return rec.count(ids[0]) == 1 })
	if got := d.Stats().Requeued; got < 1 {
		t.Fatalf("Stats().Requeued = %d, want >= 1 (the sweep returned the row)", got)
	}
}

// An idle-in-transaction writer that inserted an event delays only that
// event: events committed after it are delivered while it stays open, and
// its own event is delivered once it commits.
func TestWindow_OpenWriterDelaysOnlyItsOwnEvent(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	writer, err := b.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer writer.Rollback(ctx) //nolint:errcheck
	own, err := dispatcher.Enqueue(ctx, writer, dispatcher.Event{AggregateType: "order", AggregateID: "w", EventType: "E", Payload: []byte(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	rec := newRecorder(nil)
	b.start(t, rec, fast(dispatcher.Config{}))
	for round := 0; round < 3; round++ {
		later := b.enqueue(t, 5, "a", false)
		waitFor(t, 10*time.Second, "events committed after the open writer", func() bool {
			for _, id := range later {
				if rec.count(id) != 1 {
					return false
				}
			}
			return true
		})
	}
	if rec.count(own) != 0 {
		t.Fatal("the open writer's event was published before it committed")
	}
	if err := writer.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the writer's own event after its commit", func() bool { return rec.count(own) == 1 })
}
