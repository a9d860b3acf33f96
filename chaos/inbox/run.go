package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/pgoutbox/internal/pgcluster"
)

// run carries out one chaos run and reports whether every invariant held.
func run(ctx context.Context, o options) (bool, error) {
	began := time.Now()
	tmp, err := os.MkdirTemp("", "pgoutbox-chaos-inbox-")
	if err != nil {
		return false, err
	}
	bin, err := buildBinary(ctx, o.bin, tmp)
	if err != nil {
		return false, err
	}
	self, err := os.Executable()
	if err != nil {
		return false, err
	}
	cluster, err := pgcluster.Start(ctx, pgcluster.Options{Settings: pgcluster.TestSettings})
	if err != nil {
		return false, fmt.Errorf("PostgreSQL: %w", err)
	}
	defer func() { _ = cluster.Stop() }()
	admin, err := pgxpool.New(ctx, cluster.URL())
	if err != nil {
		return false, err
	}
	defer admin.Close()
	for _, name := range []string{"outbox", "consumer"} {
		if _, err := admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
			return false, err
		}
	}
	outboxURL, consumerURL := cluster.DatabaseURL("outbox"), cluster.DatabaseURL("consumer")

	var brokers []*broker
	defer func() {
		for _, b := range brokers {
			b.close()
		}
	}()
	for _, mk := range []func() (*broker, error){
		func() (*broker, error) { return natsBroker(ctx) },
		amqpBroker,
		kafkaBroker,
	} {
		b, err := mk()
		if err != nil {
			return false, err
		}
		brokers = append(brokers, b)
	}
	outbox, err := pgxpool.New(ctx, outboxURL)
	if err != nil {
		return false, err
	}
	defer outbox.Close()
	consumer, err := pgxpool.New(ctx, consumerURL)
	if err != nil {
		return false, err
	}
	defer consumer.Close()
	if _, err := consumer.Exec(ctx, `CREATE TABLE position_mismatches (broker text, id text, wire text, outbox text)`); err != nil {
		return false, err
	}
	for _, b := range brokers {
		for _, args := range [][]string{
			{"migrate", "up", "--database-url", outboxURL, "--table", b.outboxTable()},
			{"inbox", "migrate", "--database-url", consumerURL, "--table", b.inboxTable()},
		} {
			if out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput(); err != nil {
				return false, fmt.Errorf("pgoutbox %s: %v\n%s", strings.Join(args[:2], " "), err, out)
			}
		}
		if _, err := consumer.Exec(ctx, `CREATE TABLE `+b.name+`_effects (n bigint GENERATED ALWAYS AS IDENTITY, id text, aggregate_id text, seq bigint, parked boolean)`); err != nil {
			return false, err
		}
	}

	var relays, consumers []*procs
	for _, b := range brokers {
		relays = append(relays, newProcs("relay", b.name, o.relays, bin, tmp, func(name string, gen int) []string {
			return append([]string{"run", "--database-url", outboxURL, "--table", b.outboxTable(), "--ce-source", b.source(),
				"--owner", fmt.Sprintf("%s.%d", name, gen), "--lease", "2s", "--publish-timeout", "1s", "--max-attempts", "100000",
				"--batch", "50", "--concurrency", "16", "--poll-interval", "200ms"}, b.relayArgs...)
		}))
		consumers = append(consumers, newProcs("consumer", b.name, o.consumers, self, tmp, func(string, int) []string {
			return append([]string{"consume", "-broker", b.name, "-outbox-url", outboxURL, "-consumer-url", consumerURL}, b.consumeArgs...)
		}))
	}
	all := append(append([]*procs{}, relays...), consumers...)
	for _, p := range all {
		p.start()
	}
	stopAll := sync.OnceFunc(func() {
		for _, p := range all {
			p.stop(15 * time.Second)
		}
	})
	defer stopAll()

	fmt.Printf("chaos-inbox: seed %d, %s of faults, %d producer transactions, %d relays and %d consumers per broker (NATS JetStream, RabbitMQ, Kafka); logs in %s\n",
		o.seed, o.duration, o.events, o.relays, o.consumers, tmp)
	faultCtx, stopFaults := context.WithTimeout(ctx, o.duration)
	defer stopFaults()
	var cuts atomic.Int64
	faultsDone := make(chan struct{})
	go func() {
		defer close(faultsDone)
		rng := rand.New(rand.NewPCG(o.seed, 1))
		for {
			wait := time.Duration(float64(o.faultEvery) * (0.5 + rng.Float64()))
			select {
			case <-faultCtx.Done():
				return
			case <-time.After(wait):
			}
			i := rng.IntN(len(brokers))
			switch rng.IntN(5) {
			case 0:
				relays[i].kill(rng.IntN(o.relays))
			case 1:
				// Longer than the relays' 2s lease: another relay
				// takes its messages over and publishes them again.
				go relays[i].pause(rng.IntN(o.relays), 2500*time.Millisecond+time.Duration(rng.IntN(1500))*time.Millisecond)
			case 2:
				consumers[i].kill(rng.IntN(o.consumers))
			case 3:
				// Longer than JetStream's AckWait (5s), Kafka's session
				// timeout (6s) and two RabbitMQ heartbeats (10s): what it
				// holds is delivered to the other consumer, and processed
				// again when it wakes.
				go consumers[i].pause(rng.IntN(o.consumers), 11*time.Second+time.Duration(rng.IntN(3000))*time.Millisecond)
			default:
				brokers[i].cut()
				cuts.Add(1)
			}
		}
	}()
	committed, err := produce(faultCtx, outbox, brokers, o)
	if err != nil && ctx.Err() == nil && !errors.Is(err, context.DeadlineExceeded) {
		return false, fmt.Errorf("producers: %w", err)
	}
	<-faultCtx.Done()
	<-faultsDone
	if ctx.Err() != nil {
		return false, ctx.Err()
	}
	faultsEnded := time.Now()
	drained := drain(ctx, outbox, consumer, brokers, o.drainTimeout)
	drainTook := time.Since(faultsEnded)
	stopAll()

	ok := drained
	fmt.Printf("faults: %d relay kills, %d relay pauses, %d consumer kills, %d consumer pauses, %d connection cuts; %d transactions committed\n",
		sum(relays, func(p *procs) int64 { return p.kills.Load() }), sum(relays, func(p *procs) int64 { return p.pauses.Load() }),
		sum(consumers, func(p *procs) int64 { return p.kills.Load() }), sum(consumers, func(p *procs) int64 { return p.pauses.Load() }),
		cuts.Load(), committed)
	if !drained {
		fmt.Printf("DRAIN: not every event was processed within %s\n", o.drainTimeout)
	} else {
		fmt.Printf("drained in %s\n", drainTook.Round(100*time.Millisecond))
	}
	for i, b := range brokers {
		res, err := check(ctx, bin, outbox, consumer, outboxURL, consumerURL, b)
		if err != nil {
			return false, err
		}
		res.crashes = relays[i].crashes.Load() + consumers[i].crashes.Load()
		res.print()
		ok = ok && res.ok()
	}
	fmt.Printf("chaos-inbox: took %s\n", time.Since(began).Round(time.Second))
	if ok && !o.keep {
		_ = os.RemoveAll(tmp)
	}
	return ok, nil
}

