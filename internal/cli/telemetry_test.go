package cli

import (
	"context"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	colmetric "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	metricpb "go.opentelemetry.io/proto/otlp/metrics/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/pgoutbox/pgoutbox/dispatcher"
)

// otlpReceiver is an in-process OTLP/HTTP endpoint: it decodes the protobuf
// export requests on /v1/traces and /v1/metrics and keeps what it got.
type otlpReceiver struct {
	*httptest.Server
	mu      sync.Mutex
	spans   []*tracepb.Span
	service []string // service.name of each resource seen
	metrics map[string]*metricpb.Metric
	headers []http.Header
}

func newOTLPReceiver(t *testing.T) *otlpReceiver {
	t.Helper()
	r := &otlpReceiver{metrics: map[string]*metricpb.Metric{}}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/traces", func(w http.ResponseWriter, req *http.Request) {
		var msg coltrace.ExportTraceServiceRequest
		if !r.decode(t, w, req, &msg) {
			return
		}
		r.mu.Lock()
		for _, rs := range msg.ResourceSpans {
			r.service = append(r.service, serviceName(rs.Resource.GetAttributes()))
			for _, ss := range rs.ScopeSpans {
				r.spans = append(r.spans, ss.Spans...)
			}
		}
		r.mu.Unlock()
		r.reply(w, &coltrace.ExportTraceServiceResponse{})
	})
	mux.HandleFunc("POST /v1/metrics", func(w http.ResponseWriter, req *http.Request) {
		var msg colmetric.ExportMetricsServiceRequest
		if !r.decode(t, w, req, &msg) {
			return
		}
		r.mu.Lock()
		for _, rm := range msg.ResourceMetrics {
			for _, sm := range rm.ScopeMetrics {
				for _, m := range sm.Metrics {
					r.metrics[m.Name] = m
				}
			}
		}
		r.mu.Unlock()
		r.reply(w, &colmetric.ExportMetricsServiceResponse{})
	})
	r.Server = httptest.NewServer(mux)
	t.Cleanup(r.Close)
	return r
}

func (r *otlpReceiver) decode(t *testing.T, w http.ResponseWriter, req *http.Request, msg proto.Message) bool {
	body, err := io.ReadAll(req.Body)
	if err == nil {
		err = proto.Unmarshal(body, msg)
	}
	if err != nil || req.Header.Get("Content-Type") != "application/x-protobuf" {
		t.Errorf("OTLP request %s: content type %q, decode error %v", req.URL.Path, req.Header.Get("Content-Type"), err)
		http.Error(w, "bad request", http.StatusBadRequest)
		return false
	}
	r.mu.Lock()
	r.headers = append(r.headers, req.Header.Clone())
	r.mu.Unlock()
	return true
}

func (r *otlpReceiver) reply(w http.ResponseWriter, msg proto.Message) {
	b, _ := proto.Marshal(msg)
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(b)
}

func serviceName(attrs []*commonpb.KeyValue) string {
	for _, kv := range attrs {
		if kv.Key == "service.name" {
			return kv.Value.GetStringValue()
		}
	}
	return ""
}

// span returns the first span named name, or nil.
func (r *otlpReceiver) span(name string) *tracepb.Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range r.spans {
		if s.Name == name {
			return s
		}
	}
	return nil
}

func (r *otlpReceiver) metric(name string) *metricpb.Metric {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.metrics[name]
}

// hookReceiver is the webhook consumer: it extracts the trace context of
// each request it gets.
type hookReceiver struct {
	*httptest.Server
	mu      sync.Mutex
	wire    []trace.SpanContext // from traceparent
	creator []trace.SpanContext // from ce-traceparent
}

func newHookReceiver(t *testing.T) *hookReceiver {
	h := &hookReceiver{}
	h.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		prop := propagation.TraceContext{}
		carrier := propagation.HeaderCarrier(r.Header)
		wire := trace.SpanContextFromContext(prop.Extract(context.Background(), carrier))
		ce := trace.SpanContextFromContext(prop.Extract(context.Background(), prefixedCarrier{carrier, "ce-"}))
		h.mu.Lock()
		h.wire, h.creator = append(h.wire, wire), append(h.creator, ce)
		h.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(h.Close)
	return h
}

type prefixedCarrier struct {
	propagation.TextMapCarrier
	prefix string
}

func (p prefixedCarrier) Get(key string) string { return p.TextMapCarrier.Get(p.prefix + key) }

