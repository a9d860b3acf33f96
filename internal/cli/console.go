package cli

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/pgoutbox/pgoutbox/console"
)

// Environment variables holding the console's credentials (never flags, so
// they stay out of shell history and process listings).
const (
	envUIToken    = "PGOUTBOX_UI_TOKEN"
	envUIUser     = "PGOUTBOX_UI_USER"
	envUIPassword = "PGOUTBOX_UI_PASSWORD"
)

const uiAbout = `Serves the web console for operators: an overview (messages by status, oldest
undelivered age, expired leases, relays holding leases, blocked aggregates,
throughput and end-to-end latency over the last hour; refreshes itself),
messages with filters, message detail with retry/skip, dead letters with bulk
retry and skip (selected rows, or all matching a filter, through a
confirmation page), and blocked ordered aggregates with retry/skip of the head.

Authentication comes from the environment: PGOUTBOX_UI_TOKEN (browsers ask for
it as the password of any user name; scripts send "Authorization: Bearer
TOKEN"), or PGOUTBOX_UI_USER and PGOUTBOX_UI_PASSWORD (HTTP basic auth). Without
either, the console listens on loopback addresses only (127.0.0.1, ::1,
localhost) and refuses any other --addr; on any other address the token or
password must be at least 16 characters. --tls-cert and --tls-key serve HTTPS.

The console answers only requests whose Host is an IP address, localhost, or a
name given with --public-host: a web page on another site that points its own
name at this machine (DNS rebinding) gets 421 Misdirected Request and nothing
else.

Every state-changing request needs the page's CSRF token; --read-only hides the
actions and rejects them (read-only needs only SELECT on the table, which the
pgoutbox_relay role of docs/roles.sql has). Actions are logged to stderr with
what they changed. No page ever shows the database password.`

const uiExamples = `  pgoutbox ui
  pgoutbox ui --addr 127.0.0.1:9090 --read-only
  PGOUTBOX_UI_TOKEN=$(openssl rand -hex 16) pgoutbox ui --addr 0.0.0.0:8443 \
      --public-host outbox.example.com --tls-cert cert.pem --tls-key key.pem
  pgoutbox ui --table hr_outbox --schema hr --prefix /outbox`

