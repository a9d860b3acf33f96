// Package jetstream is a dispatcher.Publisher for NATS JetStream.
//
// Every outbox message is published as a CloudEvent in binary content mode
// (CloudEvents NATS protocol binding): the payload is the message data, and
// the context attributes travel as "ce-" headers (ce-specversion, ce-id = the
// outbox id, ce-type = event_type, ce-source = Config.Source or
// else Message.Source, ce-subject = aggregate_id, ce-time = created_at, ce-datacontenttype), their values
// percent-encoded as the binding requires; "content-type: application/json"
// is set too. The publisher also sets Nats-Msg-Id to the idempotency key
// cloudevents.IdempotencyKey(ce-source, ce-id), so the stream's duplicate
// window (StreamConfig.Duplicates, two minutes unless configured) drops a
// re-publish of a message that is already stored, and it waits for the
// stream's PubAck before reporting success. The key, not the bare outbox id:
// two outboxes (two services, or two tables) publishing to one stream both
// have an event 1, and with the bare id the stream would acknowledge the
// second as a duplicate and never store it. Consumers deduplicate on the
// same key (the Nats-Msg-Id header of the stored message).
//
// Message.Headers are forwarded as NATS headers, except names that would
// change the meaning of the message: any name starting with "ce-" or "Nats-"
// (JetStream interprets Nats-* headers: Nats-Msg-Id, Nats-Expected-*,
// Nats-Rollup, Nats-TTL, ...) and "content-type", all compared
// case-insensitively. Headers whose name or value cannot be carried (a name
// with ':', spaces or control characters; a value with control characters)
// are dropped too. Each dropped header is logged at Warn.
//
// The subject is Config.SubjectTemplate executed over the dispatcher.Message.
//
// # Error mapping
//
// Publish returns nil or an error classified for the dispatcher:
//
//   - PubAck received, including a PubAck with Duplicate=true (the stream
//     already holds a message with this Nats-Msg-Id, so the event is
//     delivered): nil.
//   - No stream bound to the subject (nats.ErrNoResponders, returned by the
//     client as jetstream.ErrNoStreamResponse after its own short retries):
//     dispatcher.UnavailableAfter(ErrNoStream, Config.NoStreamRetryAfter),
//     30s by default. See below for why this is not Permanent.
//   - The subject template fails for this message, or renders a subject that
//     is not a valid NATS publish subject (empty, an empty token such as
//     "a..b", whitespace or control characters, or a "*" / ">" wildcard
//     token): dispatcher.Permanent wrapping ErrInvalidSubject.
//   - A JetStream API error that retrying the same message cannot fix:
//     expected stream mismatch (Config.ExpectStream names another stream,
//     err_code 10060), wrong last sequence (10071, 10164), wrong last message
//     id (10070), message larger than the stream allows (10054); and the
//     client's own nats.ErrMaxPayload, nats.ErrBadSubject,
//     nats.ErrHeadersNotSupported: dispatcher.Permanent.
//   - NATS or JetStream unavailable: dispatcher.Unavailable (no attempt
//     spent while it is down; the dispatcher's breaker opens and probes it,
//     docs/failures.md). That is a connection that is closed, disconnected
//     or reconnecting (the publisher does not buffer while reconnecting:
//     nats.ErrReconnectBufExceeded fails the publish at once and the outbox
//     row itself is the buffer), a timeout (the PubAck did not arrive within
//     Config.PublishTimeout, nats.ErrTimeout, context.DeadlineExceeded), a
//     cancelled context, and a JetStream API error with code 503 (no
//     JetStream leader, JetStream or the stream's storage unavailable).
//   - Everything else: dispatcher.Retryable: an invalid PubAck, and any
//     other JetStream API error (a stream out of space with discard=new, a
//     duplicate still being processed): the dispatcher's attempt limit
//     bounds them.
//
// # Why a missing stream is Unavailable (after 30s), not Permanent
//
// A subject that no stream listens on is a configuration error that a person
// must fix, which argues for Permanent. But the same symptom appears, for a
// while, in situations that fix themselves: a deploy in which the stream is
// created by the infrastructure a minute after the dispatcher starts, a
// stream being re-created, or a JetStream cluster electing a stream leader.
// Permanent would send every message of that window to dead, to be replayed
// by hand. As Unavailable, with a long minimum delay, a missing stream for
// every message opens the dispatcher's breaker: nothing is spent, the
// breaker's log line names the error (wrapping ErrNoStream and naming the
// subject and the setting to fix), and delivery resumes when the stream
// exists. A missing stream for some subjects only, while others are
// delivered, is a failure of those messages: each spends one attempt per
// NoStreamRetryAfter, visible in last_error, and goes to dead when its
// attempts are exhausted.
package jetstream

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"text/template"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/pgoutbox/pgoutbox/dispatcher"
	"github.com/pgoutbox/pgoutbox/internal/redact"
	"github.com/pgoutbox/pgoutbox/publisher/cloudevents"
)

