package webhook

import (
	"testing"

	"go.opentelemetry.io/otel/propagation"

	"github.com/pgoutbox/pgoutbox/internal/tracecheck"
)

// The receiver finds the publish span in traceparent and the producer's
// trace in ce-traceparent (CloudEvents distributed tracing, binary mode).
func TestPublish_ForwardsTheTraceContextInHTTPHeaders(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t, nil)
	p := newPublisher(t, Config{URL: rc.URL + "/hooks"})
	d := tracecheck.Deliver(t, p)
	reqs := rc.received()
	if len(reqs) != 1 {
		t.Fatalf("%d requests, want 1", len(reqs))
	}
	d.Check(t, propagation.HeaderCarrier(reqs[0].Header), "ce-")
	if d.Name != "send "+rc.URL || d.System != "http" {
		t.Errorf("publish span %q system %q, want %q http", d.Name, d.System, "send "+rc.URL)
	}
}
