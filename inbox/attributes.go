package inbox

import (
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Position extension attributes (without a binding's prefix), as pgoutbox's
// publishers send them: see Position and docs/inbox.md.
const (
	// AttrSeq is the event's position (decimal); absent for unordered
	// events.
	AttrSeq = "pgoutboxseq"
	// AttrPrevSeq is the position of the aggregate's previous event;
	// absent for the aggregate's first.
	AttrPrevSeq = "pgoutboxprevseq"
	// AttrPrevSent is present only when the previous event was skipped at
	// the source: the latest earlier position that was delivered ("0":
	// none).
	AttrPrevSent = "pgoutboxprevsent"
)

// Binding is how one transport carries CloudEvents attributes in binary
// content mode: a header-name prefix, and whether values are
// percent-encoded.
type Binding struct {
	// Prefixes that mark an attribute header, compared case-insensitively
	// ("ce-" for HTTP and NATS, "ce_" for Kafka, "cloudEvents_" and
	// "cloudEvents:" for AMQP).
	Prefixes []string
	// PercentEncoded: values are percent-encoded (HTTP and NATS).
	PercentEncoded bool
}

// The bindings of pgoutbox's publishers.
var (
	BindingHTTP  = Binding{Prefixes: []string{"ce-"}, PercentEncoded: true}
	BindingNATS  = Binding{Prefixes: []string{"ce-"}, PercentEncoded: true}
	BindingKafka = Binding{Prefixes: []string{"ce_"}}
	BindingAMQP  = Binding{Prefixes: []string{"cloudEvents_", "cloudEvents:"}}
)

// Parse builds a Message from a transport's headers (name to first value)
// and the payload: headers with the binding's prefix are the CloudEvents
// attributes (source, id, type, subject, time and the position), every
// other header goes to Message.Headers. Errors wrap ErrInvalidMessage: a
// value that cannot be decoded, a time or position that is not a number.
// Required attributes are checked by Process, not here.
func (b Binding) Parse(headers map[string]string, data []byte) (Message, error) {
	attrs := make(map[string]string, 10)
	other := make(map[string]string, len(headers))
	for name, value := range headers {
		attr, ok := b.attribute(name)
		if !ok {
			other[name] = value
			continue
		}
		if b.PercentEncoded && strings.IndexByte(value, '%') >= 0 {
			decoded, err := url.PathUnescape(value)
			if err != nil {
				return Message{}, fmt.Errorf("%w: attribute %s: %v", ErrInvalidMessage, attr, err)
			}
			value = decoded
		}
		attrs[attr] = value
	}
	return FromAttributes(attrs, data, other)
}

// attribute returns the attribute name of a header, lower case.
func (b Binding) attribute(name string) (string, bool) {
	for _, p := range b.Prefixes {
		if len(name) > len(p) && strings.EqualFold(name[:len(p)], p) {
			return strings.ToLower(name[len(p):]), true
		}
	}
	return "", false
}

// FromAttributes builds a Message from CloudEvents attributes (names
// without prefix, lower case: id, source, type, subject, time and the
// position attributes), the payload and the other headers. Errors wrap
// ErrInvalidMessage.
func FromAttributes(attrs map[string]string, data []byte, headers map[string]string) (Message, error) {
	m := Message{Source: attrs["source"], ID: attrs["id"], Type: attrs["type"], Subject: attrs["subject"],
		Data: data, Headers: headers}
	if t := attrs["time"]; t != "" {
		parsed, err := time.Parse(time.RFC3339Nano, t)
		if err != nil {
			return m, fmt.Errorf("%w: event %s: time %q is not RFC 3339", ErrInvalidMessage, m.ID, t)
		}
		m.Time = parsed
	}
	for _, f := range []struct {
		name string
		dst  *int64
	}{{AttrSeq, &m.Position.Seq}, {AttrPrevSeq, &m.Position.Prev}, {AttrPrevSent, &m.Position.Sent}} {
		v, ok := attrs[f.name]
		if !ok {
			continue
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return m, fmt.Errorf("%w: event %s: %s %q is not a position", ErrInvalidMessage, m.ID, f.name, v)
		}
		*f.dst = n
	}
	_, m.Position.Skipped = attrs[AttrPrevSent]
	return m, nil
}
