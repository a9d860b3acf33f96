package jetstream

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/pgoutbox/pgoutbox/internal/tracecheck"
)

// headerCarrier reads trace headers from NATS headers (case-sensitive).
type headerCarrier nats.Header

func (c headerCarrier) Get(key string) string { return nats.Header(c).Get(key) }
func (c headerCarrier) Set(key, value string) { nats.Header(c).Set(key, value) }
func (c headerCarrier) Keys() []string        { return nil }

// The stored message carries the publish span in traceparent and the
// producer's trace in ce-traceparent.
func TestPublish_ForwardsTheTraceContextInNATSHeaders(t *testing.T) {
	t.Parallel()
	b := setup(t)
	p := newPublisher(t, Config{SubjectTemplate: b.prefix + ".{{.AggregateType}}.{{.EventType}}"})
	d := tracecheck.Deliver(t, p)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m, err := b.stream.GetLastMsgForSubject(ctx, b.prefix+".order.OrderPaid")
	if err != nil {
		t.Fatalf("get stored message: %v", err)
	}
	d.Check(t, headerCarrier(m.Header), CloudEventsPrefix)
	if want := "send " + b.prefix + ".order.OrderPaid"; d.Name != want || d.System != "nats" {
		t.Errorf("publish span %q system %q, want %q nats", d.Name, d.System, want)
	}
}
