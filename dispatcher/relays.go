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
