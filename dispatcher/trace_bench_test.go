package dispatcher

import (
	"context"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace/noop"
)

// BenchmarkPublishSpan measures the tracing work the dispatcher adds to one
// publish (startPublish and endPublish), per tracing setup: without an SDK
// (the global provider, or a no-op one) no span is started and the stored
// traceparent is not parsed. The drain spends tens of microseconds of database work per
// message; see BENCHMARKS.md item 7 for the end-to-end figure.
//
//	go test ./dispatcher -run '^$' -bench PublishSpan -benchmem
func BenchmarkPublishSpan(b *testing.B) {
	sdk := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()),
		sdktrace.WithBatcher(tracetest.NewNoopExporter()))
	defer func() { _ = sdk.Shutdown(context.Background()) }()
	cases := []struct {
		name string
		cfg  Config
	}{
		{"code_off", Config{DisableTracing: true}},
		{"disabled_global_provider", Config{}}, // the default: otel.GetTracerProvider(), no SDK installed
		{"disabled_noop_provider", Config{TracerProvider: noop.NewTracerProvider()}},
		{"every_message_sampled_sdk", Config{TracerProvider: sdk}},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			c.cfg.Table = TableDefault
			t := newTracing(c.cfg, PublisherFunc(func(context.Context, Message) error { return nil }))
			ctx := context.Background()
			// A claim statement first: its span tells the dispatcher
			// whether the tracer records (trace_quiet.go).
			_, claim := tracedDB{t: t}.start(ctx, "-- name: OutboxClaimWindow :many\n")
			claim.End()
			b.ReportAllocs()
			for b.Loop() {
				j := &job{msg: Message{ID: "42", EventType: "OrderPaid", Headers: map[string]string{
					"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}}}
				_ = t.startPublish(ctx, j)
				j.endPublish(spanDone, "", nil)
			}
		})
	}
}
