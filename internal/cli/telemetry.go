package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/pgoutbox/pgoutbox/dispatcher"
)

// The relay's telemetry is the OpenTelemetry SDK, configured the standard
// way: the OTEL_* environment variables below, plus --otlp-endpoint and
// --trace-mode. It lives here, in the relay, so that the library
// (dispatcher, publishers) keeps depending on the OpenTelemetry API only:
// an application that imports the library inherits none of the SDK or its
// exporters (internal/importtest).
//
//	OTEL_SDK_DISABLED=true            no traces and no OTLP export (/metrics still works)
//	OTEL_SERVICE_NAME                 service.name (default "pgoutbox")
//	OTEL_RESOURCE_ATTRIBUTES          k=v,k=v resource attributes
//	OTEL_EXPORTER_OTLP_ENDPOINT       base URL, e.g. http://collector:4318 (/v1/traces, /v1/metrics appended)
//	OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, OTEL_EXPORTER_OTLP_METRICS_ENDPOINT  full URLs per signal
//	OTEL_EXPORTER_OTLP_HEADERS (and _TRACES_, _METRICS_)  k=v,k=v request headers (API keys: never logged)
//	OTEL_EXPORTER_OTLP_PROTOCOL (and per signal)  http/protobuf only (grpc is refused with a message)
//	OTEL_EXPORTER_OTLP_COMPRESSION (and per signal)  gzip or none
//	OTEL_EXPORTER_OTLP_TIMEOUT (and per signal)  milliseconds
//	OTEL_TRACES_EXPORTER, OTEL_METRICS_EXPORTER  otlp or none (default: otlp when an endpoint is set)
//	OTEL_TRACES_SAMPLER, OTEL_TRACES_SAMPLER_ARG  always_on, always_off, traceidratio,
//	                                  parentbased_always_on (default), parentbased_always_off, parentbased_traceidratio
//	OTEL_METRIC_EXPORT_INTERVAL       milliseconds between OTLP metric exports (default 60000)
const (
	envOTLPEndpoint = "OTEL_EXPORTER_OTLP_ENDPOINT"
	serviceDefault  = "pgoutbox"
)

// telemetryFlags are run's telemetry flags.
type telemetryFlags struct {
	endpoint  *string
	traceMode *string
}

func addTelemetryFlags(f *flags) telemetryFlags {
	return telemetryFlags{
		endpoint:  f.String("otlp-endpoint", "", "export traces and metrics over OTLP/HTTP to this base URL, e.g. http://collector:4318 (default: $"+envOTLPEndpoint+"; the other OTEL_* variables apply, see the README)"),
		traceMode: f.String("trace-mode", "link", "how a publish span relates to the trace the event was enqueued in: link (a trace of its own, linked) or parent (a child span)"),
	}
}

// signal is the OTLP configuration of one signal (traces or metrics).
type signal struct {
	on          bool
	url         string // full URL
	headers     map[string]string
	compression string
	timeout     time.Duration
}

// telemetryConfig is the validated telemetry configuration.
type telemetryConfig struct {
	traces, metrics signal
	service         string
	resAttrs        []attribute.KeyValue
	sampler         sdktrace.Sampler
	samplerName     string
	mode            dispatcher.TraceMode
	exportInterval  time.Duration
}

// resolve validates the flags and the OTEL_* variables.
func (tf telemetryFlags) resolve(f *flags, getenv func(string) string, secrets func(...string)) (telemetryConfig, error) {
	var tc telemetryConfig
	switch *tf.traceMode {
	case "link":
		tc.mode = dispatcher.TraceLink
	case "parent":
		tc.mode = dispatcher.TraceParent
	default:
		return tc, f.usageError("invalid --trace-mode %q: expected link or parent", *tf.traceMode)
	}
	tc.service = firstNonEmpty(getenv("OTEL_SERVICE_NAME"), serviceDefault)
	for kv := range strings.SplitSeq(getenv("OTEL_RESOURCE_ATTRIBUTES"), ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok || k == "" {
			continue
		}
		if dv, err := url.PathUnescape(v); err == nil {
			v = dv
		}
		tc.resAttrs = append(tc.resAttrs, attribute.String(k, v))
	}
	disabled := strings.EqualFold(getenv("OTEL_SDK_DISABLED"), "true")
	base := firstNonEmpty(*tf.endpoint, getenv(envOTLPEndpoint))
	var err error
	if tc.traces, err = resolveSignal(getenv, "traces", base, disabled, secrets); err != nil {
		return tc, f.usageError("%v", err)
	}
	if tc.metrics, err = resolveSignal(getenv, "metrics", base, disabled, secrets); err != nil {
		return tc, f.usageError("%v", err)
	}
	if tc.sampler, tc.samplerName, err = resolveSampler(getenv); err != nil {
		return tc, f.usageError("%v", err)
	}
	tc.exportInterval = 60 * time.Second
	if s := getenv("OTEL_METRIC_EXPORT_INTERVAL"); s != "" {
		ms, err := strconv.Atoi(s)
		if err != nil || ms <= 0 {
			return tc, f.usageError("invalid OTEL_METRIC_EXPORT_INTERVAL %q: expected milliseconds", s)
		}
		tc.exportInterval = time.Duration(ms) * time.Millisecond
	}
	return tc, nil
}

