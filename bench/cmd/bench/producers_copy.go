package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/pgoutbox/dispatcher"
)

// Item 4b, batch producers: what the library's COPY enqueue costs per event
// against a plain COPY. The same producerClients sessions, each transaction
// one COPY of N events (BEGIN, COPY, COMMIT), as fast as they go:
//   - copy-plain: pgx CopyFrom into bench_plain (the plain table of the
//     one-INSERT cases): aggregate_type, aggregate_id, event_type, payload.
//   - copy-unordered: dispatcher.EnqueueMany, the public API a producer
//     calls, which validates every event and then writes them with one COPY
//     (dbcopy.OutboxEnqueueMany).
//   - copy-ordered: the same with Ordered set, every row of a transaction
//     its own aggregate (each session reuses its own N aggregates, so every
//     COMMIT sequences N aggregates, locked in key order, and no two sessions
//     share one).
//
// The outbox cases run against both schemas: EnqueueMany copies only
// columns that migration 00001 created, so it works against the before
// schema (00009) too. Per case: events per second and WAL bytes per event
// (the one-INSERT cases' method: pg_current_wal_lsn around the round, after
// a TRUNCATE, VACUUM ANALYZE and CHECKPOINT). The client's work (building
// and validating the events, encoding the COPY) counts: it runs on the same
// machine, and it is what a producer pays.

// producerCopySizes are the events per COPY transaction measured.
var producerCopySizes = []int{100, 1000}

// producerCopyCases are the COPY cases, per size: plain, then the outbox
// before and after, unordered then ordered.
func producerCopyCases() []*producerCase {
	var cases []*producerCase
	for _, n := range producerCopySizes {
		cases = append(cases, &producerCase{Name: "copy-plain", PerTx: n})
		for _, name := range []string{"copy-unordered", "copy-ordered"} {
			for _, schema := range []string{"before", "after"} {
				cases = append(cases, &producerCase{Name: name, Schema: schema, PerTx: n})
			}
		}
	}
	return cases
}

// copyRound runs one COPY case (copy-plain, copy-unordered, copy-ordered)
// for dur with perTx events per transaction: committed transactions per
// second and WAL bytes per transaction.
func copyRound(ctx context.Context, pool *pgxpool.Pool, kind string, perTx int, dur time.Duration) (float64, float64, error) {
	table := "outbox"
	if kind == "copy-plain" {
		table = "bench_plain"
	}
	plainColumns := []string{"aggregate_type", "aggregate_id", "event_type", "payload"}
	return walRound(ctx, pool, table, producerClients, dur, func(ctx context.Context, p, i int) error {
		tx, err := pool.Begin(ctx)
		if err != nil {
			return err
		}
		defer tx.Rollback(ctx) // a no-op after Commit
		prefix := "p" + strconv.Itoa(p) + "-"
		var n int64
		if kind == "copy-plain" {
			rows := make([][]any, perTx)
			for j := range rows {
				rows[j] = []any{"bench", prefix + strconv.Itoa(j), "benchmark", []byte(`{"num":` + strconv.Itoa(i*perTx+j) + `}`)}
			}
			n, err = tx.CopyFrom(ctx, pgx.Identifier{"bench_plain"}, plainColumns, pgx.CopyFromRows(rows))
		} else {
			events := make([]dispatcher.Event, perTx)
			for j := range events {
				events[j] = dispatcher.Event{
					AggregateType: "bench", AggregateID: prefix + strconv.Itoa(j), EventType: "benchmark",
					Payload: json.RawMessage(`{"num":` + strconv.Itoa(i*perTx+j) + `}`), Ordered: kind == "copy-ordered",
				}
			}
			n, err = dispatcher.EnqueueMany(ctx, tx, events)
		}
		if err != nil {
			return err
		}
		if n != int64(perTx) {
			return fmt.Errorf("COPY wrote %d rows, want %d", n, perTx)
		}
		return tx.Commit(ctx)
	})
}
