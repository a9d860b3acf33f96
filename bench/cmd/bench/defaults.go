package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/pgoutbox/dispatcher"
)

// The "defaults" rows: pgoutbox as a user runs it without tuning anything.
//
//   - zero Config: dispatcher.New(pool, pub, dispatcher.Config{}) in
//     process, on a pgxpool with its default size (max(4, NumCPU));
//   - `pgoutbox run --publisher discard`: the relay command, one process,
//     with no tuning flag (--metrics-addr only, to read its published counter,
//     and --log-level warn).

// zeroSetup is the library's zero Config (pool at pgxpool's default size).
func zeroSetup() drainSetup {
	return drainSetup{cfg: dispatcher.Config{}, dispatchers: 1}
}

func zeroSetupString() string {
	return fmt.Sprintf("dispatcher.Config{} (every field at its default: Batch %d with BatchMin %d, BatchWork %s, Concurrency %d, FinalizeBatch %d, Claim all, LISTEN on), pgxpool default size (MaxConns max(4, NumCPU))",
		dispatcher.BatchDefault, dispatcher.BatchMinDefault, dispatcher.BatchWorkDefault, dispatcher.ConcurrencyDefault, dispatcher.FinalizeBatchDefault)
}

// relayFlags are the only flags the CLI rows pass.
const relayFlags = "--publisher discard --metrics-addr 127.0.0.1:PORT --log-level warn"

// relayBinary builds cmd/pgoutbox of the main module (the parent of the
// bench module) once per run.
type relayBinary struct {
	once sync.Once
	path string
	err  error
}

var relayBin relayBinary

func (r *relayBinary) get() (string, error) {
	r.once.Do(func() {
		root, err := filepath.Abs("..")
		if err != nil {
			r.err = err
			return
		}
		if b, err := os.ReadFile(filepath.Join(root, "go.mod")); err != nil || !strings.Contains(string(b), "module github.com/pgoutbox/pgoutbox\n") {
			r.err = fmt.Errorf("the relay rows build ../cmd/pgoutbox: run the benchmark from the bench directory (make bench)")
			return
		}
		dir, err := os.MkdirTemp("", "pgoutbox-bench-bin-")
		if err != nil {
			r.err = err
			return
		}
		r.path = filepath.Join(dir, "pgoutbox")
		cmd := exec.Command("go", "build", "-o", r.path, "./cmd/pgoutbox")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			r.err = fmt.Errorf("go build ./cmd/pgoutbox: %v\n%s", err, out)
		}
	})
	return r.path, r.err
}

// relayProc is one running `pgoutbox run` process.
type relayProc struct {
	cmd     *exec.Cmd
	metrics string // http://127.0.0.1:PORT/metrics
	stdout  io.ReadCloser
	stderr  *strings.Builder
	done    chan error

	stopOnce sync.Once
	stopErr  error
}

// freePort is a loopback port nothing listens on, never one it returned
// before. A relay of four started together once exited during a drain (the
// likely cause: the kernel handed the same free port out twice, and the
// second relay's --metrics-addr was taken); a shared port would also have
// made the other relay's /metrics count twice.
func freePort() (int, error) {
	portsMu.Lock()
	defer portsMu.Unlock()
	for range 100 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		port := ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		if !portsGiven[port] {
			portsGiven[port] = true
			return port, nil
		}
	}
	return 0, errors.New("no loopback port that was not handed out before")
}

var (
	portsMu    sync.Mutex
	portsGiven = map[int]bool{}
)

// startRelay starts `pgoutbox run` with publisher and relayFlags' other flags.
func startRelay(url, publisher string) (*relayProc, error) {
	return startRelayWith([]string{"DATABASE_URL=" + url}, publisher)
}

// startRelayWith is startRelay with env added to the environment and args
// to the flags.
func startRelayWith(env []string, publisher string, args ...string) (*relayProc, error) {
	bin, err := relayBin.get()
	if err != nil {
		return nil, err
	}
	return startRelayBin(bin, env, publisher, args...)
}

// startRelayBin starts `bin run` with env added to the environment,
// publisher, /metrics on a free port, warnings logged, and flags.
func startRelayBin(bin string, env []string, publisher string, flags ...string) (*relayProc, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	p := &relayProc{metrics: fmt.Sprintf("http://127.0.0.1:%d/metrics", port), stderr: &strings.Builder{}, done: make(chan error, 1)}
	p.cmd = exec.Command(bin, append([]string{"run", "--publisher", publisher, "--metrics-addr", fmt.Sprintf("127.0.0.1:%d", port), "--log-level", "warn"}, flags...)...)
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stderr = p.stderr
	if publisher == "stdout" {
		if p.stdout, err = p.cmd.StdoutPipe(); err != nil {
			return nil, err
		}
	}
	if err := p.cmd.Start(); err != nil {
		return nil, err
	}
	go func() { p.done <- p.cmd.Wait() }()
	return p, nil
}

