package console

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// customPlans runs every query with its own custom plan (the unnamed
// statement, QueryExecModeExec): the console's optional filters (narg IS
// NULL OR ...) and caps would otherwise meet a cached generic plan that
// cannot know which filters are set or how small the partial indexes are.
type customPlans struct{ pool *pgxpool.Pool }

func (c customPlans) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	return c.pool.Exec(ctx, sql, append([]any{pgx.QueryExecModeExec}, args...)...)
}

func (c customPlans) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	return c.pool.Query(ctx, sql, append([]any{pgx.QueryExecModeExec}, args...)...)
}

func (c customPlans) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return c.pool.QueryRow(ctx, sql, append([]any{pgx.QueryExecModeExec}, args...)...)
}