// Defaults applied by New to zero Config fields.
const (
	URLDefault                = "nats://127.0.0.1:4222"
	SubjectTemplateDefault    = "{{.AggregateType}}.{{.EventType}}"
	PublishTimeoutDefault     = 5 * time.Second
	NoStreamRetryAfterDefault = 30 * time.Second
)

// Header names set by the publisher.
const (
	// HeaderMsgID is JetStream's deduplication header; its value is
	// cloudevents.IdempotencyKey(source, outbox id).
	HeaderMsgID = natsjs.MsgIDHeader
	// HeaderContentType carries the payload's media type.
	HeaderContentType = "content-type"
	// CloudEventsPrefix prefixes every CloudEvents attribute header.
	CloudEventsPrefix = "ce-"
)

// Sentinel errors, wrapped in the errors Publish returns.
var (
	// ErrNoStream means no JetStream stream is bound to the message's
	// subject (or none answered in time): the stream is missing, or its
	// subjects do not match Config.SubjectTemplate.
	ErrNoStream = errors.New("jetstream: no stream bound to the subject")
	// ErrInvalidSubject means the subject template failed for the message
	// or rendered a subject NATS does not accept.
	ErrInvalidSubject = errors.New("jetstream: invalid subject")
)

// Config configures a Publisher. The zero value publishes to a local server.
type Config struct {
	// URL is the NATS server URL, or several separated by commas.
	// Credentials may be embedded (nats://user:password@host:4222 or
	// nats://token@host:4222); they never appear in errors or logs.
	// Defaults to URLDefault, "nats://127.0.0.1:4222".
	URL string
	// SubjectTemplate is a text/template executed over the
	// dispatcher.Message to name the subject of each message, for example
	// "orders.{{.AggregateType}}.{{.EventType}}" or
	// "{{.Headers.tenant}}.{{.EventType}}" (a missing header renders as an
	// empty string). New parses it and executes it on a sample message with
	// every field set and no headers, which must render a valid NATS subject
	// (empty tokens are tolerated there only when the template reads
	// .Headers). A message for which it fails or renders an invalid subject
	// is Permanent.
	// Defaults to SubjectTemplateDefault, "{{.AggregateType}}.{{.EventType}}".
	SubjectTemplate string
	// Source is the CloudEvents source attribute (ce-source), and with the
	// outbox id the Nats-Msg-Id (cloudevents.IdempotencyKey). Defaults to
	// "": Message.Source, the per-outbox source the dispatcher sets.
	Source string
	// PublishTimeout bounds one Publish, from sending to receiving the
	// PubAck, within the caller's context. Defaults to 5s.
	PublishTimeout time.Duration
	// ExpectStream, when set, is sent as Nats-Expected-Stream: the server
	// rejects the message (Permanent) unless that stream stores it, which
	// catches a subject captured by the wrong stream. Ping also checks that
	// the stream exists. Defaults to "" (no expectation).
	ExpectStream string
	// NoStreamRetryAfter is the minimum delay before the next attempt of a
	// message for which no stream answered (see the package documentation).
	// Defaults to 30s.
	NoStreamRetryAfter time.Duration
	// Logger receives connection events (disconnected, reconnected, closed,
	// asynchronous server errors) and dropped headers. Defaults to
	// slog.Default().
	Logger *slog.Logger
	// FieldNames names this Config's fields in error messages, for a
	// program whose users set them under other names (the pgoutbox CLI maps
	// "SubjectTemplate" to "--nats-subject"). A field not in the map is
	// named "Config." + the field. Defaults to none.
	FieldNames map[string]string
	// Options are extra nats.Options applied after the publisher's own,
	// which they can override: nats.Name("pgoutbox"), nats.MaxReconnects(-1)
	// (reconnect forever), nats.ReconnectBufSize(-1) (fail publishes while
	// reconnecting instead of buffering them) and logging handlers. Use them
	// for TLS, credentials files, nkeys or reconnect timing. Defaults to none.
	Options []nats.Option
}