// cpu is the CPU time (user + system) the relay process has used so far,
// from /proc/<pid>/stat (clock ticks: 10 ms resolution at the usual 100 Hz).
func (p *relayProc) cpu() (time.Duration, error) {
	return procCPU(p.cmd.Process.Pid)
}

// clockTicks is the kernel's USER_HZ, the unit of /proc/<pid>/stat's times:
// 100 on every Linux architecture Go supports (sysconf(_SC_CLK_TCK) is a
// constant there).
const clockTicks = 100

func procCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may hold spaces: the fields that follow
	// start after its closing parenthesis; utime and stime are fields 14
	// and 15 of the line, 12 and 13 after it.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: unexpected format", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: unexpected format", pid)
	}
	var ticks int64
	for _, v := range f[11:13] {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/%d/stat: %v", pid, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / clockTicks, nil
}

// procHWM is a process's peak resident set (VmHWM in /proc/<pid>/status),
// or "?".
func procHWM(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return "?"
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmHWM:"); ok {
			return strings.Join(strings.Fields(v), " ")
		}
	}
	return "?"
}

// stop sends SIGINT (graceful shutdown) and waits; later calls return the
// first one's result.
func (p *relayProc) stop() error {
	p.stopOnce.Do(func() { p.stopErr = p.interrupt() })
	return p.stopErr
}

func (p *relayProc) interrupt() error {
	_ = p.cmd.Process.Signal(os.Interrupt)
	select {
	case err := <-p.done:
		if err != nil {
			return fmt.Errorf("pgoutbox run: %v\n%s", err, p.stderr.String())
		}
		return nil
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
		return fmt.Errorf("pgoutbox run did not stop within 30s of SIGINT\n%s", p.stderr.String())
	}
}

var metricsClient = &http.Client{Timeout: 2 * time.Second}

// published reads pgoutbox_messages_published_total from /metrics; -1 while
// the endpoint is not up yet.
func (p *relayProc) published() (int64, error) {
	return p.counter("pgoutbox_messages_published_total")
}

// counter reads the sample of series (a metric name with its labels, as
// exposed) from /metrics; -1 while the endpoint is not up yet or the series
// is not exposed.
func (p *relayProc) counter(series string) (int64, error) {
	resp, err := metricsClient.Get(p.metrics)
	if err != nil {
		select {
		case err := <-p.done:
			return 0, fmt.Errorf("pgoutbox run exited: %v\n%s", err, p.stderr.String())
		default:
		}
		return -1, nil
	}
	// Read the whole body, so that the connection is kept alive and reused:
	// a new connection per poll would cost the relay an accept (and a
	// goroutine) every poll, and slow down the very thing being measured.
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return 0, err
	}
	s := bufio.NewScanner(bytes.NewReader(body))
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), series+" "); ok {
			return strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		}
	}
	return -1, nil // no counter in the exposition
}

// drainRelays starts k `pgoutbox run --publisher discard` processes on a
// prepared backlog of n and measures from their start to the finalize that
// made the last message done. It returns msg/s, the elapsed time and the
// relays' CPU time (user + system, all k processes, startup included) per
// message.
//
// The clock is the database's: the start is clock_timestamp() read right
// before the processes are started, the end max(done_at), the time of the
// transaction of the last finalize (OutboxMarkDoneMany sets done_at =
// now()), which is up to one flush (milliseconds, of a drain of seconds)
// earlier than the in-process rows' end (their Stats().Published after the
// flush returned). The relays' /metrics are read only to know when they are
// done, one relay every relayPoll: one scrape costs the relay about 1.2 ms
// of CPU (the OpenTelemetry SDK collects every instrument and the
// Prometheus exporter encodes them as text), so the former scrape every
// 2 ms, to catch the end by the published counter, took a third to a half
// of the relay's CPU on two cores and halved its drain rate (BENCHMARKS.md,
// tuning log 11).
func drainRelays(ctx context.Context, admin *pgxpool.Pool, url string, k, n int) (float64, time.Duration, time.Duration, error) {
	if _, err := relayBin.get(); err != nil { // build before the clock starts
		return 0, 0, 0, err
	}
	procs := make([]*relayProc, 0, k)
	defer func() {
		for _, p := range procs {
			_ = p.stop()
		}
	}()
	var start time.Time
	if err := admin.QueryRow(ctx, "SELECT clock_timestamp()").Scan(&start); err != nil {
		return 0, 0, 0, err
	}
	for i := 0; i < k; i++ {
		p, err := startRelay(url, "discard")
		if err != nil {
			return 0, 0, 0, err
		}
		procs = append(procs, p)
	}
	scrapes, err := awaitPublished(ctx, procs, n)
	if err != nil {
		return 0, 0, 0, err
	}
	cpu, hwm, err := stopRelays(procs)
	procs = nil
	if err != nil {
		return 0, 0, 0, err
	}
	end, err := lastDone(ctx, admin)
	if err != nil {
		return 0, 0, 0, err
	}
	elapsed := end.Sub(start)
	logf("  %d relay(s): %d scrapes of /metrics; relay CPU %s (%s per message); peak RSS %s", k, scrapes, cpu.Round(10*time.Millisecond), perMessage(cpu, n),
		strings.Join(hwm, ", "))
	return float64(n) / elapsed.Seconds(), elapsed, cpu / time.Duration(n), nil
}

