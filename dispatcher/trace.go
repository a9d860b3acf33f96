package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

const tracerName = "github.com/pgoutbox/pgoutbox/dispatcher"

// Header names of the W3C trace context stored with an event (Event.Headers,
// the headers jsonb column). Enqueue, EnqueueMany and Producer write them from
// the caller's context; a producer that writes plain SQL sets them itself, in
// lower case:
//
//	INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload, headers)
//	VALUES ('order', '42', 'OrderPaid', '{"total": 10}',
//	        '{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}');
const (
	HeaderTraceParent = "traceparent"
	HeaderTraceState  = "tracestate"
	HeaderBaggage     = "baggage"
)

// TraceMode says how a publish span relates to the trace context stored
// with its event.
type TraceMode int

const (
	// TraceLink (the default) starts every publish span as the root of a
	// trace of its own, with a link to the stored creation context: what
	// the OpenTelemetry messaging conventions recommend for work that runs
	// later than, and independently of, the request that created it (a
	// retry hours later does not stretch the producer's trace).
	TraceLink TraceMode = iota
	// TraceParent makes the stored creation context the publish span's
	// parent: producer request, publish and consumer in one trace.
	TraceParent
)

func (m TraceMode) String() string {
	switch m {
	case TraceLink:
		return "link"
	case TraceParent:
		return "parent"
	}
	return fmt.Sprintf("TraceMode(%d)", int(m))
}

// MessagingDestination is implemented by publishers that name, for the
// publish span, their messaging system (the messaging.system attribute:
// "kafka", "rabbitmq", "nats", "http") and the destination of a message
// (messaging.destination.name: a topic, subject, routing key or URL; the
// span is named "send " + it). DestinationName is called only for spans
// that are recorded. A publisher without it gets messaging.system
// "pgoutbox" and the event type as destination.
type MessagingDestination interface {
	MessagingSystem() string
	DestinationName(msg Message) string
}

// Outcomes recorded on the publish span (attribute pgoutbox.outcome).
const (
	spanDone         = "done"
	spanRetry        = "retry"
	spanDefer        = "defer"
	spanDead         = "dead"
	spanLeaseLost    = "lease_lost"
	spanReleased     = "released"
	spanUnavailable  = "unavailable"
	spanPanic        = "panic"
	spanUnclassified = "unclassified"
	spanWriteFailed  = "write_failed"
)

// tracing holds what the dispatcher needs to trace: the tracer, the
// propagator and the publisher's names.
type tracing struct {
	provider trace.TracerProvider
	tracer   trace.Tracer
	prop     propagation.TextMapPropagator
	mode     TraceMode
	dest     MessagingDestination // nil: defaults
	table    string
	off      bool // Config.DisableTracing

	// quiet: the last statement span came from a tracer that records
	// nothing (no SDK; trace_quiet.go). Publishes then start no span.
	quiet atomic.Bool
	// traceContextOnly: the propagator is the default W3C TraceContext,
	// whose stored context a quiet publish parses only on demand.
	traceContextOnly bool
}

func newTracing(cfg Config, pub Publisher) *tracing {
	tp := cfg.TracerProvider
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	prop := cfg.Propagator
	if prop == nil {
		prop = propagation.TraceContext{}
	}
	dest, _ := pub.(MessagingDestination)
	table := cfg.Table
	if cfg.Schema != "" {
		table = cfg.Schema + "." + cfg.Table
	}
	_, traceContextOnly := prop.(propagation.TraceContext)
	return &tracing{provider: tp, tracer: tp.Tracer(tracerName), prop: prop, mode: cfg.TraceMode, dest: dest, table: table,
		off: cfg.DisableTracing, traceContextOnly: traceContextOnly}
}

// Start options of the publish span: a new root (TraceLink) or a child of
// the stored context (TraceParent).
var (
	rootStart  = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindProducer), trace.WithNewRoot()}
	childStart = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindProducer)}
)

