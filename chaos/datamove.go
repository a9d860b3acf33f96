package main

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/pgoutbox/dispatcher"
	"github.com/pgoutbox/pgoutbox/internal/pgcluster"
	"github.com/pgoutbox/pgoutbox/internal/tcpproxy"
)

// A data-moves run (-datamove): the outbox moves twice under live producers
// and relays, and every committed event must still be delivered, ordered
// ones in commit order.
//
//  1. The source cluster is past xid epoch 0 (pg_resetwal -e 1), as a
//     long-lived server is: its txids are 2^32 and more. Producers and
//     relays run on it.
//  2. Dump and restore: the relays lose the source, producers write on for
//     two seconds (a backlog) and pause, pg_dump -Fc, pg_restore into a
//     second cluster (epoch 0: every restored txid is one it has not
//     assigned),
//     then producers and relays are pointed at it: they connect through TCP
//     proxies that are retargeted, as a DNS name or a virtual IP would be,
//     so the relay processes keep running and must notice the new server.
//  3. Logical replication cutover, the usual blue/green major-version
//     upgrade: the schema (pg_dump -s) on a third cluster, CREATE
//     PUBLICATION ... FOR ALL TABLES on the second, CREATE SUBSCRIPTION on
//     the third, initial copy and streaming under load; then producers pause,
//     the replica catches up, `pgoutbox repair` runs on it (sequences are not
//     replicated) and producers switch; then the relays leave the second
//     cluster, the replica catches up with their last writes, the
//     subscription is dropped and the relays switch.
//  4. Producers go on on the replica, stop, and the queue drains.
//
// The time from each switch-over to the delivery of the last event
// committed before it is reported.

// dmAggregates is how many ordered aggregates the producers write to.
const dmAggregates = 200

// dmBacklogFor is how long producers go on writing to the source after the
// relays left it, before the dump: the backlog the restored copy starts
// with.
const dmBacklogFor = 2 * time.Second

// dmProducers commit business transactions: an ordered one bumps its
// aggregate's version (a row lock, so versions follow commit order) and
// writes one or two ordered events carrying it; an unordered one writes one
// to three events. They pause while the outbox moves.
type dmProducers struct {
	pool   atomic.Pointer[pgxpool.Pool]
	gate   sync.RWMutex // workers hold it shared per transaction; pause takes it
	server atomic.Int32
	stop   atomic.Bool

	mu        sync.Mutex
	events    []dmEvent
	uncertain []int64 // events of transactions whose COMMIT failed
	errors    int
}

func (p *dmProducers) run(ctx context.Context, workers int, seed uint64) {
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(w)))
			for !p.stop.Load() && ctx.Err() == nil {
				p.gate.RLock()
				evs, ids, err := p.oneTx(ctx, rng)
				p.gate.RUnlock()
				p.mu.Lock()
				switch {
				case err == nil:
					p.events = append(p.events, evs...)
				case len(ids) > 0:
					p.uncertain = append(p.uncertain, ids...)
					p.errors++
				default:
					p.errors++
				}
				p.mu.Unlock()
				if err != nil {
					time.Sleep(50 * time.Millisecond)
				}
			}
		}()
	}
	wg.Wait()
}

