package stdout

import (
	"bytes"
	"encoding/json"
	"sync"
	"testing"

	"go.opentelemetry.io/otel/propagation"

	"github.com/pgoutbox/pgoutbox/internal/tracecheck"
)

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// The JSON line carries the publish span in headers.traceparent and the
// producer's trace in ce.traceparent.
func TestPublish_WritesTheTraceContextInTheLine(t *testing.T) {
	t.Parallel()
	var buf lockedBuffer
	d := tracecheck.Deliver(t, newPublisher(t, Config{Writer: &buf, CloudEvents: true}))
	buf.mu.Lock()
	defer buf.mu.Unlock()
	var l struct {
		Headers map[string]string `json:"headers"`
		CE      map[string]string `json:"ce"`
	}
	if err := json.Unmarshal(buf.b.Bytes(), &l); err != nil {
		t.Fatalf("line %s: %v", buf.b.String(), err)
	}
	wire := propagation.MapCarrier(l.Headers)
	for k, v := range l.CE {
		wire["ce."+k] = v
	}
	d.Check(t, wire, "ce.")
}
