package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/pgoutbox/internal/pgbouncer"
	"github.com/pgoutbox/pgoutbox/internal/pgcluster"
	"github.com/pgoutbox/pgoutbox/internal/tcpproxy"
)

// figures is everything the report prints.
type figures struct {
	o                options
	res              *Result
	roles            []roleCheck
	faults           map[string]int
	exits            []exitInfo
	slow, badSig     int
	poisonKills      int
	drain            time.Duration
	drained          bool
	total            time.Duration
	faultWindow      time.Duration
	rolledBackTx     int
	rbEvents         int
	uncertain        int
	prodErrors       int64
	secretHits       map[string]int
	permDenied       int
	logWarnings      map[string]int
	pgVersion        string
	pgbouncerVersion string
	auditRows        int
	failover         *failoverFigures // failover runs
	outage           *outageFigures   // -outage runs
}

func run(ctx context.Context, o options) (*Result, error) {
	began := time.Now()
	root, err := moduleRoot()
	if err != nil {
		return nil, err
	}
	keep := o.keep
	tmp, cleanup, err := runDir("pgoutbox-chaos-", &keep)
	if err != nil {
		return nil, err
	}
	defer cleanup()
	say := func(format string, args ...any) {
		fmt.Printf("  %6.1fs  %s\n", time.Since(began).Seconds(), fmt.Sprintf(format, args...))
	}

	bin, err := relayBinary(ctx, o, root, tmp, say)
	if err != nil {
		return nil, err
	}

	say("starting a throwaway PostgreSQL")
	cl, err := pgcluster.Start(ctx, pgcluster.Options{Settings: map[string]string{
		// Durable commits (a restart in immediate mode must not lose a
		// committed event); fsync off only spares the disk: the OS does not
		// crash here, PostgreSQL does.
		"fsync": "off", "max_connections": "300",
	}})
	if err != nil {
		return nil, err
	}
	defer cl.Stop() //nolint:errcheck
	e, err := setupDatabase(ctx, cl, root, bin)
	if err != nil {
		return nil, err
	}
	if o.failover {
		say("starting a synchronous streaming standby (pg_basebackup -R; synchronous_standby_names = '%s')", standbyName)
		if err := startStandby(ctx, e); err != nil {
			return nil, err
		}
		defer e.standby.Stop() //nolint:errcheck
	}
	defer e.admin.Close()
	// Relays reach PostgreSQL through a TCP proxy, so that a blackhole
	// fault can freeze their open connections (no byte forwarded, sockets
	// left open) while new connections still work.
	// -pgbouncer: relays -> proxy -> PgBouncer -> server; producers ->
	// PgBouncer; relays' LISTEN -> server.
	proxyTarget := fmt.Sprintf("127.0.0.1:%d", cl.Port())
	var bouncerVersion string
	if o.pgbouncer {
		say("starting a throwaway PgBouncer (transaction mode)")
		bn, err := pgbouncer.Start(ctx, pgbouncer.Options{
			TargetPort: cl.Port(), PoolSize: 20, Users: []string{relayUser, producerUser},
			Passwords: map[string]string{relayUser: e.relayPass, producerUser: e.producePass},
		})
		if err != nil {
			return nil, err
		}
		defer bn.Stop() //nolint:errcheck
		proxyTarget, e.bouncerPort = bn.Addr(), bn.Port()
		bouncerVersion = bn.Version()
	}
	proxy, err := tcpproxy.New(proxyTarget, nil)
	if err != nil {
		return nil, err
	}
	defer proxy.Close()
	_, proxyPort, _ := net.SplitHostPort(proxy.Addr())
	e.relayPort, _ = strconv.Atoi(proxyPort)
	var standbyProxy *tcpproxy.Proxy
	if e.standby != nil {
		standbyProxy, err = tcpproxy.New(fmt.Sprintf("127.0.0.1:%d", e.standby.Port()), nil)
		if err != nil {
			return nil, err
		}
		defer standbyProxy.Close()
		_, port, _ := net.SplitHostPort(standbyProxy.Addr())
		e.standbyRelayPort, _ = strconv.Atoi(port)
	}
	var pgVersion string
	_ = e.admin.QueryRow(ctx, "SHOW server_version").Scan(&pgVersion)

	roles, err := verifyRoles(ctx, e)
	if err != nil {
		return nil, err
	}
	for _, rc := range roles {
		mark := "ok  "
		if !rc.OK {
			mark = "NO  "
		}
		say("role check %s %s %s", mark, rc.What, rc.Note)
	}

	secret := "hmac-" + randHex(16)
	var fl *fleet
	rcv := newReceiver(secret, o.lease, nil)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	srv := &http.Server{Handler: rcv, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln) //nolint:errcheck
	defer srv.Close()
	// Relays reach the receiver through a TCP proxy too: the outage
	// (outage.go) makes it refuse every connection.
	receiverProxy, err := tcpproxy.New(ln.Addr().String(), nil)
	if err != nil {
		return nil, err
	}
	defer receiverProxy.Close()
	target := "http://" + receiverProxy.Addr()

	env := append(os.Environ(), "PGOUTBOX_HTTP_SECRET="+secret)
	fl, err = newFleet(o.relays, bin, tmp, env, func(slot, owner string) []string {
		args := []string{"run", "--publisher", "http",
			"--http-url", target + "/r/" + slot,
			"--database-url", e.relayURL(owner),
			"--owner", owner,
			"--lease", o.lease.String(),
			"--publish-timeout", o.publishTimeout.String(),
			"--batch", strconv.Itoa(o.batch),
			"--concurrency", strconv.Itoa(o.concurrency),
			"--max-attempts", strconv.Itoa(o.maxAttempts),
			// Bounds that let a relay give up a blackholed connection fast,
			// and a reap grace of one lease (the default 30s would only
			// make the run longer).
			"--claim-timeout", "10s",
			"--write-timeout", "2s",
			"--reap-grace", o.lease.String(),
			"--poll-interval", "250ms",
			"--shutdown-timeout", "5s",
			"--stats-interval", "5s",
			"--log-format", "json",
		}
		if o.pgbouncer {
			args = append(args, "--listen-url", e.listenURL(owner))
		}
		return args
	})
	if err != nil {
		return nil, err
	}
	rcv.fleet = fl

	pcfg, err := pgxpool.ParseConfig(e.producerURL())
	if err != nil {
		return nil, err
	}
	pcfg.MaxConns = int32(o.producers + 2)
	ppool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, err
	}
	defer ppool.Close()
	// Producers write until just before the faults end, so that faults keep
	// hitting live traffic and "time to drain" measures recovery under load.
	total := o.duration + o.outage
	window := max(total-5*time.Second, total*3/4)
	prod := newProducers(ppool, o.seed, o.events, window)
	prod.txs["role-check"] = 1
	prod.txs["role-check-wait"] = 1 // the waiter's event; the holder rolled back

	plan := schedule(o.seed, o)
	fmt.Printf("pgoutbox chaos: seed %d, %d relays, faults for %s (%d planned), %d events, lease %s, publish timeout %s, max attempts %d\n",
		o.seed, o.relays, total, len(plan), o.events, o.lease, o.publishTimeout, o.maxAttempts)

	fl.start()
	start := time.Now()
	prodDone := make(chan struct{})
	go func() { prod.run(ctx, o.producers); close(prodDone) }()
	in := &injector{e: e, fleet: fl, prod: prod, proxy: proxy, standbyProxy: standbyProxy, receiverProxy: receiverProxy,
		log: func(f string, a ...any) { say(f, a...) }}
	faultsDone := make(chan struct{})
	go func() { in.run(ctx, start, plan); close(faultsDone) }()

	// Progress until the faults are over and the producers are done, then
	// until the queue drains.
	tick := time.NewTicker(5 * time.Second)
	defer tick.Stop()
	var drainStart time.Time
	var drained bool
	var drainAt time.Time
	progress := func() (open int, ok bool) {
		var pending, processing, done, dead int
		qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		err := e.admin.QueryRow(qctx, `SELECT count(*) FILTER (WHERE status = 'pending'), count(*) FILTER (WHERE status = 'processing'),
			count(*) FILTER (WHERE status = 'done'), count(*) FILTER (WHERE status = 'dead') FROM outbox`).Scan(&pending, &processing, &done, &dead)
		if err != nil {
			return 0, false
		}
		return pending + processing, true
	}
	report := func() {
		var pending, processing, done, dead int
		qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		err := e.admin.QueryRow(qctx, `SELECT count(*) FILTER (WHERE status = 'pending'), count(*) FILTER (WHERE status = 'processing'),
			count(*) FILTER (WHERE status = 'done'), count(*) FILTER (WHERE status = 'dead') FROM outbox`).Scan(&pending, &processing, &done, &dead)
		if err != nil {
			say("(database unavailable: %v)", strings.SplitN(err.Error(), "\n", 2)[0])
			return
		}
		say("committed %6d  done %6d  pending %5d  processing %4d  dead %4d  relays up %d/%d  faults %d",
			prod.committed.Load(), done, pending, processing, dead, fl.up(), o.relays, len(fl.allFaults()))
	}
	faultsOver, prodOver := false, false
