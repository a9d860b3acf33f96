package inbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5"

	"github.com/pgoutbox/pgoutbox/db/inboxdb"
)

// What to do with an ordered event.
const (
	kindNext = iota // its turn: process it now
	kindPark        // its predecessor has not been processed: park it
	kindLate        // older than the last processed: do not process it
)

type decision struct {
	kind int
	gap  *Gap // with kindNext: the gap processing it declares
}

func (d decision) status() string {
	switch d.kind {
	case kindPark:
		return statusParked
	case kindLate:
		return statusLate
	}
	return statusProcessed
}

// decide places an event at position p in its aggregate, whose last
// processed position is last (nil: none). The event is next once the
// latest earlier position the outbox delivered (p.need) has been processed,
// or anything after it; a predecessor the outbox skipped makes a gap of
// reason GapSkipped.
func (ib *Inbox) decide(last *int64, p Position, source, aggregate string) decision {
	if last != nil && p.Seq <= *last {
		return decision{kind: kindLate}
	}
	if ib.cfg.Gaps == GapIgnore {
		return decision{kind: kindNext}
	}
	need := p.need()
	var after int64
	switch {
	case last != nil:
		after = *last
		if need > after {
			return decision{kind: kindPark}
		}
	case need == 0:
	case ib.cfg.StartAtFirstSeen:
		return decision{kind: kindNext, gap: &Gap{Source: source, AggregateID: aggregate,
			Before: p.Seq, Missing: need, Reason: GapStart}}
	default:
		return decision{kind: kindPark}
	}
	d := decision{kind: kindNext}
	if p.Prev > after {
		// need <= after < Prev: the outbox skipped what lies between.
		d.gap = &Gap{Source: source, AggregateID: aggregate, After: after, Before: p.Seq, Missing: p.Prev, Reason: GapSkipped}
	}
	return d
}

// release processes the parked events of an aggregate whose turn has come,
// lowest position first, each in a transaction of its own, until the next
// one must still wait. With declare (a sweep, or right after parking), a
// head that waited past MaxParkedAge, or behind which more than MaxParked
// events wait, gets its gap declared and is processed.
func (ib *Inbox) release(ctx context.Context, source, aggregate string, declare bool) error {
	for {
		done, err := ib.releaseOne(ctx, source, aggregate, declare)
		if err != nil || done {
			return err
		}
	}
}

// releaseOne finishes the lowest parked event of the aggregate if it can;
// done reports that nothing more can be released now.
func (ib *Inbox) releaseOne(ctx context.Context, source, aggregate string, declare bool) (done bool, err error) {
	tx, err := ib.cfg.DB.Begin(ctx)
	if err != nil {
		return true, fmt.Errorf("inbox: begin: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // no-op after Commit
	q := ib.queries(tx)
	st, err := ib.lockAggregate(ctx, q, source, aggregate)
	if err != nil {
		return true, err
	}
	h, err := q.InboxParkedNext(ctx, inboxdb.InboxParkedNextParams{Source: source, AggregateID: aggregate, MaxAge: ib.cfg.MaxParkedAge})
	if errors.Is(err, pgx.ErrNoRows) {
		return true, tx.Commit(ctx)
	}
	if err != nil {
		return true, fmt.Errorf("inbox: read parked events of %q: %w", aggregate, err)
	}
	m, err := parkedMessage(source, aggregate, h)
	if err != nil {
		return true, err
	}
	dec := ib.decide(st.LastSeq, m.Position, source, aggregate)
	if dec.kind == kindPark && declare && !arrivedFailing(st, m.Position) {
		switch {
		case h.Parked > int64(ib.cfg.MaxParked):
			dec = decision{kind: kindNext, gap: &Gap{Reason: GapOverflow}}
		case h.Overdue:
			dec = decision{kind: kindNext, gap: &Gap{Reason: GapTimeout}}
		}
		if dec.gap != nil {
			*dec.gap = Gap{Source: source, AggregateID: aggregate, After: deref(st.LastSeq), Before: m.Position.Seq,
				Missing: m.Position.need(), Reason: dec.gap.Reason}
		}
	}
	finish := func(status string) error {
		n, err := q.InboxParkedFinish(ctx, inboxdb.InboxParkedFinishParams{Status: status, PriorSeq: st.LastSeq, Source: source, ID: h.ID})
		if err == nil && n != 1 {
			err = fmt.Errorf("%d rows updated", n)
		}
		if err != nil {
			return fmt.Errorf("inbox: finish parked event %s: %w", h.ID, err)
		}
		return nil
	}
	switch dec.kind {
	case kindPark:
		return true, tx.Commit(ctx)
	case kindLate:
		if err := finish(statusLate); err != nil {
			return true, err
		}
		_, err := ib.late(ctx, tx, q, source, aggregate, h.ID, m.Position.Seq, st.LastSeq)
		return err != nil, err
	}
	if err := ib.recordGap(ctx, q, dec.gap); err != nil {
		return true, err
	}
	if err := ib.handle(ctx, tx, Delivery{Message: m, Parked: true, Gap: dec.gap}); err != nil {
		_ = tx.Rollback(ctx)
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), failureWriteTimeout)
		defer cancel()
		if _, ferr := ib.queries(ib.cfg.DB).InboxParkedFailed(ctx, inboxdb.InboxParkedFailedParams{
			Source: source, ID: h.ID, Error: err.Error()}); ferr != nil {
			ib.log.Warn("inbox: recording a handler failure failed", slog.String("id", h.ID), slog.Any("error", ferr))
		}
		return true, err
	}
	if err := finish(statusProcessed); err != nil {
		return true, err
	}
	more, err := ib.advance(ctx, q, source, aggregate, m.Position.Seq)
	if err != nil {
		return true, err
	}
	if err := tx.Commit(ctx); err != nil {
		return true, fmt.Errorf("inbox: commit parked event %s: %w", h.ID, err)
	}
	ib.metrics.add(cReleased)
	ib.gapDeclared(dec.gap)
	return !more, nil
}

// arrivedFailing reports that an event between the aggregate's last
// processed position and p has arrived and failed in its handler recently:
// it is not missing, so the events behind it wait for it.
func arrivedFailing(st *inboxdb.InboxAggregateLockRow, p Position) bool {
	return st.FailingRecent && st.FailingSeq != nil && *st.FailingSeq > deref(st.LastSeq) && *st.FailingSeq < p.Seq
}

// parkedMessage rebuilds the message of a parked record.
func parkedMessage(source, aggregate string, h *inboxdb.InboxParkedNextRow) (Message, error) {
	m := Message{Source: source, ID: h.ID, Type: h.EventType, Subject: aggregate, Data: h.Payload,
		Position: Position{Seq: deref(h.Seq), Prev: deref(h.PrevSeq), Skipped: h.SentSeq != nil, Sent: deref(h.SentSeq)}}
	if h.EventTime != nil {
		m.Time = *h.EventTime
	}
	if len(h.Headers) > 0 {
		if err := json.Unmarshal(h.Headers, &m.Headers); err != nil {
			return m, fmt.Errorf("inbox: parked event %s: headers: %w", h.ID, err)
		}
	}
	return m, nil
}