func resolveSignal(getenv func(string) string, name, base string, disabled bool, secrets func(...string)) (signal, error) {
	upper := strings.ToUpper(name)
	env := func(suffix string) string {
		return firstNonEmpty(getenv("OTEL_EXPORTER_OTLP_"+upper+"_"+suffix), getenv("OTEL_EXPORTER_OTLP_"+suffix))
	}
	var s signal
	s.url = getenv("OTEL_EXPORTER_OTLP_" + upper + "_ENDPOINT")
	if s.url == "" && base != "" {
		s.url = strings.TrimSuffix(base, "/") + "/v1/" + name
	}
	switch exp := strings.ToLower(getenv("OTEL_" + upper + "_EXPORTER")); exp {
	case "", "otlp":
		s.on = s.url != "" || exp == "otlp"
	case "none":
		s.on = false
	default:
		return s, fmt.Errorf("OTEL_%s_EXPORTER=%s is not supported: pgoutbox exports otlp (or none)", upper, exp)
	}
	if disabled || !s.on {
		return signal{}, nil
	}
	if s.url == "" {
		s.url = "http://localhost:4318/v1/" + name // the OTLP/HTTP default
	}
	u, err := url.Parse(s.url)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return s, fmt.Errorf("invalid OTLP %s endpoint %q: expected an http(s) URL such as http://collector:4318", name, s.url)
	}
	switch p := env("PROTOCOL"); p {
	case "", "http/protobuf":
	case "grpc":
		return s, fmt.Errorf("OTEL_EXPORTER_OTLP_PROTOCOL=grpc is not supported: pgoutbox exports OTLP over HTTP (http/protobuf, port 4318), which every collector accepts")
	default:
		return s, fmt.Errorf("OTEL_EXPORTER_OTLP_PROTOCOL=%s is not supported: use http/protobuf", p)
	}
	switch c := env("COMPRESSION"); c {
	case "", "none", "gzip":
		s.compression = c
	default:
		return s, fmt.Errorf("OTEL_EXPORTER_OTLP_COMPRESSION=%s is not supported: use gzip or none", c)
	}
	if t := env("TIMEOUT"); t != "" {
		ms, err := strconv.Atoi(t)
		if err != nil || ms <= 0 {
			return s, fmt.Errorf("invalid OTEL_EXPORTER_OTLP_TIMEOUT %q: expected milliseconds", t)
		}
		s.timeout = time.Duration(ms) * time.Millisecond
	}
	if h := env("HEADERS"); h != "" {
		s.headers = map[string]string{}
		for kv := range strings.SplitSeq(h, ",") {
			k, v, ok := strings.Cut(kv, "=")
			if !ok || strings.TrimSpace(k) == "" {
				continue
			}
			if dv, err := url.QueryUnescape(strings.TrimSpace(v)); err == nil {
				v = dv
			}
			s.headers[strings.TrimSpace(k)] = strings.TrimSpace(v)
			secrets(strings.TrimSpace(v))
		}
	}
	if u.User != nil {
		secrets(u.User.String())
	}
	return s, nil
}

func resolveSampler(getenv func(string) string) (sdktrace.Sampler, string, error) {
	name := strings.ToLower(firstNonEmpty(getenv("OTEL_TRACES_SAMPLER"), "parentbased_always_on"))
	ratio := 1.0
	if arg := getenv("OTEL_TRACES_SAMPLER_ARG"); arg != "" && strings.HasSuffix(name, "traceidratio") {
		r, err := strconv.ParseFloat(arg, 64)
		if err != nil || r < 0 || r > 1 {
			return nil, "", fmt.Errorf("invalid OTEL_TRACES_SAMPLER_ARG %q: expected a ratio between 0 and 1", arg)
		}
		ratio = r
	}
	switch name {
	case "always_on":
		return sdktrace.AlwaysSample(), name, nil
	case "always_off":
		return sdktrace.NeverSample(), name, nil
	case "traceidratio":
		return sdktrace.TraceIDRatioBased(ratio), name, nil
	case "parentbased_always_on":
		return sdktrace.ParentBased(sdktrace.AlwaysSample()), name, nil
	case "parentbased_always_off":
		return sdktrace.ParentBased(sdktrace.NeverSample()), name, nil
	case "parentbased_traceidratio":
		return sdktrace.ParentBased(sdktrace.TraceIDRatioBased(ratio)), name, nil
	}
	return nil, "", fmt.Errorf("OTEL_TRACES_SAMPLER=%s is not supported: expected always_on, always_off, traceidratio, "+
		"parentbased_always_on, parentbased_always_off or parentbased_traceidratio", name)
}

// telemetry is the running SDK.
type telemetry struct {
	mp       *sdkmetric.MeterProvider // the dispatcher's instruments: Prometheus and OTLP
	relayMP  *sdkmetric.MeterProvider // the relay's own series (health, legacy names): Prometheus only
	tp       trace.TracerProvider     // nil: no tracing
	sdkTP    *sdktrace.TracerProvider
	registry *prometheus.Registry
}