// Publisher publishes outbox messages to JetStream. It is safe for
// concurrent use.
type Publisher struct {
	cfg     Config
	log     *slog.Logger
	subject *template.Template
	url     string // redacted, for errors and logs
	nc      *nats.Conn
	js      natsjs.JetStream
}

var _ interface {
	dispatcher.Publisher
	dispatcher.Pinger
} = (*Publisher)(nil)

func (c *Config) applyDefaults() {
	c.URL = cmp.Or(c.URL, URLDefault)
	c.SubjectTemplate = cmp.Or(c.SubjectTemplate, SubjectTemplateDefault)
	c.PublishTimeout = cmp.Or(c.PublishTimeout, PublishTimeoutDefault)
	c.NoStreamRetryAfter = cmp.Or(c.NoStreamRetryAfter, NoStreamRetryAfterDefault)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// name is how errors name field (FieldNames).
func (c *Config) name(field string) string { return cmp.Or(c.FieldNames[field], "Config."+field) }

func (c *Config) invalid(field, format string, args ...any) error {
	return fmt.Errorf("%w: jetstream: %s: %s", dispatcher.ErrInvalidConfig, c.name(field), fmt.Sprintf(format, args...))
}

// validate checks the config (after defaults) and returns the parsed subject
// template.
func (c *Config) validate() (*template.Template, error) {
	for u := range strings.SplitSeq(c.URL, ",") {
		u = strings.TrimSpace(u)
		if u == "" {
			return nil, c.invalid("URL", "empty URL in list")
		}
		if strings.Contains(u, "://") {
			if _, err := url.Parse(u); err != nil {
				// url.Error quotes the whole URL, password included: say
				// only that it does not parse.
				return nil, c.invalid("URL", "%s is not a valid URL", redact.URL(u, true))
			}
		}
	}
	tmpl, err := template.New("subject").Option("missingkey=zero").Parse(c.SubjectTemplate)
	if err != nil {
		return nil, c.invalid("SubjectTemplate", "parse: %v", err)
	}
	subject, err := render(tmpl, sampleMessage())
	if err != nil {
		return nil, c.invalid("SubjectTemplate", "execute on a sample message: %v", err)
	}
	if err := validSubject(subject); err != nil {
		// The sample has every field set but no Headers: when the template
		// reads Headers, an empty token may be a header that real messages
		// carry, so only Publish can tell.
		if !errors.Is(err, errEmptyToken) || !strings.Contains(c.SubjectTemplate, ".Headers") {
			return nil, c.invalid("SubjectTemplate", "renders %q on a sample message: %v", subject, err)
		}
	}
	if c.PublishTimeout < 0 {
		return nil, c.invalid("PublishTimeout", "must be positive, got %s", c.PublishTimeout)
	}
	if c.NoStreamRetryAfter < 0 {
		return nil, c.invalid("NoStreamRetryAfter", "must be positive, got %s", c.NoStreamRetryAfter)
	}
	if c.ExpectStream != "" && strings.ContainsAny(c.ExpectStream, " \t\r\n.*>/\\") {
		return nil, c.invalid("ExpectStream", "%q is not a valid stream name (no spaces, '.', '*', '>', '/' or '\\')", c.ExpectStream)
	}
	return tmpl, nil
}

// New validates cfg, connects to NATS and returns a Publisher. Config errors
// wrap dispatcher.ErrInvalidConfig and name the field. The connection
// reconnects by itself forever after New succeeds; Close ends it.
func New(ctx context.Context, cfg Config) (*Publisher, error) {
	cfg.applyDefaults()
	tmpl, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("jetstream: connect: %w", err)
	}
	p := &Publisher{cfg: cfg, log: cfg.Logger, subject: tmpl, url: redact.URL(cfg.URL, true)}
	opts := []nats.Option{
		nats.Name("pgoutbox"),
		nats.MaxReconnects(-1),
		nats.ReconnectBufSize(-1),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err == nil {
				return // Close
			}
			p.log.Warn("jetstream: disconnected from NATS", slog.String("url", p.url), slog.Any("error", p.scrub(err)))
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			p.log.Info("jetstream: reconnected to NATS", slog.String("url", nc.ConnectedUrlRedacted()))
		}),
		nats.ClosedHandler(func(*nats.Conn) {
			p.log.Debug("jetstream: NATS connection closed", slog.String("url", p.url))
		}),
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			attrs := []any{slog.String("url", p.url), slog.Any("error", p.scrub(err))}
			if sub != nil {
				attrs = append(attrs, slog.String("subject", sub.Subject))
			}
			p.log.Warn("jetstream: asynchronous NATS error", attrs...)
		}),
	}
	nc, err := nats.Connect(cfg.URL, append(opts, cfg.Options...)...)
	if err != nil {
		return nil, fmt.Errorf("jetstream: connect to %s: %w (check that nats-server is running with JetStream enabled, -js, and that %s is right)",
			p.url, p.scrub(err), cfg.name("URL"))
	}
	js, err := natsjs.New(nc)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	p.nc, p.js = nc, js
	p.log.Debug("jetstream: publisher connected", slog.String("url", nc.ConnectedUrlRedacted()))
	return p, nil
}

