package kafka

import (
	"testing"

	"go.opentelemetry.io/otel/propagation"

	"github.com/pgoutbox/pgoutbox/internal/tracecheck"
)

// The consumer finds the publish span in the traceparent record header and
// the producer's trace in ce_traceparent.
func TestPublish_ForwardsTheTraceContextInRecordHeaders(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	p := newPublisher(t, Config{Brokers: c.ListenAddrs(), Topic: testTopic})
	d := tracecheck.Deliver(t, p)
	recs := consume(t, c, testTopic, 1)
	d.Check(t, propagation.MapCarrier(headerMap(recs[0])), cePrefix)
	if d.Name != "send "+testTopic || d.System != "kafka" {
		t.Errorf("publish span %q system %q, want %q kafka", d.Name, d.System, "send "+testTopic)
	}
}
