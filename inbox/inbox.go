package inbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgoutbox/pgoutbox/db/inboxdb"
	"github.com/pgoutbox/pgoutbox/internal/sqlrename"
)

// Record statuses (the inbox table's status column).
const (
	statusProcessed = "processed"
	statusParked    = "parked"
	statusLate      = "late"
)

// ErrHandlerPanic is wrapped by Process when the handler panicked; the
// transaction was rolled back as for an error.
var ErrHandlerPanic = errors.New("inbox: handler panicked")

// Inbox runs a consumer's handler exactly once per event, in order per
// aggregate, in transactions of the consumer's database. It is safe for
// concurrent use, and any number of Inboxes (in any number of processes)
// may share the same tables.
type Inbox struct {
	cfg     Config
	names   *sqlrename.Tables
	cache   *sync.Map // renamed query texts
	log     *slog.Logger
	metrics *metrics
}

// New validates cfg, applies its defaults and returns an Inbox. Errors
// wrap ErrInvalidConfig and name the offending field. New does not touch
// the database.
func New(cfg Config) (*Inbox, error) {
	cfg = cfg.withDefaults()
	names, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	m, err := newMetrics(cfg.MeterProvider)
	if err != nil {
		return nil, fmt.Errorf("inbox: metrics: %w", err)
	}
	return &Inbox{cfg: cfg, names: names, cache: &sync.Map{}, log: cfg.Logger, metrics: m}, nil
}

// Stats returns a snapshot of the counters.
func (ib *Inbox) Stats() Stats { return ib.metrics.stats() }

func (ib *Inbox) queries(dbtx inboxdb.DBTX) *inboxdb.Queries {
	return inboxdb.New(wrapDBTX(dbtx, ib.names, ib.cache))
}

// Process runs the handler for m unless the inbox has received m before
// (same Source and ID), in one transaction of the consumer's database that
// also records m. Acknowledge the message to its transport only after
// Process returns an Outcome without error: then the handler's writes and
// the record are committed (Processed), or the inbox holds what it needs
// (Duplicate, Parked, Late).
//
// An error means nothing was committed for m (the handler's error, wrapped;
// ErrHandlerPanic; a database error; ErrInvalidMessage for a message that
// cannot be recorded): leave the message unacknowledged so it comes again,
// except for ErrInvalidMessage, which will fail the same way every time.
//
// For an ordered event (m.Position set), Process decides under the
// aggregate's lock: the event is next (processed now), early (parked until
// its predecessor has been processed, or until a gap is declared), or
// older than one already processed (Late). After processing an event it
// processes the parked successors it unblocked, each in a transaction of
// its own, before it returns; a successor whose handler fails stays parked
// for the next sweep (Run), and is not an error of Process.
func (ib *Inbox) Process(ctx context.Context, m Message) (Outcome, error) {
	if ib.cfg.Prepare != nil {
		if err := ib.cfg.Prepare(ctx, &m); err != nil {
			return 0, fmt.Errorf("inbox: prepare event %s: %w", m.ID, err)
		}
	}
	if err := m.validate(); err != nil {
		ib.metrics.add(cInvalid)
		return 0, err
	}
	if !m.Position.Ordered() {
		return ib.processUnordered(ctx, m)
	}
	out, parked, err := ib.processOrdered(ctx, m)
	if err != nil {
		return 0, err
	}
	if parked {
		// After parking: the count bound may be passed, or a wait may be
		// overdue.
		if err := ib.release(ctx, m.Source, m.Subject, out == Parked); err != nil {
			ib.log.Warn("inbox: releasing parked events failed; the next sweep retries",
				slog.String("source", m.Source), slog.String("aggregate_id", m.Subject), slog.Any("error", err))
		}
	}
	return out, nil
}

