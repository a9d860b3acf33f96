package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/pgoutbox/pgoutbox/db"
)

const claimCostBatch = 100

// runClaimCost is item 3: OutboxClaim latency (batch of 100, 10,000 pending
// rows) with 0, 100,000 and 1,000,000 done rows retained. Each level starts
// from an empty table: done rows first (older ids, as retention leaves
// them), then the pending rows, then VACUUM ANALYZE and CHECKPOINT. Each
// claim runs in a transaction that is rolled back, so every iteration sees
// the same queue; the figure is the claim statement's round trip.
func runClaimCost(ctx context.Context, e *env) error {
	iters := 300
	if e.o.full {
		iters = 2000
	}
	for _, retained := range []int{0, 100_000, 1_000_000} {
		if err := resetOutbox(ctx, e.outbox); err != nil {
			return err
		}
		t0 := time.Now()
		if retained > 0 {
			if err := fillOutboxSQL(ctx, e.outbox, retained, "done"); err != nil {
				return err
			}
		}
		if err := fillOutboxSQL(ctx, e.outbox, 10_000, "pending"); err != nil {
			return err
		}
		if err := settle(ctx, e.outbox, "outbox"); err != nil {
			return err
		}
		logf("claim cost: %d done + 10,000 pending rows built in %s", retained, time.Since(t0).Round(time.Millisecond))
		conn, err := e.outbox.Acquire(ctx)
		if err != nil {
			return err
		}
		q := db.New(conn)
		params := db.OutboxClaimParams{Owner: "bench", Batch: claimCostBatch, Lease: time.Minute, MaxAttempts: 12, RecoverExpired: true}
		lat := make([]time.Duration, 0, iters)
		for i := -20; i < iters; i++ { // 20 warm-up claims (plan cache, buffers)
			tx, err := conn.Begin(ctx)
			if err != nil {
				conn.Release()
				return err
			}
			start := time.Now()
			rows, err := q.WithTx(tx).OutboxClaim(ctx, params)
			el := time.Since(start)
			_ = tx.Rollback(ctx)
			if err != nil || len(rows) != claimCostBatch {
				conn.Release()
				return fmt.Errorf("claim returned %d rows: %v", len(rows), err)
			}
			if i >= 0 {
				lat = append(lat, el)
			}
		}
		plan, err := claimPlan(ctx, e)
		conn.Release()
		if err != nil {
			return err
		}
		slices.Sort(lat)
		var sum time.Duration
		for _, l := range lat {
			sum += l
		}
		c := claimCost{Retained: retained, P50: percentile(lat, 0.5), P99: percentile(lat, 0.99),
			Mean: sum / time.Duration(len(lat)), Iter: iters, Plan: plan}
		logf("claim cost with %d done rows: p50 %s, mean %s, p99 %s; %s", retained, c.P50.Round(time.Microsecond),
			c.Mean.Round(time.Microsecond), c.P99.Round(time.Microsecond), plan)
		e.res.ClaimCost = append(e.res.ClaimCost, c)
	}
	return nil
}

// claimPlan returns the index the ready branch of the claim uses and its
// buffer count, from EXPLAIN (ANALYZE, BUFFERS) in a rolled-back transaction.
func claimPlan(ctx context.Context, e *env) (string, error) {
	tx, err := e.outbox.Begin(ctx)
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
