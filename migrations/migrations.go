// Package migrations embeds pgoutbox's goose migrations and applies them
// through goose's Provider: no global registry, our own version table (so the
// host application's goose history is never touched), and a PostgreSQL
// session advisory lock so two processes migrating at once do not race.
//
// schema.sql is the same schema in one file: sqlc compiles the queries
// against it, and Up applies it as one baseline to a database where no
// migration is applied yet (baseline.go).
package migrations

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
)

// files are the numbered migrations only: schema.sql is not a goose
// migration (it has no version prefix, and goose's command-line tool would
// refuse it in its folder).
//
//go:embed 0*.sql
var files embed.FS

// VersionTable is the goose version table pgoutbox records its migrations in.
const VersionTable = "pgoutbox_migrations"

// lockID is the advisory lock key held while migrating ("pgoutbox" in ASCII),
// distinct from goose's default so a host application's own goose run is not
// blocked by ours.
const lockID int64 = 0x7067_6f75_7462_6f78

// FS returns the embedded migration files.
func FS() fs.FS { return files }

// Latest is the highest migration version this build knows.
func Latest() int64 { return LatestIn(files) }

// LatestIn is the highest migration version among the NNNNN_name.sql files
// of fsys.
func LatestIn(fsys fs.FS) int64 {
	var latest int64
	entries, _ := fs.Glob(fsys, "*.sql")
	for _, e := range entries {
		var v int64
		if _, err := fmt.Sscanf(e, "%d_", &v); err == nil && v > latest {
			latest = v
		}
	}
	return latest
}

// Migrator applies the embedded migrations to one database.
type Migrator struct {
	db           *sql.DB
	provider     *goose.Provider
	versionTable string
	baseline     string // schema.sql (renamed as the files are), "" = none
}

// New returns a Migrator of the embedded migrations over a *sql.DB (any
// driver goose's postgres dialect accepts; pgx's stdlib is the one we test),
// with schema.sql as its baseline.
func New(db *sql.DB) (*Migrator, error) {
	m, err := NewWith(db, files, VersionTable)
	if err != nil {
		return nil, err
	}
	m.baseline = schemaSQL
	return m, nil
}

// NewWith returns a Migrator for other migration files (the embedded ones
// renamed for another table, as `pgoutbox migrate --table` does) recorded in
// versionTable (schema-qualified or not). It applies the files one by one,
// never a baseline, unless SetBaseline gives it one.
func NewWith(db *sql.DB, fsys fs.FS, versionTable string) (*Migrator, error) {
	locker, err := lock.NewPostgresSessionLocker(lock.WithLockID(lockID))
	if err != nil {
		return nil, fmt.Errorf("migrations: session locker: %w", err)
	}
	p, err := goose.NewProvider(goose.DialectPostgres, db, fsys,
		goose.WithTableName(versionTable),
		goose.WithDisableGlobalRegistry(true),
		goose.WithSessionLocker(locker),
	)
	if err != nil {
		return nil, fmt.Errorf("migrations: %w", err)
	}
	return &Migrator{db: db, provider: p, versionTable: versionTable}, nil
}

// VersionTable is the goose version table this Migrator records in.
func (m *Migrator) VersionTable() string { return m.versionTable }

// FromPool is New over a pgx pool. Close releases the *sql.DB wrapper, not
// the pool.
func FromPool(pool *pgxpool.Pool) (*Migrator, error) {
	m, err := FromPoolWith(pool, files, VersionTable)
	if err != nil {
		return nil, err
	}
	m.baseline = schemaSQL
	return m, nil
}

// FromPoolWith is NewWith over a pgx pool.
func FromPoolWith(pool *pgxpool.Pool, fsys fs.FS, versionTable string) (*Migrator, error) {
	m, err := NewWith(stdlib.OpenDBFromPool(pool), fsys, versionTable)
	if err != nil {
		return nil, err
	}
	return m, nil
}

// Close releases the *sql.DB the Migrator was built over.
func (m *Migrator) Close() error { return m.db.Close() }

