// Package pgbouncer starts a throwaway PgBouncer (Debian's `pgbouncer`
// package) on a free loopback port in front of a PostgreSQL server, in
// transaction pooling mode by default: the setup of relays and producers
// behind a connection pooler. Tests and the chaos suite (`make chaos
// CHAOS_PGBOUNCER=1`) use it. As root it runs PgBouncer as the postgres user
// (PgBouncer refuses to run as root).
package pgbouncer

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// ErrNoBinary means no pgbouncer executable was found.
var ErrNoBinary = errors.New("pgbouncer not found: install it (Debian/Ubuntu: apt-get install pgbouncer; macOS: brew install pgbouncer) " +
	"or set PGBOUNCER to its path")

// Options configure a PgBouncer. The zero value is transaction pooling for
// user postgres in front of 127.0.0.1:5432.
type Options struct {
	// TargetHost and TargetPort are the PostgreSQL server every database
	// name is forwarded to. Default to 127.0.0.1 and 5432.
	TargetHost string
	TargetPort int

	// PoolMode is session, transaction or statement. Defaults to
	// "transaction".
	PoolMode string

	// PoolSize is default_pool_size: server connections per database and
	// user. Defaults to 20.
	PoolSize int

	// Users are the roles allowed to connect. Without Passwords,
	// authentication is trust (PgBouncer only checks that the name is
	// listed). Defaults to ["postgres"].
	Users []string

	// Passwords, when set, are the users' passwords: clients must then
	// authenticate (scram-sha-256), and PgBouncer logs in to the server with
	// them (for a server that checks passwords). Users without an entry get
	// an empty password. Defaults to none: trust.
	Passwords map[string]string

	// MaxPreparedStatements, when positive, sets max_prepared_statements
	// (PgBouncer 1.21+ only: older versions refuse to start with it).
	// Defaults to 0: the setting is not written.
	MaxPreparedStatements int
}

// Bouncer is a running PgBouncer.
type Bouncer struct {
	bin  string
	dir  string
	port int
	cmd  *exec.Cmd
	done chan error
}

// FindBinary locates pgbouncer: $PGBOUNCER, then PATH, then /usr/sbin.
func FindBinary() (string, error) {
	if p := os.Getenv("PGBOUNCER"); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("PGBOUNCER=%s: %w: %w", p, err, ErrNoBinary)
		}
		return p, nil
	}
	if p, err := exec.LookPath("pgbouncer"); err == nil {
		return p, nil
	}
	for _, p := range []string{"/usr/sbin/pgbouncer", "/usr/local/sbin/pgbouncer", "/opt/homebrew/bin/pgbouncer"} {
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", ErrNoBinary
}

// Start writes a configuration into a temp directory, starts PgBouncer in
// the foreground and returns once it accepts connections. Stop it with
// Stop.
func Start(ctx context.Context, opts Options) (*Bouncer, error) {
	bin, err := FindBinary()
	if err != nil {
		return nil, err
	}
	opts.TargetHost = cmp.Or(opts.TargetHost, "127.0.0.1")
	if opts.TargetPort == 0 {
		opts.TargetPort = 5432
	}
	opts.PoolMode = cmp.Or(opts.PoolMode, "transaction")
	if opts.PoolSize == 0 {
		opts.PoolSize = 20
	}
	if len(opts.Users) == 0 {
		opts.Users = []string{"postgres"}
	}
	dir, err := os.MkdirTemp("", "pgoutbox-pgbouncer-")
	if err != nil {
		return nil, fmt.Errorf("pgbouncer: temp dir: %w", err)
	}
	port, err := freePort()
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	b := &Bouncer{bin: bin, dir: dir, port: port, done: make(chan error, 1)}
	if err := b.writeConfig(opts); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	cmd := exec.Command(bin, filepath.Join(dir, "pgbouncer.ini"))
	cmd.Dir = dir
	log, err := os.Create(filepath.Join(dir, "stderr.log"))
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	defer log.Close()
	cmd.Stdout, cmd.Stderr = log, log
	if os.Geteuid() == 0 {
		uid, gid, err := postgresIDs()
		if err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		if err := chownAll(dir, uid, gid); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}}
	}
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("pgbouncer: start %s: %w", bin, err)
	}
	b.cmd = cmd
	go func() { b.done <- cmd.Wait() }()
	if err := b.waitReady(ctx); err != nil {
		_ = b.Stop()
		return nil, err
	}
	return b, nil
}