// awaitPublished waits until the relays' published counters add up to n
// (ten minutes at most) and returns how many scrapes that took. It reads
// one relay's /metrics per relayPoll, in turn: k relays are scraped as
// often in all as one is. Scraping every relay at every poll cost four
// relays four times the scrape CPU of one (88 scrapes against 19 in a
// drain, about 105 ms against 23 ms of relay CPU: 0.8 µs a message of the
// difference between the rows). The end is noticed up to k polls late;
// the callers' rates end at the last finalize (max(done_at)), not when it
// was noticed.
func awaitPublished(ctx context.Context, procs []*relayProc, n int) (int, error) {
	deadline := time.Now().Add(10 * time.Minute)
	scrapes := 0
	seen := make([]int64, len(procs))
	for {
		i := scrapes % len(procs)
		v, err := procs[i].published()
		if err != nil {
			return scrapes, err
		}
		seen[i] = max(v, 0)
		scrapes++
		var total int64
		for _, v := range seen {
			total += v
		}
		if total >= int64(n) {
			return scrapes, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return scrapes, fmt.Errorf("relays: only %d of %d published before the deadline", total, n)
		}
		time.Sleep(relayPoll)
	}
}

// stopRelays reads each relay's CPU time (user + system, summed) and peak
// RSS, then stops them all; a relay that already exited is an error.
func stopRelays(procs []*relayProc) (time.Duration, []string, error) {
	var cpu time.Duration
	var hwm []string
	for _, p := range procs {
		select {
		case err := <-p.done:
			p.done <- err // for the stop below
			return 0, nil, errors.Join(fmt.Errorf("a relay exited before the end of the drain: %v\n%s", err, p.stderr.String()), stopAll(procs))
		default:
		}
		c, err := p.cpu()
		if err != nil {
			return 0, nil, errors.Join(err, stopAll(procs))
		}
		cpu += c
		hwm = append(hwm, procHWM(p.cmd.Process.Pid))
	}
	return cpu, hwm, stopAll(procs)
}

func stopAll(procs []*relayProc) error {
	var errs []error
	for _, p := range procs {
		errs = append(errs, p.stop())
	}
	return errors.Join(errs...)
}

// lastDone is when the last message was finalized done (the database clock).
func lastDone(ctx context.Context, pool *pgxpool.Pool) (time.Time, error) {
	var end time.Time
	err := pool.QueryRow(ctx, "SELECT max(done_at) FROM outbox").Scan(&end)
	return end, err
}

// relayPoll is how often drainRelays reads a relay's published counter (one
// relay a poll, in turn).
const relayPoll = 200 * time.Millisecond

func perMessage(cpu time.Duration, n int) string {
	return fmt.Sprintf("%.1f µs", float64(cpu.Nanoseconds())/float64(n)/1e3)
}

func (r *results) addDefaults(sys string, rate float64, cpu time.Duration) {
	switch sys {
	case "zero":
		r.DrainZero = append(r.DrainZero, rate)
		r.DrainZeroCPU = append(r.DrainZeroCPU, cpu)
	case "relay":
		r.DrainRelay = append(r.DrainRelay, rate)
		r.DrainRelayCPU = append(r.DrainRelayCPU, cpu)
	case "relay4":
		r.DrainRelay4 = append(r.DrainRelay4, rate)
		r.DrainRelay4CPU = append(r.DrainRelay4CPU, cpu)
	}
}

