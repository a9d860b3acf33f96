package dispatcher_test

import (
	"context"
	"testing"
	"time"

	"github.com/pgoutbox/pgoutbox/db"
	"github.com/pgoutbox/pgoutbox/dispatcher"
)

// Two outboxes of the same name in two schemas, written in one transaction:
// each ordered event is sequenced and becomes its aggregate's head, and the
// dispatcher of each schema delivers its own.
func TestOrdered_SameTableNameInTwoSchemasInOneTransaction(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	migrateRenamed(t, b, "outbox", "billing")

	tx, err := b.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	billing, err := dispatcher.TableDBTX(tx, "outbox", "billing")
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []db.DBTX{tx, billing} {
		if _, err := dispatcher.Enqueue(ctx, q, dispatcher.Event{AggregateType: "a", AggregateID: "x", EventType: "E", Payload: []byte(`{}`), Ordered: true}); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	// What a relay of each table does before its ordered claims.
	for _, f := range []string{"public.outbox_resolve_heads", "billing.outbox_resolve_heads"} {
		if _, err := b.pool.Exec(ctx, "SELECT "+f+"(100)"); err != nil {
			t.Fatal(err)
		}
	}
	for _, table := range []string{"public.outbox", "billing.outbox"} {
		var seq *int64
		var head *bool
		if err := b.pool.QueryRow(ctx, "SELECT seq, head FROM "+table).Scan(&seq, &head); err != nil {
			t.Fatal(err)
		}
		if seq == nil || head == nil || !*head {
			t.Errorf("%s: seq %v head %v, want sequenced and head", table, seq, head)
		}
	}

	for _, schema := range []string{"", "billing"} {
		got := make(chan dispatcher.Message, 2)
		pub := dispatcher.PublisherFunc(func(_ context.Context, m dispatcher.Message) error { got <- m; return nil })
		_, stop := b.start(t, pub, fast(dispatcher.Config{Schema: schema}))
		select {
		case <-got:
		case <-time.After(30 * time.Second):
			t.Fatalf("schema %q: the ordered event was not delivered", schema)
		}
		stop()
	}
}