func sum(ps []*procs, f func(*procs) int64) int64 {
	var n int64
	for _, p := range ps {
		n += f(p)
	}
	return n
}

// buildBinary builds ./cmd/pgoutbox into dir unless bin is given.
func buildBinary(ctx context.Context, bin, dir string) (string, error) {
	if bin != "" {
		return filepath.Abs(bin)
	}
	out := filepath.Join(dir, "pgoutbox")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, "./cmd/pgoutbox")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/pgoutbox (run from the module root): %v\n%s", err, b)
	}
	return out, nil
}

// drain waits until every outbox row is done and every committed event has
// its side effect and nothing is parked, or timeout.
func drain(ctx context.Context, outbox, consumer *pgxpool.Pool, brokers []*broker, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		done := true
		for _, b := range brokers {
			var rows, undelivered, effects, parked int64
			if err := outbox.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE status <> 'done') FROM `+b.outboxTable()).Scan(&rows, &undelivered); err != nil {
				return false
			}
			if err := consumer.QueryRow(ctx, `SELECT (SELECT count(DISTINCT id) FROM `+b.name+`_effects),
				(SELECT count(*) FROM `+b.inboxTable()+` WHERE status = 'parked')`).Scan(&effects, &parked); err != nil {
				return false
			}
			if undelivered > 0 || effects < rows || parked > 0 {
				done = false
			}
		}
		if done {
			return true
		}
		time.Sleep(time.Second)
	}
	return false
}
