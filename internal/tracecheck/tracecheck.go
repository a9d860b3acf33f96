// Package tracecheck is the end-to-end trace check every publisher's tests
// run: an event enqueued inside a producer span is delivered by a real
// dispatcher (traced by an in-memory OpenTelemetry SDK) through the
// publisher under test, and the test extracts the trace context from what
// the receiving side got: the transport's traceparent must be the publish
// span's, and the CloudEvents distributed-tracing attributes the
// producer's. It needs PostgreSQL (pgtest.Main in the package's TestMain).
package tracecheck

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/pgoutbox/pgoutbox/dispatcher"
	"github.com/pgoutbox/pgoutbox/internal/pgtest"
	"github.com/pgoutbox/pgoutbox/internal/testlog"
)

// Delivery is one traced delivery.
type Delivery struct {
	Producer trace.SpanContext // the span the event was enqueued in
	Publish  trace.SpanContext // the dispatcher's publish span
	Name     string            // the publish span's name
	System   string            // its messaging.system
	Outcome  string            // its pgoutbox.outcome
}

// Deliver enqueues one event (aggregate "order" "o-1", event "OrderPaid")
// inside a producer span, runs a dispatcher over pub until the publish span
// ends, and returns both contexts.
func Deliver(t testing.TB, pub dispatcher.Publisher) Delivery {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec), sdktrace.WithSampler(sdktrace.AlwaysSample()))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	pool := pgtest.NewPool(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	pctx, span := tp.Tracer("tracecheck-app").Start(ctx, "POST /orders")
	_, err := dispatcher.Enqueue(pctx, pool, dispatcher.Event{AggregateType: "order", AggregateID: "o-1",
		EventType: "OrderPaid", Payload: []byte(`{"total":42}`)})
	span.End()
	if err != nil {
		t.Fatalf("Enqueue: %v", err)
	}
	d, err := dispatcher.New(pool, pub, dispatcher.Config{Logger: testlog.New(t), PollInterval: 20 * time.Millisecond,
		TracerProvider: tp})
	if err != nil {
		t.Fatalf("dispatcher.New: %v", err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- d.Run(runCtx) }()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	for {
		for _, s := range rec.Ended() {
			if s.SpanKind() != trace.SpanKindProducer {
				continue
			}
			out := Delivery{Producer: span.SpanContext(), Publish: s.SpanContext(), Name: s.Name()}
			for _, kv := range s.Attributes() {
				switch kv.Key {
				case "messaging.system":
					out.System = kv.Value.AsString()
				case "pgoutbox.outcome":
					out.Outcome = kv.Value.AsString()
				}
			}
			return out
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no publish span within a minute; stats %+v", d.Stats())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// Check extracts the W3C trace context from the receiving side: wire holds
// the transport's headers (traceparent, tracestate), ce the CloudEvents
// attributes under their binding's prefix (ce-traceparent, ...). The
// transport's context must be the publish span, the CloudEvents one the
// producer's span.
func (d Delivery) Check(t testing.TB, wire propagation.TextMapCarrier, cePrefix string) {
	t.Helper()
	if d.Outcome != "done" {
		t.Errorf("publish span %q outcome %q, want done", d.Name, d.Outcome)
	}
	prop := propagation.TraceContext{}
	got := trace.SpanContextFromContext(prop.Extract(context.Background(), wire))
	if got.TraceID() != d.Publish.TraceID() || got.SpanID() != d.Publish.SpanID() {
		t.Errorf("transport traceparent %q: context %s/%s, want the publish span %s/%s",
			wire.Get("traceparent"), got.TraceID(), got.SpanID(), d.Publish.TraceID(), d.Publish.SpanID())
	}
	ce := trace.SpanContextFromContext(prop.Extract(context.Background(), Prefixed{wire, cePrefix}))
	if ce.TraceID() != d.Producer.TraceID() || ce.SpanID() != d.Producer.SpanID() {
		t.Errorf("%straceparent %q: context %s/%s, want the producer's %s/%s", cePrefix,
			wire.Get(cePrefix+"traceparent"), ce.TraceID(), ce.SpanID(), d.Producer.TraceID(), d.Producer.SpanID())
	}
}

// Prefixed reads a carrier's keys under a prefix (the CloudEvents binding's
// attribute headers).
type Prefixed struct {
	propagation.TextMapCarrier
	Prefix string
}

// Get returns the value of Prefix+key.
func (p Prefixed) Get(key string) string { return p.TextMapCarrier.Get(p.Prefix + key) }

// Set sets Prefix+key.
func (p Prefixed) Set(key, value string) { p.TextMapCarrier.Set(p.Prefix+key, value) }

// Keys is not used by extraction.
func (p Prefixed) Keys() []string { return nil }
