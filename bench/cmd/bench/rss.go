package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// childResult is what the drain child prints on stdout.
type childResult struct {
	Rate      float64 `json:"rate"`
	VmHWMKiB  int64   `json:"vmhwm_kib"`
	HeapSys   uint64  `json:"heap_sys"`
	TotalSys  uint64  `json:"total_sys"`
	NumGC     uint32  `json:"num_gc"`
	ElapsedMs int64   `json:"elapsed_ms"`
}

// runRSS is item 6: peak RSS of a process that only runs the dispatcher
// while it drains 1,000,000 messages. The parent fills the table (INSERT ...
// SELECT generate_series) and re-executes this binary in -child drain-rss
// mode; the child drains with the drain setup and reports VmHWM from
// /proc/self/status; the parent cross-checks with the child's rusage.
func runRSS(ctx context.Context, e *env) error {
	n := 1_000_000
	e.res.RSSN = n
	if err := resetOutbox(ctx, e.outbox); err != nil {
		return err
	}
	t0 := time.Now()
	if err := fillOutboxSQL(ctx, e.outbox, n, "pending"); err != nil {
		return err
	}
	if err := settle(ctx, e.outbox, "outbox"); err != nil {
		return err
	}
	logf("rss: %d pending rows built in %s", n, time.Since(t0).Round(time.Millisecond))
	self, err := os.Executable()
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, self, "-child", "drain-rss", "-url", e.outboxURL, "-n", strconv.Itoa(n))
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("drain child: %w", err)
	}
	var r childResult
	if err := json.Unmarshal(out, &r); err != nil {
		return fmt.Errorf("drain child output %q: %w", out, err)
	}
	maxrss := int64(0)
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		maxrss = ru.Maxrss // KiB on Linux
	}
	done, err := countDone(ctx, e.outbox)
	if err != nil {
		return err
	}
	if done != int64(n) {
		return fmt.Errorf("rss: %d rows done, want %d", done, n)
	}
	// The figure is VmHWM, read by the child itself: it covers the child's
	// whole life after exec. rusage maxrss is only a cross-check, and an
	// upper bound: Linux carries the high-water mark of the image the
	// child was forked from (this parent) across execve.
	e.res.RSSPeakKiB = r.VmHWMKiB
	e.res.RSSRate = r.Rate
	e.res.RSSGoDetail = fmt.Sprintf("VmHWM %d KiB; rusage maxrss %d KiB, which also counts the parent image the child was forked from; Go heap_sys %.1f MiB, total_sys %.1f MiB, %d GCs, drained in %s",
		r.VmHWMKiB, maxrss, float64(r.HeapSys)/(1<<20), float64(r.TotalSys)/(1<<20), r.NumGC,
		(time.Duration(r.ElapsedMs) * time.Millisecond).Round(time.Millisecond))
	logf("rss: peak %.1f MiB while draining %d at %.0f msg/s (%s)", float64(e.res.RSSPeakKiB)/1024, n, r.Rate, e.res.RSSGoDetail)
	return nil
}

// runChild is the child side of runRSS.
func runChild(mode, url string, n int) error {
	if mode != "drain-rss" {
		return fmt.Errorf("unknown child mode %q", mode)
	}
	ctx := context.Background()
	rate, elapsed, err := drainOutbox(ctx, url, outboxSetup(), n, nil)
	if err != nil {
		return err
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	r := childResult{Rate: rate, VmHWMKiB: vmHWM(), HeapSys: ms.HeapSys, TotalSys: ms.Sys, NumGC: ms.NumGC,
		ElapsedMs: elapsed.Milliseconds()}
	return json.NewEncoder(os.Stdout).Encode(r)
}

func vmHWM() int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb
		}
	}
	return 0
}
