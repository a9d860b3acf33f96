package dispatcher

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/pgoutbox/db"
)

// sessionKey marks, in a connection's CustomData, a session whose settings
// PrepareSession has made what pgoutbox needs.
const sessionKey = "pgoutbox.session"

// PrepareSession makes conn's session what pgoutbox's statements need,
// whatever the database or role sets with ALTER DATABASE / ALTER ROLE ...
// SET (queries/session.sql): READ COMMITTED transactions, and no
// server-side statement_timeout, lock_timeout,
// idle_in_transaction_session_timeout or transaction_timeout (pgoutbox bounds
// each statement itself). Settings that already have the needed value are
// left alone. The dispatcher prepares every connection of its pool, and its
// LISTEN connection, the first time it uses it; a pool's AfterConnect can
// call it too (the CLI does), so the dispatcher has nothing left to do.
// Behind a pooler in transaction mode a session's settings do not follow
// the client: set these for the relay's role in the pooler or the database.
func PrepareSession(ctx context.Context, conn *pgx.Conn) error {
	if err := db.New(conn).OutboxSessionSettings(ctx); err != nil {
		return fmt.Errorf("outbox: session settings: %w", err)
	}
	conn.PgConn().CustomData()[sessionKey] = true
	return nil
}

// acquire takes a connection of the pool whose session is prepared
// (PrepareSession): one statement the first time a connection is used.
func (c customPlans) acquire(ctx context.Context) (*pgxpool.Conn, error) {
	conn, err := c.pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	if conn.Conn().PgConn().CustomData()[sessionKey] == nil {
		if err := PrepareSession(ctx, conn.Conn()); err != nil {
			conn.Release()
			return nil, err
		}
	}
	return conn, nil
}

func (c customPlans) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	conn, err := c.acquire(ctx)
	if err != nil {
		return pgconn.CommandTag{}, err
	}
	defer conn.Release()
	return conn.Exec(ctx, c.rename.sql(sql), c.args(args)...)
}

func (c customPlans) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	conn, err := c.acquire(ctx)
	if err != nil {
		return nil, err
	}
	rows, err := conn.Query(ctx, c.rename.sql(sql), c.args(args)...)
	if err != nil {
		conn.Release()
		return nil, err
	}
	return &releasingRows{Rows: rows, conn: conn}, nil
}

func (c customPlans) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	conn, err := c.acquire(ctx)
	if err != nil {
		return errRow{err}
	}
	return releasingRow{row: conn.QueryRow(ctx, c.rename.sql(sql), c.args(args)...), conn: conn}
}

// releasingRows gives its connection back to the pool once the rows are
// read or closed.
type releasingRows struct {
	pgx.Rows
	conn *pgxpool.Conn
}

func (r *releasingRows) Next() bool {
	if r.Rows.Next() {
		return true
	}
	r.release()
	return false
}

func (r *releasingRows) Close() {
	r.Rows.Close()
	r.release()
}

func (r *releasingRows) release() {
	if r.conn != nil {
		r.Rows.Close()
		r.conn.Release()
		r.conn = nil
	}
}

type releasingRow struct {
	row  pgx.Row
	conn *pgxpool.Conn
}

func (r releasingRow) Scan(dest ...any) error {
	defer r.conn.Release()
	return r.row.Scan(dest...)
}

type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }
