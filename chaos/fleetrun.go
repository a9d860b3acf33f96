package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/pgoutbox/dispatcher"
	"github.com/pgoutbox/pgoutbox/internal/pgcluster"
)

// The fleet variant (-fleet N): N databases on one server, served by
// -relays `pgoutbox run` processes that find them by discovery
// (--discover-pattern), each with another wake-up (listen, stats, poll in
// turn). Producers commit events into every database (ordered aggregates,
// unordered events, rolled-back transactions) while the suite SIGKILLs
// relays, terminates every server connection of one database again and
// again, and drops one database and creates it again (migrated anew). Then
// it waits for the drain and checks: 0 lost, 0 order violations, 0
// rolled-back events delivered, a source of its own per database, and
// reports each database's drain time.

// fleetDBName is the i-th database of the fleet run.
func fleetDBName(i int) string { return fmt.Sprintf("chaos_fleet_%02d", i) }

// fleetRun is one fleet run's state.
type fleetRun struct {
	o       options
	cl      *pgcluster.Cluster
	bin     string
	dbs     []string
	dropped string // the database dropped and created again
	cut     string // the database whose connections are terminated

	mu         sync.Mutex
	inc        map[string]int // current incarnation per database
	gone       map[string]int // incarnations dropped
	ready      map[string]bool
	committed  []fleetEvent
	rolledBack []string
	uncertain  []fleetEvent
	arrivals   []fleetArrival
	relayKills int
	cuts       int
}

func runFleet(ctx context.Context, o options) (*fleetResult, error) {
	began := time.Now()
	say := func(format string, args ...any) {
		fmt.Printf("  %6.1fs  %s\n", time.Since(began).Seconds(), fmt.Sprintf(format, args...))
	}
	root, err := moduleRoot()
	if err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp("", "pgoutbox-chaos-fleet-")
	if err != nil {
		return nil, err
	}
	defer func() {
		if o.keep {
			fmt.Printf("relay logs kept in %s\n", tmp)
		} else {
			os.RemoveAll(tmp)
		}
	}()
	bin, err := relayBinary(ctx, o, root, tmp, say) // run.go
	if err != nil {
		return nil, err
	}
	// Up to three connections per relay and database, the producers', the
	// suite's.
	conns := o.relays*o.fleet*3 + o.fleet*2 + 50
	say("starting a throwaway PostgreSQL (max_connections %d)", conns)
	cl, err := pgcluster.Start(ctx, pgcluster.Options{Settings: map[string]string{
		"fsync": "off", "max_connections": fmt.Sprint(conns),
	}})
	if err != nil {
		return nil, err
	}
	defer cl.Stop() //nolint:errcheck
	f := &fleetRun{o: o, cl: cl, bin: bin, inc: map[string]int{}, gone: map[string]int{}, ready: map[string]bool{}}
	for i := 1; i <= o.fleet; i++ {
		f.dbs = append(f.dbs, fleetDBName(i))
	}
	f.cut, f.dropped = f.dbs[min(2, len(f.dbs)-1)], f.dbs[min(6, len(f.dbs)-1)]
	say("creating and migrating %d databases", o.fleet)
	for _, name := range f.dbs {
		if err := f.create(ctx, name); err != nil {
			return nil, err
		}
	}

	// The receiver: 503 on the first arrival of one event in twenty (the
	// retry path), 200 otherwise.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	seen := map[string]int{}
	var seenMu sync.Mutex
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var p struct {
			Key string `json:"key"`
		}
		_ = json.Unmarshal(body, &p)
		seenMu.Lock()
		seen[p.Key]++
		n := seen[p.Key]
		seenMu.Unlock()
		h := fnv.New32a()
		h.Write([]byte(p.Key))
		ok := !(h.Sum32()%20 == 0 && n == 1)
		f.mu.Lock()
		f.arrivals = append(f.arrivals, fleetArrival{Key: p.Key, Source: r.Header.Get("ce-source"), At: time.Now(), Accepted: ok})
		f.mu.Unlock()
		if !ok {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusOK)
	})}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()

	wakes := []string{"listen", "stats", "poll"}
	relays, err := newFleet(o.relays, bin, tmp, os.Environ(), func(slot, owner string) []string {
		var n int
		fmt.Sscanf(slot, "relay-%d", &n)
		return []string{"run", "--publisher", "http", "--http-url", "http://" + ln.Addr().String() + "/" + slot,
			"--discover-databases", cl.URL(), "--discover-pattern", `chaos\_fleet\_%`, "--discover-interval", "500ms",
			"--ce-source", "urn:chaos:{{.Database}}", "--owner", owner, "--wake", wakes[(n-1)%len(wakes)],
			"--poll-max", "500ms", "--lease", o.lease.String(), "--publish-timeout", o.publishTimeout.String(),
			"--batch", fmt.Sprint(o.batch), "--concurrency", fmt.Sprint(o.concurrency), "--fleet-concurrency", "32",
			"--max-attempts", "20", "--log-format", "json", "--log-level", "warn"}
	})
	if err != nil {
		return nil, err
	}
	say("starting %d relays over %d databases (wake-ups %s in turn)", o.relays, o.fleet, strings.Join(wakes, ", "))
	relays.start()
	defer relays.stop(30 * time.Second)

	pctx, stopProducers := context.WithTimeout(ctx, o.duration)
	defer stopProducers()
	var wg sync.WaitGroup
	perDB := max(o.events/o.fleet, 1)
	for _, name := range f.dbs {
		wg.Add(1)
		go func() { defer wg.Done(); f.produce(pctx, name, perDB) }()
	}
	say("producing about %d events into each database for %s; faults: relay kills every %s, %s's connections terminated every 5s, %s dropped and created again at a third",
		perDB, o.duration, o.faultEvery, f.cut, f.dropped)
	wg.Add(1)
	go func() { defer wg.Done(); f.faults(pctx, relays) }()
	wg.Wait()
	end := time.Now()
	say("producers stopped: %d events committed, %d rolled back, %d uncertain; waiting for the drain", len(f.committed), len(f.rolledBack), len(f.uncertain))

	deadline := time.Now().Add(o.drainTimeout)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		if r := f.check(end); r.Lost == 0 {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	relays.stop(30 * time.Second)
	r := f.check(end)
	say("done")
	f.report(r, relays)
	return r, nil
}