loop:
	for {
		select {
		case <-ctx.Done():
			fl.stop(20 * time.Second)
			return nil, ctx.Err()
		case <-faultsDone:
			faultsDone = nil
			faultsOver = true
			drainStart = time.Now()
			say("fault window over")
		case <-prodDone:
			prodDone = nil
			prodOver = true
			say("producers done: %d events committed", prod.committed.Load())
		case <-tick.C:
			report()
			if faultsOver && time.Since(drainStart) > o.drainTimeout {
				say("drain timeout (%s): stopping with rows still open", o.drainTimeout)
				break loop
			}
		case <-time.After(250 * time.Millisecond):
		}
		if faultsOver && prodOver {
			if open, ok := progress(); ok && open == 0 {
				drained, drainAt = true, time.Now()
				break loop
			}
		}
	}
	report()
	in.mu.Lock()
	lastFault := in.lastEnd
	in.mu.Unlock()
	if lastFault.IsZero() {
		lastFault = drainStart
	}
	say("stopping relays (SIGTERM)")
	fl.stop(30 * time.Second)

	// Collect the history.
	h, auditRows, err := collect(ctx, e, o.maxAttempts)
	if err != nil {
		return nil, err
	}
	ds, slow, badSig, poisonKills := rcv.snapshot()
	h.Deliveries = ds
	h.Faults = fl.allFaults()
	prod.mu.Lock()
	h.CommittedTx = prod.txs
	h.RolledBackTx = prod.rolledBack
	h.UncertainTx = prod.uncertain
	rbTx, rbEvents, uncertain := len(prod.rolledBack), prod.rbEvents, len(prod.uncertain)
	prod.mu.Unlock()
	res := Check(h)

	fg := &figures{o: o, res: res, roles: roles, faults: map[string]int{}, exits: fl.allExits(), slow: slow, badSig: badSig,
		poisonKills: poisonKills, drained: drained, total: time.Since(began), faultWindow: total,
		rolledBackTx: rbTx, rbEvents: rbEvents, uncertain: uncertain, prodErrors: prod.errors.Load(), pgVersion: pgVersion, pgbouncerVersion: bouncerVersion,
		auditRows: auditRows}
	if drained {
		fg.drain = drainAt.Sub(lastFault)
	}
	in.mu.Lock()
	fg.failover, fg.outage = in.failover, in.outage
	in.mu.Unlock()
	if fg.outage != nil {
		fg.outage.measure(h, res)
	}
	if fg.failover != nil {
		fg.failover.firstWriteIn, fg.failover.writesAfter = firstWriteAfter(h.Audit, fg.failover.down)
		fg.failover.newPrimary = newPrimaryState(ctx, e)
	}
	for _, f := range h.Faults {
		fg.faults[f.Kind]++
	}

	// Relay logs: secrets must never appear; permission errors must not
	// happen under the least-privilege role.
	fg.secretHits, fg.permDenied, fg.logWarnings = scanLogs(tmp, map[string]string{
		"relay database password": e.relayPass, "producer database password": e.producePass, "HMAC secret": secret,
	})
	extraChecks(fg)
	keep = keep || !res.OK()

	text := summary(fg)
	fmt.Print("\n" + text)
	if !res.OK() {
		fmt.Print("\nVIOLATIONS\n" + res.Summary())
	}
	if o.out != "" {
		if err := writeReliability(o.out, o.section, fg, text); err != nil {
			return res, err
		}
		fmt.Printf("figures written to %s (%s run section)\n", o.out, o.section)
	}
	return res, nil
}

