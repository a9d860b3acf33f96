package queries_test

import (
	"context"
	"testing"
	"time"

	"github.com/pgoutbox/pgoutbox/db"
	"github.com/pgoutbox/pgoutbox/internal/pgtest"
)

// BenchmarkFinalizeFailures measures the failure path's one statement:
// OutboxFinalizeMany writing 'retry' for a claimed batch of 2,000 (each
// message failing again and again, so the attempt history fills its 20
// slots and then overwrites), reporting the statement's time and WAL per
// failed attempt.
//
//	go test -run '^$' -bench FinalizeFailures -benchtime 40x ./queries/
func BenchmarkFinalizeFailures(b *testing.B) {
	const n = 2000
	pool := pgtest.NewPool(b)
	ctx := context.Background()
	q := db.New(pool)
	if _, err := pool.Exec(ctx, `INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
		SELECT 'order', 'o-' || g, 'OrderPaid', '{"n":1}' FROM generate_series(1, $1) AS g`, n); err != nil {
		b.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `VACUUM ANALYZE outbox`); err != nil {
		b.Fatal(err)
	}
	var wal, rows int64
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		cs, err := claimWith(ctx, q, "relay-a/1730d9344667b910.1", n, time.Minute, 1<<20)
		if err != nil || len(cs) != n {
			b.Fatalf("claim: %d, %v", len(cs), err)
		}
		p := db.OutboxFinalizeManyParams{MaxDeferAge: time.Hour, UnorderedOnly: true}
		for _, c := range cs {
			p.Ids = append(p.Ids, c.ID)
			p.LeaseVersions = append(p.LeaseVersions, c.LeaseVersion)
			p.LeaseOwners = append(p.LeaseOwners, c.Owner)
			p.Outcomes = append(p.Outcomes, "retry")
			p.DelaysUs = append(p.DelaysUs, 0)
			p.Errors = append(p.Errors, `retryable: webhook: receiver answered 500 Internal Server Error: "boom: the receiver's database is locked"`)
			p.History = append(p.History, "retry")
			p.Answers = append(p.Answers, "HTTP 500 Internal Server Error: boom: the receiver's database is locked")
		}
		var before string
		if err := pool.QueryRow(ctx, `SELECT pg_current_wal_insert_lsn()::text`).Scan(&before); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		got, err := q.OutboxFinalizeMany(ctx, p)
		b.StopTimer()
		if err != nil || len(got.Ids) != n {
			b.Fatalf("finalize: %v", err)
		}
		var w int64
		if err := pool.QueryRow(ctx, `SELECT pg_current_wal_insert_lsn() - $1::pg_lsn`, before).Scan(&w); err != nil {
			b.Fatal(err)
		}
		wal += w
		rows += n
		b.StartTimer()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(rows), "ns/attempt")
	b.ReportMetric(float64(wal)/float64(rows), "wal-B/attempt")
}
