package pgcluster

import (
	"context"
	"fmt"
	"maps"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
)

// StartStandby makes a streaming physical standby of c and starts it on a
// port of its own: pg_basebackup -R (which writes standby.signal and
// primary_conninfo pointing at c) into a new temp directory. The standby
// runs with c's settings, then opts.Settings on top; set cluster_name there
// to name the standby for synchronous_standby_names (the WAL receiver uses
// it as its application_name). The primary's pg_hba.conf must let postgres
// open a replication connection from 127.0.0.1 (initdb's default does).
// Replication is asynchronous unless the primary's synchronous_standby_names
// names the standby. Stop the standby with Stop.
func (c *Cluster) StartStandby(ctx context.Context, opts Options) (*Cluster, error) {
	dir, err := os.MkdirTemp("", "pgoutbox-pg-standby-")
	if err != nil {
		return nil, fmt.Errorf("pgcluster: temp dir: %w", err)
	}
	settings := maps.Clone(c.opts.Settings)
	if settings == nil {
		settings = map[string]string{}
	}
	maps.Copy(settings, opts.Settings)
	s := &Cluster{dir: dir, data: filepath.Join(dir, "data"), bin: c.bin, asUser: c.asUser,
		opts: Options{Settings: settings}}
	if s.asUser != "" {
		if err := chownTo(dir, s.asUser); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
	}
	if out, err := s.run(ctx, "pg_basebackup", "-D", s.data, "-h", "127.0.0.1", "-p", strconv.Itoa(c.port),
		"-U", "postgres", "-R", "-X", "stream", "-c", "fast", "--no-sync"); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("pgcluster: pg_basebackup: %w\n%s", err, out)
	}
	if err := s.start(ctx); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return s, nil
}

// Promote ends recovery on a standby (pg_ctl promote) and waits until it
// accepts writes.
func (c *Cluster) Promote(ctx context.Context) error {
	if out, err := c.run(ctx, "pg_ctl", "-D", c.data, "-w", "-t", "60", "promote"); err != nil {
		return fmt.Errorf("pgcluster: pg_ctl promote: %w\n%s", err, out)
	}
	return nil
}

// Kill stops the server in immediate mode (a crash: no shutdown checkpoint,
// connections cut) and leaves it stopped; its files stay until Stop.
func (c *Cluster) Kill(ctx context.Context) error {
	if out, err := c.run(ctx, "pg_ctl", "-D", c.data, "-m", "immediate", "-w", "stop"); err != nil {
		return fmt.Errorf("pgcluster: pg_ctl stop -m immediate: %w\n%s", err, out)
	}
	c.started = false
	return nil
}

// chownTo gives dir to the user the server runs as (when running as root).
func chownTo(dir, name string) error {
	u, err := user.Lookup(name)
	if err != nil {
		return fmt.Errorf("pgcluster: %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	if err := os.Chown(dir, uid, gid); err != nil {
		return fmt.Errorf("pgcluster: chown: %w", err)
	}
	return nil
}
