// Package console is pgoutbox's web console for operators: an overview with
// throughput and latency charts, messages with filters, message detail, dead
// letters with bulk retry and skip, and blocked ordered aggregates. It is an
// http.Handler, so an application can serve it under a path prefix of its
// own; `pgoutbox ui` serves it on its own address.
//
// Pages are server-rendered HTML with server-rendered SVG charts, assets are
// embedded (no CDN, no JavaScript), and every page reads a bounded amount of
// data however many done rows the table retains (queries/console/console.sql).
//
// Safety: every state-changing request is a POST that must carry the
// per-browser CSRF token and pass net/http's cross-origin protection;
// ReadOnly hides the actions and rejects them; payloads and headers are
// rendered as text; responses carry a Content-Security-Policy that allows no
// script at all; every action is logged with what it changed. The handler
// itself authenticates only when Config.Token or Config.BasicUser is set;
// an application mounting it behind its own authentication leaves both
// empty.
//
//	h, err := console.New(pool, console.Config{Prefix: "/outbox"})
//	mux.Handle("/outbox/", h)
package console

import (
	"cmp"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/pgoutbox/db"
	"github.com/pgoutbox/pgoutbox/db/consoledb"
	"github.com/pgoutbox/pgoutbox/db/opsdb"
	"github.com/pgoutbox/pgoutbox/dispatcher"
	"github.com/pgoutbox/pgoutbox/internal/redact"
	"github.com/pgoutbox/pgoutbox/internal/sqlrename"
)

// Defaults of Config.
const (
	RefreshDefault      = 5 * time.Second
	StalledAfterDefault = 5 * time.Minute
	PageRowsDefault     = 50
	ScanRowsDefault     = 10000
	CountCapDefault     = 100000
	PerMinuteCapDefault = 500
	BulkBatchDefault    = 1000
)

// ErrInvalidConfig wraps every error of New about its Config.
var ErrInvalidConfig = errors.New("console: invalid config")

// Config configures the console. The zero value is valid: the table outbox,
// actions enabled, no authentication of its own, served at the root.
type Config struct {
	// Table and Schema name the outbox table (one created by `pgoutbox init
	// --table NAME --schema SCHEMA`). Defaults to outbox, through the
	// search_path.
	Table  string
	Schema string

	// Prefix is the path the handler is mounted under ("/outbox", no
	// trailing slash): every link and form action starts with it, and
	// requests are expected to arrive with it (do not strip it). Defaults to
	// "" (the root).
	Prefix string

	// ReadOnly hides every action and rejects state-changing requests with
	// 403. Read-only needs only SELECT on the table (pgoutbox_relay has
	// more). Defaults to false.
	ReadOnly bool

	// Token, when set, requires HTTP authentication whose password is the
	// token (any user name; browsers prompt for it), or an
	// "Authorization: Bearer <token>" header. Defaults to "" (none).
	Token string
	// BasicUser and BasicPassword, when set, require HTTP basic
	// authentication with exactly these credentials. Defaults to "" (none).
	BasicUser     string
	BasicPassword string

	// Hosts are the host names the console answers to, matched against each
	// request's Host header without its port, case-insensitively; any other
	// Host gets 421 Misdirected Request before authentication or any page.
	// This is what stops DNS rebinding: a web page of another site that
	// resolves its own name to 127.0.0.1 reaches the console's address, but
	// with its own name in Host. IP addresses (127.0.0.1, 10.0.0.5, [::1])
	// and localhost are always accepted; list the other names the console
	// is served under ("outbox.example.com"), or "*" for an application that
	// checks Host itself. Defaults to none: addresses and localhost only.
	Hosts []string

	// Refresh is how often the overview reloads itself. Defaults to 5s.
	Refresh time.Duration
	// StalledAfter: an ordered aggregate whose head (first undelivered
	// message in commit order) is pending or processing and older than this
	// counts as blocked, as does one whose head is dead. Defaults to 5m.
	StalledAfter time.Duration
	// PageRows is the number of rows per list page. Defaults to 50.
	PageRows int
	// ScanRows bounds the index entries a list page reads to fill one page
	// (a selective filter then pages through windows). Defaults to 10,000.
	ScanRows int
	// CountCap is where status counts stop counting (shown as "100,000+").
	// Defaults to 100,000.
	CountCap int
	// PerMinuteCap bounds the deliveries per minute whose latency the
	// latency chart reads (the first ones of the minute, in done_at order);
	// the throughput chart counts every delivery. Defaults to 500.
	PerMinuteCap int
	// BulkBatch is the number of rows one statement of a bulk action
	// changes. Defaults to 1,000.
	BulkBatch int

	// Home, when set, is a page the header links back to ("all
	// databases"): NewFleet sets it to the fleet's overview for each
	// database's console. Defaults to "" (no link).
	Home string

	// Logger receives one record per action (what changed) and errors.
	// Defaults to slog.Default().
	Logger *slog.Logger
}

