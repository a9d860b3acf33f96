package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgoutbox/pgoutbox/db"
	"github.com/pgoutbox/pgoutbox/internal/sqlrename"
)

// TableDefault is the outbox table the migrations create.
const TableDefault = "outbox"

// ErrOutboxTable is wrapped by the start check when the outbox table is
// missing, lacks a column the queries use, or lacks its attempt history.
var ErrOutboxTable = errors.New("outbox table not usable")

// renamer rewrites the generated queries of package db, written for the
// table outbox, for another table and schema (the rename `pgoutbox init`
// applies to the copied SQL: the table, its derived names, the NOTIFY
// channel). Each distinct query text is rewritten once and cached.
type renamer struct {
	r     sqlrename.Rename
	cache sync.Map // original SQL -> rewritten SQL
}

func newRenamer(table, schema string) (*renamer, error) {
	r, err := sqlrename.New(cmpOr(table, TableDefault), schema)
	if err != nil {
		return nil, err
	}
	if r.Identity() {
		return nil, nil
	}
	return &renamer{r: r}, nil
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func (n *renamer) sql(q string) string {
	if n == nil {
		return q
	}
	if out, ok := n.cache.Load(q); ok {
		return out.(string)
	}
	out, _ := n.r.SQL(q)
	n.cache.Store(q, out)
	return out
}

// TableDBTX returns a db.DBTX that runs package db's generated queries on
// table in schema ("" = through the search_path) instead of outbox, for
// code that calls the db package directly on a table created by
// `pgoutbox init` (the dispatcher does this itself from Config.Table and
// Config.Schema). With the defaults it returns dbtx unchanged.
func TableDBTX(dbtx db.DBTX, table, schema string) (db.DBTX, error) {
	n, err := newRenamer(table, schema)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidConfig, err)
	}
	if n == nil {
		return dbtx, nil
	}
	return renamedDBTX{dbtx: dbtx, n: n}, nil
}

type renamedDBTX struct {
	dbtx db.DBTX
	n    *renamer
}

func (r renamedDBTX) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	return r.dbtx.Exec(ctx, r.n.sql(sql), args...)
}

func (r renamedDBTX) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	return r.dbtx.Query(ctx, r.n.sql(sql), args...)
}

func (r renamedDBTX) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return r.dbtx.QueryRow(ctx, r.n.sql(sql), args...)
}

// requiredColumns are the columns of the table the queries use: the fields
// of the generated model (db.Outbox), so the list follows the migrations.
func requiredColumns() []string {
	t := reflect.TypeFor[db.Outbox]()
	cols := make([]string, 0, t.NumField())
	for i := range t.NumField() {
		if tag, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ","); tag != "" {
			cols = append(cols, tag)
		}
	}
	return cols
}

// CheckTable verifies, without changing anything, that the outbox table
// exists as the queries need it: table in schema ("" = resolved through the
// search_path), with every column of the migrations, and the attempt
// history table <table>_attempts beside it. It does not read any
// goose version table, so a deployment that applied the migrations with its
// own goose history passes. Errors wrap ErrOutboxTable and say in one
// sentence which table was looked for where (the schema, or the
// search_path seen), where a table of that name is, and what to do; other
// errors are the database's.
func CheckTable(ctx context.Context, q db.DBTX, table, schema string) error {
	_, _, err := ResolveTable(ctx, q, table, schema)
	return err
}

// ResolveTable is CheckTable that also returns the table's identity as the
// database resolved it: its schema and its name, unquoted (for example
// "public", "outbox" whether schema was "public" or "" with public first on
// the search_path). The default CloudEvents source is built from them
// (DefaultSource), so that every equivalent way of naming one table gives
// one source.
func ResolveTable(ctx context.Context, q db.DBTX, table, schema string) (resolvedSchema, resolvedTable string, err error) {
	table = cmpOr(table, TableDefault)
	r, err := sqlrename.New(table, schema)
	if err != nil {
		return "", "", fmt.Errorf("%w: %v", ErrInvalidConfig, err)
	}
	// One catalog read (queries/check.sql), on the generated query as it
	// is: it names no outbox table, so no rename applies.
	row, err := db.New(q).OutboxCheckTable(ctx, db.OutboxCheckTableParams{
		Relation: r.Qualified(), TableName: table, HistoryName: table + "_attempts",
	})
	if err != nil {
		return "", "", fmt.Errorf("outbox: check table %s: %w", r.Qualified(), err)
	}
	if row.Relation == "" {
		where := fmt.Sprintf("on the search_path (%s)", row.SearchPath)
		if schema != "" {
			where = "in schema " + schema
		}
		if len(row.Elsewhere) > 0 {
			return "", "", fmt.Errorf("%w: table %s not found %s, but %s exists: set the schema (Config.Schema, --schema) or the search_path instead of migrating again",
				ErrOutboxTable, table, where, strings.Join(row.Elsewhere, " and "))
		}
		return "", "", fmt.Errorf("%w: table %s not found %s: apply the pgoutbox migrations (pgoutbox migrate up, or your goose setup for the files pgoutbox init copied)",
			ErrOutboxTable, table, where)
	}
	var missing []string
	for _, c := range requiredColumns() {
		if !slices.Contains(row.Columns, c) {
			missing = append(missing, c)
		}
	}
	if len(missing) > 0 {
		return "", "", fmt.Errorf("%w: table %s lacks the columns %s: apply the newer pgoutbox migrations (pgoutbox migrate up, or pgoutbox init --upgrade for a copy)",
			ErrOutboxTable, row.Relation, strings.Join(missing, ", "))
	}
	if !row.HasHistory {
		// The failure path writes the attempt history in the statement
		// that records the failure: without the table every failure's
		// write would fail, and the messages would be delivered again
		// when their leases expire.
		return "", "", fmt.Errorf("%w: table %s has no attempt history table %s_attempts beside it (migration 00011): apply the newer pgoutbox migrations (pgoutbox migrate up, or pgoutbox init --upgrade for a copy)",
			ErrOutboxTable, row.Relation, table)
	}
	return row.SchemaName, row.ResolvedTable, nil
}

// checkTable is Run's start check. A structural problem fails Run at once;
// a database that cannot be read yet (down, restarting) is left to the
// claim loop's retries.
func (d *Dispatcher) checkTable(ctx context.Context) error {
	// Bounded like every other database call: a server that does not answer
	// must not hold Run at its start.
	cctx, cancel := context.WithTimeout(ctx, d.cfg.ClaimTimeout)
	defer cancel()
	schema, table, err := ResolveTable(cctx, d.plain, d.cfg.Table, d.cfg.Schema)
	if err == nil {
		d.resolveSource(schema, table)
	}
	if err != nil && !errors.Is(err, ErrOutboxTable) && !errors.Is(err, ErrInvalidConfig) {
		d.log.Warn("cannot check the outbox table at start; continuing", "error", err)
		return nil
	}
	return err
}