// Publish publishes msg and waits for the stream's acknowledgement. See the
// package documentation for the error mapping.
func (p *Publisher) Publish(ctx context.Context, msg dispatcher.Message) error {
	subject, err := render(p.subject, msg)
	if err != nil {
		return dispatcher.Permanent(fmt.Errorf("%w: %s for message %s: %v", ErrInvalidSubject, p.cfg.name("SubjectTemplate"), msg.ID, err))
	}
	if err := validSubject(subject); err != nil {
		return dispatcher.Permanent(fmt.Errorf("%w: %q for message %s: %v", ErrInvalidSubject, subject, msg.ID, err))
	}

	m := nats.NewMsg(subject)
	m.Data = msg.Payload
	m.Header = p.headers(ctx, msg)
	opts := []natsjs.PublishOpt{natsjs.WithMsgID(cloudevents.From(msg, p.cfg.Source).IdempotencyKey())}
	if p.cfg.ExpectStream != "" {
		opts = append(opts, natsjs.WithExpectStream(p.cfg.ExpectStream))
	}

	ctx, cancel := context.WithTimeout(ctx, p.cfg.PublishTimeout)
	defer cancel()
	ack, err := p.js.PublishMsg(ctx, m, opts...)
	if err != nil {
		return p.classify(err, subject)
	}
	if ack.Duplicate {
		p.log.LogAttrs(ctx, slog.LevelDebug, "jetstream: duplicate dropped by the stream",
			slog.String("id", msg.ID), slog.String("stream", ack.Stream), slog.Uint64("seq", ack.Sequence))
	}
	return nil
}

