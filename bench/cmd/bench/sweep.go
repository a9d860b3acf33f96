package main

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// parseSetup applies "key=value,..." overrides to the settled setup
// (development: -try).
func parseSetup(spec string) (drainSetup, error) {
	s := outboxSetup()
	if spec == "" {
		return s, nil
	}
	for _, kv := range strings.Split(spec, ",") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return s, fmt.Errorf("bad -try element %q", kv)
		}
		if k == "fd" {
			d, err := time.ParseDuration(v)
			if err != nil {
				return s, err
			}
			s.cfg.FinalizeDelay = d
			continue
		}
		n, err := strconv.Atoi(v)
		if err != nil {
			return s, fmt.Errorf("bad -try value %q", kv)
		}
		switch k {
		case "zero": // start from the zero Config (the defaults rows)
			if n == 1 {
				s = zeroSetup()
			}
		case "bmin":
			s.cfg.BatchMin = n
		case "batch":
			s.cfg.Batch = n
		case "conc":
			s.cfg.Concurrency = n
		case "fb":
			s.cfg.FinalizeBatch = n
		case "disp":
			s.dispatchers = n
		case "pool":
			s.poolConns = int32(n)
		default:
			return s, fmt.Errorf("unknown -try key %q", k)
		}
	}
	return s, nil
}

// measureSetup drains n fresh messages with s and returns msg/s.
func measureSetup(ctx context.Context, e *env, s drainSetup, n int) (float64, error) {
	if err := resetOutbox(ctx, e.outbox); err != nil {
		return 0, err
	}
	if err := enqueueOutbox(ctx, e.outbox, n, false, 1000); err != nil {
		return 0, err
	}
	if err := settle(ctx, e.outbox, "outbox"); err != nil {
		return 0, err
	}
	stop := e.startProfile()
	rate, _, err := drainOutbox(ctx, e.outboxURL, s, n, nil)
	stop()
	return rate, err
}

// runTry is a development helper: drain 100,000 with each ";"-separated
// -try setup in turn, -rounds times, and print the medians.
func runTry(ctx context.Context, e *env, specs string, times int) error {
	var setups []drainSetup
	names := strings.Split(specs, ";")
	for _, spec := range names {
		s, err := parseSetup(spec)
		if err != nil {
			return err
		}
		setups = append(setups, s)
	}
	rates := make([][]float64, len(setups))
	for i := 0; i < times; i++ {
		for k, s := range setups {
			if os.Getenv("BENCH_NEWPOOL") != "" {
				e.outbox.Close()
				e.outbox, _ = newPool(ctx, e.outboxURL, 4)
			}
			var m0, m1 runtime.MemStats
			var ru0, ru syscall.Rusage
			runtime.ReadMemStats(&m0)
			syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
			if err := resetOutbox(ctx, e.outbox); err != nil {
				return err
			}
			if err := enqueueOutbox(ctx, e.outbox, e.o.tryN, false, 1000); err != nil {
				return err
			}
			if err := settle(ctx, e.outbox, "outbox"); err != nil {
				return err
			}
			runtime.ReadMemStats(&m0)
			syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
			mc0 := readMachineCPU()
			stop := e.startProfile()
			statementTimeline.reset()
			r, _, err := drainOutbox(ctx, e.outboxURL, s, e.o.tryN, nil)
			stop()
			statementTimeline.report()
			mc1 := readMachineCPU()
			if err != nil {
				return err
			}
			runtime.ReadMemStats(&m1)
			rates[k] = append(rates[k], r)
			syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
			// The drain alone (not the enqueue): allocations, bytes and
			// process CPU per message.
			cpu := time.Duration(ru.Utime.Nano()+ru.Stime.Nano()-ru0.Utime.Nano()-ru0.Stime.Nano()) / time.Duration(e.o.tryN)
			logf("try %s: %.0f msg/s (goroutines %d; this round, drain, per message: %d allocs, %d B, %s CPU, machine %s busy; %d GCs; machine %.0f%% busy)", names[k], r, runtime.NumGoroutine(),
				(m1.Mallocs-m0.Mallocs)/uint64(e.o.tryN), (m1.TotalAlloc-m0.TotalAlloc)/uint64(e.o.tryN), cpu, (mc1.busy-mc0.busy)/time.Duration(e.o.tryN), m1.NumGC-m0.NumGC, 100*mc0.share(mc1))
		}
	}
	for k, s := range setups {
		logf("try %s: median %.0f msg/s  (%s)", names[k], median(rates[k]), s)
	}
	return nil
}

// runSweep measures throughput against batch size, publish concurrency and
// dispatchers per process (the charts). Each point is the better of two
// drains of SweepN: interference from elsewhere on the machine only ever
// lowers a drain's rate.
func runSweep(ctx context.Context, e *env) error {
	n := 50_000
	if e.o.full {
		n = 100_000
	}
	e.res.SweepN = n
	best := func(s drainSetup) (float64, error) {
		var b float64
		for i := 0; i < 2; i++ {
			r, err := measureSetup(ctx, e, s, n)
			if err != nil {
				return 0, err
			}
			b = max(b, r)
		}
		return b, nil
	}
	base := outboxSetup()
	for _, b := range []int{50, 100, 200, 500, 1000, 2000, 5000} {
		s := base
		s.cfg.Batch = b
		s.cfg.FinalizeBatch = max(b, base.cfg.FinalizeBatch)
		r, err := best(s)
		if err != nil {
			return err
		}
		logf("sweep Batch=%d: %.0f msg/s", b, r)
		e.res.SweepBatch = append(e.res.SweepBatch, point{float64(b), r})
	}
	for _, c := range []int{1, 4, 16, 64} {
		s := base
		s.cfg.Concurrency = c
		r, err := best(s)
		if err != nil {
			return err
		}
		logf("sweep Concurrency=%d: %.0f msg/s", c, r)
		e.res.SweepConcurrency = append(e.res.SweepConcurrency, point{float64(c), r})
	}
	for _, d := range []int{1, 2, 4} {
		s := base
		s.dispatchers = d
		s.poolConns = max(base.poolConns, int32(4*d))
		r, err := best(s)
		if err != nil {
			return err
		}
		logf("sweep dispatchers=%d: %.0f msg/s", d, r)
		e.res.SweepDispatchers = append(e.res.SweepDispatchers, point{float64(d), r})
	}
	return nil
}
