package main

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// Item 7: the cost of tracing. The drain of item 1 (same configuration,
// every event enqueued inside a producer span, so each row carries a
// traceparent) with three tracing setups, rounds interleaved:
//
//   - "code off": Config.DisableTracing, no tracing code on the path (the
//     dispatcher as it was before tracing);
//   - "disabled": the default, no SDK installed (the global TracerProvider
//     of the API, delegating to nothing): the statement spans find that
//     nothing records, so publishes start no span and leave the stored
//     context unparsed (dispatcher/trace_quiet.go);
//   - "every message sampled": the OpenTelemetry SDK with AlwaysSample and a
//     batch span processor over an exporter that discards the spans (the
//     SDK's work, not a collector's).
type tracingCase struct {
	Name      string
	Rounds    []float64 // msg/s
	Rate      float64   // median
	CPURounds []float64 // this process's CPU (user+system) per message, µs
	CPU       float64   // median
	Allocs    float64   // heap allocations per message (median of the rounds)
	allocs    []float64
	Spans     int64 // spans ended in the last round (sampled case)
}

// processCPU is this process's user+system CPU time so far. The
// dispatchers are the only work of the process during a drain, so its
// delta per message is the dispatcher's cost, which a machine shared with
// other load disturbs far less than the wall-clock rate.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// spanCounter counts the spans the SDK hands to the batch processor.
type spanCounter struct {
	sdktrace.SpanExporter
	n int64
}

func (c *spanCounter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	c.n += int64(len(spans)) // the batch processor exports from one goroutine
	return c.SpanExporter.ExportSpans(ctx, spans)
}

func runTracing(ctx context.Context, e *env) error {
	n := 100_000
	e.res.TracingN = n
	cases := []*tracingCase{{Name: "code off (DisableTracing)"}, {Name: "disabled (no SDK, the default)"}, {Name: "every message sampled (SDK)"}}
	producerTP := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()))
	defer func() { _ = producerTP.Shutdown(ctx) }()
	for round := -1; round < e.o.rounds; round++ { // round -1: warm-up, not counted
		k := (round + 1) % len(cases) // the order rotates from round to round
		for _, c := range append(append([]*tracingCase(nil), cases[k:]...), cases[:k]...) {
			if err := resetOutbox(ctx, e.outbox); err != nil {
				return err
			}
			pctx, span := producerTP.Tracer("bench-producer").Start(ctx, "POST /orders")
			err := enqueueOutbox(pctx, e.outbox, n, false, 1000)
			span.End()
			if err != nil {
				return err
			}
			if err := settle(ctx, e.outbox, "outbox"); err != nil {
				return err
			}
			s := outboxSetup()
			var tp *sdktrace.TracerProvider
			var counter *spanCounter
			switch {
			case strings.HasPrefix(c.Name, "code off"):
				s.cfg.DisableTracing = true
			case strings.HasPrefix(c.Name, "every"):
				counter = &spanCounter{SpanExporter: tracetest.NewNoopExporter()}
				tp = sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()),
					sdktrace.WithBatcher(counter, sdktrace.WithMaxQueueSize(20_000), sdktrace.WithMaxExportBatchSize(2048)))
				s.cfg.TracerProvider = tp
			}
			stopProfile := e.caseProfile(round, c.Name)
			var m0, m1 runtime.MemStats
			runtime.ReadMemStats(&m0)
			cpu0 := processCPU()
			rate, elapsed, err := drainOutbox(ctx, e.outboxURL, s, n, nil)
			if tp != nil {
				_ = tp.Shutdown(ctx) // exports what the batch processor still holds: part of the cost
			}
			cpuPerMsg := float64(processCPU()-cpu0) / float64(time.Microsecond) / float64(n)
			runtime.ReadMemStats(&m1)
			stopProfile()
			allocsPerMsg := float64(m1.Mallocs-m0.Mallocs) / float64(n)
			bytesPerMsg := float64(m1.TotalAlloc-m0.TotalAlloc) / float64(n)
			if err != nil {
				return err
			}
			done, err := countDone(ctx, e.outbox)
			if err != nil {
				return err
			}
			if done != int64(n) {
				return fmt.Errorf("tracing %s round %d: %d rows done, want %d", c.Name, round, done, n)
			}
			logf("round %d tracing %s: %d messages in %s = %.0f msg/s, %.2f µs CPU, %.1f allocations and %.0f B allocated per message", round, c.Name, n,
				elapsed.Round(time.Millisecond), rate, cpuPerMsg, allocsPerMsg, bytesPerMsg)
			if round >= 0 {
				c.Rounds = append(c.Rounds, rate)
				c.CPURounds = append(c.CPURounds, cpuPerMsg)
				c.allocs = append(c.allocs, allocsPerMsg)
				if counter != nil {
					c.Spans = counter.n
				}
			}
		}
	}
	for _, c := range cases {
		c.Rate = median(c.Rounds)
		c.CPU = median(c.CPURounds)
		c.Allocs = median(c.allocs)
		e.res.Tracing = append(e.res.Tracing, *c)
	}
	logf("tracing: code off %.0f, disabled %.0f (%.1f%%), every message sampled %.0f msg/s (%.1f%%); CPU per message %.2f, %.2f (%+.1f%%), %.2f µs; allocations per message %.1f, %.1f, %.1f",
		cases[0].Rate, cases[1].Rate, 100*(cases[1].Rate/cases[0].Rate-1), cases[2].Rate, 100*(cases[2].Rate/cases[0].Rate-1),
		cases[0].CPU, cases[1].CPU, 100*(cases[1].CPU/cases[0].CPU-1), cases[2].CPU, cases[0].Allocs, cases[1].Allocs, cases[2].Allocs)
	return nil
}

