// Package cloudevents maps an outbox message to CloudEvents 1.0 attributes in
// binary content mode: the payload travels as the message body and the
// attributes as transport headers. Consumers deduplicate on id (the outbox id)
// whatever the transport.
package cloudevents

import (
	"time"

	"github.com/pgoutbox/pgoutbox/dispatcher"
)

// SpecVersion is the CloudEvents version emitted.
const SpecVersion = "1.0"

// DefaultSource is the ce-source used when none is configured.
const DefaultSource = "pgoutbox"

// Attributes are the CloudEvents context attributes of one message.
type Attributes struct {
	SpecVersion     string
	ID              string // outbox id
	Type            string // event_type
	Source          string // configurable
	Subject         string // aggregate_id
	Time            time.Time
	DataContentType string
}

// From returns the attributes of msg with the given source (DefaultSource
// when empty).
func From(msg dispatcher.Message, source string) Attributes {
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
	}
}

// Map returns the attributes as name/value pairs with the given prefix
// ("ce-" for HTTP and NATS, "ce_" for Kafka and AMQP, per the CloudEvents
// protocol bindings). datacontenttype is returned without the prefix as
// "content-type" only by callers that need it; here it is prefixed too.
func (a Attributes) Map(prefix string) map[string]string {
	return map[string]string{
		prefix + "specversion":     a.SpecVersion,
		prefix + "id":              a.ID,
		prefix + "type":            a.Type,
		prefix + "source":          a.Source,
		prefix + "subject":         a.Subject,
		prefix + "time":            a.Time.Format(time.RFC3339Nano),
		prefix + "datacontenttype": a.DataContentType,
	}
}
