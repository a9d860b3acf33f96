package webhook

import (
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/pgoutbox/pgoutbox/dispatcher"
	"github.com/pgoutbox/pgoutbox/publisher/cloudevents"
)

// Header names the publisher sets on every request.
const (
	// HeaderIdempotencyKey carries cloudevents.IdempotencyKey(ce-source,
	// ce-id), the key receivers deduplicate on (the same value as HeaderID).
	HeaderIdempotencyKey = "Idempotency-Key"
	// HeaderID is the Standard Webhooks webhook-id: the idempotency key,
	// the same on every retry of one event. It is signed.
	HeaderID = "Webhook-Id"
	// HeaderTimestamp carries the signing time in Unix seconds (signed
	// requests only).
	HeaderTimestamp = "Webhook-Timestamp"
	// HeaderSignature carries the space-separated signatures "v1,<base64>"
	// and "v1ce,<base64>" for each secret (signed requests only; see Verify).
	HeaderSignature = "Webhook-Signature"
)

// cePrefix is the CloudEvents HTTP binding's attribute prefix.
const cePrefix = "ce-"

// ReservedHeaders returns the canonical names of the headers the publisher
// owns: Content-Type, Idempotency-Key, Webhook-Id, Webhook-Timestamp,
// Webhook-Signature and the CloudEvents attributes (Ce-Specversion, Ce-Id, Ce-Type, Ce-Source,
// Ce-Subject, Ce-Time, Ce-Datacontenttype, Ce-Traceparent, Ce-Tracestate and the position attributes
// Ce-Pgoutboxseq, Ce-Pgoutboxprevseq, Ce-Pgoutboxprevsent). Message.Headers with these names
// are dropped; Config.Headers with these names are rejected by New.
func ReservedHeaders() []string { return slices.Clone(reserved) }

var reserved = func() []string {
	names := []string{"Content-Type", HeaderIdempotencyKey, HeaderID, HeaderTimestamp, HeaderSignature}
	for _, name := range cloudevents.AttributeNames(cePrefix) {
		names = append(names, http.CanonicalHeaderKey(name))
	}
	slices.Sort(names)
	return names
}()

func isReserved(name string) bool {
	_, found := slices.BinarySearch(reserved, http.CanonicalHeaderKey(name))
	return found
}

// isTransportHeader reports headers net/http computes itself and would
// ignore or get wrong if a message set them.
func isTransportHeader(name string) bool {
	switch http.CanonicalHeaderKey(name) {
	case "Host", "Content-Length", "Transfer-Encoding", "Connection":
		return true
	}
	return false
}

// buildHeader layers message headers, static headers and the reserved ones
// (see the package documentation). The signature headers are added by the
// caller.
func buildHeader(msg dispatcher.Message, static map[string]string, source string) (http.Header, error) {
	h := make(http.Header, len(msg.Headers)+len(static)+8)
	for name, value := range msg.Headers {
		if !validHeaderName(name) {
			return nil, fmt.Errorf("webhook: message header name %q is not a valid HTTP header name", truncate(name, 64))
		}
		if isReserved(name) || isTransportHeader(name) {
			continue
		}
		if !validHeaderValue(value) {
			return nil, fmt.Errorf("webhook: the value of message header %q is not a valid HTTP header value", name)
		}
		h.Set(name, value)
	}
	for name, value := range static {
		h.Set(name, value)
	}
	attrs := cloudevents.From(msg, source)
	for name, value := range attrs.Map(cePrefix) {
		if name == cePrefix+"datacontenttype" {
			continue // the binding maps it to Content-Type
		}
		h.Set(name, encodeCEValue(value))
	}
	h.Set("Content-Type", attrs.DataContentType)
	key := attrs.IdempotencyKey()
	h.Set(HeaderIdempotencyKey, key)
	h.Set(HeaderID, key)
	return h, nil
}

// encodeCEValue percent-encodes a CloudEvents attribute value as the HTTP
// binding requires: bytes outside printable ASCII (0x21-0x7E), space, '"'
// and '%'.
func encodeCEValue(s string) string {
	if !strings.ContainsFunc(s, func(r rune) bool { return r < 0x21 || r > 0x7e || r == '"' || r == '%' }) {
		return s
	}
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	b.Grow(len(s) + 16)
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x21 || c > 0x7e || c == '"' || c == '%' {
			b.WriteByte('%')
			b.WriteByte(hex[c>>4])
			b.WriteByte(hex[c&0xf])
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}

// validHeaderName reports whether name is an RFC 9110 token.
func validHeaderName(name string) bool {
	if name == "" {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// validHeaderValue reports whether value has no control characters other
// than horizontal tab (net/http refuses to send those).
func validHeaderValue(value string) bool {
	for i := 0; i < len(value); i++ {
		c := value[i]
		if (c < 0x20 && c != '\t') || c == 0x7f {
			return false
		}
	}
	return true
}
