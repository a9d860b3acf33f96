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
	"time"

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
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// startRelay starts `pgoutbox run` with publisher and relayFlags' other flags.
func startRelay(url, publisher string) (*relayProc, error) {
	bin, err := relayBin.get()
	if err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	p := &relayProc{metrics: fmt.Sprintf("http://127.0.0.1:%d/metrics", port), stderr: &strings.Builder{}, done: make(chan error, 1)}
	p.cmd = exec.Command(bin, "run", "--publisher", publisher, "--metrics-addr", fmt.Sprintf("127.0.0.1:%d", port), "--log-level", "warn")
	p.cmd.Env = append(os.Environ(), "DATABASE_URL="+url)
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

// stop sends SIGINT (graceful shutdown) and waits.
func (p *relayProc) stop() error {
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
		if v, ok := strings.CutPrefix(s.Text(), "pgoutbox_messages_published_total "); ok {
			return strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		}
	}
	return -1, nil // no counter in the exposition
}

// drainRelays starts k `pgoutbox run --publisher discard` processes on a
// prepared backlog of n and measures from their start to the moment their
// published counters add up to n (each poll reads every relay's /metrics).
func drainRelays(ctx context.Context, url string, k, n int) (float64, time.Duration, error) {
	if _, err := relayBin.get(); err != nil { // build before the clock starts
		return 0, 0, err
	}
	procs := make([]*relayProc, 0, k)
	defer func() {
		for _, p := range procs {
			_ = p.stop()
		}
	}()
	start := time.Now()
	for i := 0; i < k; i++ {
		p, err := startRelay(url, "discard")
		if err != nil {
			return 0, 0, err
		}
		procs = append(procs, p)
	}
	deadline := start.Add(10 * time.Minute)
	for {
		var total int64
		for _, p := range procs {
			v, err := p.published()
			if err != nil {
				return 0, 0, err
			}
			total += max(v, 0)
		}
		if total >= int64(n) {
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return 0, 0, fmt.Errorf("relays: only %d of %d published before the deadline", total, n)
		}
		time.Sleep(2 * time.Millisecond)
	}
	elapsed := time.Since(start)
	var errs []error
	for _, p := range procs {
		errs = append(errs, p.stop())
	}
	procs = nil
	if err := errors.Join(errs...); err != nil {
		return 0, 0, err
	}
	return float64(n) / elapsed.Seconds(), elapsed, nil
}

func (r *results) addDefaults(sys string, rate float64) {
	switch sys {
	case "zero":
		r.DrainZero = append(r.DrainZero, rate)
	case "relay":
		r.DrainRelay = append(r.DrainRelay, rate)
	case "relay4":
		r.DrainRelay4 = append(r.DrainRelay4, rate)
	}
}

// drainDefaultsRound is one round of a defaults row: a fresh backlog of n,
// settled like every other round, drained by the zero Config in process or
// by one or four relay processes.
func drainDefaultsRound(ctx context.Context, e *env, sys string, round, n int, settleAll func() error) (float64, error) {
	e.res.ZeroConfig = zeroSetupString()
	e.res.RelayConfig = "`pgoutbox run " + relayFlags + "` (every dispatcher setting at its default, pool at pgxpool's default size)"
	if err := resetOutbox(ctx, e.outbox); err != nil {
		return 0, err
	}
	if err := enqueueOutbox(ctx, e.outbox, n, false, 1000); err != nil {
		return 0, err
	}
	if err := settleAll(); err != nil {
		return 0, err
	}
	var (
		rate    float64
		elapsed time.Duration
		err     error
	)
	switch sys {
	case "zero":
		rate, elapsed, err = drainOutbox(ctx, e.outboxURL, zeroSetup(), n, nil)
	case "relay":
		rate, elapsed, err = drainRelays(ctx, e.outboxURL, 1, n)
	case "relay4":
		rate, elapsed, err = drainRelays(ctx, e.outboxURL, 4, n)
	}
	if err != nil {
		return 0, fmt.Errorf("%s: %w", sys, err)
	}
	done, err := countDone(ctx, e.outbox)
	if err != nil {
		return 0, err
	}
	if done != int64(n) {
		return 0, fmt.Errorf("%s round %d: %d rows done, want %d", sys, round, done, n)
	}
	logf("round %d %-8s %d messages in %s = %.0f msg/s", round, sys+":", n, elapsed.Round(time.Millisecond), rate)
	return rate, nil
}

// cleanup removes the built relay binary.
func (r *relayBinary) cleanup() {
	if r.path != "" {
		_ = os.RemoveAll(filepath.Dir(r.path))
	}
}