// startPublish starts j's publish span and returns the context Publish runs
// in. It records the stored creation context in Message.TraceParent and
// TraceState, and, when the span is real, writes the span's context into
// Message.Headers (traceparent, tracestate, and baggage when the
// propagator carries it), which every publisher forwards on the wire: the
// consumer continues from the publish span, and finds the producer's
// context in the CloudEvents distributed-tracing attributes. When nothing
// records (no SDK: startQuiet) there is no span and the context carries
// the stored creation context, so an instrumented publisher and the logs
// still join the producer's trace.
func (t *tracing) startPublish(ctx context.Context, j *job) context.Context {
	h := j.msg.Headers
	tp, hasTP := h[HeaderTraceParent]
	j.msg.TraceParent, j.msg.TraceState = tp, h[HeaderTraceState]
	if t.off {
		return ctx
	}
	if t.quiet.Load() {
		return t.startQuiet(ctx, j, hasTP)
	}
	_, hasBaggage := h[HeaderBaggage]
	stored := ctx
	if hasTP || hasBaggage {
		stored = t.prop.Extract(ctx, propagation.MapCarrier(h))
	}
	sc := trace.SpanContextFromContext(stored)
	opts := childStart
	if t.mode == TraceLink {
		opts = rootStart
	}
	sctx, span := t.tracer.Start(stored, "send", opts...)
	if span.IsRecording() {
		// The link is added once the span is known to record, so that a
		// process without an SDK allocates nothing for it (the samplers
		// of the SDK decide on the parent and the trace id, not on links).
		if t.mode == TraceLink && sc.IsValid() {
			span.AddLink(trace.Link{SpanContext: sc})
		}
		system, dest := "pgoutbox", j.msg.EventType
		if t.dest != nil {
			system, dest = t.dest.MessagingSystem(), t.dest.DestinationName(j.msg)
		}
		span.SetName("send " + dest)
		span.SetAttributes(
			attribute.String("messaging.system", system),
			attribute.String("messaging.operation.type", "send"),
			attribute.String("messaging.operation.name", "send"),
			attribute.String("messaging.destination.name", dest),
			attribute.String("messaging.message.id", j.msg.ID),
			attribute.Int("pgoutbox.attempt", j.msg.Attempt),
			attribute.String("pgoutbox.source", j.msg.Source),
			attribute.String("pgoutbox.event_type", j.msg.EventType),
			attribute.String("pgoutbox.aggregate_id", j.msg.AggregateID),
		)
	}
	j.span = span
	if psc := span.SpanContext(); psc.IsValid() && !psc.Equal(sc) {
		t.prop.Inject(sctx, propagation.MapCarrier(h))
	} else if !psc.IsValid() && sc.IsValid() {
		sctx = trace.ContextWithRemoteSpanContext(sctx, sc)
	}
	return sctx
}

// endPublish ends j's publish span with its outcome; errType and err are
// set for failures. It is a no-op when the span has ended already.
func (j *job) endPublish(outcome, errType string, err error) {
	span := j.span
	if span == nil {
		return
	}
	j.span = nil
	if span.IsRecording() {
		span.SetAttributes(attribute.String("pgoutbox.outcome", outcome))
		if errType != "" {
			span.SetAttributes(attribute.String("error.type", errType))
			msg := errType
			if err != nil {
				msg = err.Error()
			}
			span.SetStatus(codes.Error, msg)
		}
	}
	span.End()
}

// spanCtx returns a context carrying j's publish span (for log records
// written where no context is at hand).
func (j *job) spanCtx() context.Context {
	if j.span == nil {
		return context.Background()
	}
	return trace.ContextWithSpan(context.Background(), j.span)
}

// publishErrorType is the error.type of a failed publish: the
// classification the publisher gave it.
func publishErrorType(err error, timedOut bool) string {
	var (
		def  *DeferError
		retr *RetryableError
		perm *PermanentError
		un   *UnavailableError
	)
	switch {
	case errors.As(err, &def):
		return ""
	case errors.As(err, &un):
		return "unavailable"
	case errors.As(err, &retr):
		return "retryable"
	case errors.As(err, &perm):
		return "permanent"
	case timedOut:
		return "timeout"
	}
	return "unclassified"
}

// contextWithSpanOf returns ctx (its deadline and cancellation) carrying the
// span and baggage of from.
func contextWithSpanOf(ctx, from context.Context) context.Context {
	ctx = trace.ContextWithSpan(ctx, trace.SpanFromContext(from))
	if b := baggage.FromContext(from); b.Len() > 0 {
		ctx = baggage.ContextWithBaggage(ctx, b)
	}
	return ctx
}

// endFinalized ends the publish spans of a batched finalize: done, or
// write_failed when the statement failed (the leases expire and the messages
// are delivered again). Spans of lease-lost rows have ended already.
func endFinalized(batch []*job, err error) {
	for _, j := range batch {
		if err != nil {
			j.endPublish(spanWriteFailed, "finalize_failed", err)
		} else {
			j.endPublish(spanDone, "", nil)
		}
	}
}
