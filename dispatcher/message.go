package dispatcher

import (
	"context"
	"encoding/json"
	"strconv"
	"time"
)

// Message is what a Publisher receives: one outbox row.
type Message struct {
	// ID is the outbox id as a decimal string (CloudEvents ce-id). It never
	// changes across retries or lease takeovers; with Source it forms the
	// idempotency key downstream systems deduplicate on.
	ID string
	// OutboxID is the same id as a number.
	OutboxID int64
	// Source names the outbox the message comes from (Config.Source): the
	// CloudEvents source. ID is unique only within one outbox; Source and ID
	// together identify the event everywhere, and publishers build the
	// idempotency key from both (cloudevents.IdempotencyKey).
	Source        string
	AggregateType string
	AggregateID   string
	EventType     string
	// Payload is the event's JSON document, exactly as stored.
	Payload json.RawMessage
	// Headers are transport metadata stored with the event (trace context,
	// content type, tenant). Never nil.
	Headers map[string]string
	// Attempt is this delivery attempt, starting at 1 (attempts count at
	// claim time, so a crash counts too).
	Attempt int
	// CreatedAt is when the producing transaction inserted the event
	// (database clock).
	CreatedAt time.Time
	// Ordered reports that the event was enqueued with per-aggregate order.
	Ordered bool
	// TraceParent and TraceState are the W3C trace context stored with the
	// event when it was enqueued (its traceparent and tracestate headers):
	// the producer's context, which publishers send as the CloudEvents
	// distributed-tracing attributes. Headers["traceparent"] is, when the
	// dispatcher traces, the context of the publish span instead (see
	// Config.TracerProvider). Empty when the event has none.
	TraceParent string
	TraceState  string
	// Position is an ordered event's place in its aggregate's commit order,
	// as the outbox stamped it (columns seq, prev_seq and sent_seq,
	// migration 00010), which publishers send as CloudEvents extension
	// attributes (see cloudevents.PositionAttributes) so consumers can check
	// order and completeness (package inbox). Every claim of the dispatcher
	// reads it; zero for unordered events.
	Position Position
}

// Position is an ordered event's place in its aggregate's commit order, as
// stamped at COMMIT. The zero value means "no position".
type Position struct {
	// Seq is the event's position: the outbox's seq, increasing with
	// commit order within the aggregate (a sequence shared by every
	// aggregate, so not consecutive within one).
	Seq int64
	// Prev is the seq of the aggregate's previous ordered event; 0 when
	// the event is the aggregate's first.
	Prev int64
	// Skipped reports that Prev (and maybe earlier events) was resolved
	// without being delivered (dead, then skipped); Sent is then the seq of
	// the latest earlier event of the aggregate that was delivered (0:
	// none). Unused without Skipped.
	Skipped bool
	Sent    int64
}

// IDString formats an outbox id as an idempotency key.
func IDString(id int64) string { return strconv.FormatInt(id, 10) }

// Publisher delivers one message to a downstream system. It is the thin
// boundary that turns a client library's errors into the dispatcher's
// classification: return nil on success, or an error wrapped with Retryable,
// Defer or Permanent. How unclassified errors are treated is
// Config.UnclassifiedErrors.
//
// Publish is called outside any database transaction, concurrently from
// several goroutines, and may be called again for a message that was already
// delivered (a lease takeover or a crash before finalize): the receiver must
// deduplicate on Message.Source + Message.ID (cloudevents.IdempotencyKey).
//
// ctx ends at the publish's deadline, Config.PublishTimeout after it
// started (ctx.Deadline says when), with ctx.Err() and context.Cause(ctx)
// context.DeadlineExceeded, or at shutdown with context.Canceled. Do not
// keep ctx after Publish returns. A publish that returns an error after
// its deadline (ctx.Err(), or the error of a context derived from ctx)
// counts as timed out and is retried.
type Publisher interface {
	Publish(ctx context.Context, msg Message) error
}

// PublisherFunc adapts a function to Publisher.
type PublisherFunc func(ctx context.Context, msg Message) error

// Publish calls f.
func (f PublisherFunc) Publish(ctx context.Context, msg Message) error { return f(ctx, msg) }

// Pinger is implemented by publishers that can check their downstream is
// reachable (used for readiness).
type Pinger interface {
	Ping(ctx context.Context) error
}
