// Package pgcluster starts a throwaway PostgreSQL cluster from the local
// server binaries (initdb, pg_ctl): a temp directory, a free loopback port,
// trust auth. Tests, the demo, the benchmarks and the chaos suite use it when
// no database URL is given. As root it runs the binaries as the postgres user
// (PostgreSQL refuses to run as root).
package pgcluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
)

// ErrNoBinaries means no PostgreSQL server binaries were found.
var ErrNoBinaries = errors.New("PostgreSQL server binaries (initdb, pg_ctl) not found: " +
	"install the PostgreSQL server (Debian/Ubuntu: apt-get install postgresql; macOS: brew install postgresql), " +
	"or set PG_BIN to the directory holding pg_ctl, " +
	"or point TEST_DATABASE_URL / DATABASE_URL at a running server")

// Options tune a cluster. The zero value is a durable default-config server.
type Options struct {
	// Settings are extra server settings (-c name=value), e.g. fsync=off for
	// tests. Defaults to none.
	Settings map[string]string
	// XidEpoch, when positive, sets the epoch of the cluster's transaction
	// ids before its first start (pg_resetwal -e), so that its txids are
	// those of a long-lived server (2^32 and more) from the first
	// transaction on. Defaults to 0.
	XidEpoch uint32
	// Log receives nothing; the server log stays in Dir()/server.log.
}

// TestSettings are for test clusters only, never for benchmarks: they drop
// durability for speed.
var TestSettings = map[string]string{
	"fsync":              "off",
	"synchronous_commit": "off",
	"full_page_writes":   "off",
	"max_connections":    "300",
	// Prepared transactions are off by default (0); the two-phase-commit
	// producer test (queries/notify_test.go) needs a few.
	"max_prepared_transactions": "10",
}

// Cluster is a running throwaway server.
type Cluster struct {
	dir     string
	data    string
	bin     string
	port    int
	asUser  string // "postgres" when running as root
	opts    Options
	started bool
}

// FindBin locates the directory with pg_ctl: $PG_BIN, then PATH, then
// pg_config --bindir, then /usr/lib/postgresql/*/bin (newest first).
func FindBin() (string, error) {
	if d := os.Getenv("PG_BIN"); d != "" {
		if _, err := os.Stat(filepath.Join(d, "pg_ctl")); err == nil {
			return d, nil
		}
		return "", fmt.Errorf("PG_BIN=%s has no pg_ctl: %w", d, ErrNoBinaries)
	}
	if p, err := exec.LookPath("pg_ctl"); err == nil {
		// A symlink (/usr/local/bin/pg_ctl -> /usr/lib/postgresql/15/bin)
		// names the directory of the other binaries only once resolved.
		if r, err := filepath.EvalSymlinks(p); err == nil {
			p = r
		}
		return filepath.Dir(p), nil
	}
	if out, err := exec.Command("pg_config", "--bindir").Output(); err == nil {
		d := strings.TrimSpace(string(out))
		if _, err := os.Stat(filepath.Join(d, "pg_ctl")); err == nil {
			return d, nil
		}
	}
	for _, pattern := range []string{"/usr/lib/postgresql/*/bin", "/usr/local/pgsql/bin", "/opt/homebrew/bin", "/usr/local/bin"} {
		dirs, _ := filepath.Glob(pattern)
		sort.Slice(dirs, func(i, j int) bool { return versionOf(dirs[i]) > versionOf(dirs[j]) })
		for _, d := range dirs {
			if _, err := os.Stat(filepath.Join(d, "pg_ctl")); err == nil {
				return d, nil
			}
		}
	}
	return "", ErrNoBinaries
}

func versionOf(dir string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(dir)))
	return v
}

