package dispatcher

import (
	"net"
	"net/url"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// A source names the outbox a message comes from: Message.Source, the
// CloudEvents source attribute. CloudEvents defines an event's identity as
// source + id, and the outbox id alone is only unique within one table: two
// services, or two outboxes in one database, both have an event 1. Publishers
// therefore build the idempotency key consumers deduplicate on (and
// JetStream's Nats-Msg-Id) from Source and ID together
// (cloudevents.IdempotencyKey), so events of different outboxes never
// collide, while a re-publish of one event (a retry, a lease takeover) keeps
// its key.
//
// Config.Source, when empty, defaults to DefaultSource of the database the
// pool connects to and the outbox table as the database resolves it,
// schema-qualified: a relay configured with Schema "public" and one that
// finds the table through a search_path starting with public get the same
// source, "…/DATABASE/public.outbox". Resolving needs the database: Run does
// it at its start; a database that cannot be read then leaves the default
// as if the table were in Config.Schema, or else in public.
//
// Every dispatcher of one outbox must use the same source, or a message
// published twice (a takeover) gets two keys. The default is derived from
// the connection settings, so relays that reach the same database under
// different names (localhost vs 127.0.0.1, a DNS alias, a pooler, a
// failover address) get different defaults: set Config.Source (pgoutbox run
// --ce-source) to one stable URI per outbox in such deployments, for example
// "urn:billing:outbox".
//
// DefaultSource returns the default source of the outbox table schema.table
// in the database cfg connects to:
//
//	pgoutbox://HOST:PORT/DATABASE/SCHEMA.TABLE
//
// HOST is cfg.Host (a Unix socket directory is percent-encoded) and, when
// the connection string lists several hosts, the fallbacks follow,
// comma-separated, in order; PORT is the port of each. For example
// "pgoutbox://db.internal:5432/app/public.outbox". Two outboxes differ in
// at least one of server, database, schema or table, so their defaults
// differ. An empty schema is left out ("…/app/outbox"); a nil cfg leaves
// host and database empty.
func DefaultSource(cfg *pgconn.Config, schema, table string) string {
	var b strings.Builder
	b.WriteString("pgoutbox://")
	database := ""
	if cfg != nil {
		database = cfg.Database
		first := hostPort(cfg.Host, cfg.Port)
		b.WriteString(first)
		seen := map[string]bool{first: true}
		for _, fb := range cfg.Fallbacks {
			if fb == nil {
				continue
			}
			hp := hostPort(fb.Host, fb.Port)
			if seen[hp] {
				continue // pgconn lists a host once per TLS mode it may try
			}
			seen[hp] = true
			b.WriteByte(',')
			b.WriteString(hp)
		}
	}
	b.WriteByte('/')
	b.WriteString(url.PathEscape(database))
	b.WriteByte('/')
	if schema != "" {
		b.WriteString(url.PathEscape(schema))
		b.WriteByte('.')
	}
	b.WriteString(url.PathEscape(table))
	return b.String()
}

func hostPort(host string, port uint16) string {
	p := strconv.Itoa(int(port))
	if strings.HasPrefix(host, "/") {
		return url.PathEscape(host) + ":" + p // Unix socket directory
	}
	return net.JoinHostPort(host, p)
}

// Source is Message.Source of every message this dispatcher publishes
// (Config.Source or its default). The default is final once Run has
// checked the table at its start (before its first claim): before that it
// assumes the table is in Config.Schema, or else in public.
func (d *Dispatcher) Source() string { return *d.source.Load() }

// resolveSource sets the default source from the table's identity as the
// database resolved it (Run's start check): schema-qualified whether the
// table was named with Config.Schema or through the search_path.
func (d *Dispatcher) resolveSource(schema, table string) {
	if !d.defaultSource || schema == "" || table == "" {
		return
	}
	src := DefaultSource(&d.pool.Config().ConnConfig.Config, schema, table)
	d.source.Store(&src)
}