// Up applies every pending migration. On a database where none is applied
// and the Migrator has a baseline, it first applies the baseline in one
// transaction and records the versions it stands for (baseline.go); the
// result then names schema.sql once instead of each file.
func (m *Migrator) Up(ctx context.Context) ([]*goose.MigrationResult, error) {
	var res []*goose.MigrationResult
	if m.baseline != "" {
		r, err := m.applyBaseline(ctx)
		if err != nil {
			return nil, fmt.Errorf("migrations: up: %w", err)
		}
		if r != nil {
			res = append(res, r)
		}
	}
	more, err := m.provider.Up(ctx)
	res = append(res, more...)
	if err != nil {
		return res, fmt.Errorf("migrations: up: %w", err)
	}
	return res, nil
}

// Down rolls back the most recent migration.
func (m *Migrator) Down(ctx context.Context) (*goose.MigrationResult, error) {
	res, err := m.provider.Down(ctx)
	if err != nil {
		return res, fmt.Errorf("migrations: down: %w", err)
	}
	return res, nil
}

// DownTo rolls back to version (0 = everything).
func (m *Migrator) DownTo(ctx context.Context, version int64) ([]*goose.MigrationResult, error) {
	res, err := m.provider.DownTo(ctx, version)
	if err != nil {
		return res, fmt.Errorf("migrations: down to %d: %w", version, err)
	}
	return res, nil
}

// Status reports every known migration and whether it is applied.
func (m *Migrator) Status(ctx context.Context) ([]*goose.MigrationStatus, error) {
	st, err := m.provider.Status(ctx)
	if err != nil {
		return st, fmt.Errorf("migrations: status: %w", err)
	}
	return st, nil
}

// Version returns the database's current version (0 when nothing is applied).
func (m *Migrator) Version(ctx context.Context) (int64, error) {
	v, err := m.provider.GetDBVersion(ctx)
	if err != nil {
		return 0, fmt.Errorf("migrations: version: %w", err)
	}
	return v, nil
}

// ErrNotMigrated is returned by Check when the schema is missing or older
// than this build.
var ErrNotMigrated = errors.New("pgoutbox schema is not migrated (run `pgoutbox migrate up`)")

// Check reports ErrNotMigrated unless every embedded migration is applied.
// It reads the version table without creating it.
func Check(ctx context.Context, pool *pgxpool.Pool) error { return CheckIn(ctx, pool, VersionTable) }

// VersionTableFor is the goose version table pgoutbox's own migrations of
// table (in schema, "" = unqualified) are recorded in: VersionTable for the
// default table outbox, TABLE_migrations for a table of another name (so two
// outboxes never share a history).
func VersionTableFor(table, schema string) string {
	name := VersionTable
	if table != "" && table != "outbox" {
		name = table + "_migrations"
	}
	if schema == "" {
		return name
	}
	return schema + "." + name
}

// CheckIn is Check for the version table versionTable (a plain or
// schema-qualified name, such as VersionTableFor returns).
func CheckIn(ctx context.Context, pool *pgxpool.Pool, versionTable string) error {
	v, exists, err := AppliedVersion(ctx, pool, versionTable)
	if err != nil {
		return fmt.Errorf("check schema: %w", err)
	}
	if !exists {
		return fmt.Errorf("%w: version table %s not found", ErrNotMigrated, versionTable)
	}
	if v < Latest() {
		return fmt.Errorf("%w: database at version %d, this build needs %d", ErrNotMigrated, v, Latest())
	}
	return nil
}

// AppliedVersion reads the highest applied version recorded in the goose
// version table versionTable (plain or schema-qualified) without creating
// it; exists is false when the table is missing.
func AppliedVersion(ctx context.Context, pool *pgxpool.Pool, versionTable string) (v int64, exists bool, err error) {
	if err := pool.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", versionTable).Scan(&exists); err != nil || !exists {
		return 0, false, err
	}
	err = pool.QueryRow(ctx, "SELECT coalesce(max(version_id), 0) FROM "+pgx.Identifier(strings.Split(versionTable, ".")).Sanitize()+" WHERE is_applied").Scan(&v)
	return v, err == nil, err
}