// create creates database name and migrates it with the binary.
func (f *fleetRun) create(ctx context.Context, name string) error {
	conn, err := pgx.Connect(ctx, f.cl.URL())
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		return err
	}
	if out, err := exec.CommandContext(ctx, f.bin, "migrate", "up", "--database-url", f.cl.DatabaseURL(name)).CombinedOutput(); err != nil {
		return fmt.Errorf("migrate %s: %w\n%s", name, err, out)
	}
	f.mu.Lock()
	f.inc[name]++
	f.ready[name] = true
	f.mu.Unlock()
	return nil
}

// produce commits transactions of 1-4 events into database name until ctx
// ends: unordered events, and ordered events of a few aggregates written one
// transaction at a time (their commit order is the order of K); one
// transaction in twenty rolls back.
func (f *fleetRun) produce(ctx context.Context, name string, target int) {
	h := fnv.New64a()
	h.Write([]byte(name))
	rng := rand.New(rand.NewPCG(f.o.seed, h.Sum64()))
	pace := f.o.duration / time.Duration(target/2+1)
	var pool *pgxpool.Pool
	poolInc := 0
	defer func() {
		if pool != nil {
			pool.Close()
		}
	}()
	k := map[string]int{}
	for tx := 0; ctx.Err() == nil; tx++ {
		time.Sleep(time.Duration(rng.Int64N(int64(2 * pace))))
		f.mu.Lock()
		inc, ready := f.inc[name], f.ready[name]
		f.mu.Unlock()
		if !ready {
			continue
		}
		if pool == nil || poolInc != inc {
			if pool != nil {
				pool.Close()
			}
			cfg, err := pgxpool.ParseConfig(f.cl.DatabaseURL(name))
			if err != nil {
				return
			}
			cfg.MaxConns = 2
			if pool, err = pgxpool.NewWithConfig(ctx, cfg); err != nil {
				pool = nil
				continue
			}
			poolInc = inc
			k = map[string]int{} // a new incarnation: its aggregates start over
		}
		n := 1 + rng.IntN(4)
		rollback := rng.IntN(20) == 0
		var evs []fleetEvent
		err := func() error {
			t, err := pool.Begin(ctx)
			if err != nil {
				return err
			}
			defer t.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck
			for i := range n {
				e := fleetEvent{Key: fmt.Sprintf("%s/%d/%d/%d", name, inc, tx, i), DB: name, Inc: inc}
				if rng.IntN(2) == 0 {
					e.Ordered, e.Aggregate = true, fmt.Sprintf("agg-%d", rng.IntN(5))
					k[e.Aggregate]++
					e.K = k[e.Aggregate]
				}
				payload, _ := json.Marshal(map[string]any{"key": e.Key, "k": e.K})
				if _, err := dispatcher.Enqueue(ctx, t, dispatcher.Event{AggregateType: "chaos", AggregateID: cmpStr(e.Aggregate, "u"),
					EventType: "ChaosEvent", Payload: payload, Ordered: e.Ordered}); err != nil {
					return err
				}
				evs = append(evs, e)
			}
			if rollback {
				return t.Rollback(ctx)
			}
			return t.Commit(ctx)
		}()
		f.mu.Lock()
		switch {
		case rollback && err == nil:
			for _, e := range evs {
				f.rolledBack = append(f.rolledBack, e.Key)
			}
		case err == nil:
			f.committed = append(f.committed, evs...)
		case len(evs) == n && !rollback:
			// COMMIT itself failed: the events may exist or not.
			f.uncertain = append(f.uncertain, evs...)
		default:
			for _, e := range evs {
				f.rolledBack = append(f.rolledBack, e.Key)
			}
		}
		f.mu.Unlock()
		if err != nil {
			// A failed transaction of an ordered aggregate may have been
			// committed (uncertain): its K stays used, the next is larger.
			time.Sleep(50 * time.Millisecond)
		}
	}
}

