package cloudevents

import (
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
