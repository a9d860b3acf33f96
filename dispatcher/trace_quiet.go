package dispatcher

import (
	"context"
	"sync/atomic"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Tracing without an SDK ("quiet"). Without an OpenTelemetry SDK (the
// default: the global TracerProvider of the API, which delegates to nothing
// until the application installs one) a tracer starts nothing: every span it
// returns is the parent's span context passed through. The dispatcher then
// skips the publish span altogether, and leaves the stored creation context
// unparsed until somebody asks for it.
//
// Whether the tracer records is learnt from the statement spans (trace_db.go),
// which are started anyway: the claim's, the finalize's, every statement's.
// A span that does not record and carries its parent's span id (or, without
// a parent, no span context at all) comes from a tracer without an SDK; an
// SDK gives every span, sampled or not, a span id of its own. Each statement
// updates the answer, so an SDK installed after New (otel.SetTracerProvider:
// the global provider starts delegating to it) is noticed by the next claim,
// and the publishes it claims get their spans.

// observeStatementSpan records whether span, started under ctx, came from a
// tracer that records nothing.
func (t *tracing) observeStatementSpan(ctx context.Context, span trace.Span) {
	quiet := false
	if !span.IsRecording() {
		got, parent := span.SpanContext(), trace.SpanContextFromContext(ctx)
		quiet = got.TraceID() == parent.TraceID() && got.SpanID() == parent.SpanID()
	}
	if t.quiet.Load() != quiet { // written only when it changes: publishes read it
		t.quiet.Store(quiet)
	}
}

// startQuiet is startPublish when no SDK records: no span. The publish runs
// in ctx carrying the stored creation context, as a span that records
// nothing (an instrumented publisher continues from it, the log records of
// the publish carry its trace_id and span_id), and the headers stay as
// stored: publishers forward them on the wire.
func (t *tracing) startQuiet(ctx context.Context, j *job, hasTP bool) context.Context {
	if t.traceContextOnly {
		if !hasTP {
			return ctx
		}
		s := &storedSpan{Span: noopSpan, t: t, msg: &j.msg}
		j.span = s
		return trace.ContextWithSpan(ctx, s)
	}
	// Another propagator (baggage, B3, ...) may put more than a span
	// context into the context: it extracts, as with a span.
	if _, hasBaggage := j.msg.Headers[HeaderBaggage]; !hasTP && !hasBaggage {
		return ctx
	}
	stored := t.prop.Extract(ctx, propagation.MapCarrier(j.msg.Headers))
	if s := trace.SpanFromContext(stored); s.SpanContext().IsValid() {
		j.span = s
	}
	return stored
}

// storedSpan is the span a publish runs in when nothing records: the
// creation context stored with the event (Message.TraceParent and
// TraceState, the W3C traceparent and tracestate), parsed on the first call
// of SpanContext, which most publishes never make.
type storedSpan struct {
	trace.Span // noopSpan: records nothing; methods the API adds later are no-ops too

	t   *tracing
	msg *Message                          // TraceParent and TraceState are set before the publish and not changed
	sc  atomic.Pointer[trace.SpanContext] // parsed; two goroutines that parse at once store the same value
}

var _ trace.Span = (*storedSpan)(nil)

// noopSpan is the span storedSpan embeds (an interface, 16 bytes, rather
// than noop.Span and its span context, 80).
var noopSpan trace.Span = noop.Span{}

// SpanContext returns the stored creation context (remote), or an invalid
// span context when the stored traceparent does not parse.
func (s *storedSpan) SpanContext() trace.SpanContext {
	if sc := s.sc.Load(); sc != nil {
		return *sc
	}
	sc := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), storedCarrier{s}))
	s.sc.Store(&sc)
	return sc
}

// TracerProvider returns the dispatcher's TracerProvider (as a span of a
// tracer without an SDK does).
func (s *storedSpan) TracerProvider() trace.TracerProvider { return s.t.provider }

// storedCarrier reads a storedSpan's headers for the TraceContext
// propagator.
type storedCarrier struct{ s *storedSpan }

func (c storedCarrier) Get(key string) string {
	switch key {
	case HeaderTraceParent:
		return c.s.msg.TraceParent
	case HeaderTraceState:
		return c.s.msg.TraceState
	}
	return ""
}

func (storedCarrier) Set(string, string) {}

func (storedCarrier) Keys() []string { return []string{HeaderTraceParent, HeaderTraceState} }
