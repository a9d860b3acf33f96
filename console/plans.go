package console

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgoutbox/pgoutbox/db/consoledb"
	"github.com/pgoutbox/pgoutbox/dispatcher"
)

// customPlans runs every query with its own custom plan (the unnamed
// statement, QueryExecModeExec): the console's optional filters (narg IS
// NULL OR ...) and caps would otherwise meet a cached generic plan that
// cannot know which filters are set or how small the partial indexes are.
type customPlans struct {
	pool interface {
		Exec(context.Context, string, ...any) (pgconn.CommandTag, error)
		Query(context.Context, string, ...any) (pgx.Rows, error)
		QueryRow(context.Context, string, ...any) pgx.Row
	}
}

func (c customPlans) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	return c.pool.Exec(ctx, sql, append([]any{pgx.QueryExecModeExec}, args...)...)
}

func (c customPlans) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	return c.pool.Query(ctx, sql, append([]any{pgx.QueryExecModeExec}, args...)...)
}

func (c customPlans) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return c.pool.QueryRow(ctx, sql, append([]any{pgx.QueryExecModeExec}, args...)...)
}

// deliveredPerMinute runs OutboxConsoleDeliveredPerMinute in a read-only
// transaction with jit off (SET LOCAL): its cost grows with the deliveries
// it counts, and past jit_above_cost PostgreSQL compiled it for 2.7 s to
// run 0.2 s of index scans (412,000 deliveries in the hour).
func (c *Console) deliveredPerMinute(ctx context.Context, arg consoledb.OutboxConsoleDeliveredPerMinuteParams) ([]*consoledb.OutboxConsoleDeliveredPerMinuteRow, error) {
	tx, err := c.pool.BeginTx(ctx, pgx.TxOptions{AccessMode: pgx.ReadOnly})
	if err != nil {
		return nil, err
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // read-only
	if _, err := tx.Exec(ctx, "SET LOCAL jit = off"); err != nil {
		return nil, err
	}
	dbtx, err := dispatcher.TableDBTX(customPlans{pool: tx}, c.cfg.Table, c.cfg.Schema)
	if err != nil {
		return nil, err
	}
	return consoledb.New(dbtx).OutboxConsoleDeliveredPerMinute(ctx, arg)
}
