// Package webhook is a dispatcher.Publisher that delivers each outbox message
// as an HTTP POST: a CloudEvent in binary content mode.
//
// # Request
//
// The body is Message.Payload byte for byte, with Content-Type:
// application/json. The CloudEvents attributes travel as "ce-" headers
// (ce-specversion, ce-id = outbox id, ce-type = event_type, ce-source =
// Config.Source, ce-subject = aggregate_id, ce-time = created_at), their
// values percent-encoded as the CloudEvents HTTP binding requires;
// datacontenttype is the Content-Type header, so no ce-datacontenttype is
// sent. Idempotency-Key carries the outbox id too: it never changes across
// retries, so the receiver deduplicates on it (or on ce-id).
//
// Headers are layered so that a message can never forge what identifies it:
// Message.Headers first, then Config.Headers (the operator's static headers,
// such as Authorization, win over a producer's), then the reserved headers
// above and, when Config.Secret is set, Webhook-Timestamp and
// Webhook-Signature. A message header whose name is reserved (see
// ReservedHeaders) or that net/http sets itself (Host, Content-Length,
// Transfer-Encoding, Connection) is dropped.
//
// # Signature
//
// With Config.Secret set, every request carries Webhook-Timestamp (Unix
// seconds) and Webhook-Signature: v1=<hex HMAC-SHA256(secret, timestamp + "."
// + body)>. Receivers check it with Verify, which also rejects timestamps
// outside a tolerance window to limit replays.
//
// # Error mapping
//
// Publish returns nil, or an error classified for the dispatcher:
//
//   - 2xx: nil, the message is done.
//   - Config.DeferStatus (425 Too Early by default), checked before the rules
//     below: dispatcher.Defer with the Retry-After delay, or DeferDelayDefault
//     (1 minute) when Retry-After is absent, zero or unparsable; the reason
//     names the status. The attempt is refunded.
//   - 408, 429 and 5xx: dispatcher.RetryableAfter with Retry-After (delay
//     seconds or an HTTP-date) as the minimum delay, zero when absent.
//   - 3xx: dispatcher.Permanent. Redirects are never followed (the receiver
//     must be configured with its final URL; a redirected POST would be
//     replayed as a GET by many clients).
//   - any other status (other 4xx, 1xx, codes outside 100-599):
//     dispatcher.Permanent.
//   - a transport error (DNS, connection refused or reset, TLS, Config.Timeout
//     or the caller's deadline, cancellation by the caller): dispatcher.Retryable.
//   - a message that cannot be sent as stored (a header whose name or value is
//     not valid HTTP): dispatcher.Permanent.
//
// Every status error wraps a *StatusError, which carries the status code and
// at most MaxErrorBody bytes of the response body. Retry-After values are
// capped at MaxRetryAfter.
//
// Errors never contain Config.Secret, header values or the request URL
// (webhook URLs often embed a token in their path): a transport error names
// the host only.
package webhook