// runDir makes a run's temporary directory (relay logs, the binary);
// cleanup removes it, unless *keep says to keep it (then it says where).
func runDir(prefix string, keep *bool) (string, func(), error) {
	tmp, err := os.MkdirTemp("", prefix)
	if err != nil {
		return "", nil, err
	}
	return tmp, func() {
		if *keep {
			fmt.Printf("relay logs kept in %s\n", tmp)
		} else {
			os.RemoveAll(tmp)
		}
	}, nil
}

// relayBinary is -bin, or else pgoutbox built from the module into tmp.
func relayBinary(ctx context.Context, o options, root, tmp string, say func(string, ...any)) (string, error) {
	if o.bin != "" {
		return o.bin, nil
	}
	bin := filepath.Join(tmp, "pgoutbox")
	say("building pgoutbox")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/pgoutbox")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/pgoutbox: %w\n%s", err, out)
	}
	return bin, nil
}

// extraChecks folds the run-level checks into the result.
func extraChecks(fg *figures) {
	r := fg.res
	for what, n := range fg.secretHits {
		if n > 0 {
			r.fail("secret-in-logs", "the %s appears %d times in relay logs", what, n)
		}
	}
	if fg.permDenied > 0 {
		r.fail("relay-permission-denied", "%d relay log lines report permission denied under the relay role", fg.permDenied)
	}
	if fg.badSig > 0 {
		r.fail("bad-signature", "%d deliveries had a bad HMAC signature", fg.badSig)
	}
	for _, rc := range fg.roles {
		if !rc.OK {
			r.fail("role-check", "%s: %s", rc.What, rc.Note)
		}
	}
	for _, ex := range fg.exits {
		if ex.Final && ex.Code != 0 {
			r.fail("relay-shutdown-not-graceful", "%s exited %d (%s) after SIGTERM", ex.Owner, ex.Code, ex.Signal)
		}
	}
	if fg.o.outage > 0 && fg.outage == nil {
		r.fail("outage-not-run", "the receiver outage did not happen")
	}
	if fg.o.failover {
		switch {
		case fg.failover == nil:
			r.fail("failover-not-run", "the failover (primary stopped, standby promoted) did not happen")
		case fg.failover.writesAfter == 0:
			r.fail("no-write-after-failover", "no relay wrote to the new primary after the failover")
		}
	}
	if !fg.drained {
		r.fail("not-drained", "the queue did not drain within %s after the faults", fg.o.drainTimeout)
	}
}

