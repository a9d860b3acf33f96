package dispatcher

import (
	"context"
	"maps"

	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// captureTrace returns the headers to store for an event: h plus the trace
// context of ctx (traceparent, tracestate, and whatever else the producer's
// propagator writes), unless h sets traceparent already or ctx carries no
// span context and no baggage. h itself is never modified.
func (p *Producer) captureTrace(ctx context.Context, h map[string]string) map[string]string {
	if p.cfg.DisableTraceCapture {
		return h
	}
	if _, set := h[HeaderTraceParent]; set {
		return h
	}
	if !trace.SpanContextFromContext(ctx).IsValid() && baggage.FromContext(ctx).Len() == 0 {
		return h
	}
	carrier := propagation.MapCarrier{}
	p.cfg.Propagator.Inject(ctx, carrier)
	if len(carrier) == 0 {
		return h
	}
	out := make(map[string]string, len(h)+len(carrier))
	maps.Copy(out, carrier)
	maps.Copy(out, h) // the event's own headers win
	return out
}
