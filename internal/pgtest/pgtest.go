// Package pgtest gives each test an isolated, migrated PostgreSQL database in
// milliseconds: the migrations run once into a template database (named by a
// hash of the migration files), and every test gets CREATE DATABASE ...
// TEMPLATE of it. A failing test's database is kept and its URL logged.
//
// The server is TEST_DATABASE_URL when set (a superuser URL: tests create
// databases). Otherwise Main starts one throwaway cluster from the local
// PostgreSQL binaries for the whole `go test` run of the package and stops it
// afterwards. When neither is possible the tests fail, saying how to provide
// PostgreSQL; they never skip.
package pgtest

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/pgoutbox/internal/pgbouncer"
	"github.com/pgoutbox/pgoutbox/internal/pgcluster"
	"github.com/pgoutbox/pgoutbox/migrations"
)

var (
	adminURL string // server URL (any database) used to create test databases
	startErr error  // why no server is available
	cluster  *pgcluster.Cluster

	tmplOnce sync.Once
	tmplName string
	tmplErr  error
)

// Main runs the package's tests with a PostgreSQL server. Call it from
// TestMain: func TestMain(m *testing.M) { pgtest.Main(m) }.
func Main(m *testing.M) {
	os.Exit(run(m))
}

// MainWith is Main for tests that need more of the server than the test
// settings give: settings are added to pgcluster.TestSettings of the
// throwaway cluster. A TEST_DATABASE_URL server whose max_connections is
// below settings["max_connections"] is not used (a throwaway cluster is
// started instead, and the tests say so).
func MainWith(m *testing.M, settings map[string]string) {
	os.Exit(runWith(m, settings))
}

func run(m *testing.M) int { return runWith(m, nil) }

func runWith(m *testing.M, extra map[string]string) int {
	u := os.Getenv("TEST_DATABASE_URL")
	if need, _ := strconv.Atoi(extra["max_connections"]); u != "" && need > 0 {
		if have := maxConnections(u); have < need {
			fmt.Fprintf(os.Stderr, "pgtest: TEST_DATABASE_URL's server allows %d connections, these tests need %d: starting a throwaway cluster instead\n",
				have, need)
			u = ""
		}
	}
	settings := pgcluster.TestSettings
	if len(extra) > 0 {
		settings = map[string]string{}
		for k, v := range pgcluster.TestSettings {
			settings[k] = v
		}
		for k, v := range extra {
			settings[k] = v
		}
	}
	if u != "" {
		adminURL = u
	} else {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		c, err := pgcluster.Start(ctx, pgcluster.Options{Settings: settings})
		cancel()
		if err != nil {
			startErr = fmt.Errorf("no PostgreSQL for tests: TEST_DATABASE_URL is not set and a throwaway cluster could not be started: %w", err)
		} else {
			cluster = c
			adminURL = c.URL()
		}
	}
	if startErr == nil {
		startErr = checkServerMajor(adminURL)
	}
	code := m.Run()
	if cluster != nil {
		if err := cluster.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "pgtest:", err)
		}
	}
	return code
}

// checkServerMajor holds the tests to the PostgreSQL major version named by
// PGTEST_SERVER_MAJOR (set by the version matrix, internal/cmd/pgversions),
// so that a run meant for one version cannot pass on another server. Unset,
// any server will do.
func checkServerMajor(url string) error {
	want := os.Getenv("PGTEST_SERVER_MAJOR")
	if want == "" {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return fmt.Errorf("pgtest: connect to %s: %w", redact(url), err)
	}
	defer conn.Close(ctx)
	var num int
	if err := conn.QueryRow(ctx, "SELECT current_setting('server_version_num')::int").Scan(&num); err != nil {
		return fmt.Errorf("pgtest: server version: %w", err)
	}
	if got := strconv.Itoa(num / 10000); got != want {
		return fmt.Errorf("pgtest: PGTEST_SERVER_MAJOR=%s but the server is PostgreSQL %d.%d (PG_BIN=%q)", want, num/10000, num%10000, os.Getenv("PG_BIN"))
	}
	return nil
}

// Cluster returns the throwaway cluster started by Main, or nil when the tests
// run against TEST_DATABASE_URL.
func Cluster() *pgcluster.Cluster { return cluster }

// AdminURL returns the server URL, failing the test when no server is
// available.
func AdminURL(t testing.TB) string {
	t.Helper()
	if startErr != nil {
		t.Fatal(startErr)
	}
	if adminURL == "" {
		t.Fatal("pgtest: no server: call pgtest.Main from TestMain")
	}
	return adminURL
}

