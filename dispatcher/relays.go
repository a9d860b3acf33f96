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
// is written by one goroutine, every Config.RelayInterval, at once after the
// relay's first claim and first finalize, and a last time after its
// shutdown, from figures the pipeline keeps in atomics anyway (inFlight) or
// stores once per claim and per finalize statement (lastClaim,
// lastFinalize): nothing on the per-message path.

// claimed counts a claim of n rows, by any path (the claim window, the
// isolation claim, the recovery lane's expired leases and passed rows), and
// records it as the relays view's last claim.
func (d *Dispatcher) claimed(ctx context.Context, n int) {
	if n == 0 {
		return
	}
	d.metrics.claimed(ctx, n)
	if d.lastClaim.Swap(d.sinceEpoch()) == 0 {
		d.recordRelayNow()
	}
}

// markFinalized records a finalize statement that wrote (the relays view's
// last finalize).
func (d *Dispatcher) markFinalized() {
	if d.lastFinalize.Swap(d.sinceEpoch()) == 0 {
		d.recordRelayNow()
	}
}

// sinceEpoch is a mark for lastClaim and lastFinalize: never 0, which
// means never marked.
func (d *Dispatcher) sinceEpoch() int64 { return max(int64(time.Since(d.epoch)), 1) }

// recordRelayNow asks relayLoop to write the relay's row without waiting
// for the next RelayInterval: a relay's first claim and first finalize are
// in the relays view at once, not up to an interval later (a relay that
// ran for less than an interval showed "never claimed" after publishing).
func (d *Dispatcher) recordRelayNow() {
	select {
	case d.relayNow <- struct{}{}:
	default:
	}
}

// ageOf is the time since a mark (nil: never marked).
func (d *Dispatcher) ageOf(mark int64) *time.Duration {
	if mark == 0 {
		return nil
	}
	age := max(time.Since(d.epoch)-time.Duration(mark), 0)
	return &age
}

// relayLoop writes this relay's row every RelayInterval (and when
// recordRelayNow asks) until shutDown is closed, which Run does once its
// shutdown is complete (publishes ended, the last finalizes and hand-backs
// written); then it records the relay a last time, with its last claim and
// last finalize, and marks it stopped. Its statements are not cancelled by
// ctx: a heartbeat abandoned half way could still run on the server after
// the stop and mark the relay running again; each is bounded by
// WriteTimeout instead. A table that does not exist (migration 00012 not
// applied) is reported once and the loop ends: the relays view is then
// empty, and nothing else depends on it.
func (d *Dispatcher) relayLoop(ctx context.Context, shutDown <-chan struct{}) {
	ctx = context.WithoutCancel(ctx)
	host, _ := os.Hostname()
	version := relayVersion()
	started := time.Now()
	beat := func(ctx context.Context) error {
		_, err := d.q.OutboxRelayBeat(ctx, db.OutboxRelayBeatParams{
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
		bctx, cancel := context.WithTimeout(ctx, d.cfg.WriteTimeout)
		err := beat(bctx)
		cancel()
		switch {
		case err == nil:
			wrote = true
		case isUndefinedTable(err):
			d.log.Warn("outbox_relays table missing: this relay does not appear in the relays view (apply migration 00012)", slog.Any("error", err))
			return
		default:
			d.log.Debug("relay heartbeat failed; retrying at the next interval", slog.Any("error", err))
		}
		select {
		case <-shutDown:
			d.recordStopped(ctx, beat, wrote)
			return
		case <-t.C:
		case <-d.relayNow:
		}
	}
}

// recordStopped writes the relay's row a last time (its last claim and last
// finalize as they are after the shutdown's final flush) and marks it
// stopped, both within one WriteTimeout.
func (d *Dispatcher) recordStopped(ctx context.Context, beat func(context.Context) error, wrote bool) {
	sctx, cancel := context.WithTimeout(ctx, d.cfg.WriteTimeout)
	defer cancel()
	if err := beat(sctx); err == nil {
		wrote = true
	}
	if !wrote {
		return // no row to mark
	}
	_, err := d.q.OutboxRelayStop(sctx, db.OutboxRelayStopParams{OwnerPrefix: d.tokens.prefix, LastFinalizeAge: d.ageOf(d.lastFinalize.Load())})
	if err != nil {
		d.log.Warn("could not mark the relay stopped: the relays view shows it running, then silent", slog.Any("error", err))
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
