package migrations

import (
	"context"
	_ "embed"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/pressly/goose/v3"
)

// schemaSQL is schema.sql: the schema the numbered migrations build, in one
// file. Its first line names the version it stands for.
//
//go:embed schema.sql
var schemaSQL string

// BaselineFile is the name Up reports when it applies the baseline.
const BaselineFile = "schema.sql"

// Schema returns schema.sql, the whole schema at SchemaVersion in one file.
func Schema() string { return schemaSQL }

// SchemaVersion is the migration version schema.sql stands for.
func SchemaVersion() int64 { return baselineVersion(schemaSQL) }

var baselineVersionRe = regexp.MustCompile(`(?m)^-- pgoutbox schema at migration (\d+)`)

// baselineVersion reads the version a baseline stands for from its first
// comment ("-- pgoutbox schema at migration 00019"); 0 when it names none.
func baselineVersion(sql string) int64 {
	m := baselineVersionRe.FindStringSubmatch(sql)
	if m == nil {
		return 0
	}
	v, _ := strconv.ParseInt(m[1], 10, 64)
	return v
}

// SetBaseline gives the Migrator a baseline (schema.sql, renamed the way its
// migration files are): Up then applies it to a database where no migration
// is applied, instead of each file up to the version it stands for.
func (m *Migrator) SetBaseline(sql string) { m.baseline = sql }

// applyBaseline applies the baseline when no migration is applied yet, in
// one transaction that also records every version up to the baseline's as
// applied in goose's version table, the way goose records them. It holds
// the lock goose migrates under, so a second process migrating at the same
// time waits and then finds the versions recorded. nil, nil: the database
// already has migrations, and the numbered files take it from there.
func (m *Migrator) applyBaseline(ctx context.Context) (*goose.MigrationResult, error) {
	v := baselineVersion(m.baseline)
	if v == 0 {
		return nil, fmt.Errorf("baseline: its first line does not name the migration it stands for")
	}
	var versions []int64
	for _, s := range m.provider.ListSources() {
		if s.Version <= v {
			versions = append(versions, s.Version)
		}
	}
	if len(versions) == 0 || versions[len(versions)-1] != v {
		return nil, fmt.Errorf("baseline: it stands for migration %d, which is not among the migration files", v)
	}
	// goose creates its version table (with the version 0 row) when missing.
	current, err := m.provider.GetDBVersion(ctx)
	if err != nil || current != 0 {
		return nil, err
	}
	conn, err := m.db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "SELECT pg_advisory_lock($1)", lockID); err != nil {
		return nil, fmt.Errorf("baseline: lock: %w", err)
	}
	defer func() {
		_, _ = conn.ExecContext(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock($1)", lockID)
	}()
	table := pgx.Identifier(strings.Split(m.versionTable, ".")).Sanitize()
	var applied int64
	if err := conn.QueryRowContext(ctx, "SELECT count(*) FROM "+table+" WHERE version_id > 0").Scan(&applied); err != nil {
		return nil, fmt.Errorf("baseline: %w", err)
	}
	if applied > 0 {
		return nil, nil // another process migrated meanwhile
	}
	start := time.Now()
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer func() { _ = tx.Rollback() }()
	// No arguments: pgx sends the whole file in one simple-protocol message.
	if _, err := tx.ExecContext(ctx, m.baseline); err != nil {
		return nil, fmt.Errorf("baseline %s: %w", BaselineFile, err)
	}
	if _, err := tx.ExecContext(ctx, "INSERT INTO "+table+" (version_id, is_applied) SELECT v, true FROM unnest($1::bigint[]) AS v ORDER BY v", versions); err != nil {
		return nil, fmt.Errorf("baseline: record versions: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("baseline: %w", err)
	}
	return &goose.MigrationResult{
		Source:    &goose.Source{Type: goose.TypeSQL, Path: BaselineFile, Version: v},
		Duration:  time.Since(start),
		Direction: "up",
	}, nil
}