// classify maps a PublishMsg error to the dispatcher's classification.
func (p *Publisher) classify(err error, subject string) error {
	err = p.scrub(err)
	if errors.Is(err, natsjs.ErrNoStreamResponse) || errors.Is(err, nats.ErrNoResponders) {
		return dispatcher.UnavailableAfter(fmt.Errorf("%w %q (create a stream whose subjects match it, or fix %s): %w",
			ErrNoStream, subject, p.cfg.name("SubjectTemplate"), err), p.cfg.NoStreamRetryAfter)
	}
	var apiErr *natsjs.APIError
	if errors.As(err, &apiErr) {
		switch apiErr.ErrorCode {
		case errCodeStreamNotMatch, // Config.ExpectStream names another stream
			natsjs.JSErrCodeStreamWrongLastSequence,
			natsjs.JSErrCodeStreamWrongLastSequenceConstant,
			errCodeStreamWrongLastMsgID,
			errCodeStreamMessageExceedsMaximum:
			return dispatcher.Permanent(fmt.Errorf("jetstream: publish to %q: %w", subject, err))
		}
		if apiErr.Code == 503 {
			return dispatcher.Unavailable(fmt.Errorf("jetstream: publish to %q: %w", subject, err))
		}
		return dispatcher.Retryable(fmt.Errorf("jetstream: publish to %q: %w", subject, err))
	}
	switch {
	case errors.Is(err, nats.ErrReconnectBufExceeded), errors.Is(err, nats.ErrConnectionReconnecting),
		errors.Is(err, nats.ErrConnectionClosed), errors.Is(err, nats.ErrConnectionDraining), errors.Is(err, nats.ErrDisconnected):
		return dispatcher.Unavailable(fmt.Errorf("jetstream: publish to %q: not connected to %s: %w", subject, p.url, err))
	case errors.Is(err, nats.ErrTimeout), errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return dispatcher.Unavailable(fmt.Errorf("jetstream: publish to %q: no acknowledgement from %s: %w", subject, p.url, err))
	case errors.Is(err, nats.ErrMaxPayload),
		errors.Is(err, nats.ErrBadSubject),
		errors.Is(err, nats.ErrHeadersNotSupported):
		return dispatcher.Permanent(fmt.Errorf("jetstream: publish to %q: %w", subject, err))
	}
	return dispatcher.Retryable(fmt.Errorf("jetstream: publish to %q: %w", subject, err))
}

// JetStream API error codes the client library does not name (10054 is named
// from nats.go v1.54.0 on, whose go line 1.26.0 this module does not ask for).
const (
	errCodeStreamMessageExceedsMaximum natsjs.ErrorCode = 10054 // message size exceeds maximum allowed
	errCodeStreamNotMatch              natsjs.ErrorCode = 10060 // expected stream does not match
	errCodeStreamWrongLastMsgID        natsjs.ErrorCode = 10070 // wrong last msg ID
)

// Ping reports whether the publisher can publish: the connection is up,
// JetStream answers for the account, and the Config.ExpectStream stream (if
// any) exists. It waits at most Config.PublishTimeout when ctx has no
// deadline.
func (p *Publisher) Ping(ctx context.Context) error {
	if !p.nc.IsConnected() {
		return fmt.Errorf("jetstream: not connected to %s (status %s)", p.url, p.nc.Status())
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, p.cfg.PublishTimeout)
		defer cancel()
	}
	if _, err := p.js.AccountInfo(ctx); err != nil {
		return fmt.Errorf("jetstream: JetStream not available at %s: %w", p.url, p.scrub(err))
	}
	if p.cfg.ExpectStream != "" {
		if _, err := p.js.Stream(ctx, p.cfg.ExpectStream); err != nil {
			return fmt.Errorf("jetstream: %s %q: %w", p.cfg.name("ExpectStream"), p.cfg.ExpectStream, p.scrub(err))
		}
	}
	return nil
}

// Close closes the connection. Publish fails with an Unavailable error
// after Close. It is safe to call more than once.
func (p *Publisher) Close() error {
	p.nc.Close()
	return nil
}

