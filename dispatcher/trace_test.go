package dispatcher_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/pgoutbox/pgoutbox/dispatcher"
)

type dispatcherTx = pgx.Tx

// traced is an SDK tracer provider that records every span in memory.
type traced struct {
	rec *tracetest.SpanRecorder
	tp  *sdktrace.TracerProvider
}

func newTraced(t *testing.T) *traced {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec), sdktrace.WithSampler(sdktrace.AlwaysSample()))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return &traced{rec: rec, tp: tp}
}

// producerSpan starts the span of a "business request" that enqueues.
func (tr *traced) producerSpan(ctx context.Context) (context.Context, trace.Span) {
	return tr.tp.Tracer("test-app").Start(ctx, "POST /orders")
}

// ended returns the ended spans named name.
func (tr *traced) ended(name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range tr.rec.Ended() {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}

func attrOf(s sdktrace.ReadOnlySpan, key string) (attribute.Value, bool) {
	for _, kv := range s.Attributes() {
		if string(kv.Key) == key {
			return kv.Value, true
		}
	}
	return attribute.Value{}, false
}

func wantAttr(t *testing.T, s sdktrace.ReadOnlySpan, key, want string) {
	t.Helper()
	v, ok := attrOf(s, key)
	if !ok || v.Emit() != want {
		t.Errorf("span %q: %s = %q (present %v), want %q", s.Name(), key, v.Emit(), ok, want)
	}
}

func (b *bundle) headersOf(t *testing.T, id int64) map[string]string {
	t.Helper()
	var raw []byte
	if err := b.pool.QueryRow(context.Background(), `SELECT headers FROM outbox WHERE id = $1`, id).Scan(&raw); err != nil {
		t.Fatal(err)
	}
	h := map[string]string{}
	if err := json.Unmarshal(raw, &h); err != nil {
		t.Fatalf("headers %s: %v", raw, err)
	}
	return h
}

func orderEvent(headers map[string]string) dispatcher.Event {
	return dispatcher.Event{AggregateType: "order", AggregateID: "o-1", EventType: "OrderPaid", Payload: []byte(`{}`), Headers: headers}
}

func TestEnqueue_StoresTheCallersTraceContextInTheHeaders(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tr := newTraced(t)
	ctx, span := tr.producerSpan(context.Background())
	defer span.End()
	sc := span.SpanContext()
	wantTP := "00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-01"
	member, _ := baggage.NewMember("tenant", "acme")
	bag, _ := baggage.New(member)
	withBaggage := baggage.ContextWithBaggage(ctx, bag)
	own := "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	withBaggageProducer := dispatcher.NewProducer(dispatcher.ProducerConfig{
		Propagator: propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})})

	cases := []struct {
		name    string
		enqueue func(tx dispatcherTx) (int64, error)
		want    map[string]string
	}{
		{"Enqueue in a span", func(tx dispatcherTx) (int64, error) {
			return dispatcher.Enqueue(ctx, tx, orderEvent(map[string]string{"tenant": "acme"}))
		}, map[string]string{"traceparent": wantTP, "tenant": "acme"}},
		{"EnqueueMany in a span", func(tx dispatcherTx) (int64, error) {
			if _, err := dispatcher.EnqueueMany(ctx, tx, []dispatcher.Event{orderEvent(nil)}); err != nil {
				return 0, err
			}
			var id int64
			err := tx.QueryRow(ctx, `SELECT max(id) FROM outbox`).Scan(&id)
			return id, err
		}, map[string]string{"traceparent": wantTP}},
		{"an event's own traceparent is kept", func(tx dispatcherTx) (int64, error) {
			return dispatcher.Enqueue(ctx, tx, orderEvent(map[string]string{"traceparent": own}))
		}, map[string]string{"traceparent": own}},
		{"no span, no header", func(tx dispatcherTx) (int64, error) {
			return dispatcher.Enqueue(context.Background(), tx, orderEvent(nil))
		}, map[string]string{}},
		{"baggage when the propagator carries it", func(tx dispatcherTx) (int64, error) {
			return withBaggageProducer.Enqueue(withBaggage, tx, orderEvent(nil))
		}, map[string]string{"traceparent": wantTP, "baggage": "tenant=acme"}},
		{"no baggage by default", func(tx dispatcherTx) (int64, error) {
			return dispatcher.Enqueue(withBaggage, tx, orderEvent(nil))
		}, map[string]string{"traceparent": wantTP}},
		{"capture disabled", func(tx dispatcherTx) (int64, error) {
			return dispatcher.NewProducer(dispatcher.ProducerConfig{DisableTraceCapture: true}).Enqueue(ctx, tx, orderEvent(nil))
		}, map[string]string{}},
	}
	for _, c := range cases {
		tx, err := b.pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		id, err := c.enqueue(tx)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		got := b.headersOf(t, id)
		if len(got) != len(c.want) {
			t.Errorf("%s: headers %v, want %v", c.name, got, c.want)
		}
		for k, v := range c.want {
			if got[k] != v {
				t.Errorf("%s: headers[%q] = %q, want %q (all: %v)", c.name, k, got[k], v, got)
			}
		}
	}
	// The caller's map is not modified.
	h := map[string]string{"tenant": "acme"}
	if _, err := dispatcher.Enqueue(ctx, b.pool, orderEvent(h)); err != nil {
		t.Fatal(err)
	}
	if len(h) != 1 {
		t.Errorf("Enqueue modified the event's headers: %v", h)
	}
}

