package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/pgoutbox/db"
	"github.com/pgoutbox/pgoutbox/migrations"
)

// Item 4b: the producer's tax. What an outbox INSERT costs a business
// transaction against the same INSERT into a plain table with only a
// primary key: producerClients sessions, each transaction one INSERT
// (autocommit), as fast as they go, for every case in turn. The outbox is
// measured twice in the same run: as this build migrates it ("after") and
// as migration 00009 left it ("before": the same database migrated up and
// then down to 00009, in a database of its own). Per case: committed
// transactions per second and WAL bytes per transaction
// (pg_current_wal_lsn around the round, after a CHECKPOINT, so every case
// pays its full-page images alike).
//
// The bound of one hot aggregate: its producers' COMMITs take the
// aggregate's lock one at a time, and each holder releases it only once its
// commit record is flushed, so they cannot share a WAL flush: at best one
// commit per flush. Measured as one session committing plain INSERTs (each
// waits for its own flush).
//
// Batch producers: the same sessions, each transaction one COPY of N events
// (producers_copy.go), into the plain table and through the library's
// dispatcher.EnqueueMany, per event against the plain COPY.

const (
	producerClients       = 8
	producerBeforeVersion = 9
	producerBeforeDB      = "outbox_before"
)

// producerCase is one measured producer workload.
type producerCase struct {
	Name     string // plain, unordered, ordered, ordered-hot, flush-bound; copy-plain, copy-unordered, copy-ordered
	Schema   string // after (this build), before (migration 00009); "" for the plain table
	Rounds   []float64
	WALs     []float64
	TxPerSec float64 // median of Rounds
	WALPerTx float64 // median of WALs

	// PerTx is the events per transaction: 1 for the one-INSERT cases
	// (0 in results from before the COPY cases), N for the COPY cases.
	PerTx        int
	EventsPerSec float64 // TxPerSec × events per transaction
	WALPerEvent  float64 // WALPerTx / events per transaction
}

func (c producerCase) label() string {
	l := c.Name
	if c.Schema != "" {
		l += "/" + c.Schema
	}
	if c.PerTx > 1 {
		l += " ×" + strconv.Itoa(c.PerTx)
	}
	return l
}

// events is the events per transaction (1 for the one-INSERT cases).
func (c producerCase) events() int { return max(c.PerTx, 1) }

// ordered reports whether the case writes ordered events.
func (c producerCase) ordered() bool {
	return !strings.HasSuffix(strings.TrimSuffix(c.Name, "-idle"), "unordered")
}

