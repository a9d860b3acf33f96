package dispatcher_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/pgoutbox/pgoutbox/dispatcher"
)

func TestEnqueue_RejectsInvalidEventsAndKeepsTheTransactionUsable(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	valid := dispatcher.Event{AggregateType: "order", AggregateID: "o-1", EventType: "OrderPaid", Payload: []byte(`{"a":1}`)}
	cases := []struct {
		name string
		mod  func(*dispatcher.Event)
		want string
	}{
		{"payload not JSON", func(e *dispatcher.Event) { e.Payload = []byte(`{"a":`) }, "not valid JSON"},
		{"payload empty", func(e *dispatcher.Event) { e.Payload = nil }, "Payload is empty"},
		{"payload with NUL", func(e *dispatcher.Event) { e.Payload = []byte(`{"a":"x\u0000y"}`) }, `\u0000`},
		{"payload with invalid UTF-8", func(e *dispatcher.Event) { e.Payload = []byte("{\"a\":\"\xff\"}") }, "UTF-8"},
		{"payload with a lone high surrogate", func(e *dispatcher.Event) { e.Payload = []byte(`["\ud800"]`) }, "surrogate"},
		{"payload with a lone low surrogate", func(e *dispatcher.Event) { e.Payload = []byte(`{"\udc00":1}`) }, "surrogate"},
		{"header with NUL", func(e *dispatcher.Event) { e.Headers = map[string]string{"k": "a\x00b"} }, "NUL"},
		{"payload too large", func(e *dispatcher.Event) { e.Payload = []byte(`"` + strings.Repeat("x", 1<<20) + `"`) }, "limit is"},
		{"empty aggregate id", func(e *dispatcher.Event) { e.AggregateID = "" }, "AggregateID is empty"},
		{"empty aggregate type", func(e *dispatcher.Event) { e.AggregateType = "" }, "AggregateType is empty"},
		{"empty event type", func(e *dispatcher.Event) { e.EventType = "" }, "EventType is empty"},
		{"oversized aggregate id", func(e *dispatcher.Event) { e.AggregateID = strings.Repeat("a", 256) }, "256 bytes"},
		{"invalid UTF-8 event type", func(e *dispatcher.Event) { e.EventType = "\xff" }, "UTF-8"},
		{"NUL in aggregate id", func(e *dispatcher.Event) { e.AggregateID = "a\x00b" }, "UTF-8"},
	}
	tx, err := b.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	for _, c := range cases {
		ev := valid
		c.mod(&ev)
		_, err := dispatcher.Enqueue(ctx, tx, ev)
		if !errors.Is(err, dispatcher.ErrInvalidEvent) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want ErrInvalidEvent mentioning %q", c.name, err, c.want)
		}
		if _, err := dispatcher.EnqueueMany(ctx, tx, []dispatcher.Event{valid, ev}); !errors.Is(err, dispatcher.ErrInvalidEvent) {
			t.Errorf("%s: EnqueueMany err = %v, want ErrInvalidEvent", c.name, err)
		}
	}
	// Nothing was sent to the database, so the business transaction lives on.
	if _, err := dispatcher.Enqueue(ctx, tx, valid); err != nil {
		t.Fatalf("valid enqueue after rejections: %v", err)
	}
	// Escapes jsonb does store are accepted: a surrogate pair, an escaped
	// backslash before u0000 (a literal text, not a NUL).
	for _, p := range []string{`{"emoji":"\ud83d\ude00"}`, `{"text":"\\u0000"}`} {
		ev := valid
		ev.Payload = []byte(p)
		if _, err := dispatcher.Enqueue(ctx, tx, ev); err != nil {
			t.Fatalf("payload %s: %v", p, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if n := b.count(t, "true"); n != 3 {
		t.Fatalf("rows = %d, want exactly the 3 valid events", n)
	}
}

func TestEnqueue_RollbackWritesNothingAndCommitWritesAll(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	ev := dispatcher.Event{AggregateType: "order", AggregateID: "o-1", EventType: "OrderPaid",
		Payload: []byte(`{"sql":"'); DROP TABLE outbox; --"}`), Headers: map[string]string{"traceparent": "00-abc-01"}}

	tx, _ := b.pool.Begin(ctx)
	if _, err := dispatcher.Enqueue(ctx, tx, ev); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if n := b.count(t, "true"); n != 0 {
		t.Fatalf("rolled back: %d rows", n)
	}

	tx, _ = b.pool.Begin(ctx)
	many := []dispatcher.Event{ev, ev, ev}
	if n, err := dispatcher.EnqueueMany(ctx, tx, many); err != nil || n != 3 {
		t.Fatalf("EnqueueMany: n=%d err=%v", n, err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if n := b.count(t, `payload->>'sql' = $1 AND headers->>'traceparent' = '00-abc-01'`, "'); DROP TABLE outbox; --"); n != 3 {
		t.Fatalf("committed rows with literal payload and headers = %d, want 3", n)
	}
}

func TestProducer_OrderedPerEventType(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	p := dispatcher.NewProducer(dispatcher.ProducerConfig{OrderedEventTypes: []string{"OrderPaid"}, OrderedAggregateTypes: []string{"ledger"}})
	for _, ev := range []dispatcher.Event{
		{AggregateType: "order", AggregateID: "o", EventType: "OrderPaid", Payload: []byte(`{}`)},
		{AggregateType: "order", AggregateID: "o", EventType: "EmailSent", Payload: []byte(`{}`)},
		{AggregateType: "ledger", AggregateID: "l", EventType: "Posted", Payload: []byte(`{}`)},
	} {
		if _, err := p.Enqueue(ctx, b.pool, ev); err != nil {
			t.Fatal(err)
		}
	}
	if n := b.count(t, "ordered"); n != 2 {
		t.Fatalf("ordered rows = %d, want 2 (OrderPaid, ledger)", n)
	}
}