// NewURL creates an isolated, migrated database for the test and returns its
// URL. The database is dropped when the test passes and kept when it fails.
func NewURL(t testing.TB) string {
	t.Helper()
	admin := AdminURL(t)
	tmplOnce.Do(func() { tmplName, tmplErr = ensureTemplate(admin) })
	if tmplErr != nil {
		t.Fatal(tmplErr)
	}
	name := "pgoutbox_test_" + randHex(6)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := adminExec(ctx, admin, fmt.Sprintf("CREATE DATABASE %s TEMPLATE %s", name, tmplName)); err != nil {
		t.Fatalf("pgtest: create test database: %v", err)
	}
	u := withDatabase(admin, name)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("pgtest: kept database of failed test: %s", u)
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := adminExec(ctx, admin, fmt.Sprintf("DROP DATABASE IF EXISTS %s WITH (FORCE)", name)); err != nil {
			t.Logf("pgtest: drop %s: %v", name, err)
		}
	})
	return u
}

// NewPool returns a pool on a fresh isolated, migrated database, closed when
// the test ends.
func NewPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	return Pool(t, NewURL(t))
}

// Pool opens a pool on url, closed when the test ends.
func Pool(t testing.TB, url string) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 20
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// ensureTemplate migrates a template database once per set of migrations. An
// advisory lock serializes concurrent test binaries on the same server.
func ensureTemplate(admin string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	name := "pgoutbox_tmpl_" + migrationsHash()
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		return "", fmt.Errorf("pgtest: connect to %s: %w (is the server running? set TEST_DATABASE_URL to a reachable superuser URL)", redact(admin), err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock(7071)"); err != nil {
		return "", fmt.Errorf("pgtest: lock: %w", err)
	}
	defer conn.Exec(context.Background(), "SELECT pg_advisory_unlock(7071)") //nolint:errcheck
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&exists); err != nil {
		return "", fmt.Errorf("pgtest: %w", err)
	}
	if exists {
		return name, nil
	}
	build := name + "_build"
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+build+" WITH (FORCE)"); err != nil {
		return "", fmt.Errorf("pgtest: %w", err)
	}
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+build); err != nil {
		return "", fmt.Errorf("pgtest: create template: %w", err)
	}
	pool, err := pgxpool.New(ctx, withDatabase(admin, build))
	if err != nil {
		return "", fmt.Errorf("pgtest: %w", err)
	}
	m, err := migrations.FromPool(pool)
	if err == nil {
		_, err = m.Up(ctx)
		m.Close()
	}
	pool.Close()
	if err != nil {
		return "", fmt.Errorf("pgtest: migrate template: %w", err)
	}
	// Rename only once complete, so a crashed run never leaves a half-migrated
	// template under the final name.
	if _, err := conn.Exec(ctx, fmt.Sprintf("ALTER DATABASE %s RENAME TO %s", build, name)); err != nil {
		return "", fmt.Errorf("pgtest: %w", err)
	}
	return name, nil
}

// maxConnections is the max_connections of the server at url (0 when it
// cannot be read).
func maxConnections(url string) int {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return 0
	}
	defer conn.Close(ctx)
	var n int
	_ = conn.QueryRow(ctx, "SELECT current_setting('max_connections')::int").Scan(&n)
	return n
}

func adminExec(ctx context.Context, admin, sql string) error {
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	var lastErr error
	for i := 0; i < 20; i++ {
		if _, lastErr = conn.Exec(ctx, sql); lastErr == nil {
			return nil
		}
		// Another test creating from the same template at the same moment.
		if !strings.Contains(lastErr.Error(), "is being accessed by other users") {
			return lastErr
		}
		time.Sleep(50 * time.Millisecond)
	}
	return lastErr
}

func migrationsHash() string {
	h := sha256.New()
	entries, _ := fs.Glob(migrations.FS(), "*.sql")
	for _, e := range entries {
		b, _ := fs.ReadFile(migrations.FS(), e)
		h.Write([]byte(e))
		h.Write(b)
	}
	h.Write([]byte(migrations.Schema())) // the template is built from the baseline
	return hex.EncodeToString(h.Sum(nil))[:12]
}

func withDatabase(raw, name string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme == "" {
		// keyword/value DSN
		return raw + " dbname=" + name
	}
	u.Path = "/" + name
	return u.String()
}

func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparseable URL)"
	}
	return u.Redacted()
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// BouncerURL starts a throwaway PgBouncer in transaction pooling mode in
// front of the test server (Debian's pgbouncer package, see
// internal/pgbouncer) and returns dbURL routed through it. PgBouncer stops
// when the test ends. The test fails, saying how to install PgBouncer, when
// it is missing.
func BouncerURL(t testing.TB, dbURL string, opts pgbouncer.Options) string {
	t.Helper()
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	port, _ := strconv.Atoi(u.Port())
	opts.TargetHost = cmp.Or(opts.TargetHost, u.Hostname())
	if opts.TargetPort == 0 {
		opts.TargetPort = cmp.Or(port, 5432)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b, err := pgbouncer.Start(ctx, opts)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("pgtest: pgbouncer log:\n%s", b.Log())
		}
		if err := b.Stop(); err != nil {
			t.Logf("pgtest: %v", err)
		}
	})
	bu, err := b.URL(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	return bu
}