// runProducers is item 4b. Rounds are interleaved (every case once per
// round, in the same order) so that load from elsewhere on the machine
// spreads over all cases; the median round is reported.
func runProducers(ctx context.Context, e *env) error {
	dur := 5 * time.Second
	if e.o.full {
		dur = 15 * time.Second
	}
	beforeURL := withDB(e.outboxURL, producerBeforeDB)
	if err := createBefore(ctx, e, beforeURL); err != nil {
		return fmt.Errorf("producers: the before schema: %w", err)
	}
	after, err := newPool(ctx, e.outboxURL, producerClients)
	if err != nil {
		return err
	}
	defer after.Close()
	before, err := newPool(ctx, beforeURL, producerClients)
	if err != nil {
		return err
	}
	defer before.Close()
	if _, err := after.Exec(ctx, `CREATE TABLE IF NOT EXISTS bench_plain (
	    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	    aggregate_type text NOT NULL, aggregate_id text NOT NULL, event_type text NOT NULL,
	    payload jsonb NOT NULL, created_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		return err
	}
	cases := []*producerCase{
		{Name: "plain", PerTx: 1},
		{Name: "unordered", Schema: "before", PerTx: 1}, {Name: "unordered", Schema: "after", PerTx: 1},
		{Name: "unordered-idle", Schema: "after", PerTx: 1},
		{Name: "ordered", Schema: "before", PerTx: 1}, {Name: "ordered", Schema: "after", PerTx: 1},
		{Name: "ordered-idle", Schema: "after", PerTx: 1},
		{Name: "ordered-hot", Schema: "before", PerTx: 1}, {Name: "ordered-hot", Schema: "after", PerTx: 1},
		{Name: "flush-bound", PerTx: 1},
	}
	cases = append(cases, producerCopyCases()...) // producers_copy.go
	for round := 0; round < e.o.rounds; round++ {
		for _, c := range cases {
			pool := after
			if c.Schema == "before" {
				pool = before
			}
			var rate, wal float64
			if strings.HasPrefix(c.Name, "copy-") {
				rate, wal, err = copyRound(ctx, pool, c.Name, c.PerTx, dur)
			} else {
				rate, wal, err = produceRound(ctx, pool, c.Name, dur)
			}
			if err != nil {
				return fmt.Errorf("%s: %w", c.label(), err)
			}
			if c.Schema != "" {
				if err := checkSequenced(ctx, pool, c.ordered(), c.Schema == "after"); err != nil {
					return fmt.Errorf("%s: %w", c.label(), err)
				}
			}
			c.Rounds, c.WALs = append(c.Rounds, rate), append(c.WALs, wal)
			if c.PerTx > 1 {
				logf("producers: round %d %-29s %5.0f tx/s = %7.0f events/s, %4.0f B WAL/event", round+1, c.label(), rate, rate*float64(c.PerTx), wal/float64(c.PerTx))
			} else {
				logf("producers: round %d %-18s %6.0f tx/s, %4.0f B WAL/tx", round+1, c.label(), rate, wal)
			}
		}
	}
	for _, c := range cases {
		c.TxPerSec, c.WALPerTx = median(c.Rounds), median(c.WALs)
		c.EventsPerSec, c.WALPerEvent = c.TxPerSec*float64(c.events()), c.WALPerTx/float64(c.events())
		e.res.Producers = append(e.res.Producers, *c)
	}
	e.res.ProducerClients = producerClients
	e.res.ProducerSeconds = dur.Seconds()
	for _, l := range producerTable(e.res) {
		fmt.Println(l)
	}
	return nil
}

// createBefore creates the before database: every migration up, then down
// to producerBeforeVersion.
func createBefore(ctx context.Context, e *env, url string) error {
	if err := e.adminExec(ctx, "DROP DATABASE IF EXISTS "+producerBeforeDB+" WITH (FORCE)"); err != nil {
		return err
	}
	if err := e.adminExec(ctx, "CREATE DATABASE "+producerBeforeDB); err != nil {
		return err
	}
	pool, err := newPool(ctx, url, 2)
	if err != nil {
		return err
	}
	defer pool.Close()
	m, err := migrations.FromPool(pool)
	if err != nil {
		return err
	}
	defer m.Close()
	if _, err := m.Up(ctx); err != nil {
		return err
	}
	_, err = m.DownTo(ctx, producerBeforeVersion)
	return err
}

// produceRound empties the case's table, checkpoints, and runs its
// producers for dur: committed transactions per second and WAL bytes per
// transaction.
func produceRound(ctx context.Context, pool *pgxpool.Pool, kind string, dur time.Duration) (float64, float64, error) {
	table, clients := "outbox", producerClients
	var insert string // the outbox cases run OutboxEnqueue
	switch kind {
	case "plain":
		table = "bench_plain"
		insert = `INSERT INTO bench_plain (aggregate_type, aggregate_id, event_type, payload) VALUES ('bench', $1, 'benchmark', $2)`
	case "flush-bound":
		table, clients = "bench_plain", 1
		insert = `INSERT INTO bench_plain (aggregate_type, aggregate_id, event_type, payload) VALUES ('bench', $1, 'benchmark', $2)`
	}
	if strings.HasSuffix(kind, "-idle") {
		// A relay waiting idle (migration 00015): a session holds the idle
		// lock as a relay's LISTEN connection does while it waits for a
		// wake-up, so every producer transaction queues one (PostgreSQL
		// commits notifying transactions one at a time). Without it no relay waits: the
		// same as relays that are all busy claiming.
		release, err := holdIdle(ctx, pool)
		if err != nil {
			return 0, 0, err
		}
		defer release()
	}
	ordered := !strings.HasPrefix(kind, "unordered")
	return walRound(ctx, pool, table, clients, dur, func(ctx context.Context, p, i int) error {
		agg := "p" + strconv.Itoa(p) + "-" + strconv.Itoa(i%100)
		if kind == "ordered-hot" {
			agg = "hot"
		}
		payload := `{"num":` + strconv.Itoa(i) + `}`
		var err error
		if table == "outbox" {
			// The statement dispatcher.Enqueue runs (its wake-up included).
			_, err = db.New(pool).OutboxEnqueue(ctx, db.OutboxEnqueueParams{AggregateType: "bench", AggregateID: agg,
				EventType: "benchmark", Payload: []byte(payload), Ordered: ordered})
		} else {
			_, err = pool.Exec(ctx, insert, agg, payload)
		}
		return err
	})
}

// walRound empties table, checkpoints, and runs clients sessions for dur,
// each calling tx(ctx, session, i) for its i-th transaction until the
// deadline: committed transactions per second and WAL bytes per
// transaction (pg_current_wal_lsn around the round).
func walRound(ctx context.Context, pool *pgxpool.Pool, table string, clients int, dur time.Duration, tx func(ctx context.Context, p, i int) error) (float64, float64, error) {
	for _, sql := range []string{"TRUNCATE " + table + " RESTART IDENTITY", "VACUUM ANALYZE " + table, "CHECKPOINT"} {
		if _, err := pool.Exec(ctx, sql); err != nil {
			return 0, 0, err
		}
	}
	var lsn0, lsn1 string
	if err := pool.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&lsn0); err != nil {
		return 0, 0, err
	}
	var committed atomic.Int64
	var firstErr error
	var errOnce sync.Once
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	start := time.Now()
	deadline := start.Add(dur)
	for p := 0; p < clients; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; time.Now().Before(deadline); i++ {
				if err := tx(rctx, p, i); err != nil {
					errOnce.Do(func() { firstErr = err; cancel() })
					return
				}
				committed.Add(1)
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if firstErr != nil {
		return 0, 0, firstErr
	}
	var wal float64
	if err := pool.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&lsn1); err != nil {
		return 0, 0, err
	}
	if err := pool.QueryRow(ctx, `SELECT pg_wal_lsn_diff($1::pg_lsn, $2::pg_lsn)::float8`, lsn1, lsn0).Scan(&wal); err != nil {
		return 0, 0, err
	}
	n := committed.Load()
	return float64(n) / elapsed.Seconds(), wal / float64(max(n, 1)), nil
}

// checkSequenced verifies, once they are decided, that ordered rows all got
// their commit position (and unordered rows none) and, with positions, that each ordered row's
// prev_seq names its aggregate's previous row.
func checkSequenced(ctx context.Context, pool *pgxpool.Pool, ordered, positions bool) error {
	// No relay ran: decide the ordered events as one would.
	if _, err := pool.Exec(ctx, `DO $$ BEGIN WHILE outbox_resolve_heads(10000) > 0 LOOP END LOOP; END $$`); err != nil {
		return err
	}
	var bad int64
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM outbox WHERE ordered <> $1 OR (seq IS NULL) = $1`, ordered).Scan(&bad); err != nil {
		return err
	}
	if bad > 0 {
		return fmt.Errorf("%d rows with the wrong ordered/seq state", bad)
	}
	if !ordered || !positions {
		return nil
	}
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM (
	    SELECT prev_seq, lag(seq) OVER (PARTITION BY aggregate_id ORDER BY seq) AS want FROM outbox WHERE ordered) AS s
	     WHERE prev_seq IS DISTINCT FROM want`).Scan(&bad); err != nil {
		return err
	}
	if bad > 0 {
		return fmt.Errorf("%d ordered rows whose prev_seq is not their aggregate's previous seq", bad)
	}
	return nil
}

// holdIdle takes the idle lock of queries/wake.sql (OutboxWakeIdle) on a
// connection of its own until release.
func holdIdle(ctx context.Context, pool *pgxpool.Pool) (func(), error) {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	var ok bool
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock(('outbox'::regclass)::oid::integer, 1869968485)`).Scan(&ok); err != nil || !ok {
		conn.Release()
		return nil, fmt.Errorf("the idle lock: taken %v, %v", ok, err)
	}
	return func() {
		_, _ = conn.Exec(context.Background(), `SELECT pg_advisory_unlock_all()`)
		conn.Release()
	}, nil
}
