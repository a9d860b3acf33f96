package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/metric/noop"

	"github.com/pgoutbox/pgoutbox/db"
)

// repairMoved repairs, on every pass of the recovery lane (the first runs
// as Run starts), what rows brought from another server leave behind
// (queries/repair.sql, migration 00008):
//   - when it starts and then once per SweepInterval, the id and seq
//     sequences are moved past the rows where they are behind (logical
//     replication does not copy sequences);
//   - pending rows and heads whose txid this server never assigned (a
//     pg_restore or a logical replication copy from a server further on in
//     its xids, or in a later xid epoch) are re-stamped with a txid of this
//     server, so that the claim cursors claim them;
//   - ordered rows inserted while the table's triggers were off (a logical
//     replication apply, pg_restore --disable-triggers) are sequenced and
//     their aggregates' heads decided.
//
// Each is one index probe (the sequences: two) that finds nothing in the
// normal case.
func (d *Dispatcher) repairMoved(ctx context.Context) error {
	if d.sequencesChecked.IsZero() || time.Since(d.sequencesChecked) >= d.cfg.SweepInterval {
		d.sequencesChecked = time.Now()
		n, err := d.repairSequences(ctx, false)
		if err != nil {
			return err
		}
		if n > 0 {
			d.repaired(n, "sequences were behind the rows (a logical replication copy does not carry them): moved past the highest id and seq")
		}
	}
	n, err := d.restampForeign(ctx)
	if err != nil {
		return err
	}
	if n > 0 {
		d.repaired(n, "pending messages carried a txid this server has not assigned (restored or replicated from another server): re-stamped so that they are claimed")
	}
	if d.cfg.Claim != ClaimUnorderedOnly {
		if n, err = d.sequenceUnsequenced(ctx); err != nil {
			return err
		}
		if n > 0 {
			d.repaired(n, "ordered messages were inserted with the table's triggers off and never sequenced: sequenced in id order and their heads decided")
		}
	}
	return nil
}

// repaired counts and logs a repair, and wakes the claimer for what it made
// claimable.
func (d *Dispatcher) repaired(n int64, what string) {
	d.metrics.repaired.Add(n)
	d.log.Warn(what, slog.Int64("count", n))
	d.wakeUp()
}

// restampForeign runs OutboxRestampForeign until it finds nothing more.
func (d *Dispatcher) restampForeign(ctx context.Context) (int64, error) {
	var total int64
	for ctx.Err() == nil {
		sctx, cancel := context.WithTimeout(ctx, d.cfg.ClaimTimeout)
		n, err := d.q.OutboxRestampForeign(sctx, int32(sweepRows))
		cancel()
		if err != nil {
			return total, fmt.Errorf("re-stamp foreign txids: %w", err)
		}
		total += n
		if n < sweepRows { // both lanes of the query found fewer than sweepRows
			break
		}
	}
	return total, nil
}

// sequenceUnsequenced runs OutboxRepairUnsequenced, read committed, until
// it finds nothing more.
func (d *Dispatcher) sequenceUnsequenced(ctx context.Context) (int64, error) {
	return d.readCommittedLoop(ctx, "sequence unsequenced ordered rows", func(ctx context.Context, q *db.Queries) (int32, error) {
		return q.OutboxRepairUnsequenced(ctx, int32(sweepRows))
	})
}

// repairSequences runs OutboxRepairSequences (scanAll: read every ordered
// row's seq).
func (d *Dispatcher) repairSequences(ctx context.Context, scanAll bool) (int64, error) {
	sctx, cancel := context.WithTimeout(ctx, d.cfg.ClaimTimeout)
	defer cancel()
	n, err := d.q.OutboxRepairSequences(sctx, db.OutboxRepairSequencesParams{CheckOnly: false, ScanAll: scanAll})
	if err != nil {
		return 0, fmt.Errorf("repair sequences: %w", err)
	}
	return int64(n), nil
}

// readCommittedLoop runs step (a statement that handles up to sweepRows
// rows) in READ COMMITTED transactions until it handles fewer, and returns
// the total.
func (d *Dispatcher) readCommittedLoop(ctx context.Context, what string, step func(context.Context, *db.Queries) (int32, error)) (int64, error) {
	var total int64
	for ctx.Err() == nil {
		var n int32
		err := d.inReadCommitted(ctx, func(q *db.Queries) error {
			sctx, cancel := context.WithTimeout(ctx, d.cfg.ClaimTimeout)
			defer cancel()
			var err error
			n, err = step(sctx, q)
			return err
		})
		if err != nil {
			return total, fmt.Errorf("%s: %w", what, err)
		}
		total += int64(n)
		if int(n) < sweepRows {
			break
		}
	}
	return total, nil
}

// RepairReport says what Repair changed.
type RepairReport struct {
	Restamped       int64 // pending rows and heads re-stamped with a txid of this server
	Sequenced       int64 // ordered rows sequenced (inserted with the table's triggers off)
	SequencesMoved  int64 // sequences (id, seq) moved past the rows
	HeadsDecided    int64 // ordered events decided (committed since a relay last decided, or sequenced above)
	HeadsFlagged    int64 // aggregates whose head was not flagged
	NothingRepaired bool  // all of the above are 0
}

// Repair runs at once, on table in schema ("" and "": the default table
// through the search_path), every repair a relay's recovery lane makes by
// itself: it re-stamps pending rows whose txid this server has not assigned
// (restored or replicated from another server), sequences ordered rows
// inserted with the table's triggers off, moves the id and seq sequences
// past the rows (reading every ordered row's seq), decides undecided heads
// and flags the heads of aggregates that have none. Run it after a restore
// or a logical replication cutover, before producers write (the sequences)
// and whether or not a relay runs; it is safe to run at any time, and
// repeated it finds nothing. `pgoutbox repair` runs it.
func Repair(ctx context.Context, pool *pgxpool.Pool, table, schema string) (RepairReport, error) {
	var rep RepairReport
	d, err := New(pool, PublisherFunc(func(context.Context, Message) error { return errors.New("not publishing") }), Config{
		Table: table, Schema: schema, DisableListen: true, DisableTracing: true, StatsInterval: -1,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), MeterProvider: noop.NewMeterProvider(),
	})
	if err != nil {
		return rep, err
	}
	if rep.SequencesMoved, err = d.repairSequences(ctx, true); err != nil {
		return rep, err
	}
	if rep.Restamped, err = d.restampForeign(ctx); err != nil {
		return rep, err
	}
	if rep.Sequenced, err = d.sequenceUnsequenced(ctx); err != nil {
		return rep, err
	}
	if rep.HeadsDecided, err = d.decideHeads(ctx); err != nil {
		return rep, err
	}
	sctx, cancel := context.WithTimeout(ctx, d.cfg.ClaimTimeout)
	rep.HeadsFlagged, err = d.q.OutboxRepairHeads(sctx)
	cancel()
	if err != nil {
		return rep, fmt.Errorf("repair heads: %w", err)
	}
	rep.NothingRepaired = rep == RepairReport{}
	return rep, nil
}