// seen is what a publisher saw of one message.
type seen struct {
	msg dispatcher.Message
	sc  trace.SpanContext // span context of the ctx Publish got
}

type seenLog struct {
	mu   sync.Mutex
	msgs []seen
}

func (l *seenLog) publisher(fail func(n int) error) dispatcher.Publisher {
	return dispatcher.PublisherFunc(func(ctx context.Context, m dispatcher.Message) error {
		l.mu.Lock()
		l.msgs = append(l.msgs, seen{msg: m, sc: trace.SpanContextFromContext(ctx)})
		n := len(l.msgs)
		l.mu.Unlock()
		if fail != nil {
			return fail(n)
		}
		return nil
	})
}

func (l *seenLog) all() []seen {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]seen(nil), l.msgs...)
}

// enqueueTraced writes one event inside a producer span and returns its id
// and the producer's span context.
func (b *bundle) enqueueTraced(t *testing.T, tr *traced) (int64, trace.SpanContext) {
	t.Helper()
	ctx, span := tr.producerSpan(context.Background())
	defer span.End()
	id, err := dispatcher.Enqueue(ctx, b.pool, orderEvent(nil))
	if err != nil {
		t.Fatal(err)
	}
	return id, span.SpanContext()
}

func TestTrace_PublishSpanIsLinkedToTheProducerAndItsContextGoesOnTheWire(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tr := newTraced(t)
	id, producer := b.enqueueTraced(t, tr)
	var log seenLog
	b.start(t, log.publisher(nil), fast(dispatcher.Config{TracerProvider: tr.tp}))
	waitFor(t, 30*time.Second, "the publish span", func() bool { return len(tr.ended("send OrderPaid")) == 1 })

	s := tr.ended("send OrderPaid")[0]
	if s.SpanKind() != trace.SpanKindProducer {
		t.Errorf("kind %v, want producer", s.SpanKind())
	}
	if s.SpanContext().TraceID() == producer.TraceID() || s.Parent().IsValid() {
		t.Errorf("link mode: the publish span must start a trace of its own (trace %s, parent %v)", s.SpanContext().TraceID(), s.Parent())
	}
	if links := s.Links(); len(links) != 1 || links[0].SpanContext.TraceID() != producer.TraceID() || links[0].SpanContext.SpanID() != producer.SpanID() {
		t.Errorf("links %v, want one to the producer span %s", links, producer.SpanID())
	}
	wantAttr(t, s, "messaging.system", "pgoutbox")
	wantAttr(t, s, "messaging.destination.name", "OrderPaid")
	wantAttr(t, s, "messaging.operation.type", "send")
	wantAttr(t, s, "messaging.message.id", dispatcher.IDString(id))
	wantAttr(t, s, "pgoutbox.attempt", "1")
	wantAttr(t, s, "pgoutbox.outcome", "done")

	got := log.all()
	if len(got) != 1 {
		t.Fatalf("%d publishes, want 1", len(got))
	}
	m := got[0]
	if m.sc.SpanID() != s.SpanContext().SpanID() {
		t.Errorf("Publish ran in span %s, want the publish span %s", m.sc.SpanID(), s.SpanContext().SpanID())
	}
	wantWire := "00-" + s.SpanContext().TraceID().String() + "-" + s.SpanContext().SpanID().String() + "-01"
	if m.msg.Headers["traceparent"] != wantWire {
		t.Errorf("Headers[traceparent] = %q, want the publish span %q", m.msg.Headers["traceparent"], wantWire)
	}
	if !strings.Contains(m.msg.TraceParent, producer.TraceID().String()) {
		t.Errorf("Message.TraceParent = %q, want the producer's trace %s", m.msg.TraceParent, producer.TraceID())
	}

	// The statements have spans too; the batched finalize links to the
	// publish span it settles.
	waitFor(t, 30*time.Second, "the finalize span", func() bool { return len(tr.ended("OutboxMarkDoneMany outbox")) > 0 })
	var claims []sdktrace.ReadOnlySpan
	for _, s := range tr.rec.Ended() {
		if strings.HasPrefix(s.Name(), "OutboxClaim") && strings.HasSuffix(s.Name(), " outbox") {
			claims = append(claims, s)
		}
	}
	if len(claims) == 0 {
		t.Fatal("no claim span (OutboxClaim* outbox)")
	}
	wantAttr(t, claims[0], "db.system.name", "postgresql")
	wantAttr(t, claims[0], "db.operation.name", strings.TrimSuffix(claims[0].Name(), " outbox"))
	fin := tr.ended("OutboxMarkDoneMany outbox")[0]
	wantAttr(t, fin, "db.operation.name", "OutboxMarkDoneMany")
	if links := fin.Links(); len(links) != 1 || links[0].SpanContext.SpanID() != s.SpanContext().SpanID() {
		t.Errorf("finalize span links %v, want the publish span %s", links, s.SpanContext().SpanID())
	}
}