// Start creates and starts a new cluster. Stop it with Stop.
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	bin, err := FindBin()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "pgoutbox-pg-")
	if err != nil {
		return nil, fmt.Errorf("pgcluster: temp dir: %w", err)
	}
	c := &Cluster{dir: dir, data: filepath.Join(dir, "data"), bin: bin, opts: opts}
	if os.Geteuid() == 0 {
		c.asUser = "postgres"
		u, err := user.Lookup("postgres")
		if err != nil {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("pgcluster: running as root needs a 'postgres' user to run the server as: %w", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("pgcluster: chown: %w", err)
		}
	}
	if out, err := c.run(ctx, "initdb", "-D", c.data, "-U", "postgres", "--auth=trust",
		"--no-sync", "-E", "UTF8", "--locale=C"); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("pgcluster: initdb: %w\n%s", err, out)
	}
	if opts.XidEpoch > 0 {
		if out, err := c.run(ctx, "pg_resetwal", "-e", strconv.FormatUint(uint64(opts.XidEpoch), 10), "-D", c.data); err != nil {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("pgcluster: pg_resetwal: %w\n%s", err, out)
		}
	}
	if err := c.start(ctx); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return c, nil
}

func (c *Cluster) start(ctx context.Context) error {
	if c.port == 0 {
		port, err := freePort()
		if err != nil {
			return err
		}
		c.port = port
	}
	o := []string{"-p", strconv.Itoa(c.port), "-k", c.dir, "-c", "listen_addresses=127.0.0.1"}
	keys := make([]string, 0, len(c.opts.Settings))
	for k := range c.opts.Settings {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		o = append(o, "-c", k+"="+c.opts.Settings[k])
	}
	out, err := c.run(ctx, "pg_ctl", "-D", c.data, "-l", filepath.Join(c.dir, "server.log"),
		"-o", strings.Join(o, " "), "-w", "-t", "60", "start")
	if err != nil {
		log, _ := os.ReadFile(filepath.Join(c.dir, "server.log"))
		return fmt.Errorf("pgcluster: pg_ctl start: %w\n%s\n%s", err, out, log)
	}
	c.started = true
	return nil
}

// Restart stops the server with the given mode ("immediate" simulates a
// crash) and starts it again on the same port.
func (c *Cluster) Restart(ctx context.Context, mode string) error {
	if out, err := c.run(ctx, "pg_ctl", "-D", c.data, "-m", mode, "-w", "stop"); err != nil {
		return fmt.Errorf("pgcluster: pg_ctl stop: %w\n%s", err, out)
	}
	c.started = false
	return c.start(ctx)
}

// Stop stops the server immediately and removes its files.
func (c *Cluster) Stop() error {
	var err error
	if c.started {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		if out, e := c.run(ctx, "pg_ctl", "-D", c.data, "-m", "immediate", "-w", "stop"); e != nil {
			err = fmt.Errorf("pgcluster: pg_ctl stop: %w\n%s", e, out)
		}
		c.started = false
	}
	if e := os.RemoveAll(c.dir); e != nil && err == nil {
		err = e
	}
	return err
}

// URL is the connection URL of the cluster's postgres database.
func (c *Cluster) URL() string { return c.DatabaseURL("postgres") }

// DatabaseURL is the connection URL of database name on this cluster.
func (c *Cluster) DatabaseURL(name string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", c.port, name)
}

// Port is the server's TCP port on 127.0.0.1.
func (c *Cluster) Port() int { return c.port }

// Dir is the cluster's temp directory (data/, server.log).
func (c *Cluster) Dir() string { return c.dir }

// Bin is the directory of the server binaries in use (pgbench lives there).
func (c *Cluster) Bin() string { return c.bin }

func (c *Cluster) run(ctx context.Context, name string, args ...string) ([]byte, error) {
	path := filepath.Join(c.bin, name)
	var cmd *exec.Cmd
	if c.asUser != "" {
		cmd = exec.CommandContext(ctx, "runuser", append([]string{"-u", c.asUser, "--", path}, args...)...)
	} else {
		cmd = exec.CommandContext(ctx, path, args...)
	}
	cmd.Dir = c.dir
	return cmd.CombinedOutput()
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("pgcluster: free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
