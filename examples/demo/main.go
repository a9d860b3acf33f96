// Command demo shows pgoutbox end to end on a throwaway PostgreSQL: producers
// write 10,000 events inside business transactions, four relay processes
// deliver them to an HTTP receiver that sometimes fails, one relay is killed
// mid-flight (SIGKILL) and another is frozen longer than its lease (SIGSTOP,
// like a long GC pause or a VM stall). Other relays take over their leases;
// the frozen relay's late writes are fenced off. A report follows.
//
//	make demo                      # starts its own PostgreSQL from local binaries
//	DATABASE_URL=postgres://... make demo   # uses a fresh database on that server
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/pgoutbox/console"
	"github.com/pgoutbox/pgoutbox/dispatcher"
	"github.com/pgoutbox/pgoutbox/internal/pgcluster"
	"github.com/pgoutbox/pgoutbox/migrations"
	"github.com/pgoutbox/pgoutbox/publisher/webhook"
)

func main() {
	var (
		relayMode = flag.Bool("relay", false, "internal: run as one relay process")
		dbURL     = flag.String("db", "", "internal: database URL for -relay")
		target    = flag.String("target", "", "internal: receiver URL for -relay")
		owner     = flag.String("owner", "", "internal: lease owner for -relay")
		events    = flag.Int("events", 10000, "events to enqueue")
		relays    = flag.Int("relays", 4, "relay processes")
		lease     = flag.Duration("lease", 2*time.Second, "lease of each relay")
		uiAddr    = flag.String("ui", "", "serve the web console on this loopback address while the demo runs and after its report, until Ctrl-C (such as 127.0.0.1:8080)")
	)
	flag.Parse()
	if *relayMode {
		os.Exit(runRelay(*dbURL, *target, *owner, *lease))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *events, *relays, *lease, *uiAddr); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

// ---- relay process ----------------------------------------------------------

func runRelay(dbURL, target, owner string, lease time.Duration) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer pool.Close()
	pub, err := webhook.New(webhook.Config{URL: target, Secret: "demo-secret", Timeout: lease / 2})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	d, err := dispatcher.New(pool, pub, dispatcher.Config{
		Owner: owner, Batch: 50, Concurrency: 8, Lease: lease, PublishTimeout: lease / 2,
		MaxAttempts: 5, BackoffBase: 50 * time.Millisecond, BackoffCap: time.Second,
		PollInterval: 200 * time.Millisecond, ShutdownTimeout: 2 * time.Second,
		// Dead messages and lost leases are expected here; the report counts them.
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})),
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	_ = d.Run(ctx)
	_ = json.NewEncoder(os.Stdout).Encode(d.Stats())
	return 0
}

// ---- receiver ---------------------------------------------------------------

// receiver is the downstream system: it deduplicates by Idempotency-Key, as
// every consumer of an outbox must, and fails some requests on purpose.
type receiver struct {
	mu         sync.Mutex
	first      map[string]time.Duration // id -> latency of the first delivery
	count      map[string]int
	attempts   map[string]int
	answers    map[int]int
	deliveries int
}

func newReceiver() *receiver {
	return &receiver{first: map[string]time.Duration{}, count: map[string]int{}, attempts: map[string]int{}, answers: map[int]int{}}
}

// fate decides, per message, how the receiver answers its first attempt:
// 3% 503 (retryable), 1% 425 Too Early (business defer), 0.5% 422 (permanent,
// for unordered events only: a dead head would block its ordered aggregate
// until an operator runs `pgoutbox dead skip`, which this demo does not do).
func fate(id string, ordered bool) int {
	h := fnv.New32a()
	h.Write([]byte(id))
	switch v := h.Sum32() % 1000; {
	case v < 30:
		return http.StatusServiceUnavailable
	case v < 40:
		return http.StatusTooEarly
	case v < 45 && !ordered:
		return http.StatusUnprocessableEntity
	}
	return http.StatusOK
}

func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	id := req.Header.Get("Idempotency-Key")
	if err := webhook.Verify("demo-secret", req.Header, readAll(req), time.Now(), 0); err != nil {
		http.Error(w, "bad signature", http.StatusUnauthorized)
		return
	}
	created, _ := time.Parse(time.RFC3339Nano, req.Header.Get("ce-time"))
	r.mu.Lock()
	r.attempts[id]++
	status := http.StatusOK
	var order int
	fmt.Sscanf(req.Header.Get("ce-subject"), "order-%d", &order)
	if f := fate(id, order%2 == 0); f == http.StatusUnprocessableEntity || (f != http.StatusOK && r.attempts[id] == 1) {
		status = f
	}
	r.answers[status]++
	if status == http.StatusOK {
		r.deliveries++
		r.count[id]++
		if r.count[id] == 1 {
			r.first[id] = time.Since(created)
		}
	}
	r.mu.Unlock()
	if status == http.StatusTooEarly {
		w.Header().Set("Retry-After", "1")
	}
	w.WriteHeader(status)
}

