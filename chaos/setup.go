package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/pgoutbox/db"
	"github.com/pgoutbox/pgoutbox/db/opsdb"
	"github.com/pgoutbox/pgoutbox/dispatcher"
	"github.com/pgoutbox/pgoutbox/internal/pgcluster"
)

const (
	chaosDB      = "chaos"
	relayUser    = "chaos_relay"
	producerUser = "chaos_producer"
)

// env is the database side of a run.
type env struct {
	cluster     *pgcluster.Cluster
	adminURL    string // superuser on the chaos database
	relayPass   string
	producePass string
	admin       *pgxpool.Pool
	relayPort   int // the tcpproxy relays connect through (blackhole faults); 0 = the server's port
	// Failover runs (failover.go): the streaming standby, and the tcpproxy
	// in front of it.
	standby          *pgcluster.Cluster
	standbyRelayPort int
	bouncerPort      int // PgBouncer producers connect to (-pgbouncer); 0 = none
}

// listenURL is the relays' direct LISTEN connection (-pgbouncer: the pool
// goes through the proxy and PgBouncer, LISTEN straight to the server).
func (e *env) listenURL(app string) string {
	return fmt.Sprintf("postgres://%s:%s@127.0.0.1:%d/%s?sslmode=disable&application_name=%s",
		relayUser, e.relayPass, e.cluster.Port(), chaosDB, app)
}

func (e *env) relayURL(app string) string {
	port := e.cluster.Port()
	if e.relayPort != 0 {
		port = e.relayPort
	}
	return fmt.Sprintf("postgres://%s:%s@%s/%s?sslmode=disable&application_name=%s%s",
		relayUser, e.relayPass, e.hosts(port, e.standbyRelayPort), chaosDB, app, e.sessionAttrs())
}