// oneTx commits one transaction; on a failed COMMIT it returns the ids it
// inserted (the transaction may or may not have committed).
func (p *dmProducers) oneTx(ctx context.Context, rng *rand.Rand) ([]dmEvent, []int64, error) {
	server := int(p.server.Load())
	tx, err := p.pool.Load().Begin(ctx)
	if err != nil {
		return nil, nil, err
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // no-op after Commit
	var evs []dmEvent
	if rng.IntN(100) < 60 {
		agg := fmt.Sprintf("agg-%03d", rng.IntN(dmAggregates))
		var v int64
		if err := tx.QueryRow(ctx, "UPDATE dm_versions SET v = v + 1 WHERE agg = $1 RETURNING v", agg).Scan(&v); err != nil {
			return nil, nil, err
		}
		for part := 1; part <= 1+rng.IntN(2); part++ {
			id, err := dispatcher.Enqueue(ctx, tx, dispatcher.Event{AggregateType: "order", AggregateID: agg, EventType: "OrderStep",
				Ordered: true, Payload: fmt.Appendf(nil, `{"v":%d,"part":%d}`, v, part)})
			if err != nil {
				return nil, nil, err
			}
			evs = append(evs, dmEvent{ID: id, Aggregate: agg, Version: v, Part: part, Server: server})
		}
	} else {
		for range 1 + rng.IntN(3) {
			id, err := dispatcher.Enqueue(ctx, tx, dispatcher.Event{AggregateType: "thing", AggregateID: "u", EventType: "ThingHappened",
				Payload: []byte(`{}`)})
			if err != nil {
				return nil, nil, err
			}
			evs = append(evs, dmEvent{ID: id, Server: server})
		}
	}
	if err := tx.Commit(ctx); err != nil {
		ids := make([]int64, len(evs))
		for i, e := range evs {
			ids[i] = e.ID
		}
		return nil, ids, err
	}
	return evs, nil, nil
}

// pause waits for the transactions in flight and holds new ones back.
func (p *dmProducers) pause() { p.gate.Lock() }

// resume lets the producers go on, on server through pool.
func (p *dmProducers) resume(server int, pool *pgxpool.Pool) {
	p.server.Store(int32(server))
	if pool != nil {
		p.pool.Store(pool)
	}
	p.gate.Unlock()
}

func (p *dmProducers) committed() []dmEvent {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.events)
}

// dmReceiver records every arrival and accepts it.
type dmReceiver struct {
	mu       sync.Mutex
	arrivals []dmArrival
	got      map[int64]bool
}

