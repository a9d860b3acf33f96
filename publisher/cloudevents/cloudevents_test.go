package cloudevents

import (
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/pgoutbox/pgoutbox/dispatcher"
)

func TestFrom_MapsOutboxColumnsToAttributes(t *testing.T) {
	t.Parallel()
	created := time.Date(2026, 11, 29, 10, 0, 0, 123000000, time.FixedZone("JST", 9*3600))
	msg := dispatcher.Message{ID: "42", OutboxID: 42, AggregateType: "order", AggregateID: "o-1",
		EventType: "OrderPaid", CreatedAt: created}
	got := From(msg, "").Map("ce-")
	want := map[string]string{
		"ce-specversion":     "1.0",
		"ce-id":              "42",
		"ce-type":            "OrderPaid",
		"ce-source":          "pgoutbox",
		"ce-subject":         "o-1",
		"ce-time":            "2026-11-29T01:00:00.123Z",
		"ce-datacontenttype": "application/json",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("(-want +got):\n%s", diff)
	}
	if got := From(msg, "urn:shop").Source; got != "urn:shop" {
		t.Fatalf("source = %q", got)
	}
}

func TestFrom_SourceIsThePublishersElseTheMessagesElseDefault(t *testing.T) {
	t.Parallel()
	msg := dispatcher.Message{ID: "1", Source: "pgoutbox://db:5432/app/public.outbox"}
	if got := From(msg, "").Source; got != msg.Source {
		t.Fatalf("source = %q, want the message's", got)
	}
	if got := From(msg, "urn:shop").Source; got != "urn:shop" {
		t.Fatalf("source = %q, want the publisher's", got)
	}
	if got := From(dispatcher.Message{ID: "1"}, "").Source; got != DefaultSource {
		t.Fatalf("source = %q, want %q", got, DefaultSource)
	}
}

func TestIdempotencyKey_IsStablePerEventAndDiffersBetweenOutboxes(t *testing.T) {
	t.Parallel()
	// printf %s urn:shop | sha256sum | cut -c1-32
	if got, want := IdempotencyKey("urn:shop", "41"), "75da0dad8c346ed92e3988b3ff910557-41"; got != want {
		t.Fatalf("IdempotencyKey = %q, want %q", got, want)
	}
	a := IdempotencyKey("pgoutbox://db:5432/app/public.outbox", "1")
	b := IdempotencyKey("pgoutbox://db:5432/app/public.billing_outbox", "1")
	if a == b {
		t.Fatalf("two outboxes' event 1 share the key %q", a)
	}
	if IdempotencyKey("urn:a", "12") == IdempotencyKey("urn:a1", "2") {
		t.Fatal("keys are ambiguous")
	}
	if got := From(dispatcher.Message{ID: "41"}, "urn:shop").IdempotencyKey(); got != IdempotencyKey("urn:shop", "41") {
		t.Fatalf("Attributes.IdempotencyKey = %q", got)
	}
}

// The position of an ordered event travels as three extension attributes;
// an unordered event (zero Position) has none of them.
func TestMap_PositionAttributesOnlyWhenSet(t *testing.T) {
	t.Parallel()
	msg := dispatcher.Message{ID: "42", AggregateID: "o-1", EventType: "OrderPaid"}
	for _, tc := range []struct {
		pos  dispatcher.Position
		want map[string]string
	}{
		{dispatcher.Position{}, map[string]string{}},
		{dispatcher.Position{Seq: 7}, map[string]string{"ce_pgoutboxseq": "7"}},
		{dispatcher.Position{Seq: 9, Prev: 7}, map[string]string{"ce_pgoutboxseq": "9", "ce_pgoutboxprevseq": "7"}},
		{dispatcher.Position{Seq: 9, Prev: 7, Skipped: true}, map[string]string{"ce_pgoutboxseq": "9", "ce_pgoutboxprevseq": "7", "ce_pgoutboxprevsent": "0"}},
		{dispatcher.Position{Seq: 9, Prev: 7, Skipped: true, Sent: 3}, map[string]string{"ce_pgoutboxseq": "9", "ce_pgoutboxprevseq": "7", "ce_pgoutboxprevsent": "3"}},
	} {
		msg.Position = tc.pos
		got := map[string]string{}
		for k, v := range From(msg, "").Map("ce_") {
			for _, name := range PositionAttributes {
				if k == "ce_"+name {
					got[k] = v
				}
			}
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("%+v (-want +got):\n%s", tc.pos, diff)
		}
	}
	names := AttributeNames("ce-")
	for _, name := range PositionAttributes {
		if !slices.Contains(names, "ce-"+name) {
			t.Errorf("AttributeNames does not reserve %s", name)
		}
	}
}