func TestTrace_ParentModeContinuesTheProducersTrace(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tr := newTraced(t)
	_, producer := b.enqueueTraced(t, tr)
	var log seenLog
	b.start(t, log.publisher(nil), fast(dispatcher.Config{TracerProvider: tr.tp, TraceMode: dispatcher.TraceParent}))
	waitFor(t, 30*time.Second, "the publish span", func() bool { return len(tr.ended("send OrderPaid")) == 1 })
	s := tr.ended("send OrderPaid")[0]
	if s.SpanContext().TraceID() != producer.TraceID() || s.Parent().SpanID() != producer.SpanID() {
		t.Errorf("publish span trace %s parent %s, want the producer's %s/%s",
			s.SpanContext().TraceID(), s.Parent().SpanID(), producer.TraceID(), producer.SpanID())
	}
	if len(s.Links()) != 0 {
		t.Errorf("parent mode: links %v, want none", s.Links())
	}
}

func TestTrace_PublishSpanRecordsTheOutcome(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name            string
		err             error
		outcome, errTyp string
		writeSpan       string // the fenced batch write, linked to the publish span
	}{
		{"retryable", dispatcher.Retryable(errors.New("broker busy")), "retry", "retryable", "OutboxFinalizeMany outbox"},
		{"permanent", dispatcher.Permanent(errors.New("schema rejected")), "dead", "permanent", "OutboxFinalizeMany outbox"},
		{"defer", dispatcher.Defer(time.Hour, "not yet"), "defer", "", "OutboxFinalizeMany outbox"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			tr := newTraced(t)
			var log seenLog
			b.enqueueTraced(t, tr)
			b.start(t, log.publisher(func(n int) error {
				if n == 1 {
					return c.err
				}
				return nil
			}), fast(dispatcher.Config{TracerProvider: tr.tp}))
			waitFor(t, 30*time.Second, "the publish span", func() bool { return len(tr.ended("send OrderPaid")) >= 1 })
			s := tr.ended("send OrderPaid")[0]
			wantAttr(t, s, "pgoutbox.outcome", c.outcome)
			if c.errTyp != "" {
				wantAttr(t, s, "error.type", c.errTyp)
			} else if v, ok := attrOf(s, "error.type"); ok {
				t.Errorf("error.type = %q, want none", v.Emit())
			}
			var write sdktrace.ReadOnlySpan
			for _, w := range tr.ended(c.writeSpan) {
				for _, l := range w.Links() {
					if l.SpanContext.SpanID() == s.SpanContext().SpanID() {
						write = w
					}
				}
			}
			if write == nil {
				t.Errorf("no %q span linked to the publish span", c.writeSpan)
			}
		})
	}
}