func (e *env) producerURL() string {
	if e.bouncerPort != 0 {
		// An application behind PgBouncer before 1.21 must not use pgx's
		// named statement cache (docs/cli.md, Behind PgBouncer).
		return fmt.Sprintf("postgres://%s:%s@127.0.0.1:%d/%s?sslmode=disable&application_name=producer&default_query_exec_mode=cache_describe",
			producerUser, e.producePass, e.bouncerPort, chaosDB)
	}
	return fmt.Sprintf("postgres://%s:%s@%s/%s?sslmode=disable&application_name=producer%s",
		producerUser, e.producePass, e.hosts(e.cluster.Port(), e.standbyPort()), chaosDB, e.sessionAttrs())
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// auditSQL records every UPDATE of outbox (chaos database only, not a
// product migration). SECURITY DEFINER so the relay role needs no grant on
// the audit table. application_name is the writing relay's owner name. The
// commit-order trigger's UPDATE (a producer's COMMIT setting seq) is not
// delivery state and is left out.
const auditSQL = `
CREATE TABLE outbox_audit (
    seq            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    id             bigint      NOT NULL,
    old_status     text        NOT NULL,
    new_status     text        NOT NULL,
    old_lv         bigint      NOT NULL,
    new_lv         bigint      NOT NULL,
    old_attempts   integer     NOT NULL,
    new_attempts   integer     NOT NULL,
    old_owner      text,
    new_owner      text,
    app            text        NOT NULL,
    new_last_error text,
    at             timestamptz NOT NULL
);
CREATE FUNCTION outbox_audit() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = public AS $$
BEGIN
    INSERT INTO outbox_audit (id, old_status, new_status, old_lv, new_lv, old_attempts, new_attempts,
                              old_owner, new_owner, app, new_last_error, at)
    SELECT o.id, o.status, n.status, o.lease_version, n.lease_version, o.attempts, n.attempts,
           o.lease_owner, n.lease_owner, current_setting('application_name'), left(n.last_error, 100),
           clock_timestamp()
      FROM old_rows AS o JOIN new_rows AS n USING (id)
     -- not the relay's decision of a committed ordered event (00020), which
     -- only sets seq and the position
     WHERE NOT (o.seq IS NULL AND n.seq IS NOT NULL AND o.status = n.status
                AND o.lease_version = n.lease_version AND o.attempts = n.attempts);
    RETURN NULL;
END;
$$;
CREATE TRIGGER outbox_audit AFTER UPDATE ON outbox
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION outbox_audit();
CREATE TABLE chaos_orders (
    id     bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tx     text NOT NULL,
    amount integer NOT NULL
);
-- Versioned aggregates (issue 11 case 3): each producer transaction bumps v
-- and writes ordered events carrying it.
CREATE TABLE chaos_versions (
    id text PRIMARY KEY,
    v  bigint NOT NULL
);
INSERT INTO chaos_versions SELECT 'ver-' || lpad(g::text, 2, '0'), 0 FROM generate_series(0, 19) AS g;
`

// setupDatabase creates the chaos database, migrates it with the pgoutbox
// binary, applies docs/roles.sql, creates one login user per role with a
// password, the audit trigger and a business table, and switches TCP
// authentication to scram-sha-256 for everyone but the superuser.
func setupDatabase(ctx context.Context, c *pgcluster.Cluster, root, bin string) (*env, error) {
	e := &env{cluster: c, relayPass: "rp-" + randHex(12), producePass: "pp-" + randHex(12)}
	conn, err := pgx.Connect(ctx, c.URL())
	if err != nil {
		return nil, err
	}
	_, err = conn.Exec(ctx, "CREATE DATABASE "+chaosDB)
	conn.Close(ctx)
	if err != nil {
		return nil, err
	}
	e.adminURL = c.DatabaseURL(chaosDB)

	out, err := exec.CommandContext(ctx, bin, "migrate", "up", "--database-url", e.adminURL).CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("pgoutbox migrate up: %w\n%s", err, out)
	}
	roles, err := os.ReadFile(filepath.Join(root, "docs", "roles.sql"))
	if err != nil {
		return nil, err
	}
	e.admin, err = pgxpool.New(ctx, e.adminURL)
	if err != nil {
		return nil, err
	}
	steps := []string{string(roles), string(roles) /* idempotent */, auditSQL}
	var version int
	if err := e.admin.QueryRow(ctx, "SELECT current_setting('server_version_num')::int").Scan(&version); err != nil {
		return nil, err
	}
	if version < 150000 {
		// What docs/roles.sql asks of an operator before PostgreSQL 15,
		// which made it the default: no CREATE in schema public for
		// every role.
		steps = append(steps, "REVOKE CREATE ON SCHEMA public FROM PUBLIC")
	}
	for _, s := range steps {
		if _, err := e.admin.Exec(ctx, s); err != nil {
			return nil, fmt.Errorf("setup: %w", err)
		}
	}
	for _, u := range []struct{ name, pass, group string }{
		{relayUser, e.relayPass, "pgoutbox_relay"},
		{producerUser, e.producePass, "pgoutbox_producer"},
	} {
		var stmt string
		if err := e.admin.QueryRow(ctx, "SELECT format('CREATE ROLE %I LOGIN PASSWORD %L IN ROLE %I', $1::text, $2::text, $3::text)",
			u.name, u.pass, u.group).Scan(&stmt); err != nil {
			return nil, err
		}
		// scram-sha-256, as pg_hba.conf below asks (PostgreSQL 13 stores
		// md5 by default).
		if _, err := e.admin.Exec(ctx, "SET password_encryption = 'scram-sha-256'; "+stmt); err != nil {
			return nil, fmt.Errorf("create login role %s: %w", u.name, err)
		}
	}
	// The business table is the application's, not pgoutbox's: its grant is
	// the application's business.
	if _, err := e.admin.Exec(ctx, "GRANT INSERT ON chaos_orders TO "+producerUser); err != nil {
		return nil, err
	}
	if _, err := e.admin.Exec(ctx, "GRANT SELECT, UPDATE ON chaos_versions TO "+producerUser); err != nil {
		return nil, err
	}
	// The replication line lets a failover run's standby stream (failover.go).
	hba := "local all all trust\nhost all postgres 127.0.0.1/32 trust\nhost replication postgres 127.0.0.1/32 trust\n" +
		"host all all 127.0.0.1/32 scram-sha-256\n"
	if err := os.WriteFile(filepath.Join(c.Dir(), "data", "pg_hba.conf"), []byte(hba), 0o600); err != nil {
		return nil, err
	}
	if _, err := e.admin.Exec(ctx, "SELECT pg_reload_conf()"); err != nil {
		return nil, err
	}
	time.Sleep(200 * time.Millisecond)
	// Passwords are checked now.
	bad := strings.Replace(e.relayURL("x"), e.relayPass, "wrong", 1)
	if c, err := pgx.Connect(ctx, bad); err == nil {
		c.Close(ctx)
		return nil, errors.New("setup: a wrong password was accepted (pg_hba.conf not in effect)")
	}
	return e, nil
}

