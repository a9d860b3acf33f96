// Package cloudevents maps an outbox message to CloudEvents 1.0 attributes in
// binary content mode: the payload travels as the message body and the
// attributes as transport headers.
//
// # Distributed tracing
//
// The CloudEvents distributed-tracing extension attributes traceparent and
// tracestate carry the W3C trace context the event was created in (the
// producer's request: dispatcher.Message.TraceParent and TraceState), and
// travel with the prefix of the binding like every attribute (ce-traceparent
// on HTTP and NATS, ce_traceparent on Kafka, cloudEvents_traceparent on
// AMQP). The hop itself, the publish span, travels in the transport's own
// trace headers, plain traceparent and tracestate, which every publisher
// forwards from Message.Headers: a consumer that continues "the trace of
// this delivery" extracts those; one that wants the producer's trace reads
// the ce- attributes. Without a tracing SDK in the relay both carry the
// producer's context.
//
// # Identity and the idempotency key
//
// CloudEvents identifies an event by source + id. The id is the outbox id,
// unique only within one outbox table; the source names the outbox
// (dispatcher.Message.Source, by default derived from the database and the
// table: see dispatcher.DefaultSource). IdempotencyKey combines the two into
// one string, THE key consumers deduplicate on, whatever the transport:
//
//	IdempotencyKey(source, id) = lowercase hex of the first 16 bytes of
//	                             SHA-256(source), then "-", then id
//
// for example "75da0dad8c346ed92e3988b3ff910557-41" for source "urn:shop"
// and id 41. It never changes across retries and lease takeovers of one
// event, differs between outboxes, is at most 52 bytes for an outbox id,
// and uses only [0-9a-f-], so every
// transport carries it unchanged: JetStream's Nats-Msg-Id (the stream's
// duplicate window drops a re-publish), the webhook's webhook-id and
// Idempotency-Key, AMQP's message_id, and Kafka's idempotency_key header. A
// consumer may equally deduplicate on the pair (source, id) of the
// CloudEvents attributes; the key is that pair in one bounded string.
package cloudevents

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"time"

	"github.com/pgoutbox/pgoutbox/dispatcher"
)

// SpecVersion is the CloudEvents version emitted.
const SpecVersion = "1.0"

// DefaultSource is the ce-source used when neither the publisher nor the
// message names one (a Message built by hand; the dispatcher always sets
// Message.Source).
const DefaultSource = "pgoutbox"

// Attributes are the CloudEvents context attributes of one message.
type Attributes struct {
	SpecVersion     string
	ID              string // outbox id
	Type            string // event_type
	Source          string // publisher setting, else Message.Source
	Subject         string // aggregate_id
	Time            time.Time
	DataContentType string
	// TraceParent and TraceState are the distributed-tracing extension
	// (the creation context); Map omits them when empty.
	TraceParent string
	TraceState  string
	// Position is the ordered event's place in its aggregate's commit order
	// (see PositionAttributes); Map omits it when zero.
	Position dispatcher.Position
}

// Position extension attributes, without prefix: an ordered event's place
// in its aggregate's commit order, which package inbox checks.
//
//	pgoutboxseq       the event's position (decimal): the outbox's seq,
//	                  increasing with commit order within the aggregate
//	                  (ce subject); absent for unordered events
//	pgoutboxprevseq   the position of the aggregate's previous event;
//	                  absent for the aggregate's first
//	pgoutboxprevsent  present only when the previous event was skipped at
//	                  the source (resolved without delivery): the position
//	                  of the latest earlier event that was delivered, "0"
//	                  for none
const (
	AttrSeq      = "pgoutboxseq"
	AttrPrevSeq  = "pgoutboxprevseq"
	AttrPrevSent = "pgoutboxprevsent"
)

// PositionAttributes are the position extension attributes' names, without
// prefix.
var PositionAttributes = []string{AttrSeq, AttrPrevSeq, AttrPrevSent}

// TracingAttributes are the names of the distributed-tracing extension
// attributes, without prefix.
var TracingAttributes = []string{"traceparent", "tracestate"}

// AttributeNames returns every attribute name Map can return, with prefix
// (publishers reserve these names).
func AttributeNames(prefix string) []string {
	names := make([]string, 0, 9)
	for name := range (Attributes{}).Map(prefix) {
		names = append(names, name)
	}
	for _, name := range TracingAttributes {
		names = append(names, prefix+name)
	}
	for _, name := range PositionAttributes {
		names = append(names, prefix+name)
	}
	return names
}

// From returns the attributes of msg. The source is the publisher's own
// setting when not empty, else msg.Source, else DefaultSource.
func From(msg dispatcher.Message, source string) Attributes {
	if source == "" {
		source = msg.Source
	}
	if source == "" {
		source = DefaultSource
	}
	return Attributes{
		SpecVersion:     SpecVersion,
		ID:              msg.ID,
		Type:            msg.EventType,
		Source:          source,
		Subject:         msg.AggregateID,
		Time:            msg.CreatedAt.UTC(),
		DataContentType: "application/json",
		TraceParent:     msg.TraceParent,
		TraceState:      msg.TraceState,
		Position:        msg.Position,
	}
}

// Map returns the attributes as name/value pairs with the given prefix
// ("ce-" for HTTP and NATS, "ce_" for Kafka and AMQP, per the CloudEvents
// protocol bindings). datacontenttype is returned without the prefix as
// "content-type" only by callers that need it; here it is prefixed too.
func (a Attributes) Map(prefix string) map[string]string {
	m := map[string]string{
		prefix + "specversion":     a.SpecVersion,
		prefix + "id":              a.ID,
		prefix + "type":            a.Type,
		prefix + "source":          a.Source,
		prefix + "subject":         a.Subject,
		prefix + "time":            a.Time.Format(time.RFC3339Nano),
		prefix + "datacontenttype": a.DataContentType,
	}
	if a.TraceParent != "" {
		m[prefix+"traceparent"] = a.TraceParent
		if a.TraceState != "" {
			m[prefix+"tracestate"] = a.TraceState
		}
	}
	if p := a.Position; p.Seq != 0 {
		m[prefix+AttrSeq] = strconv.FormatInt(p.Seq, 10)
		if p.Prev != 0 {
			m[prefix+AttrPrevSeq] = strconv.FormatInt(p.Prev, 10)
		}
		if p.Skipped {
			m[prefix+AttrPrevSent] = strconv.FormatInt(p.Sent, 10)
		}
	}
	return m
}

// IdempotencyKey returns the key consumers deduplicate on for the event id
// of source (see the package documentation for its form and why).
func IdempotencyKey(source, id string) string {
	sum := sha256.Sum256([]byte(source))
	return hex.EncodeToString(sum[:16]) + "-" + id
}

// IdempotencyKey returns IdempotencyKey(a.Source, a.ID).
func (a Attributes) IdempotencyKey() string { return IdempotencyKey(a.Source, a.ID) }
