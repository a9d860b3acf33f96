// Package migrations embeds the inbox's goose migrations: the tables of
// package inbox, applied in the consumer's database (not the outbox's) and
// recorded in a goose version table of their own, VersionTable, so they
// never mix with the outbox's history or the application's.
//
// The same .sql files are sqlc's schema for package db/inboxdb.
package migrations

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"testing/fstest"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/pgoutbox/internal/sqlrename"

	outboxmigrations "github.com/pgoutbox/pgoutbox/migrations"
)

//go:embed *.sql
var files embed.FS

// VersionTable is the goose version table the inbox's migrations of the
// default table inbox are recorded in.
const VersionTable = "pgoutbox_inbox_migrations"

// FS returns the embedded migration files.
func FS() fs.FS { return files }

// Latest is the highest migration version this build knows.
func Latest() int64 { return outboxmigrations.LatestIn(files) }

// VersionTableFor is the version table of the inbox table named table in
// schema ("" = unqualified): VersionTable for the default table inbox,
// TABLE_migrations for another name (as pgoutbox inbox init prints).
func VersionTableFor(table, schema string) string {
	name := VersionTable
	if table != "" && table != "inbox" {
		name = table + "_migrations"
	}
	if schema == "" {
		return name
	}
	return schema + "." + name
}

// FromPool returns a Migrator of the embedded inbox migrations over a pgx
// pool, recorded in VersionTable.
func FromPool(pool *pgxpool.Pool) (*outboxmigrations.Migrator, error) {
	return outboxmigrations.FromPoolWith(pool, files, VersionTable)
}

// FSFor returns the embedded migrations renamed for the inbox table table
// (its companions table_aggregates and table_gaps) in schema ("" =
// unqualified): the rename `pgoutbox inbox init` applies. With a schema, the
// first migration creates it.
func FSFor(table, schema string) (fs.FS, error) {
	names, err := sqlrename.NewTables("inbox", sqlrename.InboxTables, table, schema)
	if err != nil {
		return nil, err
	}
	if names.Identity() {
		return files, nil
	}
	out := fstest.MapFS{}
	entries, err := fs.Glob(files, "*.sql")
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		src, err := fs.ReadFile(files, e)
		if err != nil {
			return nil, err
		}
		body, _ := names.SQL(string(src))
		if schema != "" && strings.HasPrefix(e, "00001_") {
			body = strings.Replace(body, "-- +goose Up\n", "-- +goose Up\nCREATE SCHEMA IF NOT EXISTS "+schema+";\n", 1)
		}
		out[e] = &fstest.MapFile{Data: []byte(body)}
	}
	return out, nil
}

// FromPoolFor returns a Migrator of the migrations renamed for table in
// schema (FSFor), recorded in VersionTableFor(table, schema). With a schema
// it first creates the schema, where goose keeps its version table.
func FromPoolFor(ctx context.Context, pool *pgxpool.Pool, table, schema string) (*outboxmigrations.Migrator, error) {
	fsys, err := FSFor(table, schema)
	if err != nil {
		return nil, err
	}
	if schema != "" {
		// The name was validated by FSFor.
		if _, err := pool.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+schema); err != nil {
			return nil, fmt.Errorf("inbox migrations: %w", err)
		}
	}
	return outboxmigrations.FromPoolWith(pool, fsys, VersionTableFor(table, schema))
}

// ErrNotMigrated is returned by Check when the inbox tables are missing or
// older than this build.
var ErrNotMigrated = errors.New("inbox schema is not migrated (run `pgoutbox inbox migrate`)")

// Check reports ErrNotMigrated unless every embedded migration is recorded
// in versionTable (a plain or schema-qualified name, such as VersionTableFor
// returns). It reads the version table without creating it.
func Check(ctx context.Context, pool *pgxpool.Pool, versionTable string) error {
	v, exists, err := outboxmigrations.AppliedVersion(ctx, pool, versionTable)
	if err != nil {
		return fmt.Errorf("check inbox schema: %w", err)
	}
	if !exists {
		return fmt.Errorf("%w: version table %s not found", ErrNotMigrated, versionTable)
	}
	if v < Latest() {
		return fmt.Errorf("%w: database at version %d, this build needs %d", ErrNotMigrated, v, Latest())
	}
	return nil
}