// caseProfile writes, with -cpuprofile, a CPU profile of the first counted
// round of each tracing case to the -cpuprofile path plus ".tracing-" and
// the case's first word ("code", "disabled", "every"), for comparing where
// the cases spend their time (go tool pprof -diff_base). It returns the
// function that stops the profile.
func (e *env) caseProfile(round int, name string) func() {
	if e.o.cpuprofile == "" || round != 0 {
		return func() {}
	}
	key, _, _ := strings.Cut(name, " ")
	f, err := os.Create(e.o.cpuprofile + ".tracing-" + key)
	if err != nil {
		logf("cpuprofile: %v", err)
		return func() {}
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		logf("cpuprofile: %v", err)
		_ = f.Close()
		return func() {}
	}
	return func() {
		pprof.StopCPUProfile()
		_ = f.Close()
	}
}

// writeTracing renders item 7.
func writeTracing(p func(string, ...any), r *results) {
	if len(r.Tracing) == 0 {
		return
	}
	base := r.Tracing[0].Rate
	p("## 7. The cost of tracing")
	p("")
	p("The drain of item 1 (%s messages, the same configuration), every event enqueued inside a producer span (so every row carries a `traceparent`), with three tracing setups; rounds interleaved (the order rotating), median of %d shown. *Code off*: `Config.DisableTracing`, no tracing code on the path, the dispatcher as before tracing. *Disabled*: the default, no OpenTelemetry SDK installed: each statement span (claim, finalize) finds that nothing records, so publishes start no span and the stored `traceparent` is parsed only if the publisher or a log record asks for the context (`dispatcher/trace_quiet.go`). *Every message sampled*: the SDK with `AlwaysSample` and a batch span processor over an exporter that discards spans: one producer span per message, one client span per statement.", kfmt(float64(r.TracingN)), len(r.Tracing[0].Rounds))
	p("")
	p("| Tracing | msg/s | vs code off | rounds (msg/s) | relay CPU per message | vs code off | rounds (µs) | allocations per message |")
	p("| --- | --- | --- | --- | --- | --- | --- | --- |")
	baseCPU := r.Tracing[0].CPU
	for _, c := range r.Tracing {
		var rounds, cpus []string
		for i, x := range c.Rounds {
			rounds = append(rounds, kfmt(x))
			cpus = append(cpus, fmt.Sprintf("%.2f", c.CPURounds[i]))
		}
		p("| %s | %s | %+.1f%% | %s | %.2f µs | %+.1f%% | %s | %.1f |", c.Name, kfmt(c.Rate), 100*(c.Rate/base-1), strings.Join(rounds, ", "),
			c.CPU, 100*(c.CPU/baseCPU-1), strings.Join(cpus, ", "), c.Allocs)
	}
	p("")
	p("*Relay CPU per message* is the benchmark process's user + system CPU time (getrusage) during the drain divided by the messages: the dispatcher's own cost (the database's CPU is not in it), which load from elsewhere on the machine disturbs far less than the wall-clock rate. *Allocations per message* (runtime.MemStats.Mallocs over the drain) does not depend on the load at all. `-cpuprofile FILE` writes a CPU profile of each setup's first counted round to FILE.tracing-code, FILE.tracing-disabled and FILE.tracing-every (compare with `go tool pprof -diff_base`).")
	p("")
	if s := r.Tracing[len(r.Tracing)-1].Spans; s > 0 {
		p("The sampled run exported %s spans in its last round (%.2f per message).", kfmt(float64(s)), float64(s)/float64(r.TracingN))
		p("")
	}
}