// startTelemetry builds the SDK. prom adds the Prometheus exporter (for
// /metrics).
func startTelemetry(ctx context.Context, tc telemetryConfig, prom bool) (*telemetry, error) {
	res, err := resource.New(ctx, resource.WithTelemetrySDK(),
		resource.WithAttributes(append([]attribute.KeyValue{attribute.String("service.name", tc.service)}, tc.resAttrs...)...))
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return nil, fmt.Errorf("telemetry resource: %w", err)
	}
	t := &telemetry{}
	var readers, relayReaders []sdkmetric.Option
	if prom {
		t.registry = prometheus.NewRegistry()
		exp, err := otelprom.New(otelprom.WithRegisterer(t.registry), otelprom.WithoutScopeInfo())
		if err != nil {
			return nil, fmt.Errorf("prometheus exporter: %w", err)
		}
		readers = append(readers, sdkmetric.WithReader(exp))
		relayExp, err := otelprom.New(otelprom.WithRegisterer(t.registry), otelprom.WithoutScopeInfo(), otelprom.WithoutTargetInfo())
		if err != nil {
			return nil, fmt.Errorf("prometheus exporter: %w", err)
		}
		relayReaders = append(relayReaders, sdkmetric.WithReader(relayExp))
	}
	if tc.metrics.on {
		opts := []otlpmetrichttp.Option{otlpmetrichttp.WithEndpointURL(tc.metrics.url)}
		if tc.metrics.headers != nil {
			opts = append(opts, otlpmetrichttp.WithHeaders(tc.metrics.headers))
		}
		if tc.metrics.compression == "gzip" {
			opts = append(opts, otlpmetrichttp.WithCompression(otlpmetrichttp.GzipCompression))
		}
		if tc.metrics.timeout > 0 {
			opts = append(opts, otlpmetrichttp.WithTimeout(tc.metrics.timeout))
		}
		exp, err := otlpmetrichttp.New(ctx, opts...)
		if err != nil {
			return nil, fmt.Errorf("OTLP metric exporter: %w", err)
		}
		readers = append(readers, sdkmetric.WithReader(sdkmetric.NewPeriodicReader(exp, sdkmetric.WithInterval(tc.exportInterval))))
	}
	t.mp = sdkmetric.NewMeterProvider(append(readers, sdkmetric.WithResource(res))...)
	t.relayMP = sdkmetric.NewMeterProvider(append(relayReaders, sdkmetric.WithResource(res))...)
	if tc.traces.on {
		opts := []otlptracehttp.Option{otlptracehttp.WithEndpointURL(tc.traces.url)}
		if tc.traces.headers != nil {
			opts = append(opts, otlptracehttp.WithHeaders(tc.traces.headers))
		}
		if tc.traces.compression == "gzip" {
			opts = append(opts, otlptracehttp.WithCompression(otlptracehttp.GzipCompression))
		}
		if tc.traces.timeout > 0 {
			opts = append(opts, otlptracehttp.WithTimeout(tc.traces.timeout))
		}
		exp, err := otlptracehttp.New(ctx, opts...)
		if err != nil {
			return nil, fmt.Errorf("OTLP trace exporter: %w", err)
		}
		t.sdkTP = sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res), sdktrace.WithSampler(tc.sampler))
		t.tp = t.sdkTP
	}
	return t, nil
}

// shutdown flushes and stops the exporters (bounded: a collector that does
// not answer must not hold the relay's exit).
func (t *telemetry) shutdown(ctx context.Context, log *slog.Logger) {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	var errs []error
	if t.sdkTP != nil {
		errs = append(errs, t.sdkTP.Shutdown(sctx))
	}
	errs = append(errs, t.mp.Shutdown(sctx), t.relayMP.Shutdown(sctx))
	if err := errors.Join(errs...); err != nil {
		log.Warn("telemetry shutdown", slog.String("error", err.Error()))
	}
}

// metricsHandler serves the Prometheus exposition of every instrument.
func (t *telemetry) metricsHandler() http.Handler {
	return promhttp.HandlerFor(t.registry, promhttp.HandlerOpts{})
}

// meter is the relay's own meter (health and the series kept under their
// names of before the SDK; see metrics.go).
func (t *telemetry) meter() metric.Meter {
	return t.relayMP.Meter("github.com/pgoutbox/pgoutbox/relay")
}

// logAttrs describe the telemetry at startup (no header values).
func (tc telemetryConfig) logAttrs() []any {
	attrs := []any{slog.String("trace_mode", tc.mode.String())}
	if tc.traces.on {
		attrs = append(attrs, slog.String("otlp_traces", redactURL(tc.traces.url)), slog.String("trace_sampler", tc.samplerName))
	}
	if tc.metrics.on {
		attrs = append(attrs, slog.String("otlp_metrics", redactURL(tc.metrics.url)))
	}
	return attrs
}

func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "?"
	}
	return u.Scheme + "://" + u.Host + u.Path
}
