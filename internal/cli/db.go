package cli

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/pgoutbox/db"
	"github.com/pgoutbox/pgoutbox/db/opsdb"
	"github.com/pgoutbox/pgoutbox/dispatcher"
	"github.com/pgoutbox/pgoutbox/internal/redact"
	"github.com/pgoutbox/pgoutbox/migrations"
)

// database is a resolved --database-url / DATABASE_URL.
type database struct {
	raw      string
	redacted string
	source   string // "--database-url" or "DATABASE_URL"
	cfg      *pgxpool.Config
}

// resolveDatabase picks the URL (flag first, then the environment) and
// parses it without connecting.
func (a *app) resolveDatabase(f *flags, flagValue string) (*database, error) {
	d := &database{raw: flagValue, source: "--database-url"}
	if d.raw == "" {
		d.raw, d.source = a.getenv("DATABASE_URL"), "DATABASE_URL"
	}
	if d.raw == "" {
		return nil, f.usageError("no database: set DATABASE_URL or pass --database-url (for example postgres://user:password@localhost:5432/app)")
	}
	d.redacted = redact.URL(d.raw, false)
	a.secrets.Add(redact.Secrets(d.raw, false)...)
	if msg := schemeError(d.raw); msg != "" {
		return nil, failf("invalid database URL %s: %s; check %s", d.redacted, msg, d.source)
	}
	cfg, err := pgxpool.ParseConfig(d.raw)
	if err != nil {
		return nil, failf("invalid database URL %s: %s; check %s", d.redacted, a.secrets.Scrub(unwrapParse(err)), d.source)
	}
	a.secrets.Add(cfg.ConnConfig.Password)
	if cfg.ConnConfig.ConnectTimeout == 0 {
		cfg.ConnConfig.ConnectTimeout = 10 * time.Second
	}
	// TCP keepalive and TCP_USER_TIMEOUT, so a connection to a host that
	// vanished is noticed in seconds, not hours (see dispatcher.Dialer).
	cfg.ConnConfig.DialFunc = dispatcher.Dialer()
	// Behind PgBouncer in transaction mode (before 1.21's
	// max_prepared_statements) pgx's default statement cache fails: a named
	// prepared statement lives on one server connection and the next
	// transaction may run on another. Every command's queries therefore go
	// through the unnamed statement, with descriptions cached (one round
	// trip, as before), unless the URL chooses default_query_exec_mode.
	if !strings.Contains(d.raw, "default_query_exec_mode") {
		cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeCacheDescribe
	}
	// Whatever the database or role sets (default_transaction_isolation,
	// statement_timeout, lock_timeout, idle_in_transaction_session_timeout),
	// every connection of every command gets what pgoutbox needs.
	cfg.AfterConnect = dispatcher.PrepareSession
	d.cfg = cfg
	return d, nil
}

// schemeError names a URL scheme pgx does not take ("" when the scheme is
// postgres or postgresql, or raw is keyword/value). pgx reads anything that
// does not start with postgres:// or postgresql:// as keyword/value and
// says "failed to parse as keyword/value", which hides a misspelled scheme
// (postgress://, postgre://, jdbc:postgresql://).
func schemeError(raw string) string {
	scheme, _, ok := strings.Cut(strings.TrimSpace(raw), "://")
	if !ok || scheme == "postgres" || scheme == "postgresql" || strings.ContainsAny(scheme, " ='") {
		return ""
	}
	return fmt.Sprintf("unknown scheme %q: a PostgreSQL URL starts with postgres:// or postgresql://", scheme)
}

// unwrapParse drops pgconn's "cannot parse `<dsn>`:" prefix (the DSN is
// already shown, redacted).
func unwrapParse(err error) string {
	msg := err.Error()
	if i := strings.Index(msg, "`: "); i >= 0 && strings.HasPrefix(msg, "cannot parse `") {
		return msg[i+3:]
	}
	return msg
}

// compactErr puts a multi-line driver error (pgx lists every address it
// tried) on one line, without repeated lines.
func compactErr(msg string) string {
	var parts []string
	seen := map[string]bool{}
	for _, line := range strings.Split(msg, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || seen[line] {
			continue
		}
		seen[line] = true
		parts = append(parts, strings.TrimSuffix(line, ":"))
	}
	return strings.Join(parts, ": ")
}

// connect opens a pool and pings the server.
func (a *app) connect(ctx context.Context, d *database) (*pgxpool.Pool, error) {
	a.dbUser = d.cfg.ConnConfig.User
	pool, err := pgxpool.NewWithConfig(ctx, d.cfg)
	if err != nil {
		return nil, failf("cannot reach PostgreSQL at %s: %s; check %s", d.redacted, a.secrets.Scrub(err.Error()), d.source)
	}
	if err := a.ping(ctx, pool); err != nil {
		pool.Close()
		if ctx.Err() != nil {
			return nil, failf("interrupted while connecting to PostgreSQL at %s", d.redacted)
		}
		return nil, failf("cannot reach PostgreSQL at %s: %s; check %s", d.redacted, a.secrets.Scrub(compactErr(err.Error())), d.source)
	}
	return pool, nil
}

func (a *app) ping(ctx context.Context, pool *pgxpool.Pool) error {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	return pool.Ping(ctx)
}

// dbtx is dbtx for the command's --table and --schema.
func (a *app) dbtx(dbtx db.DBTX) db.DBTX {
	out, err := dispatcher.TableDBTX(dbtx, a.table, a.schema)
	if err != nil { // validated when the flags were parsed
		panic(err)
	}
	return out
}

