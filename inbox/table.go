package inbox

import (
	"context"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgoutbox/pgoutbox/db/inboxdb"
	"github.com/pgoutbox/pgoutbox/internal/sqlrename"
)

// renamedDBTX runs package inboxdb's queries, written for the table inbox,
// on another table and schema (Config.Table, Config.Schema). Each distinct
// query text is rewritten once and cached.
type renamedDBTX struct {
	dbtx  inboxdb.DBTX
	names *sqlrename.Tables
	cache *sync.Map // original SQL -> rewritten SQL
}

func (r renamedDBTX) sql(q string) string {
	if out, ok := r.cache.Load(q); ok {
		return out.(string)
	}
	out, _ := r.names.SQL(q)
	r.cache.Store(q, out)
	return out
}

func (r renamedDBTX) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	return r.dbtx.Exec(ctx, r.sql(sql), args...)
}

func (r renamedDBTX) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	return r.dbtx.Query(ctx, r.sql(sql), args...)
}

func (r renamedDBTX) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return r.dbtx.QueryRow(ctx, r.sql(sql), args...)
}

// TableDBTX returns an inboxdb.DBTX that runs package inboxdb's queries on
// the inbox table table in schema ("" = through the search_path), for code
// that calls inboxdb directly on tables created by `pgoutbox inbox init`.
// With the defaults it returns dbtx unchanged.
func TableDBTX(dbtx inboxdb.DBTX, table, schema string) (inboxdb.DBTX, error) {
	if table == "" {
		table = TableDefault
	}
	names, err := sqlrename.NewTables(TableDefault, sqlrename.InboxTables, table, schema)
	if err != nil {
		return nil, err
	}
	return wrapDBTX(dbtx, &names, &sync.Map{}), nil
}

func wrapDBTX(dbtx inboxdb.DBTX, names *sqlrename.Tables, cache *sync.Map) inboxdb.DBTX {
	if names.Identity() {
		return dbtx
	}
	return renamedDBTX{dbtx: dbtx, names: names, cache: cache}
}
