// Package webhook is a dispatcher.Publisher that delivers each outbox message
// as an HTTP POST: a CloudEvent in binary content mode.
//
// # Request
//
// The body is Message.Payload byte for byte, with Content-Type:
// application/json. The CloudEvents attributes travel as "ce-" headers
// (ce-specversion, ce-id = outbox id, ce-type = event_type, ce-source =
// Config.Source or else Message.Source, ce-subject = aggregate_id, ce-time =
// created_at), their values percent-encoded as the CloudEvents HTTP binding
// requires; datacontenttype is the Content-Type header, so no
// ce-datacontenttype is sent. webhook-id (Standard Webhooks) and
// Idempotency-Key both carry cloudevents.IdempotencyKey(ce-source, ce-id):
// the key the receiver deduplicates on. It never changes across retries of
// one event and differs between outboxes (ce-id alone does not: every
// outbox has an event 1).
//
// Headers are layered so that a message can never forge what identifies it:
// Message.Headers first, then Config.Headers (the operator's static headers,
// such as Authorization, win over a producer's), then the reserved headers
// above and, when Config.Secret is set, webhook-timestamp and
// webhook-signature. A message header whose name is reserved (see
// ReservedHeaders) or that net/http sets itself (Host, Content-Length,
// Transfer-Encoding, Connection) is dropped.
//
// # Signature
//
// With Config.Secret set, requests are signed the Standard Webhooks way
// (https://www.standardwebhooks.com): webhook-timestamp is the Unix time in
// seconds, and webhook-signature a space-separated list holding, for each
// secret (Config.Secret, then Config.PreviousSecrets while rotating):
//
//	v1,<base64 HMAC-SHA256(key, webhook-id + "." + webhook-timestamp + "." + body)>
//	v1ce,<base64 HMAC-SHA256(ce-key, webhook-id + "." + webhook-timestamp + "." +
//	      ce-specversion + "\n" + ce-id + "\n" + ce-source + "\n" +
//	      ce-type + "\n" + ce-subject + "\n" + ce-time + "\n" + body)>
//
// The key is the base64-decoded part of a "whsec_" secret, or the secret's
// bytes as they are; ce-key is HMAC-SHA256(key, "pgoutbox webhook v1ce"), so
// that a v1ce entry relabelled v1 verifies nothing. v1 is what every Standard Webhooks library verifies; v1ce
// is pgoutbox's companion, ignored by those libraries, that also covers the
// CloudEvents headers (header values as sent, percent-encoded), because in
// binary content mode the event's type and subject travel outside the body.
// Verify checks both, the presence of webhook-id and a timestamp tolerance
// (5 minutes unless given), so that neither a replay with another ce-id or
// ce-type nor a stale replay verifies; receivers deduplicate on webhook-id
// to drop replays within the window. docs/webhooks.md shows the same check
// in Python and Node.
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
//   - Config.UnavailableStatus (408, 429, 502, 503 and 504 by default): the
//     receiver is unavailable, not the message wrong:
//     dispatcher.UnavailableAfter with Retry-After (delay seconds or an
//     HTTP-date) as the least wait, zero when absent. The attempt is
//     refunded while the receiver is down, and the dispatcher's breaker
//     opens (docs/failures.md).
//   - any other 408, 429 or 5xx (500, 501, 505, ...): dispatcher.RetryableAfter
//     with Retry-After as the minimum delay, zero when absent.
//   - 3xx: dispatcher.Permanent. Redirects are never followed (the receiver
//     must be configured with its final URL; a redirected POST would be
//     replayed as a GET by many clients).
//   - any other status (other 4xx, 1xx, codes outside 100-599):
//     dispatcher.Permanent.
//   - a transport error (DNS, connection refused or reset, TLS, Config.Timeout
//     or the caller's deadline, cancellation by the caller): no answer from
//     the receiver, dispatcher.Unavailable. Each Publish sends its request
//     once: the client never resends it by itself when a connection breaks
//     (net/http would, for a POST carrying Idempotency-Key); the dispatcher
//     decides about the next try.
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
