package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

const claimCostBatch = 100

// runClaimCost is item 3: the single-statement claim's latency (singleClaimSQL, prepared
// as sqlc's generated code prepares a query; batch of 100, 10,000 pending
// rows) with 0, 100,000 and 1,000,000 done rows retained. Each level gets
// its own freshly migrated database on the same server: done rows first
// (older ids, as retention leaves them), then the pending rows, then VACUUM
// ANALYZE and CHECKPOINT. The claims then interleave the three levels (one
// claim on each per iteration), so noise from elsewhere on the machine hits
// all three alike. Each claim runs in a transaction that is rolled back, so
// every iteration sees the same queue; the figure is the claim statement's
// client-side round trip.
func runClaimCost(ctx context.Context, e *env) error {
	iters := 400
	if e.o.full {
		iters = 2000
	}
	levels := []int{0, 100_000, 1_000_000}
	type level struct {
		pool *pgxpool.Pool
		conn *pgxpool.Conn
		lat  []time.Duration
	}
	ls := make([]*level, len(levels))
	defer func() {
		for _, l := range ls {
			if l != nil {
				if l.conn != nil {
					l.conn.Release()
				}
				l.pool.Close()
			}
		}
		for _, retained := range levels {
			_ = e.adminExec(ctx, fmt.Sprintf("DROP DATABASE IF EXISTS outbox_claim_%d WITH (FORCE)", retained))
		}
	}()
	for i, retained := range levels {
		name := fmt.Sprintf("outbox_claim_%d", retained)
		t0 := time.Now()
		pool, err := e.migratedDatabase(ctx, name)
		if err != nil {
			return err
		}
		ls[i] = &level{pool: pool}
		if retained > 0 {
			if err := fillOutboxSQL(ctx, pool, retained, "done"); err != nil {
				return err
			}
		}
		if err := fillOutboxSQL(ctx, pool, 10_000, "pending"); err != nil {
			return err
		}
		if err := settle(ctx, pool, "outbox"); err != nil {
			return err
		}
		if ls[i].conn, err = pool.Acquire(ctx); err != nil {
			return err
		}
		logf("claim cost: database %s with %d done + 10,000 pending rows built in %s", name, retained, time.Since(t0).Round(time.Millisecond))
	}
	claim := strings.NewReplacer(
		"@max_attempts::integer", "$1::integer",
		"@recover_expired::boolean", "$2::boolean",
		"@batch::integer", "$3::integer",
		"@owner::text", "$4::text",
		"@lease::interval", "$5::interval",
	).Replace(singleClaimSQL)
	args := []any{12, true, claimCostBatch, "bench", time.Minute}
	for i := -20; i < iters; i++ { // 20 warm-up rounds (plan cache, buffers)
		for _, l := range ls {
			tx, err := l.conn.Begin(ctx)
			if err != nil {
				return err
			}
			start := time.Now()
			rows, err := claimedIDs(ctx, tx, claim, args)
			el := time.Since(start)
			_ = tx.Rollback(ctx)
			if err != nil || len(rows) != claimCostBatch {
				return fmt.Errorf("claim returned %d rows: %v", len(rows), err)
			}
			if i >= 0 {
				l.lat = append(l.lat, el)
			}
		}
	}
	for i, retained := range levels {
		l := ls[i]
		plan, err := claimPlan(ctx, l.pool)
		if err != nil {
			return err
		}
		slices.Sort(l.lat)
		var sum time.Duration
		for _, x := range l.lat {
			sum += x
		}
		c := claimCost{Retained: retained, P50: percentile(l.lat, 0.5), P99: percentile(l.lat, 0.99),
			Mean: sum / time.Duration(len(l.lat)), Iter: iters, Plan: plan}
		logf("claim cost with %d done rows: p50 %s, mean %s, p99 %s; %s", retained, c.P50.Round(time.Microsecond),
			c.Mean.Round(time.Microsecond), c.P99.Round(time.Microsecond), plan)
		e.res.ClaimCost = append(e.res.ClaimCost, c)
	}
	return nil
}

// claimPlan returns the index the ready branch of the claim uses and its
// buffer count, from EXPLAIN (ANALYZE, BUFFERS) in a rolled-back transaction.
func claimPlan(ctx context.Context, pool *pgxpool.Pool) (string, error) {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return "", err
	}
	defer tx.Rollback(ctx)
	sql := strings.Replace(claimSQL(claimCostBatch, "'bench'"), "WITH expired", "EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) WITH expired", 1)
	rows, err := tx.Query(ctx, sql)
	if err != nil {
		return "", err
	}
	defer rows.Close()
	var lines []string
	for rows.Next() {
		var l string
		if err := rows.Scan(&l); err != nil {
			return "", err
		}
		lines = append(lines, l)
	}
	if err := rows.Err(); err != nil {
		return "", err
	}
	var index, exec string
	inReady := false
	for i, l := range lines {
		t := strings.TrimSpace(l)
		if strings.HasPrefix(t, "CTE ready") {
			inReady = true
		}
		if inReady && index == "" && (strings.Contains(t, "Scan using") || strings.Contains(t, "Seq Scan")) {
			index = strings.TrimPrefix(t, "->  ")
			if j := strings.Index(index, " on "); j > 0 {
				index = index[:j]
			}
			for _, m := range lines[i+1 : min(len(lines), i+6)] {
				if s := strings.TrimSpace(m); strings.HasPrefix(s, "Buffers:") {
					index += " (" + s + ")"
					break
				}
			}
		}
		if strings.HasPrefix(t, "Execution Time:") {
			exec = t
		}
	}
	if index == "" {
		index = "ready branch: " + strings.Join(lines, " | ")
	}
	return index + "; " + exec, nil
}

// claimedIDs runs a claim and returns the ids it claimed.
func claimedIDs(ctx context.Context, tx pgx.Tx, sql string, args []any) ([]int64, error) {
	rows, err := tx.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (int64, error) {
		vals, err := r.Values()
		if err != nil {
			return 0, err
		}
		return vals[0].(int64), nil
	})
}
