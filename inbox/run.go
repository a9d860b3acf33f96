package inbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/pgoutbox/pgoutbox/db/inboxdb"
)

// sweepAggregates is how many aggregates with parked events one sweep
// visits, oldest wait first.
const sweepAggregates = 1000

// Sweep releases parked events whose turn has come (their predecessor was
// processed, but the process that did it stopped before releasing them) and
// declares the gaps that are due: a parked event that waited longer than
// MaxParkedAge for its predecessor (GapTimeout), or an aggregate with more
// than MaxParked events parked (GapOverflow), unless the predecessor has
// arrived and its handler failed within MaxParkedAge. Run calls it every
// SweepInterval; call it yourself only if you do not call Run.
func (ib *Inbox) Sweep(ctx context.Context) error {
	rows, err := ib.queries(ib.cfg.DB).InboxParkedAggregates(ctx, inboxdb.InboxParkedAggregatesParams{
		MaxAge: ib.cfg.MaxParkedAge, MaxParked: int64(ib.cfg.MaxParked), MaxRows: sweepAggregates})
	if err != nil {
		return fmt.Errorf("inbox: sweep: %w", err)
	}
	var parked int64
	var oldest float64
	for _, r := range rows {
		parked += r.Parked
		oldest = max(oldest, r.OldestAgeSeconds)
	}
	ib.metrics.setParked(parked, oldest)
	var errs []error
	for _, r := range rows {
		if err := ib.release(ctx, r.Source, r.AggregateID, true); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Purge deletes finished records (processed and late) and gap records older
// than Retention (database clock), PurgeBatch rows per statement, and
// returns how many it deleted. Parked records and the aggregates' positions
// are kept. Run calls it every PurgeInterval.
func (ib *Inbox) Purge(ctx context.Context) (int64, error) {
	q := ib.queries(ib.cfg.DB)
	var total int64
	for _, purge := range []func() (int64, error){
		func() (int64, error) {
			return q.InboxPurge(ctx, inboxdb.InboxPurgeParams{OlderThan: ib.cfg.Retention, MaxRows: int32(ib.cfg.PurgeBatch)})
		},
		func() (int64, error) {
			return q.InboxPurgeGaps(ctx, inboxdb.InboxPurgeGapsParams{OlderThan: ib.cfg.Retention, MaxRows: int32(ib.cfg.PurgeBatch)})
		},
	} {
		for {
			n, err := purge()
			total += n
			ib.metrics.purged.Add(n)
			if err != nil {
				return total, fmt.Errorf("inbox: purge: %w", err)
			}
			if n < int64(ib.cfg.PurgeBatch) {
				break
			}
		}
	}
	return total, nil
}

// Run sweeps parked events every SweepInterval and purges old records every
// PurgeInterval until ctx ends; it returns nil then. Errors are logged and
// retried at the next interval. Run it once per process that consumes
// (several processes may run it on the same tables); the parked gauges of
// the metrics are reported while it runs.
func (ib *Inbox) Run(ctx context.Context) error {
	reg, err := ib.metrics.observeParked()
	if err != nil {
		return fmt.Errorf("inbox: metrics: %w", err)
	}
	defer reg.Unregister() //nolint:errcheck // nothing to do about it
	sweep := time.NewTicker(ib.cfg.SweepInterval)
	defer sweep.Stop()
	purge := time.NewTicker(ib.cfg.PurgeInterval)
	defer purge.Stop()
	ib.log.Debug("inbox: run started", slog.Duration("sweep_interval", ib.cfg.SweepInterval), slog.Duration("purge_interval", ib.cfg.PurgeInterval))
	defer ib.log.Debug("inbox: run stopped")
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-sweep.C:
			if err := ib.Sweep(ctx); err != nil && ctx.Err() == nil {
				ib.log.Warn("inbox: sweep failed; retrying at the next interval", slog.Any("error", err))
			}
		case <-purge.C:
			if _, err := ib.Purge(ctx); err != nil && ctx.Err() == nil {
				ib.log.Warn("inbox: purge failed; retrying at the next interval", slog.Any("error", err))
			}
		}
	}
}