func collect(ctx context.Context, e *env, maxAttempts int) (History, int, error) {
	h := History{MaxAttempts: maxAttempts}
	rows, err := e.admin.Query(ctx, `SELECT id, coalesce(headers->>'x-chaos-tx', ''), aggregate_id, ordered, coalesce(seq, 0), status,
		attempts, lease_version, coalesce(last_error, ''), coalesce(headers->>'x-chaos-fate', ''),
		coalesce((headers->>'x-chaos-version')::bigint, 0), coalesce((headers->>'x-chaos-part')::int, 0) FROM outbox ORDER BY id`)
	if err != nil {
		return h, 0, err
	}
	for rows.Next() {
		var r Row
		if err := rows.Scan(&r.ID, &r.Tx, &r.AggregateID, &r.Ordered, &r.Seq, &r.Status, &r.Attempts, &r.LeaseVersion, &r.LastError, &r.Fate, &r.Version, &r.Part); err != nil {
			return h, 0, err
		}
		h.Rows = append(h.Rows, r)
	}
	if err := rows.Err(); err != nil {
		return h, 0, err
	}
	rows, err = e.admin.Query(ctx, `SELECT id, old_status, new_status, old_lv, new_lv, old_attempts, new_attempts,
		coalesce(old_owner, ''), coalesce(new_owner, ''), app, coalesce(new_last_error, ''), at FROM outbox_audit ORDER BY seq`)
	if err != nil {
		return h, 0, err
	}
	for rows.Next() {
		var t Transition
		if err := rows.Scan(&t.ID, &t.OldStatus, &t.NewStatus, &t.OldLV, &t.NewLV, &t.OldAttempts, &t.NewAttempts,
			&t.OldOwner, &t.NewOwner, &t.App, &t.NewLastError, &t.At); err != nil {
			return h, 0, err
		}
		if strings.HasPrefix(t.App, "relay-") {
			h.AuditByApp = true
		}
		h.Audit = append(h.Audit, t)
	}
	return h, len(h.Audit), rows.Err()
}

// scanLogs reads every relay log: occurrences of each secret, lines saying
// permission denied, and warning/error messages by text.
func scanLogs(dir string, secrets map[string]string) (hits map[string]int, denied int, warnings map[string]int) {
	hits, warnings = map[string]int{}, map[string]int{}
	files, _ := filepath.Glob(filepath.Join(dir, "relay-*.log"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for what, s := range secrets {
			hits[what] += bytes.Count(b, []byte(s))
		}
		for _, line := range bytes.Split(b, []byte("\n")) {
			if bytes.Contains(line, []byte("permission denied")) {
				denied++
			}
			if bytes.Contains(line, []byte(`"level":"WARN"`)) || bytes.Contains(line, []byte(`"level":"ERROR"`)) {
				msg := jsonField(string(line), "msg")
				warnings[msg]++
			}
		}
	}
	return hits, denied, warnings
}

func jsonField(line, key string) string {
	i := strings.Index(line, `"`+key+`":"`)
	if i < 0 {
		return "?"
	}
	rest := line[i+len(key)+4:]
	if j := strings.Index(rest, `"`); j >= 0 {
		return rest[:j]
	}
	return rest
}
