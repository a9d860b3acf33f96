package inbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Message is one event as a consumer received it: the CloudEvents
// attributes pgoutbox's publishers send, the payload, and the position of an
// ordered event. The adapters (inbox/inboxhttp, inbox/inboxnats,
// inbox/inboxamqp, inbox/inboxkafka) build it from their transport's
// headers; FromAttributes builds it from attribute name/value pairs.
type Message struct {
	// Source and ID are the CloudEvents source and id: the outbox that
	// produced the event and its id there. Together they identify the event
	// everywhere; the inbox deduplicates on the pair. Both are required.
	Source string
	ID     string
	// Type is the CloudEvents type (the outbox's event_type).
	Type string
	// Subject is the CloudEvents subject (the outbox's aggregate_id): the
	// aggregate whose order Position refers to. Required when Position is
	// set.
	Subject string
	// Time is the CloudEvents time (when the producing transaction inserted
	// the event). Zero when absent.
	Time time.Time
	// Data is the payload, exactly as received.
	Data []byte
	// Headers are the other transport headers and extension attributes
	// received with the event (trace context, tenant, ...). Stored with a
	// parked event and given back to the handler when it is released.
	Headers map[string]string
	// Position is the event's place in its aggregate's commit order; zero
	// for an unordered event, or one from an outbox that does not send it.
	Position Position
}

// Position is an ordered event's place in its aggregate's commit order, as
// the outbox stamped it at COMMIT (see docs/inbox.md, "The position on the
// wire").
type Position struct {
	// Seq is the event's position: increasing with commit order within its
	// aggregate (the outbox's seq, a sequence shared by all aggregates, so
	// positions of one aggregate are increasing but not consecutive). 0: no
	// position.
	Seq int64
	// Prev is the position of the aggregate's previous event. 0: the event
	// is the first of its aggregate.
	Prev int64
	// Skipped reports that the outbox skipped the previous event (an
	// operator resolved it without delivering it), and possibly more before
	// it: Sent is then the latest earlier position the outbox delivered (0:
	// none). Without Skipped, Sent is unused: Prev was delivered.
	Skipped bool
	Sent    int64
}

// Ordered reports whether the event carries a position.
func (p Position) Ordered() bool { return p.Seq != 0 }

// need is the latest earlier position that was delivered: the event is next
// once the consumer has processed it (or anything after it).
func (p Position) need() int64 {
	if p.Skipped {
		return p.Sent
	}
	return p.Prev
}

// ErrInvalidMessage is wrapped by Process for a message the inbox cannot
// record: no source or id, or a position that contradicts itself. Nothing
// was written; retrying the same message fails the same way.
var ErrInvalidMessage = errors.New("inbox: invalid message")

func (m Message) validate() error {
	p := m.Position
	switch {
	case m.Source == "":
		return fmt.Errorf("%w: no source (the CloudEvents source attribute is required)", ErrInvalidMessage)
	case m.ID == "":
		return fmt.Errorf("%w: no id (the CloudEvents id attribute is required)", ErrInvalidMessage)
	case p.Seq < 0 || p.Prev < 0 || p.Sent < 0:
		return fmt.Errorf("%w: event %s: negative position (seq %d, prev %d, sent %d)", ErrInvalidMessage, m.ID, p.Seq, p.Prev, p.Sent)
	case p.Seq == 0 && (p.Prev != 0 || p.Skipped):
		return fmt.Errorf("%w: event %s: a predecessor position without a position of its own", ErrInvalidMessage, m.ID)
	case p.Seq != 0 && m.Subject == "":
		return fmt.Errorf("%w: event %s: a position without a subject (the aggregate it orders)", ErrInvalidMessage, m.ID)
	case p.Seq != 0 && p.Prev >= p.Seq:
		return fmt.Errorf("%w: event %s: predecessor position %d is not before the position %d", ErrInvalidMessage, m.ID, p.Prev, p.Seq)
	case p.Skipped && p.Sent >= p.Prev && p.Prev != 0:
		return fmt.Errorf("%w: event %s: delivered position %d is not before the skipped predecessor %d", ErrInvalidMessage, m.ID, p.Sent, p.Prev)
	case p.Skipped && p.Prev == 0:
		return fmt.Errorf("%w: event %s: a skipped predecessor, but no predecessor position", ErrInvalidMessage, m.ID)
	}
	return nil
}

// Delivery is what the handler receives: the message, and what the inbox
// knows about its place in its aggregate's order.
type Delivery struct {
	Message
	// Parked reports that the event arrived before its predecessor, waited
	// in the inbox, and is processed now that its turn has come.
	Parked bool
	// Gap, when not nil, says that events of the aggregate before this one
	// will not be processed before it: the outbox skipped them, or they did
	// not arrive within the park bound. The same gap was logged and passed
	// to Config.OnGap.
	Gap *Gap
}

// Handler processes one event inside tx, a transaction of the consumer's
// database that also records the event in the inbox: return nil to commit
// both, an error to roll both back (the adapter then leaves the message
// unacknowledged, so it is delivered again). It must not commit or roll
// back tx itself. It runs once per event, however many times the event is
// delivered, and, for ordered events, in position order within an
// aggregate.
type Handler func(ctx context.Context, tx pgx.Tx, d Delivery) error

// Outcome is what Process did with a message. Every outcome means the
// message may be acknowledged: it is processed, or the inbox holds what it
// needs.
type Outcome int

const (
	// Processed: the handler ran and committed with the inbox record (and,
	// for an ordered event, any parked successors it unblocked were
	// processed after it).
	Processed Outcome = iota + 1
	// Duplicate: the event was received before; the handler did not run.
	Duplicate
	// Parked: an ordered event whose predecessor has not been processed;
	// the inbox keeps it and processes it in order (or declares a gap when
	// the predecessor does not come within Config.MaxParkedAge).
	Parked
	// Late: an ordered event older than one already processed (its gap was
	// declared before it arrived, or its record was purged before this
	// redelivery); the handler did not run, so order holds.
	Late
)

func (o Outcome) String() string {
	switch o {
	case Processed:
		return "processed"
	case Duplicate:
		return "duplicate"
	case Parked:
		return "parked"
	case Late:
		return "late"
	}
	return fmt.Sprintf("Outcome(%d)", int(o))
}

// GapReason says why a gap was declared.
type GapReason string

const (
	// GapSkipped: the outbox skipped the missing events (the event after
	// them said so); they will never be delivered.
	GapSkipped GapReason = "skipped"
	// GapTimeout: the predecessor did not arrive within
	// Config.MaxParkedAge of its successor.
	GapTimeout GapReason = "timeout"
	// GapOverflow: more than Config.MaxParked events of the aggregate were
	// parked waiting for the predecessor.
	GapOverflow GapReason = "overflow"
	// GapStart: the first event the inbox saw of an aggregate had a
	// predecessor, and Config.StartAtFirstSeen let it start there.
	GapStart GapReason = "start"
)

// Gap describes events of an aggregate that will not be processed before a
// later one was: those after position After (0: from the aggregate's
// start) and before position Before, the predecessor Missing among them.
type Gap struct {
	Source      string
	AggregateID string
	After       int64
	Before      int64
	Missing     int64
	Reason      GapReason
}

func (g Gap) String() string {
	return fmt.Sprintf("gap in aggregate %q of %s: events after position %d and before %d (predecessor %d) will not be processed before %d: %s",
		g.AggregateID, g.Source, g.After, g.Before, g.Missing, g.Before, g.Reason)
}
