// Package stdout has two publishers for development and measurement.
//
// Publisher writes each message as one JSON line to an io.Writer (standard
// output by default):
//
//	{"id":"42","idempotency_key":"7528de9ad2f30256fe4775f5c8ba9ee5-42","aggregate_type":"order","aggregate_id":"o-1","event_type":"OrderPaid",
//	 "payload":{...},"headers":{...},"attempt":1,"created_at":"2026-11-29T10:00:00.123Z",
//	 "ce":{"specversion":"1.0","id":"42",...}}
//
// (on one line; "idempotency_key" is cloudevents.IdempotencyKey of the
// source and the id, the key consumers deduplicate on; "payload" is the
// stored JSON document as is, "created_at" is
// RFC 3339 in UTC, and "ce", the CloudEvents attributes, is present only
// when Config.CloudEvents is set). Each line is written with a single Write
// call under a mutex, so concurrent publishes never interleave within a
// line.
//
// Discard drops every message and returns nil: a sink for measuring the
// relay itself.
//
// # Error mapping
//
//   - a write error, or a short write: whatever reads the output failed,
//     not the message: dispatcher.Unavailable (no attempt spent while it
//     fails; the dispatcher's breaker opens and probes it, docs/failures.md);
//   - a ctx already done when Publish starts: dispatcher.Unavailable,
//     nothing is written;
//   - a payload that is not valid JSON (it cannot be embedded in the line):
//     dispatcher.Permanent.
//
// Discard never returns an error.
package stdout