// queries is package db's queries on the command's table.
func (a *app) queries(dbtx db.DBTX) *db.Queries { return db.New(a.dbtx(dbtx)) }

// ops is package opsdb's queries (the operators' statements) on the
// command's table.
func (a *app) ops(dbtx db.DBTX) *opsdb.Queries { return opsdb.New(a.dbtx(dbtx)) }

// checkSchema fails unless the outbox table is usable: the table, its
// columns and attempt history table (whoever applied the migrations, with whatever goose
// version table), and, where pgoutbox's own version table records the
// table (migrations.VersionTableFor), every migration this build knows.
func (a *app) checkSchema(ctx context.Context, pool *pgxpool.Pool) error {
	schema, table, err := dispatcher.ResolveTable(ctx, pool, a.table, a.schema)
	if err != nil {
		if errors.Is(err, dispatcher.ErrOutboxTable) {
			return failf("%s", a.secrets.Scrub(err.Error()))
		}
		return a.dbError("checking the schema", err)
	}
	a.resolvedSchema, a.resolvedTable = schema, table
	versionTable := migrations.VersionTableFor(a.table, a.schema)
	var own bool
	if err := pool.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", versionTable).Scan(&own); err != nil {
		return a.dbError("checking the schema", err)
	}
	if !own {
		return nil // applied with another goose history: the structure is what counts
	}
	err = migrations.CheckIn(ctx, pool, versionTable)
	if err == nil {
		return nil
	}
	if errors.Is(err, migrations.ErrNotMigrated) {
		detail := strings.TrimPrefix(err.Error(), migrations.ErrNotMigrated.Error())
		detail = strings.TrimPrefix(detail, ": ")
		if detail != "" {
			detail = " (" + detail + ")"
		}
		return failf("schema not migrated%s: run `pgoutbox migrate up`", detail)
	}
	return a.dbError("checking the schema", err)
}

// open = resolve + connect + checkSchema: what every data command needs.
func (a *app) open(ctx context.Context, f *flags, flagValue string) (*pgxpool.Pool, *database, error) {
	d, err := a.resolveDatabase(f, flagValue)
	if err != nil {
		return nil, nil, err
	}
	pool, err := a.connect(ctx, d)
	if err != nil {
		return nil, nil, err
	}
	if err := a.checkSchema(ctx, pool); err != nil {
		pool.Close()
		return nil, nil, err
	}
	return pool, d, nil
}

// dbError wraps a query error for the user: what failed, then the server's
// error as PostgreSQL gave it (without the library's own prefixes, which
// repeat what), and for a missing privilege the grant that fixes it.
func (a *app) dbError(what string, err error) error {
	msg := fmt.Sprint(err)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		msg = pgErr.Error()
		if pgErr.Code == "42501" { // insufficient_privilege
			msg += "; " + a.grantHint(what, pgErr)
		}
	}
	return failf("%s: %s", what, a.secrets.Scrub(msg))
}

// grantHint names the role that lacks a privilege and the grant a command
// needs, for an error "permission denied for table ..." (SQLSTATE 42501).
func (a *app) grantHint(what string, pgErr *pgconn.PgError) string {
	table := a.tableName()
	role := a.dbUser
	if role == "" {
		role = "the connecting role"
	} else {
		role = fmt.Sprintf("the role %q", role)
	}
	privs, group := "SELECT", "pgoutbox_relay"
	switch {
	case strings.HasPrefix(what, "enqueue"):
		privs, group = "INSERT", "pgoutbox_producer"
	case strings.HasPrefix(what, "dead retry"), strings.HasPrefix(what, "dead skip"), strings.HasPrefix(what, "redeliver"):
		privs, group = "SELECT, UPDATE", "pgoutbox_admin"
	case strings.HasPrefix(what, "purge"):
		privs, group = "SELECT, DELETE", "pgoutbox_admin"
	case strings.HasPrefix(what, "checking the schema") && strings.Contains(pgErr.Message, "_migrations"):
		versionTable := migrations.VersionTableFor(a.table, a.schema)
		return fmt.Sprintf("%s needs SELECT on %s (every command reads the schema version): grant it a role of docs/roles.sql, or GRANT SELECT ON %s TO %s",
			role, versionTable, versionTable, a.grantee())
	}
	return fmt.Sprintf("%s needs %s on %s for this: grant it the %s role of docs/roles.sql (GRANT %s TO %s), or GRANT %s ON %s TO %s",
		role, privs, table, group, group, a.grantee(), privs, table, a.grantee())
}

// tableName is the command's table as the user named it: schema.table, or
// the table alone (resolved through the search_path).
func (a *app) tableName() string {
	if a.schema != "" {
		return a.schema + "." + a.table
	}
	return a.table
}

// grantee is the connecting role as a GRANT names it.
func (a *app) grantee() string {
	if a.dbUser == "" {
		return "your_role"
	}
	return pgx.Identifier{a.dbUser}.Sanitize()
}

// defaultSource is the default CloudEvents source of the outbox table
// (dispatcher.DefaultSource of the table as the database resolved it, after
// checkSchema): one source per table however --schema and --table name it.
func (a *app) defaultSource(d *database) string {
	schema, table := a.resolvedSchema, a.resolvedTable
	if table == "" { // not checked: as the dispatcher assumes before its start check
		schema, table = cmp.Or(a.schema, "public"), cmp.Or(a.table, dispatcher.TableDefault)
	}
	return dispatcher.DefaultSource(&d.cfg.ConnConfig.Config, schema, table)
}
