package rabbitmq

import (
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/pgoutbox/pgoutbox/internal/tracecheck"
)

// tableCarrier reads trace headers from AMQP application headers.
type tableCarrier amqp.Table

func (c tableCarrier) Get(key string) string { s, _ := c[key].(string); return s }
func (c tableCarrier) Set(key, value string) { c[key] = value }
func (c tableCarrier) Keys() []string        { return nil }

// The consumer finds the publish span in the traceparent header and the
// producer's trace in cloudEvents_traceparent.
func TestPublish_ForwardsTheTraceContextInAMQPHeaders(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	p := newPublisher(t, Config{Exchange: b.exchange, RoutingKeyTemplate: "{{.AggregateType}}.{{.EventType}}"})
	d := tracecheck.Deliver(t, p)
	m := b.get(t)
	d.Check(t, tableCarrier(m.Headers), CloudEventsPrefix)
	if d.Name != "send "+b.exchange || d.System != "rabbitmq" {
		t.Errorf("publish span %q system %q, want %q rabbitmq", d.Name, d.System, "send "+b.exchange)
	}
}