func readAll(req *http.Request) []byte {
	b, _ := io.ReadAll(io.LimitReader(req.Body, 1<<20))
	return b
}

// ---- orchestration ----------------------------------------------------------

type relay struct {
	owner string
	cmd   *exec.Cmd
	out   *strings.Builder
	stats *dispatcher.Stats
	fate  string
}

func run(ctx context.Context, events, relays int, lease time.Duration, uiAddr string) error {
	dbURL, cleanup, err := database(ctx)
	if err != nil {
		return err
	}
	defer cleanup()
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		return err
	}
	defer pool.Close()
	m, err := migrations.FromPool(pool)
	if err != nil {
		return err
	}
	if _, err := m.Up(ctx); err != nil {
		return err
	}
	m.Close()
	if _, err := pool.Exec(ctx, `CREATE TABLE demo_orders (id bigint PRIMARY KEY, total_cents int NOT NULL)`); err != nil {
		return err
	}

	rcv := newReceiver()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: rcv}
	go srv.Serve(ln) //nolint:errcheck
	defer srv.Close()
	target := "http://" + ln.Addr().String() + "/events"

	fmt.Printf("pgoutbox demo: %d events, %d relay processes, lease %s\n", events, relays, lease)
	if uiAddr != "" {
		stopUI, err := serveConsole(pool, uiAddr)
		if err != nil {
			return err
		}
		defer stopUI(ctx)
	}
	var rs []*relay
	for i := 1; i <= relays; i++ {
		r := &relay{owner: fmt.Sprintf("relay-%d", i), out: &strings.Builder{}}
		r.cmd = exec.Command(os.Args[0], "-relay", "-db", dbURL, "-target", target, "-owner", r.owner, "-lease", lease.String())
		r.cmd.Stdout = r.out
		r.cmd.Stderr = os.Stderr
		if err := r.cmd.Start(); err != nil {
			return err
		}
		rs = append(rs, r)
	}
	defer func() {
		for _, r := range rs {
			if r.cmd.ProcessState == nil {
				_ = r.cmd.Process.Kill()
				_ = r.cmd.Wait()
			}
		}
	}()

	start := time.Now()
	produced := make(chan error, 1)
	go func() { produced <- produce(ctx, pool, events) }()

	// Faults: kill relay-2 once a third is delivered; freeze relay-3 for
	// longer than its lease once half is delivered.
	var killedHeld, frozenHeld []int64
	killed, frozen := false, false
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	producerDone := false
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-produced:
			if err != nil {
				return fmt.Errorf("producers: %w", err)
			}
			producerDone = true
		case <-tick.C:
		}
		var pending, processing, done, dead int
		err := pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE status = 'pending'), count(*) FILTER (WHERE status = 'processing'),
			count(*) FILTER (WHERE status = 'done'), count(*) FILTER (WHERE status = 'dead') FROM outbox`).Scan(&pending, &processing, &done, &dead)
		if err != nil {
			return err
		}
		fmt.Printf("\r  %5.1fs  done %5d  pending %5d  processing %4d  dead %3d  relays up %d/%d   ",
			time.Since(start).Seconds(), done, pending, processing, dead, relaysUp(rs), len(rs))
		if !killed && relays >= 2 && done > events/3 {
			// Freeze first so the set of leases it holds cannot change, then kill.
			_ = rs[1].cmd.Process.Signal(syscall.SIGSTOP)
			killedHeld = heldBy(ctx, pool, rs[1].owner)
			if len(killedHeld) == 0 {
				_ = rs[1].cmd.Process.Signal(syscall.SIGCONT)
			} else {
				_ = rs[1].cmd.Process.Signal(syscall.SIGKILL)
				_ = rs[1].cmd.Wait()
				rs[1].fate = fmt.Sprintf("SIGKILL at %.1fs holding %d leases", time.Since(start).Seconds(), len(killedHeld))
				killed = true
				fmt.Printf("\n  ! %s killed (SIGKILL) holding %d leases\n", rs[1].owner, len(killedHeld))
			}
		}
		if !frozen && relays >= 3 && done > events/2 {
			_ = rs[2].cmd.Process.Signal(syscall.SIGSTOP)
			frozenHeld = heldBy(ctx, pool, rs[2].owner)
			if len(frozenHeld) == 0 {
				_ = rs[2].cmd.Process.Signal(syscall.SIGCONT)
			} else {
				frozen = true
				rs[2].fate = fmt.Sprintf("SIGSTOP for %s (lease %s) holding %d leases, then SIGCONT", lease+lease/2, lease, len(frozenHeld))
				fmt.Printf("\n  ! %s frozen (SIGSTOP) for %s holding %d leases\n", rs[2].owner, lease+lease/2, len(frozenHeld))
				go func(p *os.Process) {
					time.Sleep(lease + lease/2)
					_ = p.Signal(syscall.SIGCONT)
				}(rs[2].cmd.Process)
			}
		}
		if producerDone && pending == 0 && processing == 0 && done+dead == events {
			break
		}
	}
	elapsed := time.Since(start)
	fmt.Println()
	for _, r := range rs {
		if r.cmd.ProcessState != nil {
			continue
		}
		_ = r.cmd.Process.Signal(syscall.SIGTERM)
		_ = r.cmd.Wait()
		var st dispatcher.Stats
		if json.Unmarshal([]byte(r.out.String()), &st) == nil {
			r.stats = &st
		}
	}
	return report(ctx, pool, rcv, rs, events, elapsed, killedHeld, frozenHeld)
}

func relaysUp(rs []*relay) int {
	n := 0
	for _, r := range rs {
		if r.cmd.ProcessState == nil {
			n++
		}
	}
	return n
}

func heldBy(ctx context.Context, pool *pgxpool.Pool, owner string) []int64 {
	// Each claim writes lease_owner = owner + "/" + run id + "." + claim number.
	rows, err := pool.Query(ctx, `SELECT id FROM outbox WHERE status = 'processing' AND starts_with(lease_owner, $1 || '/')`, owner)
	if err != nil {
		return nil
	}
	ids, _ := pgx.CollectRows(rows, pgx.RowTo[int64])
	return ids
}

// produce writes events in business transactions: each transaction inserts
// an order row and its events; one in twenty rolls back, and its events must
// never be delivered.
func produce(ctx context.Context, pool *pgxpool.Pool, events int) error {
	const perTx = 10
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	txs := make(chan int, 64)
	go func() {
		for i := 0; i < events/perTx; i++ {
			txs <- i
		}
		close(txs)
	}()
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range txs {
				if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
					if _, err := tx.Exec(ctx, `INSERT INTO demo_orders VALUES ($1, $2)`, i, 100*i); err != nil {
						return err
					}
					for e := 0; e < perTx; e++ {
						_, err := dispatcher.Enqueue(ctx, tx, dispatcher.Event{
							AggregateType: "order", AggregateID: fmt.Sprintf("order-%d", i),
							EventType: "OrderLineAdded", Payload: []byte(fmt.Sprintf(`{"order":%d,"line":%d}`, i, e)),
							Ordered: i%2 == 0,
						})
						if err != nil {
							return err
						}
					}
					return nil
				}); err != nil {
					errs <- err
					return
				}
				// A rolled-back transaction: its events never exist.
				if i%20 == 0 {
					tx, err := pool.Begin(ctx)
					if err != nil {
						errs <- err
						return
					}
					_, _ = dispatcher.Enqueue(ctx, tx, dispatcher.Event{AggregateType: "order", AggregateID: "rolled-back",
						EventType: "OrderCancelled", Payload: []byte(`{}`)})
					_ = tx.Rollback(ctx)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

func report(ctx context.Context, pool *pgxpool.Pool, rcv *receiver, rs []*relay, events int, elapsed time.Duration, killedHeld, frozenHeld []int64) error {
	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	var total dispatcher.Stats
	for _, r := range rs {
		if r.stats == nil {
			continue
		}
		total.Published += r.stats.Published
		total.Retried += r.stats.Retried
		total.Deferred += r.stats.Deferred
		total.Dead += r.stats.Dead
		total.LeaseLost += r.stats.LeaseLost
		total.Recovered += r.stats.Recovered
	}
	var done, dead, takenOver int
	if err := pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE status = 'done'), count(*) FILTER (WHERE status = 'dead') FROM outbox`).Scan(&done, &dead); err != nil {
		return err
	}
	held := append(append([]int64{}, killedHeld...), frozenHeld...)
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM outbox WHERE id = ANY($1) AND lease_version >= 2`, held).Scan(&takenOver); err != nil {
		return err
	}
	dups := 0
	for _, c := range rcv.count {
		if c > 1 {
			dups += c - 1
		}
	}
	var lat []time.Duration
	for _, d := range rcv.first {
		lat = append(lat, d)
	}
	slices.Sort(lat)
	pct := func(p float64) time.Duration {
		if len(lat) == 0 {
			return 0
		}
		return lat[min(len(lat)-1, int(p*float64(len(lat))))]
	}
	rolledBack := rcv.attempts["rolled-back"]
	fmt.Printf("\nReport (%s)\n", elapsed.Round(time.Millisecond))
	fmt.Printf("  events committed            %6d  (rolled-back transactions delivered: %d)\n", events, rolledBack)
	fmt.Printf("  done / dead in the table    %6d / %d\n", done, dead)
	fmt.Printf("  distinct ids delivered      %6d\n", len(rcv.first))
	fmt.Printf("  duplicate deliveries        %6d  (takeovers and crash windows; the receiver dedups by Idempotency-Key)\n", dups)
	fmt.Printf("  retried (503)               %6d\n", total.Retried)
	fmt.Printf("  deferred (425, refunded)    %6d\n", total.Deferred)
	fmt.Printf("  dead (422 permanent)        %6d\n", dead)
	fmt.Printf("  recovered expired leases    %6d  (published alone)\n", total.Recovered)
	fmt.Printf("  leases taken over           %6d of %d held by the killed and frozen relays\n", takenOver, len(held))
	fmt.Printf("  fenced writes rejected      %6d  (stale owners' finalizes that changed nothing)\n", total.LeaseLost)
	fmt.Printf("  end-to-end latency          p50 %s  p99 %s  (created_at -> first delivery)\n", pct(0.50).Round(time.Microsecond), pct(0.99).Round(time.Microsecond))
	fmt.Printf("  throughput                  %6.0f events/s\n", float64(events)/elapsed.Seconds())
	fmt.Println("  relays:")
	for _, r := range rs {
		line := "no stats (killed)"
		if r.stats != nil {
			line = fmt.Sprintf("graceful shutdown, published %d, lease lost %d", r.stats.Published, r.stats.LeaseLost)
		}
		if r.fate != "" {
			line = r.fate + "; " + line
		}
		fmt.Printf("    %s: %s\n", r.owner, line)
	}
	var problems []string
	if len(rcv.first) != done {
		problems = append(problems, fmt.Sprintf("done rows (%d) != distinct ids delivered (%d)", done, len(rcv.first)))
	}
	if done+dead != events {
		problems = append(problems, fmt.Sprintf("lost: %d", events-done-dead))
	}
	if rolledBack != 0 {
		problems = append(problems, "a rolled-back event was delivered")
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "; "))
	}
	fmt.Println("  nothing lost; every committed event is done or dead.")
	return nil
}

// database returns a fresh database: on DATABASE_URL's server when set,
// otherwise on a throwaway cluster started from the local binaries.
func database(ctx context.Context) (string, func(), error) {
	if base := os.Getenv("DATABASE_URL"); base != "" {
		name := "pgoutbox_demo_" + randHex()
		conn, err := pgx.Connect(ctx, base)
		if err != nil {
			return "", nil, fmt.Errorf("connect DATABASE_URL: %w", err)
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
			return "", nil, err
		}
		u, err := url.Parse(base)
		if err != nil {
			return "", nil, err
		}
		u.Path = "/" + name
		return u.String(), func() {
			c, err := pgx.Connect(context.Background(), base)
			if err == nil {
				_, _ = c.Exec(context.Background(), "DROP DATABASE "+name+" WITH (FORCE)")
				c.Close(context.Background())
			}
		}, nil
	}
	fmt.Println("no DATABASE_URL: starting a throwaway PostgreSQL from the local binaries")
	c, err := pgcluster.Start(ctx, pgcluster.Options{})
	if err != nil {
		return "", nil, err
	}
	return c.URL(), func() { _ = c.Stop() }, nil
}

func randHex() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// ---- web console (-ui) ------------------------------------------------------

// serveConsole serves the web console (package console, as `pgoutbox ui`
// does) on addr, a loopback address: the demo's database has no
// authentication in front of it. The returned func waits for Ctrl-C after
// the report, then stops the server.
func serveConsole(pool *pgxpool.Pool, addr string) (func(context.Context), error) {
	host, _, err := net.SplitHostPort(addr)
	if ip := net.ParseIP(host); err != nil || (host != "localhost" && (ip == nil || !ip.IsLoopback())) {
		return nil, fmt.Errorf("-ui %q: want a loopback host:port such as 127.0.0.1:8080", addr)
	}
	h, err := console.New(pool, console.Config{Refresh: 2 * time.Second,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln) //nolint:errcheck
	fmt.Printf("web console: http://%s/ (watch the relays work; it reloads every 2s)\n", ln.Addr())
	return func(ctx context.Context) {
		if ctx.Err() == nil {
			fmt.Printf("web console still on http://%s/ : Ctrl-C stops it\n", ln.Addr())
			<-ctx.Done()
		}
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}, nil
}
