package jetstream

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"testing"
	"time"

	gocmp "github.com/google/go-cmp/cmp"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/pgoutbox/pgoutbox/dispatcher"
	"github.com/pgoutbox/pgoutbox/internal/pgtest"
	"github.com/pgoutbox/pgoutbox/internal/testlog"
	"github.com/pgoutbox/pgoutbox/publisher/cloudevents"
)

// Two outboxes (two databases, each with its own outbox table) publish
// their event 1 to one stream with one publisher and default settings: both
// are stored. With the bare outbox id as Nats-Msg-Id the stream answered the
// second with a duplicate PubAck and never stored it.
func TestTwoOutboxesSharingAStream_BothEventsWithID1AreStored(t *testing.T) {
	t.Parallel()
	b := setup(t)
	p := newPublisher(t, Config{SubjectTemplate: b.prefix + ".{{.AggregateType}}.{{.EventType}}"})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	var ds []*dispatcher.Dispatcher
	done := make(chan error, 2)
	for i := range 2 {
		pool := pgtest.NewPool(t)
		id, err := dispatcher.Enqueue(ctx, pool, dispatcher.Event{AggregateType: "order", AggregateID: "o-1",
			EventType: "OrderPaid", Payload: json.RawMessage(`{"outbox":` + string(rune('1'+i)) + `}`)})
		if err != nil {
			t.Fatalf("Enqueue into outbox %d: %v", i+1, err)
		}
		if id != 1 {
			t.Fatalf("outbox %d: first id = %d, want 1", i+1, id)
		}
		d, err := dispatcher.New(pool, p, dispatcher.Config{Logger: testlog.New(t), PollInterval: 20 * time.Millisecond})
		if err != nil {
			t.Fatalf("dispatcher.New: %v", err)
		}
		ds = append(ds, d)
	}
	runCtx, stop := context.WithCancel(ctx)
	for _, d := range ds {
		go func() { done <- d.Run(runCtx) }()
	}
	for _, d := range ds {
		for d.Stats().Published < 1 {
			if ctx.Err() != nil {
				t.Fatalf("dispatcher did not publish: %+v", d.Stats())
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	stop()
	for range ds {
		if err := <-done; err != nil {
			t.Fatalf("Run: %v", err)
		}
	}

	if got := b.msgCount(t); got != 2 {
		t.Fatalf("stream holds %d messages, want 2: one outbox's event 1 was dropped as a duplicate of the other's", got)
	}
	type stored struct{ ID, Source, MsgID, Data string }
	var got []stored
	for seq := uint64(1); seq <= 2; seq++ {
		m, err := b.stream.GetMsg(ctx, seq)
		if err != nil {
			t.Fatalf("GetMsg %d: %v", seq, err)
		}
		got = append(got, stored{m.Header.Get("ce-id"), m.Header.Get("ce-source"), m.Header.Get(HeaderMsgID), string(m.Data)})
	}
	if got[0].Source == got[1].Source {
		t.Fatalf("both outboxes have the default source %q, want one per outbox", got[0].Source)
	}
	for i, m := range got {
		if m.ID != "1" || m.MsgID != cloudevents.IdempotencyKey(m.Source, "1") {
			t.Errorf("message %d: ce-id %q, Nats-Msg-Id %q; want 1 and the key of %q", i+1, m.ID, m.MsgID, m.Source)
		}
	}
	datas := []string{got[0].Data, got[1].Data}
	slices.Sort(datas)
	if diff := gocmp.Diff([]string{`{"outbox": 1}`, `{"outbox": 2}`}, datas); diff != "" {
		t.Fatalf("payloads (-want +got):\n%s", diff)
	}
	// A re-publish of one outbox's event is still dropped by the window.
	msg := testMessage(1)
	msg.Source = got[0].Source
	msg.AggregateType = "order"
	if err := publish(t, p, msg); err != nil {
		t.Fatalf("re-publish: %v", err)
	}
	if n := b.msgCount(t); n != 2 {
		t.Fatalf("after a re-publish the stream holds %d messages, want 2", n)
	}
	if _, err := b.stream.GetMsg(ctx, 3); !errors.Is(err, natsjs.ErrMsgNotFound) {
		t.Fatalf("GetMsg 3 = %v, want not found", err)
	}
}