func TestTrace_PublishLogsCarryTraceAndSpanID(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tr := newTraced(t)
	var buf syncBuffer
	logger := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	var log seenLog
	b.enqueueTraced(t, tr)
	b.start(t, log.publisher(func(int) error { return dispatcher.Permanent(errors.New("schema rejected")) }),
		fast(dispatcher.Config{TracerProvider: tr.tp, Logger: logger}))
	waitFor(t, 30*time.Second, "the publish span", func() bool { return len(tr.ended("send OrderPaid")) == 1 })
	s := tr.ended("send OrderPaid")[0]
	var found bool
	for line := range strings.SplitSeq(buf.String(), "\n") {
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) != nil || rec["msg"] != "message is dead" {
			continue
		}
		found = true
		if rec["trace_id"] != s.SpanContext().TraceID().String() || rec["span_id"] != s.SpanContext().SpanID().String() {
			t.Errorf("log record %s: want trace_id %s span_id %s", line, s.SpanContext().TraceID(), s.SpanContext().SpanID())
		}
	}
	if !found {
		t.Errorf("no \"message is dead\" record in\n%s", buf.String())
	}
}

func TestTrace_WithoutAnSDKThePublishRunsInTheStoredContext(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tr := newTraced(t)
	_, producer := b.enqueueTraced(t, tr)
	var log seenLog
	var buf syncBuffer
	logger := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	b.start(t, log.publisher(func(int) error { return dispatcher.Retryable(errors.New("busy")) }),
		fast(dispatcher.Config{Logger: logger, MaxAttempts: 5})) // no TracerProvider: the global no-op
	waitFor(t, 30*time.Second, "a publish", func() bool { return len(log.all()) >= 1 }) // retried at once: more may follow
	m := log.all()[0]
	if m.sc.TraceID() != producer.TraceID() || m.sc.SpanID() != producer.SpanID() {
		t.Errorf("Publish ctx span context %s/%s, want the stored %s/%s", m.sc.TraceID(), m.sc.SpanID(), producer.TraceID(), producer.SpanID())
	}
	if m.msg.Headers["traceparent"] != m.msg.TraceParent || m.msg.TraceParent == "" {
		t.Errorf("Headers[traceparent] %q, TraceParent %q: want the stored context in both", m.msg.Headers["traceparent"], m.msg.TraceParent)
	}
	waitFor(t, 30*time.Second, "the retry log", func() bool { return strings.Contains(buf.String(), "delivery failed; retrying") })
	if !strings.Contains(buf.String(), `"trace_id":"`+producer.TraceID().String()+`"`) {
		t.Errorf("retry log lacks the producer's trace id %s:\n%s", producer.TraceID(), buf.String())
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestTrace_DisableTracingMakesNoSpansAndForwardsTheStoredContext(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tr := newTraced(t)
	_, producer := b.enqueueTraced(t, tr)
	before := len(tr.rec.Ended())
	var log seenLog
	d, _ := b.start(t, log.publisher(nil), fast(dispatcher.Config{TracerProvider: tr.tp, DisableTracing: true}))
	waitFor(t, 30*time.Second, "the publish", func() bool { return d.Stats().Published == 1 })
	if n := len(tr.rec.Ended()) - before; n != 0 {
		t.Errorf("%d spans with DisableTracing, want none", n)
	}
	m := log.all()[0]
	if m.sc.IsValid() {
		t.Errorf("Publish ctx carries span context %v, want none", m.sc)
	}
	if !strings.Contains(m.msg.TraceParent, producer.TraceID().String()) || m.msg.Headers["traceparent"] != m.msg.TraceParent {
		t.Errorf("TraceParent %q, Headers %v: want the stored context in both", m.msg.TraceParent, m.msg.Headers)
	}
}
