// Package cluster starts one throwaway PostgreSQL cluster for the benchmark
// from the local server binaries (initdb, pg_ctl). It follows the main
// module's internal/pgcluster (which a nested module cannot import), minus
// everything the benchmark does not need. The server runs with its default,
// durable configuration plus the settings the caller passes, all of which
// the benchmark prints. As root the binaries run as the postgres user.
package cluster

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

// Cluster is a running throwaway server.
type Cluster struct {
	dir, data, bin string
	port           int
	asUser         string
	settings       map[string]string
	started        bool
}

// FindBin locates the directory holding pg_ctl: $PG_BIN, PATH, pg_config
// --bindir, then /usr/lib/postgresql/*/bin (newest first).
func FindBin() (string, error) {
	if d := os.Getenv("PG_BIN"); d != "" {
		if _, err := os.Stat(filepath.Join(d, "pg_ctl")); err == nil {
			return d, nil
		}
		return "", fmt.Errorf("PG_BIN=%s has no pg_ctl", d)
	}
	if p, err := exec.LookPath("pg_ctl"); err == nil {
		// A symlink (e.g. /usr/local/bin/pg_ctl) points at the real bin
		// directory, where initdb and pgbench live too.
		if real, err := filepath.EvalSymlinks(p); err == nil {
			p = real
		}
		return filepath.Dir(p), nil
	}
	if out, err := exec.Command("pg_config", "--bindir").Output(); err == nil {
		d := strings.TrimSpace(string(out))
		if _, err := os.Stat(filepath.Join(d, "pg_ctl")); err == nil {
			return d, nil
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool {
		a, _ := strconv.Atoi(filepath.Base(filepath.Dir(dirs[i])))
		b, _ := strconv.Atoi(filepath.Base(filepath.Dir(dirs[j])))
		return a > b
	})
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "pg_ctl")); err == nil {
			return d, nil
		}
	}
	return "", errors.New("PostgreSQL server binaries (initdb, pg_ctl) not found: install the PostgreSQL server or set PG_BIN")
}

// Start creates and starts a cluster with the given extra settings
// (-c name=value). Stop removes it.
func Start(ctx context.Context, settings map[string]string) (*Cluster, error) {
	bin, err := FindBin()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "pgoutbox-bench-pg-")
	if err != nil {
		return nil, err
	}
	c := &Cluster{dir: dir, data: filepath.Join(dir, "data"), bin: bin, settings: settings}
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("cluster: running as root needs a 'postgres' user: %w", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		c.asUser = "postgres"
	}
	// initdb --no-sync only skips syncing the freshly created files to disk
	// (it is a throwaway directory); the running server keeps fsync on.
	if out, err := c.run(ctx, "initdb", "-D", c.data, "-U", "postgres", "--auth=trust",
		"--no-sync", "-E", "UTF8", "--locale=C"); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("cluster: initdb: %w\n%s", err, out)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	c.port = l.Addr().(*net.TCPAddr).Port
	l.Close()
	o := []string{"-p", strconv.Itoa(c.port), "-k", c.dir, "-c", "listen_addresses=127.0.0.1"}
	keys := make([]string, 0, len(settings))
	for k := range settings {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		o = append(o, "-c", k+"="+settings[k])
	}
	if out, err := c.run(ctx, "pg_ctl", "-D", c.data, "-l", filepath.Join(c.dir, "server.log"),
		"-o", strings.Join(o, " "), "-w", "-t", "60", "start"); err != nil {
		log, _ := os.ReadFile(filepath.Join(c.dir, "server.log"))
		os.RemoveAll(dir)
		return nil, fmt.Errorf("cluster: pg_ctl start: %w\n%s\n%s", err, out, log)
	}
	c.started = true
	return c, nil
}

// Stop stops the server and removes its files.
func (c *Cluster) Stop() error {
	var err error
	if c.started {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if out, e := c.run(ctx, "pg_ctl", "-D", c.data, "-m", "fast", "-w", "stop"); e != nil {
			err = fmt.Errorf("cluster: pg_ctl stop: %w\n%s", e, out)
		}
		c.started = false
	}
	if e := os.RemoveAll(c.dir); e != nil && err == nil {
		err = e
	}
	return err
}

// URL is the connection URL of database name.
func (c *Cluster) URL(name string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", c.port, name)
}

// Port is the TCP port on 127.0.0.1.
func (c *Cluster) Port() int { return c.port }

// Bin is the directory of the server binaries (pgbench lives there).
func (c *Cluster) Bin() string { return c.bin }

// Dir is the cluster's temp directory.
func (c *Cluster) Dir() string { return c.dir }

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