func (r *dmReceiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	id, err := strconv.ParseInt(req.Header.Get("ce-id"), 10, 64)
	if err != nil {
		http.Error(w, "no ce-id", http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	r.arrivals = append(r.arrivals, dmArrival{ID: id, At: time.Now()})
	r.got[id] = true
	r.mu.Unlock()
	w.WriteHeader(http.StatusOK)
}

// delivered reports whether every event has arrived.
func (r *dmReceiver) delivered(evs []dmEvent) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range evs {
		if !r.got[e.ID] {
			return false
		}
	}
	return true
}

// dmFigures are the timings of a run.
type dmFigures struct {
	restoreSwitch, restoreDelivered   time.Duration // dump and restore: relays away from the source until pointed at the copy; then until the last event committed before delivered
	restoredDone                      time.Duration // relays pointed at the copy until its restored backlog is done
	restoredBacklog, restoredForeign  int           // undelivered events the copy got, and of them those with a txid it had not assigned
	producersSwitch, relaysSwitch     time.Duration // logical replication: producers paused until they write to the replica; relays away until pointed at it
	replicaDelivered                  time.Duration // relays pointed at the replica until the last event committed before delivered
	repairOutput                      string
	drain                             time.Duration
	uncertain, producerErrors, relays int
}

func runDataMove(ctx context.Context, o options) (*dmResult, error) {
	began := time.Now()
	say := func(format string, args ...any) {
		fmt.Printf("  %6.1fs  %s\n", time.Since(began).Seconds(), fmt.Sprintf(format, args...))
	}
	root, err := moduleRoot()
	if err != nil {
		return nil, err
	}
	keep := o.keep
	tmp, cleanup, err := runDir("pgoutbox-chaos-datamove-", &keep)
	if err != nil {
		return nil, err
	}
	defer cleanup()
	bin, err := relayBinary(ctx, o, root, tmp, say)
	if err != nil {
		return nil, err
	}

	settings := map[string]string{"fsync": "off", "max_connections": "100"}
	say("starting the source cluster, past xid epoch 0 (pg_resetwal -e 1)")
	src, err := pgcluster.Start(ctx, pgcluster.Options{Settings: settings, XidEpoch: 1})
	if err != nil {
		return nil, err
	}
	defer src.Stop() //nolint:errcheck
	say("starting the restore target (epoch 0) and the logical replica")
	copySettings := map[string]string{"fsync": "off", "max_connections": "100", "wal_level": "logical"}
	restored, err := pgcluster.Start(ctx, pgcluster.Options{Settings: copySettings})
	if err != nil {
		return nil, err
	}
	defer restored.Stop() //nolint:errcheck
	replica, err := pgcluster.Start(ctx, pgcluster.Options{Settings: settings})
	if err != nil {
		return nil, err
	}
	defer replica.Stop() //nolint:errcheck
	tool := func(name string, args ...string) error {
		out, err := exec.CommandContext(ctx, filepath.Join(src.Bin(), name), args...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("%s: %w\n%s", name, err, out)
		}
		return nil
	}
	dbURL := func(c *pgcluster.Cluster) string { return c.DatabaseURL(chaosDB) }
	exec1 := func(url string, stmts ...string) error {
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			return err
		}
		defer conn.Close(ctx)
		for _, s := range stmts {
			if _, err := conn.Exec(ctx, s); err != nil {
				return fmt.Errorf("%s: %w", s, err)
			}
		}
		return nil
	}
	for _, c := range []*pgcluster.Cluster{src, restored, replica} {
		if err := exec1(c.URL(), "CREATE DATABASE "+chaosDB); err != nil {
			return nil, err
		}
	}
	if out, err := exec.CommandContext(ctx, bin, "migrate", "up", "--database-url", dbURL(src)).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("pgoutbox migrate up: %w\n%s", err, out)
	}
	if err := exec1(dbURL(src), "CREATE TABLE dm_versions (agg text PRIMARY KEY, v bigint NOT NULL)",
		fmt.Sprintf("INSERT INTO dm_versions SELECT 'agg-' || lpad(g::text, 3, '0'), 0 FROM generate_series(0, %d) AS g", dmAggregates-1)); err != nil {
		return nil, err
	}

	addr := func(c *pgcluster.Cluster) string { return fmt.Sprintf("127.0.0.1:%d", c.Port()) }
	relayProxy, err := tcpproxy.New(addr(src), nil)
	if err != nil {
		return nil, err
	}
	defer relayProxy.Close()
	prodProxy, err := tcpproxy.New(addr(src), nil)
	if err != nil {
		return nil, err
	}
	defer prodProxy.Close()
	through := func(p *tcpproxy.Proxy) string {
		return fmt.Sprintf("postgres://postgres@%s/%s?sslmode=disable&connect_timeout=3", p.Addr(), chaosDB)
	}

	rcv := &dmReceiver{got: map[int64]bool{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	srv := &http.Server{Handler: rcv, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln) //nolint:errcheck
	defer srv.Close()
	target := "http://" + ln.Addr().String()
	lease := o.lease
	fl, err := newFleet(o.relays, bin, tmp, append(os.Environ(), "PGOUTBOX_HTTP_SECRET=datamove-"+randHex(8)), func(slot, owner string) []string {
		return []string{"run", "--publisher", "http", "--http-url", target + "/r/" + slot,
			"--database-url", through(relayProxy), "--owner", owner,
			"--lease", lease.String(), "--publish-timeout", o.publishTimeout.String(),
			"--claim-timeout", "10s", "--write-timeout", "2s", "--poll-interval", "250ms",
			"--shutdown-timeout", "5s", "--stats-interval", "5s", "--log-format", "json"}
	})
	if err != nil {
		return nil, err
	}
	newPool := func() (*pgxpool.Pool, error) {
		cfg, err := pgxpool.ParseConfig(through(prodProxy))
		if err != nil {
			return nil, err
		}
		cfg.MaxConns = int32(o.producers + 1)
		return pgxpool.NewWithConfig(ctx, cfg)
	}
	pool, err := newPool()
	if err != nil {
		return nil, err
	}
	prod := &dmProducers{}
	prod.pool.Store(pool)
	phase := o.duration / 3
	fmt.Printf("pgoutbox chaos -datamove: seed %d, %d relays, %d producers, %s per server, lease %s\n",
		o.seed, o.relays, o.producers, phase, o.lease)

	fl.start()
	prodDone := make(chan struct{})
	go func() { prod.run(ctx, o.producers, o.seed); close(prodDone) }()
	var fg dmFigures
	fg.relays = o.relays
	waitDelivered := func(evs []dmEvent, from time.Time) (time.Duration, error) {
		for !rcv.delivered(evs) {
			if time.Since(from) > o.drainTimeout {
				return 0, fmt.Errorf("events committed before the switch not delivered %s after it", o.drainTimeout)
			}
			if ctx.Err() != nil {
				return 0, ctx.Err()
			}
			time.Sleep(20 * time.Millisecond)
		}
		return time.Since(from), nil
	}
	sleep := func(d time.Duration) error {
		select {
		case <-time.After(d):
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	fail := func(err error) (*dmResult, error) {
		prod.stop.Store(true)
		fl.stop(20 * time.Second)
		keep = true
		return nil, err
	}

	say("producers and %d relays on the source", o.relays)
	if err := sleep(phase); err != nil {
		return fail(err)
	}

	// Dump and restore. The relays leave the source first (stopped for the
	// move), producers a little later (the last ones to stop writing), so
	// that the dump holds a backlog.
	away := time.Now()
	relayProxy.Down()
	say("relays cut off from the source; producers go on for %s", dmBacklogFor)
	if err := sleep(dmBacklogFor); err != nil {
		return fail(err)
	}
	prod.pause()
	before := prod.committed()
	prodProxy.Down()
	say("producers paused (%d events committed); pg_dump -Fc", len(before))
	dump := filepath.Join(tmp, "outbox.dump")
	if err := tool("pg_dump", "-Fc", "-f", dump, "-d", dbURL(src)); err != nil {
		return fail(err)
	}
	say("pg_restore into the second cluster")
	if err := tool("pg_restore", "-d", dbURL(restored), dump); err != nil {
		return fail(err)
	}
	bpool, err := pgxpool.New(ctx, dbURL(restored))
	if err != nil {
		return fail(err)
	}
	defer bpool.Close()
	var backlog, foreign int
	if err := bpool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE status IN ('pending', 'processing')),
		count(*) FILTER (WHERE status IN ('pending', 'processing') AND txid >= pg_snapshot_xmax(pg_current_snapshot())) FROM outbox`).Scan(&backlog, &foreign); err != nil {
		return fail(err)
	}
	relayProxy.Retarget(addr(restored))
	prodProxy.Retarget(addr(restored))
	relayProxy.Up()
	prodProxy.Up()
	switched := time.Now()
	fg.restoreSwitch = switched.Sub(away)
	fg.restoredBacklog, fg.restoredForeign = backlog, foreign
	pool.Close()
	if pool, err = newPool(); err != nil {
		return fail(err)
	}
	prod.resume(1, pool)
	say("producers and relays pointed at the restored copy (%s after the relays lost the source); it holds %d undelivered events, %d with a txid it has not assigned",
		fg.restoreSwitch.Round(time.Millisecond), backlog, foreign)
	if fg.restoreDelivered, err = waitDelivered(before, switched); err != nil {
		return fail(err)
	}
	maxBefore := slices.MaxFunc(before, func(a, b dmEvent) int { return cmp.Compare(a.ID, b.ID) }).ID
	for {
		var open int
		if err := bpool.QueryRow(ctx, "SELECT count(*) FROM outbox WHERE status IN ('pending', 'processing') AND id <= $1", maxBefore).Scan(&open); err != nil {
			return fail(err)
		}
		if open == 0 {
			break
		}
		if time.Since(switched) > o.drainTimeout {
			return fail(fmt.Errorf("%d restored events still undelivered on the copy %s after the switch", open, o.drainTimeout))
		}
		time.Sleep(20 * time.Millisecond)
	}
	fg.restoredDone = time.Since(switched)
	say("every event committed on the source delivered %s after the switch; the copy's backlog done after %s",
		fg.restoreDelivered.Round(time.Millisecond), fg.restoredDone.Round(time.Millisecond))
	if err := sleep(phase / 2); err != nil {
		return fail(err)
	}

	// Logical replication cutover.
	say("logical replication: schema on the third cluster, publication, subscription")
	schema := filepath.Join(tmp, "schema.dump")
	if err := tool("pg_dump", "-Fc", "-s", "-f", schema, "-d", dbURL(restored)); err != nil {
		return fail(err)
	}
	if err := tool("pg_restore", "-d", dbURL(replica), schema); err != nil {
		return fail(err)
	}
	if err := exec1(dbURL(restored), "CREATE PUBLICATION dm FOR ALL TABLES"); err != nil {
		return fail(err)
	}
	if err := exec1(dbURL(replica), fmt.Sprintf("CREATE SUBSCRIPTION dm CONNECTION 'host=127.0.0.1 port=%d dbname=%s user=postgres' PUBLICATION dm",
		restored.Port(), chaosDB)); err != nil {
		return fail(err)
	}
	rpool, err := pgxpool.New(ctx, dbURL(replica))
	if err != nil {
		return fail(err)
	}
	defer rpool.Close()
	ppool, err := pgxpool.New(ctx, dbURL(restored))
	if err != nil {
		return fail(err)
	}
	defer ppool.Close()
	// catchUp waits until the replica's initial copy is done and, unless
	// what is "", it has what the second cluster has: "rows" the same outbox
	// rows and aggregate versions (producers paused), "full" the same
	// delivery state of the second cluster's rows (relays cut off).
	catchUp := func(what string) error {
		state := map[string]string{
			"rows": `SELECT count(*)::text || '/' || coalesce(max(id), 0)::text || '/' ||
			            (SELECT coalesce(sum(v), 0) FROM dm_versions)::text FROM outbox`,
			// The replica's own rows (producers moved there already) are
			// past the second cluster's highest id.
			"full": `SELECT md5(coalesce(string_agg(id || ':' || status || ':' || lease_version || ':' || coalesce(seq, 0), ',' ORDER BY id), ''))
			           FROM outbox WHERE id <= $1`,
		}[what]
		var top int64
		if err := ppool.QueryRow(ctx, "SELECT coalesce(max(id), 0) FROM outbox").Scan(&top); err != nil {
			return err
		}
		args := []any{}
		if what == "full" {
			args = append(args, top)
		}
		deadline := time.Now().Add(2 * time.Minute)
		for {
			var synced bool
			var a, b string
			err := rpool.QueryRow(ctx, "SELECT coalesce((SELECT bool_and(srsubstate = 'r') FROM pg_subscription_rel), false)").Scan(&synced)
			if err == nil && state != "" {
				err = ppool.QueryRow(ctx, state, args...).Scan(&a)
			}
			if err == nil && state != "" {
				err = rpool.QueryRow(ctx, state, args...).Scan(&b)
			}
			if err != nil {
				return err
			}
			if synced && a == b {
				return nil
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("the replica did not catch up (%q) within 2 minutes", what)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	if err := catchUp(""); err != nil {
		return fail(err)
	}
	say("initial copy done, streaming; %s more under load", phase/2)
	if err := sleep(phase / 2); err != nil {
		return fail(err)
	}
	pausedAt := time.Now()
	prod.pause()
	if err := catchUp("rows"); err != nil {
		return fail(err)
	}
	out, err := exec.CommandContext(ctx, bin, "repair", "--database-url", dbURL(replica)).CombinedOutput()
	if err != nil {
		return fail(fmt.Errorf("pgoutbox repair: %w\n%s", err, out))
	}
	fg.repairOutput = strings.TrimSpace(string(out))
	prodProxy.Retarget(addr(replica))
	prodProxy.Down()
	prodProxy.Up()
	pool.Close()
	if pool, err = newPool(); err != nil {
		return fail(err)
	}
	prod.resume(2, pool)
	fg.producersSwitch = time.Since(pausedAt)
	say("producers on the replica (%s paused; pgoutbox repair: %s)", fg.producersSwitch.Round(time.Millisecond), strings.ReplaceAll(fg.repairOutput, "\n", "; "))

	away = time.Now()
	relayProxy.Down()
	if err := catchUp("full"); err != nil {
		return fail(err)
	}
	if err := exec1(dbURL(replica), "DROP SUBSCRIPTION dm"); err != nil {
		return fail(err)
	}
	prod.mu.Lock()
	beforeRelays := slices.Clone(prod.events)
	prod.mu.Unlock()
	relayProxy.Retarget(addr(replica))
	relayProxy.Up()
	switched = time.Now()
	fg.relaysSwitch = switched.Sub(away)
	say("relays pointed at the replica (%s away)", fg.relaysSwitch.Round(time.Millisecond))
	if fg.replicaDelivered, err = waitDelivered(beforeRelays, switched); err != nil {
		return fail(err)
	}
	say("every event committed before the relays switched delivered %s after", fg.replicaDelivered.Round(time.Millisecond))
	if err := sleep(phase); err != nil {
		return fail(err)
	}
	prod.stop.Store(true)
	<-prodDone
	pool.Close()
	drainFrom := time.Now()
	all := prod.committed()
	say("producers done: %d events committed; draining", len(all))
	if fg.drain, err = waitDelivered(all, drainFrom); err != nil {
		say("%v", err)
	}
	fl.stop(30 * time.Second)

	// Events of a failed COMMIT must arrive when they are in the final table
	// (the COMMIT went through), and must not otherwise.
	prod.mu.Lock()
	fg.uncertain, fg.producerErrors = len(prod.uncertain), prod.errors
	uncertain := slices.Clone(prod.uncertain)
	prod.mu.Unlock()
	var inTable []int64
	if len(uncertain) > 0 {
		if err := rpool.QueryRow(ctx, "SELECT coalesce(array_agg(id), '{}') FROM outbox WHERE id = ANY($1)", uncertain).Scan(&inTable); err != nil {
			return fail(err)
		}
	}
	for _, id := range inTable {
		all = append(all, dmEvent{ID: id, Server: 2})
	}
	rcv.mu.Lock()
	arrivals := append([]dmArrival(nil), rcv.arrivals...)
	rcv.mu.Unlock()
	res := checkDataMove(all, arrivals)
	var open int
	if err := rpool.QueryRow(ctx, "SELECT count(*) FROM outbox WHERE status IN ('pending', 'processing')").Scan(&open); err == nil && open > 0 {
		res.fail("%d rows still pending or processing on the replica after the drain", open)
	}
	keep = keep || !res.OK()
	fmt.Print("\n" + dmSummary(res, fg))
	if !res.OK() {
		fmt.Print("\nVIOLATIONS\n" + res.Summary())
	}
	return res, nil
}

func dmSummary(r *dmResult, fg dmFigures) string {
	var b strings.Builder
	fmt.Fprintf(&b, "events committed:   %d (source %d, restored copy %d, logical replica %d); %d ordered in %d aggregates\n",
		r.Events, r.ByServer[0], r.ByServer[1], r.ByServer[2], r.Ordered, r.Aggregates)
	fmt.Fprintf(&b, "arrivals:           %d (%d duplicates)\n", r.Arrivals, r.Duplicates)
	fmt.Fprintf(&b, "lost:               %d\n", r.Lost)
	fmt.Fprintf(&b, "order violations:   %d\n", r.OrderViolations)
	fmt.Fprintf(&b, "dump and restore:   relays away %s; the copy got %d undelivered events (%d with a txid it had not assigned); every source event delivered %s after the switch, the copy's backlog done after %s\n",
		fg.restoreSwitch.Round(time.Millisecond), fg.restoredBacklog, fg.restoredForeign, fg.restoreDelivered.Round(time.Millisecond), fg.restoredDone.Round(time.Millisecond))
	fmt.Fprintf(&b, "logical cutover:    producers paused %s; relays away %s; then every earlier event delivered in %s\n",
		fg.producersSwitch.Round(time.Millisecond), fg.relaysSwitch.Round(time.Millisecond), fg.replicaDelivered.Round(time.Millisecond))
	fmt.Fprintf(&b, "pgoutbox repair:    %s\n", strings.ReplaceAll(fg.repairOutput, "\n", "; "))
	fmt.Fprintf(&b, "final drain:        %s\n", fg.drain.Round(time.Millisecond))
	fmt.Fprintf(&b, "producer errors:    %d (%d events of failed commits)\n", fg.producerErrors, fg.uncertain)
	return b.String()
}
