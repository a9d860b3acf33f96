package fleet

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pgoutbox/pgoutbox/db/fleetdb"
)

// Database is one database of the fleet.
type Database struct {
	// Name identifies the database in logs, metrics (database=NAME),
	// /healthz and the console; unique within a fleet.
	Name string
	// URL is its PostgreSQL URL or keyword/value connection string.
	URL string
}

// Databases names each URL after its database (dbname), qualified with
// host:port where two URLs name databases of the same name on different
// servers ("db2:5432/app"). An unparseable URL is an error naming it by
// position (URLs may hold passwords).
func Databases(urls ...string) ([]Database, error) {
	type parsed struct {
		url, db, server string
	}
	ps := make([]parsed, 0, len(urls))
	count := map[string]int{}
	for i, u := range urls {
		cfg, err := pgconn.ParseConfig(u)
		if err != nil {
			return nil, fmt.Errorf("%w: database URL #%d: %v", ErrInvalidConfig, i+1, parseError(err))
		}
		p := parsed{url: u, db: cfg.Database, server: fmt.Sprintf("%s:%d", cfg.Host, cfg.Port)}
		if p.db == "" {
			p.db = cfg.User // PostgreSQL's default database
		}
		count[p.db]++
		ps = append(ps, p)
	}
	out := make([]Database, 0, len(ps))
	seen := map[string]bool{}
	for i, p := range ps {
		name := p.db
		if count[p.db] > 1 {
			name = p.server + "/" + p.db
		}
		if seen[name] {
			return nil, fmt.Errorf("%w: database URL #%d names %s again", ErrInvalidConfig, i+1, name)
		}
		seen[name] = true
		out = append(out, Database{Name: name, URL: p.url})
	}
	return out, nil
}

// parseError drops pgconn's "cannot parse `<dsn>`:" prefix: the DSN may
// hold a password.
func parseError(err error) string {
	msg := err.Error()
	if i := strings.Index(msg, "`: "); i >= 0 && strings.HasPrefix(msg, "cannot parse `") {
		return msg[i+3:]
	}
	return msg
}

// WithDatabase returns serverURL with its database replaced by name (a URL
// or a keyword/value string).
func WithDatabase(serverURL, name string) string {
	if u, err := url.Parse(serverURL); err == nil && (u.Scheme == "postgres" || u.Scheme == "postgresql") {
		u.Path = "/" + name
		u.RawPath = ""
		return u.String()
	}
	return serverURL + " dbname='" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(name) + "'"
}

// ListDatabases returns a Discover function listing the databases of the
// server serverURL connects to whose name matches the SQL LIKE pattern
// (templates and databases that do not allow connections are left out:
// FleetListDatabases, queries/fleet/fleet.sql), each named after its
// database and reached through serverURL with its database replaced.
func ListDatabases(serverURL, pattern string) func(context.Context) ([]Database, error) {
	return discover(serverURL, func(ctx context.Context, conn *pgx.Conn) ([]string, error) {
		return fleetdb.New(conn).FleetListDatabases(ctx, pattern)
	})
}

// QueryDatabases returns a Discover function that runs query on serverURL:
// its first column is, on each row, either a database name (reached through
// serverURL with the database replaced) or a connection URL (a value
// holding "://" or "="). Databases are named as by Databases.
func QueryDatabases(serverURL, query string) func(context.Context) ([]Database, error) {
	return discover(serverURL, func(ctx context.Context, conn *pgx.Conn) ([]string, error) {
		rows, err := conn.Query(ctx, query)
		if err != nil {
			return nil, err
		}
		return pgx.CollectRows(rows, func(r pgx.CollectableRow) (string, error) {
			v, err := r.Values()
			if err != nil || len(v) == 0 {
				return "", err
			}
			return fmt.Sprint(v[0]), nil
		})
	})
}

// discover connects to serverURL (the simple protocol: no prepared
// statement, so a pooler in front of the server is no matter), lists
// database names or URLs with list, and names the databases.
func discover(serverURL string, list func(context.Context, *pgx.Conn) ([]string, error)) func(context.Context) ([]Database, error) {
	return func(ctx context.Context) ([]Database, error) {
		ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		cfg, err := pgx.ParseConfig(serverURL)
		if err != nil {
			return nil, fmt.Errorf("discover databases: %w", err)
		}
		cfg.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
		conn, err := pgx.ConnectConfig(ctx, cfg)
		if err != nil {
			return nil, fmt.Errorf("discover databases: %w", err)
		}
		defer conn.Close(context.WithoutCancel(ctx))
		values, err := list(ctx, conn)
		if err != nil {
			return nil, fmt.Errorf("discover databases: %w", err)
		}
		urls := make([]string, 0, len(values))
		for _, v := range values {
			if strings.Contains(v, "://") || strings.Contains(v, "=") {
				urls = append(urls, v)
			} else {
				urls = append(urls, WithDatabase(serverURL, v))
			}
		}
		return Databases(urls...)
	}
}