func (a *app) ui(ctx context.Context, args []string) error {
	f := newFlags("ui", "pgoutbox ui [flags]", uiAbout, uiExamples)
	dbURL := f.databaseURL()
	addr := f.String("addr", "127.0.0.1:8080", "listen address (host:port); a non-loopback host needs "+envUIToken+" or "+envUIUser+"/"+envUIPassword)
	readOnly := f.Bool("read-only", false, "hide every action and reject state-changing requests")
	prefix := f.String("prefix", "", "serve under this path (such as /outbox) instead of /")
	stalledAfter := f.durationDays("stalled-after", console.StalledAfterDefault, "an ordered aggregate whose head (its first undelivered message) is older than this counts as blocked")
	refresh := f.duration("refresh", console.RefreshDefault, "how often the overview reloads itself")
	publicHosts := f.listOf("public-host", "host", "a host name the console is reached by besides IP addresses and localhost (repeatable); requests naming any other host get 421")
	tlsCert := f.String("tls-cert", "", "serve HTTPS with this certificate (PEM file; with --tls-key)")
	tlsKey := f.String("tls-key", "", "the private key of --tls-cert (PEM file)")
	if _, err := a.parse(f, args, 0); err != nil {
		return err
	}
	if (*tlsCert == "") != (*tlsKey == "") {
		return f.usageError("--tls-cert and --tls-key must be given together")
	}
	for _, h := range *publicHosts {
		if h == "" || strings.ContainsAny(h, "/:@ \t") {
			return f.usageError("--public-host %q: expected a host name such as outbox.example.com (no scheme, port or path)", h)
		}
	}
	if err := f.checkPositive("stalled-after", *stalledAfter); err != nil {
		return err
	}
	if *refresh < time.Second {
		return f.usageError("--refresh must be at least 1s, got %s", *refresh)
	}
	if *prefix != "" && (!strings.HasPrefix(*prefix, "/") || strings.HasSuffix(*prefix, "/")) {
		return f.usageError("--prefix must start with / and not end with / (such as /outbox), got %q", *prefix)
	}
	token, user, password := a.getenv(envUIToken), a.getenv(envUIUser), a.getenv(envUIPassword)
	a.secrets.Add(token, password)
	switch {
	case token != "" && (user != "" || password != ""):
		return f.usageError("set %s, or %s and %s, not both", envUIToken, envUIUser, envUIPassword)
	case (user == "") != (password == ""):
		return f.usageError("%s and %s must be set together", envUIUser, envUIPassword)
	}
	host, _, err := net.SplitHostPort(*addr)
	if err != nil {
		return f.usageError("--addr %q: expected host:port, such as 127.0.0.1:8080", *addr)
	}
	if token == "" && user == "" && !console.LoopbackHost(host) {
		return f.usageError("refusing to listen on %s without authentication: set %s (or %s and %s), or use a loopback address such as 127.0.0.1:8080",
			*addr, envUIToken, envUIUser, envUIPassword)
	}
	if !console.LoopbackHost(host) {
		secret, name := token, envUIToken
		if user != "" {
			secret, name = password, envUIPassword
		}
		if len(secret) < minUISecret {
			return f.usageError("refusing to listen on %s with a %d-character %s: off loopback it must be at least %d characters (such as $(openssl rand -hex 16))",
				*addr, len(secret), name, minUISecret)
		}
	}
	var tlsConfig *tls.Config
	if *tlsCert != "" {
		cert, err := tls.LoadX509KeyPair(*tlsCert, *tlsKey)
		if err != nil {
			return failf("ui: --tls-cert %s / --tls-key %s: %v", *tlsCert, *tlsKey, err)
		}
		tlsConfig = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	}

	pool, _, err := a.open(ctx, f, *dbURL)
	if err != nil {
		return err
	}
	defer pool.Close()
	log := slog.New(slog.NewTextHandler(a.stderr, nil))
	h, err := console.New(pool, console.Config{Table: a.table, Schema: a.schema, Prefix: *prefix, ReadOnly: *readOnly,
		Token: token, BasicUser: user, BasicPassword: password, StalledAfter: *stalledAfter, Refresh: *refresh, Logger: log,
		Hosts: *publicHosts})
	if err != nil {
		return failf("%v", err)
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return failf("ui: listen on %s: %v", *addr, err)
	}
	scheme := "http"
	if tlsConfig != nil {
		ln, scheme = tls.NewListener(ln, tlsConfig), "https"
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 30 * time.Second,
		WriteTimeout: 5 * time.Minute, IdleTimeout: 2 * time.Minute, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	mode := "actions enabled"
	if *readOnly {
		mode = "read-only"
	}
	auth := "no authentication (loopback only)"
	switch {
	case token != "":
		auth = "token from " + envUIToken
	case user != "":
		auth = "basic auth from " + envUIUser + "/" + envUIPassword
	}
	fmt.Fprintf(a.stdout, "pgoutbox ui: console on %s://%s%s/ (%s; %s); Ctrl-C stops it\n", scheme, ln.Addr(), *prefix, mode, auth)
	if a.metricsListening != nil { // tests: the address bound (--addr 127.0.0.1:0)
		a.metricsListening(ln.Addr())
	}
	select {
	case <-ctx.Done():
	case err := <-served:
		if !errors.Is(err, http.ErrServerClosed) {
			return failf("ui: %v", err)
		}
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	_ = srv.Shutdown(sctx)
	return nil
}

// minUISecret is the shortest token or password the console accepts on an
// address other than loopback.
const minUISecret = 16