// One trace from the producer's request to the consumer: the event is
// enqueued inside a producer span; the relay (OTLP configured the standard
// way, through OTEL_* variables and --otlp-endpoint) exports a publish span
// linked to it; the webhook receiver extracts the publish span from
// traceparent and the producer's span from ce-traceparent; and the
// dispatcher's metrics, histograms included, arrive over OTLP too.
func TestRun_ExportsTracesAndMetricsOverOTLP(t *testing.T) {
	t.Parallel()
	d := newDB(t)
	otlp := newOTLPReceiver(t)
	hook := newHookReceiver(t)

	tp := sdktrace.NewTracerProvider()
	ctx, span := tp.Tracer("shop").Start(context.Background(), "POST /orders")
	if _, err := dispatcher.Enqueue(ctx, d.pool, dispatcher.Event{AggregateType: "order", AggregateID: "o-1",
		EventType: "OrderPaid", Payload: []byte(`{"total":42}`)}); err != nil {
		t.Fatal(err)
	}
	span.End()
	producer := span.SpanContext()

	env := d.env()
	env["OTEL_SERVICE_NAME"] = "relay-under-test"
	env["OTEL_EXPORTER_OTLP_HEADERS"] = "x-api-key=s3cret-token"
	env["OTEL_METRIC_EXPORT_INTERVAL"] = "100"
	b := start(t, invocation{env: env}, "run", "--publisher", "http", "--http-url", hook.URL+"/hooks",
		"--poll-interval", "50ms", "--otlp-endpoint", otlp.URL)

	name := "send " + hook.URL
	eventually(t, 30*time.Second, "the webhook delivery", func() bool {
		hook.mu.Lock()
		defer hook.mu.Unlock()
		return len(hook.wire) == 1
	})
	eventually(t, 30*time.Second, "the OTLP metric export of the publish histogram", func() bool {
		return otlp.metric("pgoutbox.publish.duration") != nil
	})
	r := b.stop(t) // flushes the span batch
	wantCode(t, r, ExitOK)
	if strings.Contains(r.stderr, "s3cret-token") {
		t.Errorf("the OTLP header value leaked into the log:\n%s", r.stderr)
	}

	s := otlp.span(name)
	if s == nil {
		t.Fatalf("no %q span exported; stderr:\n%s", name, r.stderr)
	}
	if s.Kind != tracepb.Span_SPAN_KIND_PRODUCER {
		t.Errorf("span kind %v, want producer", s.Kind)
	}
	if len(s.Links) != 1 || hex.EncodeToString(s.Links[0].TraceId) != producer.TraceID().String() ||
		hex.EncodeToString(s.Links[0].SpanId) != producer.SpanID().String() {
		t.Errorf("span links %v, want one to the producer span %s/%s", s.Links, producer.TraceID(), producer.SpanID())
	}
	attrs := map[string]string{}
	for _, kv := range s.Attributes {
		attrs[kv.Key] = kv.Value.String()
	}
	for _, k := range []string{"messaging.system", "messaging.destination.name", "messaging.message.id", "pgoutbox.outcome"} {
		if attrs[k] == "" {
			t.Errorf("span attribute %s missing (have %v)", k, attrs)
		}
	}
	hook.mu.Lock()
	wire, creator := hook.wire[0], hook.creator[0]
	hook.mu.Unlock()
	if wire.TraceID().String() != hex.EncodeToString(s.TraceId) || wire.SpanID().String() != hex.EncodeToString(s.SpanId) {
		t.Errorf("receiver's traceparent %s/%s, want the exported publish span %x/%x", wire.TraceID(), wire.SpanID(), s.TraceId, s.SpanId)
	}
	if creator.TraceID() != producer.TraceID() {
		t.Errorf("receiver's ce-traceparent trace %s, want the producer's %s", creator.TraceID(), producer.TraceID())
	}
	if otlp.span("OutboxMarkDoneMany outbox") == nil || otlp.span("OutboxClaimWindow outbox") == nil {
		t.Errorf("claim and finalize spans not exported")
	}

	otlp.mu.Lock()
	services, hdrs := append([]string(nil), otlp.service...), append([]http.Header(nil), otlp.headers...)
	otlp.mu.Unlock()
	for _, svc := range services {
		if svc != "relay-under-test" {
			t.Errorf("resource service.name %q, want relay-under-test (OTEL_SERVICE_NAME)", svc)
		}
	}
	for _, h := range hdrs {
		if h.Get("X-Api-Key") != "s3cret-token" {
			t.Errorf("OTLP request without the OTEL_EXPORTER_OTLP_HEADERS header: %v", h)
		}
	}
	if h := otlp.metric("pgoutbox.publish.duration").GetHistogram(); h == nil || len(h.DataPoints) == 0 {
		t.Errorf("pgoutbox.publish.duration is not a histogram with points: %v", otlp.metric("pgoutbox.publish.duration"))
	}
	if otlp.metric("pgoutbox.messages.claimed") == nil {
		t.Errorf("pgoutbox.messages.claimed not exported")
	}
}

func TestRun_RefusesOTLPOverGRPCWithAReason(t *testing.T) {
	t.Parallel()
	d := newDB(t)
	env := d.env()
	env["OTEL_EXPORTER_OTLP_ENDPOINT"] = "http://127.0.0.1:4317"
	env["OTEL_EXPORTER_OTLP_PROTOCOL"] = "grpc"
	r := call(t, invocation{env: env}, "run", "--publisher", "discard")
	wantCode(t, r, ExitUsage)
	mustContain(t, r, "stderr", "OTEL_EXPORTER_OTLP_PROTOCOL=grpc is not supported: pgoutbox exports OTLP over HTTP")
}
