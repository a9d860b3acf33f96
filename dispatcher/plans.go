package dispatcher

import (
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/pgoutbox/db"
)

// customPlans runs the dispatcher's queries so that PostgreSQL plans every
// execution with its actual parameters and never falls back to a cached
// generic plan.
//
// pgx's default mode prepares each statement once; after five executions
// PostgreSQL may switch that prepared statement to a generic plan, made once
// from the table statistics of that moment and kept until the statistics
// change. When those statistics say the outbox is empty (a new table, or
// right after a purge or a TRUNCATE, before autovacuum analyzes it again),
// the generic plan is a sequential scan, for the claim's UPDATE too, and it
// stays while the table fills: measured in the sustained benchmark at
// 10,000 msg/s, a claim of 1,040 rows took 150 ms (seq scan over 38,880
// rows) and the dispatcher fell behind by a second. Custom plans cost a
// planning pass per query (well under a millisecond here) and always use
// the indexes the query comments name.
//
// QueryExecModeCacheDescribe keeps one round trip (the statement's
// description is cached per connection; it executes through the unnamed
// statement); with the description cache disabled in the pool's config,
// QueryExecModeDescribeExec does the same in two.
//
// It is also where the queries are rewritten once each for Config.Table and
// Config.Schema (rename is nil for the default table).
type customPlans struct {
	pool   *pgxpool.Pool
	mode   pgx.QueryExecMode
	rename *renamer
}

var _ db.DBTX = customPlans{}

func newCustomPlans(pool *pgxpool.Pool, rename *renamer) customPlans {
	mode := pgx.QueryExecModeCacheDescribe
	if pool.Config().ConnConfig.DescriptionCacheCapacity == 0 {
		mode = pgx.QueryExecModeDescribeExec
	}
	return customPlans{pool: pool, mode: mode, rename: rename}
}

func (c customPlans) args(args []any) []any {
	return append([]any{c.mode}, args...)
}

// Exec, Query and QueryRow run on a prepared session (session.go).
