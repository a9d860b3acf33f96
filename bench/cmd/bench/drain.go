package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/pgoutbox/dispatcher"
)

// drainSetup is one pgoutbox configuration under test: the dispatcher
// config, how many dispatchers share the process, and the pool size.
type drainSetup struct {
	cfg         dispatcher.Config
	dispatchers int
	poolConns   int32
}

// outboxSetup is the configuration the drain and RSS items use: the
// settled result of the sweeps (see bench/tuning-log.md).
func outboxSetup() drainSetup {
	return drainSetup{
		cfg: dispatcher.Config{
			Claim:         dispatcher.ClaimUnorderedOnly,
			Batch:         2000,
			Concurrency:   16,
			FinalizeBatch: 4000,
			FinalizeDelay: 2 * time.Millisecond,
			StatsInterval: -1,
		},
		dispatchers: 1,
		poolConns:   8,
	}
}

func (s drainSetup) String() string {
	c := s.cfg
	return fmt.Sprintf("%d dispatcher(s), Batch %d, Concurrency %d, FinalizeBatch %d, FinalizeDelay %s, pool MaxConns %d, Claim %s, LISTEN on",
		s.dispatchers, c.Batch, c.Concurrency, c.FinalizeBatch, c.FinalizeDelay, s.poolConns, c.Claim)
}

var noopPublisher = dispatcher.PublisherFunc(func(context.Context, dispatcher.Message) error { return nil })

func quietLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// resetOutbox empties the outbox table and gives the next round a fresh,
// vacuumed table.
func resetOutbox(ctx context.Context, pool *pgxpool.Pool) error {
	if _, err := pool.Exec(ctx, "TRUNCATE outbox RESTART IDENTITY"); err != nil {
		return err
	}
	_, err := pool.Exec(ctx, "VACUUM ANALYZE outbox")
	return err
}

// settle runs right before a measured round of either system: VACUUM
// ANALYZE of the table, then a CHECKPOINT, so every round starts from the
// same WAL position relative to a checkpoint (full-page writes included)
// instead of whichever round a timed checkpoint happens to land in.
func settle(ctx context.Context, pool *pgxpool.Pool, table string) error {
	if _, err := pool.Exec(ctx, "VACUUM ANALYZE "+table); err != nil {
		return err
	}
	_, err := pool.Exec(ctx, "CHECKPOINT")
	return err
}

// enqueueTx is how many events one enqueueOutbox transaction carries (one
// COPY each).
const enqueueTx = 5000

