package dispatcher

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgoutbox/pgoutbox/db"
)

// inReadCommitted runs fn in a transaction that is READ COMMITTED whatever
// default_transaction_isolation the database or role sets: the statements
// that read after taking the aggregates' locks (deciding and repairing
// heads, sequencing rows) need a fresh snapshot per statement, and refuse
// to run otherwise. The transaction commits when fn returns nil.
func (d *Dispatcher) inReadCommitted(ctx context.Context, fn func(q *db.Queries) error) error {
	conn, err := d.plans.acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err != nil {
		return err
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // no-op after Commit
	var dbtx db.DBTX = txPlans{tx: tx, plans: d.plans}
	if !d.cfg.DisableTracing {
		dbtx = tracedDB{inner: dbtx, t: d.tracing}
	}
	if err := fn(db.New(dbtx)); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// txPlans runs the dispatcher's queries in tx as customPlans does on the
// pool: renamed for the table, planned with their parameters.
type txPlans struct {
	tx    pgx.Tx
	plans customPlans
}

func (t txPlans) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	return t.tx.Exec(ctx, t.plans.rename.sql(sql), t.plans.args(args)...)
}

func (t txPlans) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	return t.tx.Query(ctx, t.plans.rename.sql(sql), t.plans.args(args)...)
}

func (t txPlans) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return t.tx.QueryRow(ctx, t.plans.rename.sql(sql), t.plans.args(args)...)
}