// drainDefaultsRound is one round of a defaults row: a fresh backlog of n,
// settled like every other round, drained by the zero Config in process or
// by one or four relay processes. It returns msg/s and the CPU time per
// message of the process(es) that drained: the relays', or this process's
// during the in-process drain (the dispatcher and the Stats() poll).
func drainDefaultsRound(ctx context.Context, e *env, sys string, round, n int, settleAll func() error) (float64, time.Duration, error) {
	e.res.ZeroConfig = zeroSetupString()
	e.res.RelayConfig = "`pgoutbox run " + relayFlags + "` (every dispatcher setting at its default, pool at pgxpool's default size)"
	if err := resetOutbox(ctx, e.outbox); err != nil {
		return 0, 0, err
	}
	if err := enqueueOutbox(ctx, e.outbox, n, false, 1000); err != nil {
		return 0, 0, err
	}
	if err := settleAll(); err != nil {
		return 0, 0, err
	}
	var (
		rate    float64
		elapsed time.Duration
		cpu     time.Duration
		err     error
	)
	switch sys {
	case "zero":
		before := selfCPU()
		rate, elapsed, err = drainOutbox(ctx, e.outboxURL, zeroSetup(), n, nil)
		cpu = (selfCPU() - before) / time.Duration(n)
	case "relay":
		rate, elapsed, cpu, err = drainRelays(ctx, e.outbox, e.outboxURL, 1, n)
	case "relay4":
		rate, elapsed, cpu, err = drainRelays(ctx, e.outbox, e.outboxURL, 4, n)
	}
	if err != nil {
		return 0, 0, fmt.Errorf("%s: %w", sys, err)
	}
	done, err := countDone(ctx, e.outbox)
	if err != nil {
		return 0, 0, err
	}
	if done != int64(n) {
		return 0, 0, fmt.Errorf("%s round %d: %d rows done, want %d", sys, round, done, n)
	}
	logf("round %d %-8s %d messages in %s = %.0f msg/s, %s CPU per message (load average %s)", round, sys+":", n, elapsed.Round(time.Millisecond), rate,
		perMessage(cpu*time.Duration(n), n), loadAverage())
	return rate, cpu, nil
}

// selfCPU is this process's CPU time so far (user + system).
func selfCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// loadAverage is the first field of /proc/loadavg ("?" where there is none).
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	if f := strings.Fields(string(b)); len(f) > 0 {
		return f[0]
	}
	return "?"
}

// runDefaults is the item "defaults": the defaults rows of item 1 and River,
// in the same rotation and with the same preparation as item 1 (which
// measures them too), without the tuned pgoutbox and the SQL ceiling: for
// measuring the defaults alone (-only defaults).
func runDefaults(ctx context.Context, e *env) error {
	n := 100_000
	e.res.DrainN = n
	e.res.RiverConfig = riverSetupString()
	rp, err := newPool(ctx, e.riverURL, 4)
	if err != nil {
		return err
	}
	defer rp.Close()
	settleAll := func() error {
		if _, err := rp.Exec(ctx, "VACUUM ANALYZE river_job"); err != nil {
			return err
		}
		return settle(ctx, e.outbox, "outbox")
	}
	systems := []string{"river", "zero", "relay", "relay4"}
	for round := -1; round < e.o.rounds; round++ {
		k := (round + 1) % len(systems)
		for _, sys := range append(append([]string(nil), systems[k:]...), systems[:k]...) {
			if sys == "river" {
				rate, elapsed, err := drainRiver(ctx, rp, n, settleAll)
				if err != nil {
					return err
				}
				logf("round %d River:    %d jobs in %s = %.0f jobs/s (load average %s)", round, n, elapsed.Round(time.Millisecond), rate, loadAverage())
				if round >= 0 {
					e.res.DrainRiver = append(e.res.DrainRiver, rate)
				}
				continue
			}
			rate, cpu, err := drainDefaultsRound(ctx, e, sys, round, n, settleAll)
			if err != nil {
				return err
			}
			if round >= 0 {
				e.res.addDefaults(sys, rate, cpu)
			}
		}
	}
	river := median(e.res.DrainRiver)
	logf("defaults: River %.0f jobs/s; zero Config %.0f msg/s (%.2fx River, %s CPU per message), pgoutbox run %.0f msg/s (%.2fx River, %s), 4 x pgoutbox run %.0f msg/s (%.2fx one, %s)",
		river, median(e.res.DrainZero), median(e.res.DrainZero)/river, medianCPU(e.res.DrainZeroCPU),
		median(e.res.DrainRelay), median(e.res.DrainRelay)/river, medianCPU(e.res.DrainRelayCPU),
		median(e.res.DrainRelay4), median(e.res.DrainRelay4)/median(e.res.DrainRelay), medianCPU(e.res.DrainRelay4CPU))
	return nil
}

// medianCPU formats the median of per-message CPU times.
func medianCPU(xs []time.Duration) string {
	if len(xs) == 0 {
		return "-"
	}
	f := make([]float64, len(xs))
	for i, x := range xs {
		f[i] = float64(x)
	}
	return perMessage(time.Duration(median(f)), 1)
}

// cleanup removes the built relay binary.
func (r *relayBinary) cleanup() {
	if r.path != "" {
		_ = os.RemoveAll(filepath.Dir(r.path))
	}
}
