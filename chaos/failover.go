package main

// The failover scenario (-failover, `make chaos-failover`): a second
// cluster streams from the primary (pg_basebackup -R) as a synchronous
// standby; relays, producers and the suite itself connect through a
// multi-host URL (both servers, target_session_attrs=read-write); mid-run
// the primary is stopped hard (pg_ctl stop -m immediate) and the standby
// promoted (pg_ctl promote). Everyone must go on against the new primary
// with the same invariants as every run: nothing lost, no stale write, every
// duplicate explained.

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/pgoutbox/internal/pgcluster"
)

// standbyName is the standby's cluster_name, which its WAL receiver reports
// as application_name, and what synchronous_standby_names names.
const standbyName = "standby"

// hosts is the host:port list of a URL: the primary's port, then the
// standby's when this is a failover run (p2 != 0).
func (e *env) hosts(p1, p2 int) string {
	if e.standby == nil || p2 == 0 {
		return "127.0.0.1:" + strconv.Itoa(p1)
	}
	return fmt.Sprintf("127.0.0.1:%d,127.0.0.1:%d", p1, p2)
}

// sessionAttrs makes a multi-host URL pick whichever server accepts writes.
func (e *env) sessionAttrs() string {
	if e.standby == nil {
		return ""
	}
	return "&target_session_attrs=read-write"
}

func (e *env) standbyPort() int {
	if e.standby == nil {
		return 0
	}
	return e.standby.Port()
}

// startStandby makes a synchronous streaming standby of e's cluster and
// points the suite's own admin pool at both servers. The primary gets
// synchronous_standby_names only after the base backup, so the standby,
// once promoted, does not wait for a standby of its own (it has none).
func startStandby(ctx context.Context, e *env) error {
	s, err := e.cluster.StartStandby(ctx, pgcluster.Options{Settings: map[string]string{"cluster_name": standbyName}})
	if err != nil {
		return err
	}
	e.standby = s
	for _, q := range []string{
		"ALTER SYSTEM SET synchronous_standby_names = '" + standbyName + "'",
		"ALTER SYSTEM SET synchronous_commit = 'on'",
		"SELECT pg_reload_conf()",
	} {
		if _, err := e.admin.Exec(ctx, q); err != nil {
			return fmt.Errorf("synchronous replication: %s: %w", q, err)
		}
	}
	deadline := time.Now().Add(time.Minute)
	for {
		var state string
		err := e.admin.QueryRow(ctx, `SELECT coalesce(max(sync_state), '') FROM pg_stat_replication WHERE application_name = $1`,
			standbyName).Scan(&state)
		if err != nil {
			return err
		}
		if state == "sync" {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the standby is not a synchronous standby after a minute (sync_state %q)", state)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// The suite's admin pool follows the primary too.
	e.admin.Close()
	e.adminURL = fmt.Sprintf("postgres://postgres@%s/%s?sslmode=disable&target_session_attrs=read-write",
		e.hosts(e.cluster.Port(), s.Port()), chaosDB)
	e.admin, err = pgxpool.New(ctx, e.adminURL)
	return err
}

// failover stops the primary hard and promotes the standby. It returns when
// the primary was down (pg_ctl stop returned) and how long the promotion
// took after that.
func failover(ctx context.Context, e *env) (down time.Time, promotedIn time.Duration, err error) {
	if err := e.cluster.Kill(ctx); err != nil {
		return time.Time{}, 0, err
	}
	down = time.Now()
	if err := e.standby.Promote(ctx); err != nil {
		return down, 0, err
	}
	return down, time.Since(down), nil
}

// failoverFigures is what the report says about the failover.
type failoverFigures struct {
	at           time.Duration // into the fault window
	down         time.Time     // when the primary was down (pg_ctl stop -m immediate returned)
	promotedIn   time.Duration // from down to the end of pg_ctl promote
	firstWriteIn time.Duration // from down to the first audited relay write on the new primary
	writesAfter  int           // audited relay writes on the new primary
	newPrimary   string        // the new primary's own view, read at the end
}

// firstWriteAfter finds the first audited update after t (database clock).
func firstWriteAfter(audit []Transition, t time.Time) (time.Duration, int) {
	var first time.Time
	n := 0
	for _, a := range audit {
		if a.At.After(t) {
			n++
			if first.IsZero() || a.At.Before(first) {
				first = a.At
			}
		}
	}
	if first.IsZero() {
		return 0, 0
	}
	return first.Sub(t), n
}

// newPrimaryState reads, on the new primary, that it is out of recovery.
func newPrimaryState(ctx context.Context, e *env) string {
	conn, err := pgx.Connect(ctx, e.standby.DatabaseURL(chaosDB))
	if err != nil {
		return "unreachable: " + err.Error()
	}
	defer conn.Close(ctx)
	var inRecovery bool
	var sync string
	if err := conn.QueryRow(ctx, "SELECT pg_is_in_recovery(), current_setting('synchronous_standby_names')").Scan(&inRecovery, &sync); err != nil {
		return err.Error()
	}
	return fmt.Sprintf("in recovery %v, synchronous_standby_names %q", inRecovery, sync)
}