func (ib *Inbox) processUnordered(ctx context.Context, m Message) (Outcome, error) {
	tx, err := ib.cfg.DB.Begin(ctx)
	if err != nil {
		return 0, fmt.Errorf("inbox: begin: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // no-op after Commit
	q := ib.queries(tx)
	rec, err := q.InboxRecord(ctx, recordParams(m, statusProcessed, nil))
	if err != nil {
		return 0, fmt.Errorf("inbox: record event %s: %w", m.ID, err)
	}
	if !rec.Inserted {
		return ib.duplicate(ctx, tx)
	}
	if err := ib.handle(ctx, tx, Delivery{Message: m}); err != nil {
		return 0, err
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, fmt.Errorf("inbox: commit event %s: %w", m.ID, err)
	}
	ib.metrics.add(cProcessed)
	return Processed, nil
}

func (ib *Inbox) duplicate(ctx context.Context, tx pgx.Tx) (Outcome, error) {
	if err := tx.Commit(ctx); err != nil {
		return 0, fmt.Errorf("inbox: commit duplicate: %w", err)
	}
	ib.metrics.add(cDuplicate)
	return Duplicate, nil
}

// processOrdered decides and processes an ordered event; parked reports
// that events of its aggregate are parked (release them now).
func (ib *Inbox) processOrdered(ctx context.Context, m Message) (_ Outcome, parked bool, _ error) {
	tx, err := ib.cfg.DB.Begin(ctx)
	if err != nil {
		return 0, false, fmt.Errorf("inbox: begin: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // no-op after Commit
	q := ib.queries(tx)
	st, err := ib.lockAggregate(ctx, q, m.Source, m.Subject)
	if err != nil {
		return 0, false, err
	}
	dec := ib.decide(st.LastSeq, m.Position, m.Source, m.Subject)
	rec, err := q.InboxRecord(ctx, recordParams(m, dec.status(), st.LastSeq))
	if err != nil {
		return 0, false, fmt.Errorf("inbox: record event %s: %w", m.ID, err)
	}
	if !rec.Inserted {
		out, err := ib.duplicate(ctx, tx)
		return out, false, err
	}
	switch dec.kind {
	case kindPark:
		if err := tx.Commit(ctx); err != nil {
			return 0, false, fmt.Errorf("inbox: commit parked event %s: %w", m.ID, err)
		}
		ib.metrics.add(cParked)
		ib.log.Debug("inbox: event parked until its predecessor is processed",
			slog.String("source", m.Source), slog.String("aggregate_id", m.Subject), slog.String("id", m.ID),
			slog.Int64("seq", m.Position.Seq), slog.Int64("waits_for", m.Position.need()))
		return Parked, true, nil
	case kindLate:
		out, err := ib.late(ctx, tx, q, m.Source, m.Subject, m.ID, m.Position.Seq, st.LastSeq)
		return out, false, err
	}
	if err := ib.recordGap(ctx, q, dec.gap); err != nil {
		return 0, false, err
	}
	if err := ib.handle(ctx, tx, Delivery{Message: m, Gap: dec.gap}); err != nil {
		_ = tx.Rollback(ctx)
		ib.recordFailing(ctx, m.Source, m.Subject, m.Position.Seq, err)
		return 0, false, err
	}
	if parked, err = ib.advance(ctx, q, m.Source, m.Subject, m.Position.Seq); err != nil {
		return 0, false, err
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, false, fmt.Errorf("inbox: commit event %s: %w", m.ID, err)
	}
	ib.metrics.add(cProcessed)
	ib.gapDeclared(dec.gap)
	return Processed, parked, nil
}

// late commits an ordered event that is older than the aggregate's last
// processed position, without running the handler.
func (ib *Inbox) late(ctx context.Context, tx pgx.Tx, q *inboxdb.Queries, source, aggregate, id string, seq int64, last *int64) (Outcome, error) {
	covered, err := q.InboxGapCovers(ctx, inboxdb.InboxGapCoversParams{Source: source, AggregateID: aggregate, Seq: seq})
	if err != nil {
		return 0, fmt.Errorf("inbox: late event %s: %w", id, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, fmt.Errorf("inbox: commit late event %s: %w", id, err)
	}
	ib.metrics.add(cLate)
	why := "its record was purged before this redelivery, or it was never recorded"
	if covered {
		why = "it arrived after a gap was declared for it"
	}
	ib.log.Warn("inbox: ordered event older than one already processed; not processed, so order holds",
		slog.String("source", source), slog.String("aggregate_id", aggregate), slog.String("id", id),
		slog.Int64("seq", seq), slog.Int64("last_processed", deref(last)), slog.String("why", why))
	return Late, nil
}

// lockAggregate locks the aggregate's order state, creating it on first
// sight.
func (ib *Inbox) lockAggregate(ctx context.Context, q *inboxdb.Queries, source, aggregate string) (*inboxdb.InboxAggregateLockRow, error) {
	p := inboxdb.InboxAggregateLockParams{Source: source, AggregateID: aggregate, FailingWithin: ib.cfg.MaxParkedAge}
	st, err := q.InboxAggregateLock(ctx, p)
	if errors.Is(err, pgx.ErrNoRows) {
		if err := q.InboxAggregateCreate(ctx, inboxdb.InboxAggregateCreateParams{Source: source, AggregateID: aggregate}); err != nil {
			return nil, fmt.Errorf("inbox: create aggregate %q: %w", aggregate, err)
		}
		st, err = q.InboxAggregateLock(ctx, p)
	}
	if err != nil {
		return nil, fmt.Errorf("inbox: lock aggregate %q: %w", aggregate, err)
	}
	return st, nil
}

// advance records seq as the aggregate's last processed position and
// reports whether events of the aggregate are parked.
func (ib *Inbox) advance(ctx context.Context, q *inboxdb.Queries, source, aggregate string, seq int64) (parked bool, err error) {
	rows, err := q.InboxAggregateAdvance(ctx, inboxdb.InboxAggregateAdvanceParams{Source: source, AggregateID: aggregate, Seq: seq})
	if err == nil && len(rows) != 1 {
		err = fmt.Errorf("%d rows updated", len(rows))
	}
	if err != nil {
		return false, fmt.Errorf("inbox: advance aggregate %q to %d: %w", aggregate, seq, err)
	}
	return rows[0], nil
}

func (ib *Inbox) recordGap(ctx context.Context, q *inboxdb.Queries, g *Gap) error {
	if g == nil {
		return nil
	}
	var after *int64
	if g.After != 0 {
		after = &g.After
	}
	err := q.InboxGapRecord(ctx, inboxdb.InboxGapRecordParams{Source: g.Source, AggregateID: g.AggregateID,
		BeforeSeq: g.Before, AfterSeq: after, MissingSeq: g.Missing, Reason: string(g.Reason)})
	if err != nil {
		return fmt.Errorf("inbox: record %v: %w", g, err)
	}
	return nil
}

// gapDeclared reports a committed gap.
func (ib *Inbox) gapDeclared(g *Gap) {
	if g == nil {
		return
	}
	ib.metrics.gap(g.Reason)
	ib.log.Warn("inbox: "+g.String(),
		slog.String("source", g.Source), slog.String("aggregate_id", g.AggregateID), slog.String("reason", string(g.Reason)),
		slog.Int64("after", g.After), slog.Int64("before", g.Before), slog.Int64("missing", g.Missing))
	if ib.cfg.OnGap != nil {
		ib.cfg.OnGap(*g)
	}
}

// recordFailing notes, after the failed transaction rolled back, that the
// aggregate's event seq arrived and failed: while it keeps failing, the
// events parked behind it wait for it and no gap is declared.
func (ib *Inbox) recordFailing(ctx context.Context, source, aggregate string, seq int64, herr error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), failureWriteTimeout)
	defer cancel()
	err := ib.queries(ib.cfg.DB).InboxAggregateFailing(ctx, inboxdb.InboxAggregateFailingParams{
		Source: source, AggregateID: aggregate, Seq: seq, Error: herr.Error()})
	if err != nil {
		ib.log.Warn("inbox: recording a handler failure failed", slog.String("aggregate_id", aggregate), slog.Any("error", err))
	}
}

// handle runs the handler, turning a panic into an error.
func (ib *Inbox) handle(ctx context.Context, tx pgx.Tx, d Delivery) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: event %s: %v", ErrHandlerPanic, d.ID, r)
		}
		if err != nil {
			ib.metrics.add(cHandlerError)
		}
	}()
	if err := ib.cfg.Handler(ctx, tx, d); err != nil {
		return fmt.Errorf("inbox: handler of event %s: %w", d.ID, err)
	}
	return nil
}

func recordParams(m Message, status string, prior *int64) inboxdb.InboxRecordParams {
	p := inboxdb.InboxRecordParams{Source: m.Source, ID: m.ID, Status: status, EventType: m.Type}
	if m.Subject != "" {
		p.AggregateID = &m.Subject
	}
	if pos := m.Position; pos.Ordered() {
		p.Seq, p.PriorSeq = &pos.Seq, prior
		if pos.Prev != 0 {
			p.PrevSeq = &pos.Prev
		}
		if pos.Skipped {
			p.SentSeq = &pos.Sent
		}
	}
	if status == statusParked {
		p.Payload = m.Data
		if p.Payload == nil {
			p.Payload = []byte{}
		}
		p.Headers, _ = json.Marshal(m.Headers) // map[string]string always marshals
		if !m.Time.IsZero() {
			p.EventTime = &m.Time
		}
	}
	return p
}

func deref(p *int64) int64 {
	if p == nil {
		return 0
	}
	return *p
}

// failureWriteTimeout bounds the write that records a handler failure,
// made after the failed transaction rolled back (also when ctx has ended).
const failureWriteTimeout = 5 * time.Second
