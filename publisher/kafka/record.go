package kafka

import (
	"slices"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pgoutbox/pgoutbox/dispatcher"
	"github.com/pgoutbox/pgoutbox/publisher/cloudevents"
)

// cePrefix is the CloudEvents Kafka binding's attribute prefix.
const cePrefix = "ce_"

// HeaderContentType carries the CloudEvents datacontenttype.
const HeaderContentType = "content-type"

// HeaderIdempotencyKey carries cloudevents.IdempotencyKey(ce_source, ce_id),
// the key consumers deduplicate on.
const HeaderIdempotencyKey = "idempotency_key"

// ReservedHeaders returns the record header names the publisher owns:
// ce_specversion, ce_id, ce_source, ce_type, ce_subject, ce_time,
// ce_datacontenttype, ce_traceparent, ce_tracestate, the position attributes ce_pgoutboxseq,
// ce_pgoutboxprevseq and ce_pgoutboxprevsent, content-type and idempotency_key. Message.Headers with these names
// (ignoring case) are dropped.
func ReservedHeaders() []string { return slices.Clone(reserved) }

// ceOrder is the order the attributes are written in; the extension
// attributes follow, when present, in extensionOrder.
var (
	ceOrder        = []string{"specversion", "id", "source", "type", "subject", "time"}
	extensionOrder = slices.Concat(cloudevents.TracingAttributes, cloudevents.PositionAttributes)
)

var reserved = func() []string {
	names := []string{HeaderContentType, HeaderIdempotencyKey}
	names = append(names, cloudevents.AttributeNames(cePrefix)...)
	slices.Sort(names)
	return names
}()

func isReserved(name string) bool {
	_, found := slices.BinarySearch(reserved, strings.ToLower(name))
	return found
}

// buildRecord maps msg to a record for topic (see the package documentation).
func buildRecord(msg dispatcher.Message, topic, source string) *kgo.Record {
	attrs := cloudevents.From(msg, source)
	ce := attrs.Map(cePrefix)
	headers := make([]kgo.RecordHeader, 0, len(ceOrder)+1+len(msg.Headers))
	for _, name := range ceOrder {
		headers = append(headers, kgo.RecordHeader{Key: cePrefix + name, Value: []byte(ce[cePrefix+name])})
	}
	for _, name := range extensionOrder {
		if v, ok := ce[cePrefix+name]; ok {
			headers = append(headers, kgo.RecordHeader{Key: cePrefix + name, Value: []byte(v)})
		}
	}
	headers = append(headers, kgo.RecordHeader{Key: HeaderContentType, Value: []byte(attrs.DataContentType)},
		kgo.RecordHeader{Key: HeaderIdempotencyKey, Value: []byte(attrs.IdempotencyKey())})
	names := make([]string, 0, len(msg.Headers))
	for name := range msg.Headers {
		if !isReserved(name) {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	for _, name := range names {
		headers = append(headers, kgo.RecordHeader{Key: name, Value: []byte(msg.Headers[name])})
	}
	var key []byte
	if msg.AggregateID != "" {
		key = []byte(msg.AggregateID)
	}
	return &kgo.Record{
		Topic:   topic,
		Key:     key,
		Value:   msg.Payload,
		Headers: headers,
	}
}
