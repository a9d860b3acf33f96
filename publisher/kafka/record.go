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
// ce_datacontenttype, ce_traceparent, ce_tracestate, content-type and idempotency_key. Message.Headers with these names
// (ignoring case) are dropped.
func ReservedHeaders() []string { return slices.Clone(reserved) }

// ceOrder is the order the attributes are written in.
var ceOrder = []string{"specversion", "id", "source", "type", "subject", "time"}

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
	for _, name := range cloudevents.TracingAttributes {
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
