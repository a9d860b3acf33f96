package dispatcher

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"runtime/debug"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgoutbox/pgoutbox/db"
	"github.com/pgoutbox/pgoutbox/internal/buildinfo"
)

// relayForgetAfter is how long a relay's row stays in outbox_relays after
// its last heartbeat (any running relay deletes older ones).
const relayForgetAfter = time.Hour

// The relay's record in outbox_relays (migration 00012, queries/relays.sql):
// its row says who relays this outbox, from where, and how busy it is. It
// is written by one goroutine, every Config.RelayInterval, from figures the
// pipeline keeps in atomics anyway (inFlight) or stores once per claim and
// per finalize statement (lastClaim, lastFinalize): nothing on the
// per-message path.

// markClaimed records a claim that returned rows (the relays view's last
// claim).
func (d *Dispatcher) markClaimed() { d.lastClaim.Store(int64(time.Since(d.epoch))) }

// markFinalized records a finalize statement that wrote (the relays view's
// last finalize).
func (d *Dispatcher) markFinalized() { d.lastFinalize.Store(int64(time.Since(d.epoch))) }

// ageOf is the time since a mark (nil: never marked).
func (d *Dispatcher) ageOf(mark int64) *time.Duration {
	if mark == 0 {
		return nil
	}
	age := max(time.Since(d.epoch)-time.Duration(mark), 0)
	return &age
}

// relayLoop writes this relay's row every RelayInterval until ctx ends,
// then marks it stopped (on stopCtx, which outlives ctx). A table that does
// not exist (migration 00012 not applied) is reported once and the loop
// ends: the relays view is then empty, and nothing else depends on it.
func (d *Dispatcher) relayLoop(ctx, stopCtx context.Context) {
	host, _ := os.Hostname()
	version := relayVersion()
	started := time.Now()
	beat := func() error {
		bctx, cancel := context.WithTimeout(ctx, d.cfg.WriteTimeout)
		defer cancel()
		_, err := d.q.OutboxRelayBeat(bctx, db.OutboxRelayBeatParams{
			ForgetAfter: relayForgetAfter, OwnerPrefix: d.tokens.prefix, Owner: d.cfg.Owner, Host: host,
			Pid: int32(os.Getpid()), Version: version, RunningFor: time.Since(started),
			InFlight: int32(d.inFlight.Load()), LastClaimAge: d.ageOf(d.lastClaim.Load()),
			LastFinalizeAge: d.ageOf(d.lastFinalize.Load()),
		})
		return err
	}
	wrote := false
	t := time.NewTicker(d.cfg.RelayInterval)
	defer t.Stop()
	for {
		err := beat()
		switch {
		case err == nil:
			wrote = true
		case ctx.Err() != nil:
		case isUndefinedTable(err):
			d.log.Warn("outbox_relays table missing: this relay does not appear in the relays view (apply migration 00012)", slog.Any("error", err))
			return
		default:
			d.log.Debug("relay heartbeat failed; retrying at the next interval", slog.Any("error", err))
		}
		select {
		case <-ctx.Done():
			if wrote {
				sctx, cancel := context.WithTimeout(stopCtx, d.cfg.WriteTimeout)
				_, err := d.q.OutboxRelayStop(sctx, db.OutboxRelayStopParams{OwnerPrefix: d.tokens.prefix, LastFinalizeAge: d.ageOf(d.lastFinalize.Load())})
				cancel()
				if err != nil {
					d.log.Debug("could not mark the relay stopped", slog.Any("error", err))
				}
			}
			return
		case <-t.C:
		}
	}
}

// isUndefinedTable reports SQLSTATE 42P01 (undefined_table).
func isUndefinedTable(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "42P01"
}

// relayVersion is the version of pgoutbox this relay runs: the binary's
// (`pgoutbox run`), or the pgoutbox module an application built in.
func relayVersion() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	const module = "github.com/pgoutbox/pgoutbox"
	if bi.Main.Path == module {
		return strings.TrimPrefix(buildinfo.Read().String(), "pgoutbox ")
	}
	for _, m := range bi.Deps {
		if m.Path == module {
			if m.Replace != nil && m.Replace.Version != "" {
				return m.Replace.Version
			}
			return m.Version
		}
	}
	return "unknown"
}

// Relay is one relay process as it records itself in outbox_relays
// (ReadRelays). Ages are seconds on the database clock; -1 means never.
type Relay struct {
	OwnerPrefix            string     `json:"owner_prefix"` // the start of every lease_owner it writes
	Owner                  string     `json:"owner"`
	Host                   string     `json:"host"`
	PID                    int32      `json:"pid"`
	Version                string     `json:"version"`
	State                  string     `json:"state"` // RelayRunning, RelaySilent or RelayStopped
	StartedAt              time.Time  `json:"started_at"`
	HeartbeatAt            time.Time  `json:"heartbeat_at"`
	StoppedAt              *time.Time `json:"stopped_at"`
	InFlight               int32      `json:"in_flight"` // claimed, not yet finalized, at its last heartbeat
	Leases                 int64      `json:"leases"`    // processing rows its claims hold now
	LastClaimAt            *time.Time `json:"last_claim_at"`
	LastFinalizeAt         *time.Time `json:"last_finalize_at"`
	HeartbeatAgeSeconds    float64    `json:"heartbeat_age_seconds"`
	LastClaimAgeSeconds    float64    `json:"last_claim_age_seconds"`
	LastFinalizeAgeSeconds float64    `json:"last_finalize_age_seconds"`
}

// The states of a Relay.
const (
	RelayRunning = "running" // beating
	RelaySilent  = "silent"  // no heartbeat for RelaySilentAfter: crashed, cut off, or paused
	RelayStopped = "stopped" // Run returned
)

// RelaySilentAfter is how long without a heartbeat makes a relay silent:
// three heartbeats at RelayIntervalDefault, and some slack.
const RelaySilentAfter = 3*RelayIntervalDefault + 5*time.Second

// ReadRelays reads up to maxRows relays of the last hour from outbox_relays
// (running first). A table without it (migration 00012 not applied) has
// none: nil, nil.
func ReadRelays(ctx context.Context, q *db.Queries, maxRows int) ([]Relay, error) {
	present, err := q.OutboxRelaysTable(ctx)
	if err != nil || !present {
		return nil, err
	}
	rows, err := q.OutboxRelays(ctx, int32(maxRows))
	if err != nil {
		return nil, err
	}
	out := make([]Relay, 0, len(rows))
	for _, r := range rows {
		state := RelayRunning
		switch {
		case r.StoppedAt != nil:
			state = RelayStopped
		case r.HeartbeatAgeSeconds > RelaySilentAfter.Seconds():
			state = RelaySilent
		}
		out = append(out, Relay{OwnerPrefix: r.OwnerPrefix, Owner: r.Owner, Host: r.Host, PID: r.Pid, Version: r.Version,
			State: state, StartedAt: r.StartedAt, HeartbeatAt: r.HeartbeatAt, StoppedAt: r.StoppedAt, InFlight: r.InFlight,
			Leases: r.Leases, LastClaimAt: r.LastClaimAt, LastFinalizeAt: r.LastFinalizeAt, HeartbeatAgeSeconds: r.HeartbeatAgeSeconds,
			LastClaimAgeSeconds: r.LastClaimAgeSeconds, LastFinalizeAgeSeconds: r.LastFinalizeAgeSeconds})
	}
	return out, nil
}