// roleCheck is one verified statement about the least-privilege roles.
type roleCheck struct {
	What string
	OK   bool
	Note string
}

// verifyRoles checks what docs/roles.sql promises: producers can enqueue
// (and wake relays through the enqueue statement's NOTIFY) but not read or change
// delivery state; relays can claim and finalize but not insert or delete.
// The relays' real work under the role is verified by the run itself. It
// commits one event (tx "role-check"), returned so the checker knows it.
func verifyRoles(ctx context.Context, e *env) ([]roleCheck, error) {
	var out []roleCheck
	add := func(what string, ok bool, note string) { out = append(out, roleCheck{what, ok, note}) }
	denied := func(err error) bool {
		var pgErr *pgconn.PgError
		return errors.As(err, &pgErr) && pgErr.Code == "42501"
	}
	prod, err := pgx.Connect(ctx, e.producerURL())
	if err != nil {
		return nil, fmt.Errorf("connect as %s: %w", producerUser, err)
	}
	defer prod.Close(ctx)
	// Behind PgBouncer (-pgbouncer) the relay's LISTEN needs its direct
	// connection, as the relays' --listen-url.
	relayCheck := e.relayURL("role-check")
	if e.bouncerPort != 0 {
		relayCheck = e.listenURL("role-check")
	}
	relay, err := pgx.Connect(ctx, relayCheck)
	if err != nil {
		return nil, fmt.Errorf("connect as %s: %w", relayUser, err)
	}
	defer relay.Close(ctx)

	// LISTEN as the relay and hold the idle lock as an idle relay does,
	// Enqueue as the producer: the NOTIFY arrives.
	if _, err := relay.Exec(ctx, "LISTEN outbox"); err != nil {
		add("relay: LISTEN outbox", false, err.Error())
	}
	idle, err := db.New(relay).OutboxWakeIdle(ctx)
	add("relay: takes the idle lock (OutboxWakeIdle)", err == nil && (idle.Held || idle.OtherRelay), fmt.Sprintf("%+v %s", idle, errText(err)))
	tx, err := prod.Begin(ctx)
	if err != nil {
		return nil, err
	}
	_, err = dispatcher.Enqueue(ctx, tx, dispatcher.Event{AggregateType: "check", AggregateID: "role-check", EventType: "RoleCheck",
		Payload: []byte(`{}`), Headers: map[string]string{"x-chaos-tx": "role-check", "x-chaos-fate": FateOK}})
	add("producer: Enqueue (INSERT ... RETURNING id; identity column, no sequence grant)", err == nil, errText(err))
	if err == nil {
		err = tx.Commit(ctx)
		add("producer: COMMIT", err == nil, errText(err))
	} else {
		_ = tx.Rollback(ctx)
	}
	nctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	_, err = relay.WaitForNotification(nctx)
	cancel()
	add("relay: receives the NOTIFY the enqueue statement sends under the producer role", err == nil, errText(err))

	for _, s := range []struct{ what, sql string }{
		{"producer: SELECT payload denied", "SELECT payload FROM outbox LIMIT 1"},
		{"producer: UPDATE denied", "UPDATE outbox SET status = 'done' WHERE false"},
		{"producer: DELETE denied", "DELETE FROM outbox WHERE false"},
	} {
		_, err := prod.Exec(ctx, s.sql)
		add(s.what, denied(err), errText(err))
	}
	for _, s := range []struct{ what, sql string }{
		{"relay: INSERT denied", "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload) VALUES ('a','b','c','{}')"},
		{"relay: DELETE denied", "DELETE FROM outbox WHERE false"},
		{"relay: TRUNCATE denied", "TRUNCATE outbox"},
		{"relay: CREATE TABLE denied", "CREATE TABLE relay_owned (x int)"},
		{"relay: audit table (chaos only) not readable", "SELECT 1 FROM outbox_audit LIMIT 1"},
	} {
		_, err := relay.Exec(ctx, s.sql)
		add(s.what, denied(err), errText(err))
	}
	// The monitoring queries the relay runs (gauges).
	_, err = dispatcher.ReadQueueStats(ctx, db.New(relay))
	add("relay: queue gauges (count by status, oldest age, expired leases, blocked aggregates)", err == nil, errText(err))

	// OutboxOrderedCommitWaits under the relay role while a producer's COMMIT
	// waits for another producer's commit of the same aggregate (the first
	// holds the aggregate's lock from its insert: SET CONSTRAINTS ALL
	// IMMEDIATE). pg_locks shows other roles' waits to every role.
	prod2, err := pgx.Connect(ctx, e.producerURL())
	if err != nil {
		return nil, fmt.Errorf("connect as %s: %w", producerUser, err)
	}
	defer prod2.Close(ctx)
	holder, err := prod.Begin(ctx)
	if err != nil {
		return nil, err
	}
	defer holder.Rollback(ctx) //nolint:errcheck
	waitEvent := dispatcher.Event{AggregateType: "check", AggregateID: "role-check-wait", EventType: "RoleCheck",
		Payload: []byte(`{}`), Headers: map[string]string{"x-chaos-tx": "role-check-wait", "x-chaos-fate": FateOK}, Ordered: true}
	if _, err := holder.Exec(ctx, "SET CONSTRAINTS ALL IMMEDIATE"); err != nil {
		return nil, err
	}
	if _, err := dispatcher.Enqueue(ctx, holder, waitEvent); err != nil {
		add("producer: ordered Enqueue (commit-order trigger runs as the table owner)", false, errText(err))
		return out, nil
	}
	add("producer: ordered Enqueue (commit-order trigger runs as the table owner)", true, "")
	waiter, err := prod2.Begin(ctx)
	if err != nil {
		return nil, err
	}
	if _, err := dispatcher.Enqueue(ctx, waiter, waitEvent); err != nil {
		return nil, err
	}
	committed := make(chan error, 1)
	go func() { committed <- waiter.Commit(ctx) }()
	var seen int64
	var errW error
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		var w *opsdb.OutboxOrderedCommitWaitsRow
		w, errW = opsdb.New(relay).OutboxOrderedCommitWaits(ctx)
		if errW != nil || w.WaitingCommits > 0 {
			seen = w.WaitingCommits
			break
		}
	}
	_ = holder.Rollback(ctx) // the waiter's COMMIT then goes through
	errC := <-committed
	add("relay: OutboxOrderedCommitWaits (pgoutbox stats) sees another role's COMMIT waiting for its aggregate",
		errW == nil && seen == 1, fmt.Sprintf("waiting commits seen: %d, err: %v", seen, errW))
	add("producer: the waiting COMMIT goes through once the other transaction ends", errC == nil, errText(errC))
	return out, nil
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
