package queries_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgoutbox/pgoutbox/db"
	"github.com/pgoutbox/pgoutbox/internal/pgtest"
)

// The insert trigger's NOTIFY arrives only at COMMIT, never for a rollback,
// and a burst of inserts in one transaction (row by row or COPY) wakes
// listeners once.
func TestNotify_OncePerCommittedTransactionNeverForRollback(t *testing.T) {
	t.Parallel()
	url := pgtest.NewURL(t)
	pool := pgtest.Pool(t, url)
	ctx := context.Background()
	listener, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer listener.Close(ctx)
	if _, err := listener.Exec(ctx, "LISTEN outbox"); err != nil {
		t.Fatal(err)
	}
	count := func() int {
		n := 0
		for {
			wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
			_, err := listener.WaitForNotification(wctx)
			cancel()
			if err != nil {
				return n
			}
			n++
		}
	}
	ev := db.OutboxEnqueueParams{AggregateType: "o", AggregateID: "a", EventType: "E", Payload: []byte(`{}`), Headers: []byte(`{}`)}

	tx, _ := pool.Begin(ctx)
	for i := 0; i < 100; i++ {
		if _, err := db.New(tx).OutboxEnqueue(ctx, ev); err != nil {
			t.Fatal(err)
		}
	}
	if n := count(); n != 0 {
		t.Fatalf("%d notifications before COMMIT", n)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if n := count(); n != 1 {
		t.Fatalf("100 inserts in one transaction: %d notifications, want 1", n)
	}

	tx, _ = pool.Begin(ctx)
	many := make([]db.OutboxEnqueueManyParams, 500)
	for i := range many {
		many[i] = db.OutboxEnqueueManyParams{AggregateType: "o", AggregateID: "a", EventType: "E", Payload: []byte(`{}`), Headers: []byte(`{}`)}
	}
	if _, err := db.New(tx).OutboxEnqueueMany(ctx, many); err != nil {
		t.Fatal(err)
	}
	_ = tx.Commit(ctx)
	if n := count(); n != 1 {
		t.Fatalf("COPY of 500: %d notifications, want 1", n)
	}

	tx, _ = pool.Begin(ctx)
	if _, err := db.New(tx).OutboxEnqueue(ctx, ev); err != nil {
		t.Fatal(err)
	}
	_ = tx.Rollback(ctx)
	if n := count(); n != 0 {
		t.Fatalf("rolled back: %d notifications, want 0", n)
	}
}