// headers returns the NATS headers of msg: the user's forwardable headers,
// then the CloudEvents attributes and content type.
func (p *Publisher) headers(ctx context.Context, msg dispatcher.Message) nats.Header {
	attrs := cloudevents.From(msg, p.cfg.Source)
	h := make(nats.Header, len(msg.Headers)+8)
	for k, v := range msg.Headers {
		if reason := dropReason(k, v); reason != "" {
			p.log.LogAttrs(ctx, slog.LevelWarn, "jetstream: user header not forwarded",
				slog.String("id", msg.ID), slog.String("header", k), slog.String("reason", reason))
			continue
		}
		h.Set(k, v)
	}
	for k, v := range attrs.Map(CloudEventsPrefix) {
		h.Set(k, percentEncode(v))
	}
	h.Set(HeaderContentType, attrs.DataContentType)
	return h
}

// dropReason says why a user header cannot be forwarded, or "" if it can.
func dropReason(name, value string) string {
	lower := strings.ToLower(name)
	switch {
	case strings.HasPrefix(lower, CloudEventsPrefix):
		return "reserved for CloudEvents attributes"
	case strings.HasPrefix(lower, "nats-"):
		return "reserved for NATS and JetStream"
	case lower == HeaderContentType:
		return "reserved: the content type is the payload's"
	case name == "":
		return "empty name"
	}
	for i := 0; i < len(name); i++ {
		if b := name[i]; b <= ' ' || b >= 0x7f || b == ':' {
			return "invalid name"
		}
	}
	for i := 0; i < len(value); i++ {
		if b := value[i]; (b < ' ' && b != '\t') || b == 0x7f {
			return "control character in value"
		}
	}
	return ""
}

// percentEncode encodes a header value as the CloudEvents NATS binding
// requires: space, double quote, percent and every byte outside printable
// ASCII become %XY (upper-case hex) of their UTF-8 bytes.
func percentEncode(s string) string {
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c >= 0x7f || c == '"' || c == '%' {
			if b.Len() == 0 {
				b.Grow(len(s) + 8)
				b.WriteString(s[:i])
			}
			b.WriteByte('%')
			b.WriteByte(hex[c>>4])
			b.WriteByte(hex[c&0xf])
			continue
		}
		if b.Len() > 0 {
			b.WriteByte(c)
		}
	}
	if b.Len() == 0 {
		return s
	}
	return b.String()
}

var errEmptyToken = errors.New("empty token")

// validSubject checks that s can be published to: non-empty tokens separated
// by '.', no whitespace or control characters, no wildcard tokens.
func validSubject(s string) error {
	if s == "" {
		return errors.New("empty subject")
	}
	for i := 0; i < len(s); i++ {
		if b := s[i]; b <= ' ' || b == 0x7f {
			return fmt.Errorf("whitespace or control character at byte %d", i)
		}
	}
	for tok := range strings.SplitSeq(s, ".") {
		switch tok {
		case "":
			return errEmptyToken
		case "*", ">":
			return fmt.Errorf("wildcard token %q", tok)
		}
	}
	return nil
}

func render(t *template.Template, msg dispatcher.Message) (string, error) {
	var b strings.Builder
	if err := t.Execute(&b, msg); err != nil {
		return "", err
	}
	return b.String(), nil
}

// sampleMessage is what New executes the subject template on.
func sampleMessage() dispatcher.Message {
	return dispatcher.Message{
		ID: "1", OutboxID: 1, AggregateType: "aggregate", AggregateID: "aggregate-1",
		EventType: "Event", Payload: []byte(`{}`), Headers: map[string]string{},
		Attempt: 1, CreatedAt: time.Unix(0, 0).UTC(),
	}
}

// scrub removes the URL's secrets from err's text, keeping err in the chain
// for errors.Is and errors.As.
func (p *Publisher) scrub(err error) error {
	return redact.Error(err, p.cfg.URL, true)
}