func cmpStr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// faults injects the fleet's faults until ctx ends.
func (f *fleetRun) faults(ctx context.Context, relays *fleet) {
	rng := rand.New(rand.NewPCG(f.o.seed, 7))
	kill := time.NewTicker(f.o.faultEvery)
	defer kill.Stop()
	cut := time.NewTicker(5 * time.Second)
	defer cut.Stop()
	drop := time.NewTimer(f.o.duration / 3)
	defer drop.Stop()
	admin, err := pgx.Connect(ctx, f.cl.URL())
	if err != nil {
		return
	}
	defer admin.Close(context.Background())
	for {
		select {
		case <-ctx.Done():
			return
		case <-kill.C:
			if relays.kill(fmt.Sprintf("relay-%d", 1+rng.IntN(len(relays.slots))), "kill", 0) {
				f.mu.Lock()
				f.relayKills++
				f.mu.Unlock()
			}
		case <-cut.C:
			if _, err := admin.Exec(ctx, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1", f.cut); err == nil {
				f.mu.Lock()
				f.cuts++
				f.mu.Unlock()
			}
		case <-drop.C:
			f.mu.Lock()
			f.ready[f.dropped] = false
			f.gone[f.dropped] = f.inc[f.dropped]
			f.mu.Unlock()
			if _, err := admin.Exec(ctx, "DROP DATABASE "+f.dropped+" WITH (FORCE)"); err != nil {
				fmt.Fprintf(os.Stderr, "chaos: drop %s: %v\n", f.dropped, err)
				continue
			}
			fmt.Printf("  dropped %s; creating it again in 3s\n", f.dropped)
			select {
			case <-time.After(3 * time.Second):
			case <-ctx.Done():
				return
			}
			if err := f.create(context.WithoutCancel(ctx), f.dropped); err != nil {
				fmt.Fprintf(os.Stderr, "chaos: create %s again: %v\n", f.dropped, err)
			}
		}
	}
}

// check runs the checker on the history so far.
func (f *fleetRun) check(end time.Time) *fleetResult {
	f.mu.Lock()
	h := fleetHistory{Committed: append([]fleetEvent(nil), f.committed...), RolledBack: append([]string(nil), f.rolledBack...),
		Uncertain: append([]fleetEvent(nil), f.uncertain...), Arrivals: append([]fleetArrival(nil), f.arrivals...),
		Dropped: map[string]int{}, End: end}
	for k, v := range f.gone {
		h.Dropped[k] = v
	}
	f.mu.Unlock()
	return fleetCheck(h)
}

func (f *fleetRun) report(r *fleetResult, relays *fleet) {
	fmt.Printf("\nfleet chaos: %d databases, %d relays (%s), seed %d, %s of faults\n", f.o.fleet, f.o.relays, f.bin, f.o.seed, f.o.duration)
	fmt.Printf("faults: %d relay kills, %d connection cuts of %s, %s dropped and created again\n", f.relayKills, f.cuts, f.cut, f.dropped)
	fmt.Printf("events: %d committed, %d delivered, %d duplicates, %d gone with the dropped incarnation, %d uncertain commits (%d of them delivered)\n",
		r.Events, r.Delivered, r.Duplicates, r.Gone, len(f.uncertain), r.UncertainDelivered)
	fmt.Printf("invariants: lost %d, order violations %d, rolled-back delivered %d, source violations %d\n\n",
		r.Lost, r.OrderViolations, r.RolledBackArrived, r.SourceViolations)
	names := make([]string, 0, len(r.PerDB))
	for n := range r.PerDB {
		names = append(names, n)
	}
	sort.Strings(names)
	fmt.Printf("%-16s %8s %10s %11s %6s %10s  %s\n", "database", "events", "delivered", "duplicates", "gone", "drain", "source")
	for _, n := range names {
		d := r.PerDB[n]
		fmt.Printf("%-16s %8d %10d %11d %6d %10s  %s\n", n, d.Events, d.Delivered, d.Duplicates, d.Gone,
			d.Drain.Round(time.Millisecond), strings.Join(d.Sources, ","))
	}
	exits := 0
	for _, e := range relays.allExits() {
		if !e.ByUs && !e.Final {
			exits++
		}
	}
	fmt.Printf("\nrelay exits not caused by the suite: %d\n", exits)
	for _, v := range r.Violations {
		fmt.Println("VIOLATION:", v)
	}
	if exits > 0 {
		r.fail("%d relay exits not caused by the suite (see the relay logs: -keep)", exits)
	}
}

var errFleetOptions = errors.New("-fleet needs at least 2 databases")
