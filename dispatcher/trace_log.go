package dispatcher

import (
	"context"
	"log/slog"

	"go.opentelemetry.io/otel/trace"
)

// traceLogHandler adds trace_id and span_id to every record logged with a
// context that carries a span context: the publish span of the message a
// record is about (or, when tracing is off, the context stored with the
// event), so that logs and traces join on the trace id.
type traceLogHandler struct{ slog.Handler }

func newTraceLogger(l *slog.Logger) *slog.Logger {
	if _, ok := l.Handler().(traceLogHandler); ok {
		return l
	}
	return slog.New(traceLogHandler{l.Handler()})
}

func (h traceLogHandler) Handle(ctx context.Context, r slog.Record) error {
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		r = r.Clone()
		r.AddAttrs(slog.String("trace_id", sc.TraceID().String()), slog.String("span_id", sc.SpanID().String()))
	}
	return h.Handler.Handle(ctx, r)
}

func (h traceLogHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return traceLogHandler{h.Handler.WithAttrs(attrs)}
}

func (h traceLogHandler) WithGroup(name string) slog.Handler {
	return traceLogHandler{h.Handler.WithGroup(name)}
}