func (b *Bouncer) writeConfig(o Options) error {
	var users strings.Builder
	for _, u := range o.Users {
		if strings.ContainsAny(u, "\"\n") {
			return fmt.Errorf("pgbouncer: user name %q has a quote or newline", u)
		}
		pw := o.Passwords[u]
		if strings.ContainsAny(pw, "\"\n") {
			return fmt.Errorf("pgbouncer: the password of %q has a quote or newline", u)
		}
		fmt.Fprintf(&users, "%q %q\n", u, pw)
	}
	auth := "trust"
	if len(o.Passwords) > 0 {
		auth = "scram-sha-256"
	}
	if err := os.WriteFile(filepath.Join(b.dir, "userlist.txt"), []byte(users.String()), 0o600); err != nil {
		return fmt.Errorf("pgbouncer: %w", err)
	}
	ini := fmt.Sprintf(`[databases]
* = host=%s port=%d

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = %s
auth_file = %s
pool_mode = %s
default_pool_size = %d
max_client_conn = 2000
log_connections = 0
log_disconnections = 0
admin_users = %s
; retry a failed server login after 1s, not 15s (a restarting server)
server_login_retry = 1
`, o.TargetHost, o.TargetPort, b.port, auth, filepath.Join(b.dir, "userlist.txt"), o.PoolMode, o.PoolSize,
		o.Users[0])
	if o.MaxPreparedStatements > 0 {
		ini += fmt.Sprintf("max_prepared_statements = %d\n", o.MaxPreparedStatements)
	}
	if err := os.WriteFile(filepath.Join(b.dir, "pgbouncer.ini"), []byte(ini), 0o600); err != nil {
		return fmt.Errorf("pgbouncer: %w", err)
	}
	return nil
}

// waitReady returns once the port accepts a TCP connection, or with the
// log when PgBouncer exits first.
func (b *Bouncer) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var d net.Dialer
	for {
		conn, err := d.DialContext(ctx, "tcp", b.Addr())
		if err == nil {
			conn.Close()
			return nil
		}
		select {
		case err := <-b.done:
			b.done <- err
			return fmt.Errorf("pgbouncer exited at start (%v):\n%s", err, b.Log())
		case <-ctx.Done():
			return fmt.Errorf("pgbouncer did not accept connections on %s: %w\n%s", b.Addr(), ctx.Err(), b.Log())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Version is the first line of `pgbouncer --version` ("PgBouncer 1.18.0"),
// or "" when it cannot be read.
func (b *Bouncer) Version() string {
	out, err := exec.Command(b.bin, "--version").Output()
	if err != nil {
		return ""
	}
	first, _, _ := strings.Cut(string(out), "\n")
	return strings.TrimPrefix(strings.TrimSpace(first), "PgBouncer ")
}

// Addr is host:port of the pooler.
func (b *Bouncer) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(b.port)) }

// Port is the pooler's TCP port on 127.0.0.1.
func (b *Bouncer) Port() int { return b.port }

// Dir holds pgbouncer.ini, userlist.txt and stderr.log (the log).
func (b *Bouncer) Dir() string { return b.dir }

// Log returns PgBouncer's log (for failure messages).
func (b *Bouncer) Log() string {
	out, _ := os.ReadFile(filepath.Join(b.dir, "stderr.log"))
	return string(out)
}

// URL returns rawURL (a postgres:// URL) with its host and port replaced by
// the pooler's, keeping user, database and parameters.
func (b *Bouncer) URL(rawURL string) (string, error) {
	u, err := url.Parse(rawURL)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return "", fmt.Errorf("pgbouncer: %q is not a postgres:// URL", rawURL)
	}
	u.Host = b.Addr()
	return u.String(), nil
}

// Stop ends PgBouncer (SIGTERM: immediate shutdown, clients are
// disconnected) and removes its files.
func (b *Bouncer) Stop() error {
	var err error
	if b.cmd != nil && b.cmd.Process != nil {
		_ = b.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-b.done:
		case <-time.After(10 * time.Second):
			_ = b.cmd.Process.Kill()
			<-b.done
			err = errors.New("pgbouncer: did not stop within 10s of SIGTERM; killed")
		}
		b.cmd = nil
	}
	if e := os.RemoveAll(b.dir); e != nil && err == nil {
		err = e
	}
	return err
}

func postgresIDs() (int, int, error) {
	u, err := user.Lookup("postgres")
	if err != nil {
		return 0, 0, fmt.Errorf("pgbouncer: running as root needs a 'postgres' user to run PgBouncer as: %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return uid, gid, nil
}

func chownAll(dir string, uid, gid int) error {
	return filepath.Walk(dir, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Chown(p, uid, gid)
	})
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("pgbouncer: free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
