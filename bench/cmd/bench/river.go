package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

// River is configured the way `river bench` configures itself (its
// cmd/river/riverbench): FetchCooldown 2ms, FetchPollInterval 20ms, one
// queue with 2,000 workers, a no-op worker, jobs inserted with InsertMany in
// batches of 5,000. Its pool gets the same 8 connections as pgoutbox's (the
// river CLI would use pgxpool's default, max(4, NumCPU) = 4 here; 4, 8 and
// 16 measured alike during development, within the machine's noise).
const (
	riverFetchCooldown     = 2 * time.Millisecond
	riverFetchPollInterval = 20 * time.Millisecond
	riverMaxWorkers        = 2000
	riverInsertBatch       = 5000
	riverPoolConns         = 8
)

func riverSetupString() string {
	return fmt.Sprintf("river.Client (v0.51.2, riverpgxv5), queue default MaxWorkers %d, FetchCooldown %s, FetchPollInterval %s, no-op worker, InsertMany in batches of %d, pool MaxConns %d (as pgoutbox)",
		riverMaxWorkers, riverFetchCooldown, riverFetchPollInterval, riverInsertBatch, riverPoolConns)
}

type benchArgs struct {
	Num int `json:"num"`
}

func (benchArgs) Kind() string { return "benchmark" }

type benchWorker struct {
	river.WorkerDefaults[benchArgs]
}

func (w *benchWorker) Work(context.Context, *river.Job[benchArgs]) error { return nil }

func migrateRiver(ctx context.Context, url string) error {
	pool, err := newPool(ctx, url, 2)
	if err != nil {
		return err
	}
	defer pool.Close()
	m, err := rivermigrate.New(riverpgxv5.New(pool), nil)
	if err != nil {
		return err
	}
	_, err = m.Migrate(ctx, rivermigrate.DirectionUp, nil)
	return err
}

// drainRiver inserts n jobs with InsertMany, then starts a client and
// measures from Start to the n-th completion event (River's subscription
// reports a completion once its completer has written it).
func drainRiver(ctx context.Context, admin *pgxpool.Pool, n int, settleAll func() error) (float64, time.Duration, error) {
	if _, err := admin.Exec(ctx, "TRUNCATE river_job"); err != nil {
		return 0, 0, err
	}
	if _, err := admin.Exec(ctx, "VACUUM ANALYZE river_job"); err != nil {
		return 0, 0, err
	}
	conns := int32(riverPoolConns)
	if v, err := strconv.Atoi(os.Getenv("BENCH_RIVER_POOL")); err == nil && v > 0 { // development: pool size sweep
		conns = int32(v)
	}
	pool, err := newPool(ctx, admin.Config().ConnConfig.ConnString(), conns)
	if err != nil {
		return 0, 0, err
	}
	defer pool.Close()
	workers := river.NewWorkers()
	river.AddWorker(workers, &benchWorker{})
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		FetchCooldown:     riverFetchCooldown,
		FetchPollInterval: riverFetchPollInterval,
		Logger:            quietLogger(),
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: riverMaxWorkers}},
		Workers:           workers,
	})
	if err != nil {
		return 0, 0, err
	}
	params := make([]river.InsertManyParams, 0, riverInsertBatch)
	for i := 0; i < n; {
		params = params[:0]
		for ; i < n && len(params) < riverInsertBatch; i++ {
			params = append(params, river.InsertManyParams{Args: benchArgs{Num: i}})
		}
		if _, err := client.InsertMany(ctx, params); err != nil {
			return 0, 0, err
		}
	}
	if err := settleAll(); err != nil {
		return 0, 0, err
	}
	events, cancelSub := client.SubscribeConfig(&river.SubscribeConfig{
		ChanSize: n + 1000,
		Kinds:    []river.EventKind{river.EventKindJobCompleted, river.EventKindJobFailed, river.EventKindJobCancelled},
	})
	defer cancelSub()
	start := time.Now()
	if err := client.Start(ctx); err != nil {
		return 0, 0, err
	}
	completed, failed := 0, 0
	timeout := time.After(10 * time.Minute)
	var last time.Time
wait:
	for completed+failed < n {
		select {
		case ev := <-events:
			if ev == nil {
				break wait
			}
			if ev.Kind == river.EventKindJobCompleted {
				completed++
			} else {
				failed++
			}
			last = time.Now()
		case <-timeout:
			break wait
		}
	}
	stopCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := client.Stop(stopCtx); err != nil {
		return 0, 0, err
	}
	if completed != n {
		return 0, 0, fmt.Errorf("river: %d completed, %d failed, want %d completed", completed, failed, n)
	}
	var done int64
	if err := admin.QueryRow(ctx, "SELECT count(*) FROM river_job WHERE state = 'completed'").Scan(&done); err != nil {
		return 0, 0, err
	}
	if done != int64(n) {
		return 0, 0, fmt.Errorf("river: %d rows completed in river_job, want %d", done, n)
	}
	elapsed := last.Sub(start)
	return float64(n) / elapsed.Seconds(), elapsed, nil
}