// enqueueOutbox inserts n unordered messages with the public API
// (dispatcher.EnqueueMany: one COPY per enqueueTx), payload {"num":i} as
// River's benchmark args.
func enqueueOutbox(ctx context.Context, pool *pgxpool.Pool, n int, ordered bool, aggregates int) error {
	events := make([]dispatcher.Event, 0, enqueueTx)
	for i := 0; i < n; i += enqueueTx {
		events = benchEvents(events[:0], i, min(i+enqueueTx, n), ordered, aggregates)
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			_, err := dispatcher.EnqueueMany(ctx, tx, events)
			return err
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// benchEvents appends the events numbered from to to-1: payload {"num":i},
// spread over aggregates aggregate ids (all "a1" when aggregates is 0).
func benchEvents(events []dispatcher.Event, from, to int, ordered bool, aggregates int) []dispatcher.Event {
	for i := from; i < to; i++ {
		agg := "a1"
		if aggregates > 0 {
			agg = "a" + strconv.Itoa(i%aggregates)
		}
		events = append(events, dispatcher.Event{
			AggregateType: "bench", AggregateID: agg, EventType: "benchmark",
			Payload: json.RawMessage(`{"num":` + strconv.Itoa(i) + `}`), Ordered: ordered,
		})
	}
	return events
}

// fillOutboxSQL inserts n pending rows (or done rows) with one INSERT ...
// SELECT generate_series: the fast way to build large tables.
func fillOutboxSQL(ctx context.Context, pool *pgxpool.Pool, n int, status string) error {
	const q = `
		INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload, status, done_at, attempts, lease_version)
		SELECT 'bench', 'a' || (g % 1000), 'benchmark', jsonb_build_object('num', g), $2,
		       CASE WHEN $2 = 'done' THEN now() END, CASE WHEN $2 = 'done' THEN 1 ELSE 0 END,
		       CASE WHEN $2 = 'done' THEN 1 ELSE 0 END
		  FROM generate_series(1, $1::integer) AS g`
	_, err := pool.Exec(ctx, q, n, status)
	return err
}

// drainOutbox runs the setup until n messages are finalized done and returns
// msg/s, measured from the start of Run to the flush that finalized the
// n-th message (the same end point as River's completion events: the
// completion is durable in the database).
func drainOutbox(ctx context.Context, url string, s drainSetup, n int, pub dispatcher.Publisher) (float64, time.Duration, error) {
	pool, err := newPool(ctx, url, s.poolConns)
	if err != nil {
		return 0, 0, err
	}
	defer pool.Close()
	if err := pool.Ping(ctx); err != nil {
		return 0, 0, err
	}
	if pub == nil {
		pub = noopPublisher
	}
	ds := make([]*dispatcher.Dispatcher, s.dispatchers)
	for i := range ds {
		cfg := s.cfg
		cfg.Logger = quietLogger()
		if ds[i], err = dispatcher.New(pool, pub, cfg); err != nil {
			return 0, 0, err
		}
	}
	runCtx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	start := time.Now()
	for _, d := range ds {
		wg.Add(1)
		go func() { defer wg.Done(); _ = d.Run(runCtx) }()
	}
	deadline := time.Now().Add(10 * time.Minute)
	var published int64
	for time.Now().Before(deadline) {
		published = 0
		for _, d := range ds {
			published += d.Stats().Published
		}
		if published >= int64(n) {
			break
		}
		time.Sleep(500 * time.Microsecond)
	}
	elapsed := time.Since(start)
	cancel()
	wg.Wait()
	if published < int64(n) {
		return 0, 0, fmt.Errorf("drain: only %d of %d published before the deadline", published, n)
	}
	return float64(n) / elapsed.Seconds(), elapsed, nil
}

func countDone(ctx context.Context, pool *pgxpool.Pool) (int64, error) {
	var n int64
	err := pool.QueryRow(ctx, "SELECT count(*) FROM outbox WHERE status = 'done'").Scan(&n)
	return n, err
}

// runDrain is item 1: pgoutbox vs River, alternating rounds, median.
func runDrain(ctx context.Context, e *env) error {
	n := 100_000
	e.res.DrainN = n
	s := outboxSetup()
	e.res.OutboxConfig = s.String()
	e.res.RiverConfig = riverSetupString()
	rp, err := newPool(ctx, e.riverURL, 4)
	if err != nil {
		return err
	}
	defer rp.Close()
	// Before every round of either system: both tables vacuumed (so that no
	// autovacuum of the previous round's table runs during this one), both
	// analyzed, then a CHECKPOINT.
	settleAll := func() error {
		if _, err := rp.Exec(ctx, "VACUUM ANALYZE river_job"); err != nil {
			return err
		}
		return settle(ctx, e.outbox, "outbox")
	}
	ceil, cleanup, err := newCeilingRunner(e, ceilingDispatcher)
	if err != nil {
		return err
	}
	defer cleanup()
	e.res.CeilingBatch = ceil.batch
	e.res.CeilingClients = ceilingClients
	e.res.CeilingRoundRows = 200_000
	// One warm-up round each (not counted): page cache, plan caches. The
	// order of the three systems rotates from round to round.
	systems := []string{"river", "outbox", "ceiling", "zero", "relay", "relay4"}
	for round := -1; round < e.o.rounds; round++ {
		k := (round + 1) % len(systems)
		order := append(append([]string(nil), systems[k:]...), systems[:k]...)
		for _, sys := range order {
			switch sys {
			case "ceiling":
				if err := ceil.prepare(ctx, e, e.res.CeilingRoundRows); err != nil {
					return err
				}
				if err := settleAll(); err != nil {
					return err
				}
				rate, err := ceil.run(ctx, e, ceilingClients, e.res.CeilingRoundRows)
				if err != nil {
					return err
				}
				if round >= 0 {
					e.res.CeilingRounds = append(e.res.CeilingRounds, rate)
				}
			case "zero", "relay", "relay4":
				rate, cpu, err := drainDefaultsRound(ctx, e, sys, round, n, settleAll)
				if err != nil {
					return err
				}
				if round >= 0 {
					e.res.addDefaults(sys, rate, cpu)
				}
			case "outbox":
				if err := resetOutbox(ctx, e.outbox); err != nil {
					return err
				}
				if err := enqueueOutbox(ctx, e.outbox, n, false, 1000); err != nil {
					return err
				}
				if err := settleAll(); err != nil {
					return err
				}
				var stop func()
				if round >= 0 {
					stop = e.startProfile()
				}
				rate, elapsed, err := drainOutbox(ctx, e.outboxURL, s, n, nil)
				if stop != nil {
					stop()
				}
				if err != nil {
					return err
				}
				done, err := countDone(ctx, e.outbox)
				if err != nil {
					return err
				}
				if done != int64(n) {
					return fmt.Errorf("pgoutbox round %d: %d rows done, want %d", round, done, n)
				}
				logf("round %d pgoutbox: %d messages in %s = %.0f msg/s", round, n, elapsed.Round(time.Millisecond), rate)
				if round >= 0 {
					e.res.DrainOutbox = append(e.res.DrainOutbox, rate)
				}
			case "river":
				rate, elapsed, err := drainRiver(ctx, rp, n, settleAll)
				if err != nil {
					return err
				}
				logf("round %d River:    %d jobs in %s = %.0f jobs/s", round, n, elapsed.Round(time.Millisecond), rate)
				if round >= 0 {
					e.res.DrainRiver = append(e.res.DrainRiver, rate)
				}
			}
		}
	}
	e.res.DrainVerified = fmt.Sprintf("after every pgoutbox round: count(status = 'done') = %d; after every River round: %d completion events", n, n)
	e.res.CeilingRate = median(e.res.CeilingRounds)
	logf("median pgoutbox %.0f msg/s, River %.0f jobs/s, ratio %.2f; SQL ceiling %.0f rows/s, pgoutbox at %.0f%% of it",
		median(e.res.DrainOutbox), median(e.res.DrainRiver), median(e.res.DrainOutbox)/median(e.res.DrainRiver),
		e.res.CeilingRate, 100*median(e.res.DrainOutbox)/e.res.CeilingRate)
	logf("defaults: zero Config %.0f msg/s (%.2fx River), pgoutbox run %.0f msg/s (%.2fx River), 4 x pgoutbox run %.0f msg/s (%.2fx one)",
		median(e.res.DrainZero), median(e.res.DrainZero)/median(e.res.DrainRiver),
		median(e.res.DrainRelay), median(e.res.DrainRelay)/median(e.res.DrainRiver),
		median(e.res.DrainRelay4), median(e.res.DrainRelay4)/median(e.res.DrainRelay))
	return nil
}

// counterPublisher counts publishes (for sweeps that need none of the rest).
type counterPublisher struct{ n atomic.Int64 }

func (c *counterPublisher) Publish(context.Context, dispatcher.Message) error {
	c.n.Add(1)
	return nil
}