func (c *Config) setDefaults() {
	c.Table = cmp.Or(c.Table, dispatcher.TableDefault)
	c.Refresh = cmp.Or(c.Refresh, RefreshDefault)
	c.StalledAfter = cmp.Or(c.StalledAfter, StalledAfterDefault)
	c.PageRows = cmp.Or(c.PageRows, PageRowsDefault)
	c.ScanRows = cmp.Or(c.ScanRows, ScanRowsDefault)
	c.CountCap = cmp.Or(c.CountCap, CountCapDefault)
	c.PerMinuteCap = cmp.Or(c.PerMinuteCap, PerMinuteCapDefault)
	c.BulkBatch = cmp.Or(c.BulkBatch, BulkBatchDefault)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

func (c *Config) validate() error {
	if _, err := sqlrename.New(c.Table, c.Schema); err != nil {
		return fmt.Errorf("%w: Table/Schema: %v", ErrInvalidConfig, err)
	}
	if c.Prefix != "" && (!strings.HasPrefix(c.Prefix, "/") || strings.HasSuffix(c.Prefix, "/")) {
		return fmt.Errorf("%w: Prefix must start with / and not end with / (such as /outbox), got %q", ErrInvalidConfig, c.Prefix)
	}
	if (c.BasicUser == "") != (c.BasicPassword == "") {
		return fmt.Errorf("%w: BasicUser and BasicPassword must be set together", ErrInvalidConfig)
	}
	if c.Token != "" && c.BasicUser != "" {
		return fmt.Errorf("%w: set Token or BasicUser/BasicPassword, not both", ErrInvalidConfig)
	}
	for _, h := range c.Hosts {
		if h == "" || strings.ContainsAny(h, "/ \t@") {
			return fmt.Errorf("%w: Hosts: %q is not a host name (such as outbox.example.com, without scheme or port)", ErrInvalidConfig, h)
		}
	}
	for _, f := range []struct {
		name string
		v    int
		max  int
	}{{"PageRows", c.PageRows, 1000}, {"ScanRows", c.ScanRows, 10_000_000}, {"CountCap", c.CountCap, 1 << 30},
		{"PerMinuteCap", c.PerMinuteCap, 1 << 30}, {"BulkBatch", c.BulkBatch, 100_000}} {
		if f.v < 1 || f.v > f.max {
			return fmt.Errorf("%w: %s must be between 1 and %d, got %d", ErrInvalidConfig, f.name, f.max, f.v)
		}
	}
	if c.Refresh < time.Second {
		return fmt.Errorf("%w: Refresh must be at least 1s, got %s", ErrInvalidConfig, c.Refresh)
	}
	if c.StalledAfter <= 0 {
		return fmt.Errorf("%w: StalledAfter must be positive, got %s", ErrInvalidConfig, c.StalledAfter)
	}
	return nil
}

// Console is the web console's http.Handler.
type Console struct {
	cfg     Config
	pool    *pgxpool.Pool
	q       *db.Queries        // the relay's queries (queries/*.sql)
	cq      *consoledb.Queries // the console's own (queries/console/)
	oq      *opsdb.Queries     // operators' (queries/ops/)
	log     *slog.Logger
	secrets *redact.Scrubber
	csrfKey []byte
	mux     *http.ServeMux
	cop     *http.CrossOriginProtection
	where   string // "user@host:port/database, table outbox" (never a password)
}

// New returns the console for the outbox table on pool.
func New(pool *pgxpool.Pool, cfg Config) (*Console, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	dbtx, err := dispatcher.TableDBTX(customPlans{pool: pool}, cfg.Table, cfg.Schema)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidConfig, err)
	}
	c := &Console{cfg: cfg, pool: pool, q: db.New(dbtx), cq: consoledb.New(dbtx), oq: opsdb.New(dbtx), log: cfg.Logger, secrets: &redact.Scrubber{}}
	cc := pool.Config().ConnConfig
	c.secrets.Add(cc.Password, cfg.Token, cfg.BasicPassword)
	table := cfg.Table
	if cfg.Schema != "" {
		table = cfg.Schema + "." + cfg.Table
	}
	c.where = fmt.Sprintf("%s@%s:%d/%s, table %s", cc.User, cc.Host, cc.Port, cc.Database, table)
	c.csrfKey = make([]byte, 32)
	if _, err := rand.Read(c.csrfKey); err != nil {
		return nil, fmt.Errorf("console: csrf key: %w", err)
	}
	c.cop = http.NewCrossOriginProtection()
	c.routes()
	return c, nil
}

// ServeHTTP serves the console: authentication, security headers, CSRF on
// every state-changing request, then the page.
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !c.admit(w, r) {
		return
	}
	c.mux.ServeHTTP(w, r)
}

// admit sets the security headers and lets the request on only for a host
// the console serves, authenticated; otherwise it has answered.
func (c *Console) admit(w http.ResponseWriter, r *http.Request) bool {
	securityHeaders(w.Header())
	if !c.hostAllowed(r.Host) {
		http.Error(w, "misdirected request: this console does not serve the host "+strconvQuote(r.Host), http.StatusMisdirectedRequest)
		return false
	}
	return c.authenticate(w, r)
}

// securityHeaders sets the headers every response of the console carries.
func securityHeaders(h http.Header) {
	h.Set("Content-Security-Policy", contentSecurityPolicy)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-store")
}

// contentSecurityPolicy allows the console's own stylesheet and nothing
// else: no script of any origin, no inline style, forms only to itself, no
// framing.
const contentSecurityPolicy = "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; " +
	"frame-ancestors 'none'; base-uri 'none'"
