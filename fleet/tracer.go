package fleet

import (
	"context"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/embedded"
)

// databaseKey is the span attribute naming a span's database.
const databaseKey = "pgoutbox.database"

// withDatabase returns tp (the global provider when nil) with every span
// carrying pgoutbox.database=name.
func withDatabase(tp trace.TracerProvider, name string) trace.TracerProvider {
	return dbTracerProvider{tp: tp, attr: trace.WithAttributes(attribute.String(databaseKey, name))}
}

type dbTracerProvider struct {
	embedded.TracerProvider
	tp   trace.TracerProvider // nil: otel.GetTracerProvider() when a tracer is made
	attr trace.SpanStartEventOption
}

func (p dbTracerProvider) Tracer(name string, opts ...trace.TracerOption) trace.Tracer {
	tp := p.tp
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	return dbTracer{t: tp.Tracer(name, opts...), attr: p.attr}
}

type dbTracer struct {
	embedded.Tracer
	t    trace.Tracer
	attr trace.SpanStartEventOption
}

func (t dbTracer) Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	return t.t.Start(ctx, name, append(opts, t.attr)...)
}
