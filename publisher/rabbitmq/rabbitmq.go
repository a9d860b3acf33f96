// Package rabbitmq is a dispatcher.Publisher for RabbitMQ (AMQP 0-9-1) with
// publisher confirms.
//
// Every outbox message is published as a CloudEvent in binary content mode
// (CloudEvents AMQP protocol binding): the payload is the message body, the
// datacontenttype attribute is the content_type property
// ("application/json"), and every other attribute is an application header
// with the "cloudEvents_" prefix (the binding allows "cloudEvents_" and
// "cloudEvents:" and recommends "_" for JMS compatibility): cloudEvents_id =
// the outbox id, cloudEvents_type = event_type, cloudEvents_source =
// Config.Source or else Message.Source, cloudEvents_subject = aggregate_id, cloudEvents_time =
// created_at (RFC 3339 string: an AMQP 0-9-1 timestamp would lose the
// sub-second part), cloudEvents_specversion. The AMQP properties are set too:
// message_id = cloudevents.IdempotencyKey(source, outbox id), the key
// consumers deduplicate on (a re-publish carries the same message_id; the
// bare outbox id would collide between outboxes sharing a broker), type = event_type, timestamp = created_at,
// delivery_mode = persistent.
//
// Message.Headers are forwarded as application headers, except names
// starting with "cloudEvents_" or "cloudEvents:" (case-insensitive), which
// would override the CloudEvents attributes, and names longer than 255
// bytes; each dropped header is logged at Warn. The dedup id is the
// message_id property, which headers cannot touch.
//
// The routing key is Config.RoutingKeyTemplate executed over the
// dispatcher.Message; the exchange is Config.Exchange.
//
// # Concurrency and connection recovery
//
// Publish may be called from many goroutines. Each publish in flight has an
// AMQP channel of its own, taken from a small pool (Config.MaxIdleChannels)
// of channels in confirm mode, so a broker confirm and a basic.return always
// belong to the one message in flight on their channel. A channel the broker
// closed (for example 404 for a missing exchange), or one whose publish timed
// out, is thrown away; the next publish opens a new one on the same
// connection. When the connection itself is lost, the publishes in flight
// fail with an Unavailable error and the next Publish (or Ping) dials again,
// one goroutine at a time, with exponential backoff between failed dials
// (Config.ReconnectDelay up to Config.MaxReconnectDelay). A Publish never
// waits longer than its context and Config.ConfirmTimeout: when the next dial
// is not due before then, it fails at once with an Unavailable error.
//
// # Error mapping
//
// Publish returns nil or an error classified for the dispatcher:
//
//   - basic.ack from the broker and no basic.return: nil.
//   - basic.return (Config.Mandatory is on, the default, and no queue is
//     bound for the routing key): dispatcher.Permanent wrapping
//     ErrUnroutable. Without mandatory the broker would drop the message
//     silently; a person must bind a queue (or set an alternate exchange),
//     then replay the dead messages.
//   - Channel closed by the broker with 404 NOT_FOUND (the exchange does
//     not exist): dispatcher.Permanent wrapping ErrExchangeNotFound. The
//     channel is replaced, so the next message publishes normally once the
//     exchange exists.
//   - Channel closed with 403 ACCESS_REFUSED (no write permission on the
//     exchange) or 406 PRECONDITION_FAILED (the message breaks a broker
//     limit, such as max_message_size): dispatcher.Permanent.
//   - The routing key template fails for the message, or renders a key
//     longer than 255 bytes: dispatcher.Permanent wrapping
//     ErrInvalidRoutingKey.
//   - basic.nack (the broker could not take responsibility for the message,
//     for example a queue at x-max-length with x-overflow=reject-publish):
//     dispatcher.Retryable wrapping ErrNacked.
//   - The broker unavailable: dispatcher.Unavailable (no attempt spent while
//     it is down; the dispatcher's breaker opens and probes it,
//     docs/failures.md). That is a connection lost or refused (not
//     connected and the next dial not yet due, a failed dial), a connection
//     closed by the broker (320 CONNECTION_FORCED: a broker shutting down;
//     506 RESOURCE_ERROR, 541 INTERNAL_ERROR), the connection blocked by a
//     broker resource alarm (connection.blocked), no confirm within
//     Config.ConfirmTimeout or the caller's context (the channel is thrown
//     away; the message may still have been routed, and the consumer
//     deduplicates on message_id), and the Publisher closed (ErrNotConnected,
//     ErrBlocked, ErrClosed or the client's error).
//   - A channel closed with any other code: dispatcher.Retryable.
package rabbitmq

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"text/template"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/pgoutbox/pgoutbox/dispatcher"
	"github.com/pgoutbox/pgoutbox/internal/redact"
	"github.com/pgoutbox/pgoutbox/publisher/cloudevents"
)

// Defaults applied by New to zero Config fields.
const (
	URLDefault                = "amqp://guest:guest@127.0.0.1:5672/"
	RoutingKeyTemplateDefault = "{{.AggregateType}}.{{.EventType}}"
	ConfirmTimeoutDefault     = 5 * time.Second
	DialTimeoutDefault        = 5 * time.Second
	ReconnectDelayDefault     = 100 * time.Millisecond
	MaxReconnectDelayDefault  = 10 * time.Second
	MaxIdleChannelsDefault    = 8
)

// CloudEventsPrefix prefixes every CloudEvents attribute header.
const CloudEventsPrefix = "cloudEvents_"

// Sentinel errors, wrapped in the errors Publish returns.
var (
	// ErrUnroutable means the broker returned a mandatory message: no
	// queue is bound for its routing key on the exchange.
	ErrUnroutable = errors.New("rabbitmq: message unroutable")
	// ErrExchangeNotFound means the broker closed the channel with 404:
	// Config.Exchange does not exist.
	ErrExchangeNotFound = errors.New("rabbitmq: exchange not found")
	// ErrNacked means the broker answered basic.nack.
	ErrNacked = errors.New("rabbitmq: message nacked by the broker")
	// ErrInvalidRoutingKey means the routing key template failed for the
	// message or rendered a key longer than 255 bytes.
	ErrInvalidRoutingKey = errors.New("rabbitmq: invalid routing key")
	// ErrNotConnected means there is no connection to the broker right now.
	ErrNotConnected = errors.New("rabbitmq: not connected")
	// ErrBlocked means the broker blocked the connection (a memory or disk
	// alarm): publishes would stall until it unblocks.
	ErrBlocked = errors.New("rabbitmq: connection blocked by the broker")
	// ErrClosed means Close was called.
	ErrClosed = errors.New("rabbitmq: publisher closed")
)

// Config configures a Publisher. The zero value publishes to a local broker
// through the default exchange.
type Config struct {
	// URL is the AMQP URI (amqp:// or amqps://). The password never appears
	// in errors or logs. Defaults to URLDefault,
	// "amqp://guest:guest@127.0.0.1:5672/".
	URL string
	// Exchange is the exchange every message is published to. It must
	// exist: the publisher does not declare topology. Defaults to "", the
	// default exchange, which routes to the queue named by the routing key.
	Exchange string
	// RoutingKeyTemplate is a text/template executed over the
	// dispatcher.Message to make each routing key, for example
	// "{{.AggregateType}}.{{.EventType}}" or "{{.Headers.tenant}}.events" (a
	// missing header renders as an empty string). New parses it and
	// executes it on a sample message. Defaults to RoutingKeyTemplateDefault,
	// "{{.AggregateType}}.{{.EventType}}".
	RoutingKeyTemplate string
	// Mandatory asks the broker to return messages no queue is bound for,
	// which Publish reports as Permanent (ErrUnroutable); with it off such
	// messages are dropped by the broker and Publish returns nil. Turn it
	// off with a pointer to false (off := false; &off). Defaults to true (nil).
	Mandatory *bool
	// Source is the CloudEvents source attribute (cloudEvents_source), and
	// with the outbox id the message_id (cloudevents.IdempotencyKey).
	// Defaults to "": Message.Source, the per-outbox source the dispatcher
	// sets.
	Source string
	// ConfirmTimeout bounds one Publish, including a reconnection, the
	// publish and the wait for the broker's confirm, within the caller's
	// context. Defaults to 5s.
	ConfirmTimeout time.Duration
	// DialTimeout bounds connecting to the broker (TCP, TLS and AMQP
	// handshake) in New and when reconnecting. Defaults to 5s.
	DialTimeout time.Duration
	// ReconnectDelay is the wait after the first failed reconnection; it
	// doubles (with jitter) after each further failure. Defaults to 100ms.
	ReconnectDelay time.Duration
	// MaxReconnectDelay caps the wait between reconnection attempts.
	// Defaults to 10s.
	MaxReconnectDelay time.Duration
	// MaxIdleChannels is how many confirm-mode channels are kept open for
	// reuse between publishes. Defaults to 8.
	MaxIdleChannels int
	// Logger receives connection events (lost, reconnected, failed dials,
	// blocked) and dropped headers. Defaults to slog.Default().
	Logger *slog.Logger
	// FieldNames names this Config's fields in error messages, for a
	// program whose users set them under other names (the pgoutbox CLI maps
	// "Exchange" to "--amqp-exchange"). A field not in the map is named
	// "Config." + the field. Defaults to none.
	FieldNames map[string]string
}

// Publisher publishes outbox messages to RabbitMQ. It is safe for concurrent
// use.
type Publisher struct {
	cfg       Config
	mandatory bool
	log       *slog.Logger
	key       *template.Template
	url       string        // redacted, for errors and logs
	dialSem   chan struct{} // one dial at a time

	mu       sync.Mutex
	cur      *conn // nil or possibly closed: see acquire
	closed   bool
	failures int       // consecutive failed dials
	nextDial time.Time // no dial before this
}

var _ interface {
	dispatcher.Publisher
	dispatcher.Pinger
} = (*Publisher)(nil)

// conn is one AMQP connection and its idle channels.
type conn struct {
	c       *amqp.Connection
	blocked atomic.Pointer[string] // reason while blocked, nil otherwise

	mu   sync.Mutex
	idle []*channel
}

// channel is a confirm-mode channel used by one publish at a time.
type channel struct {
	ch      *amqp.Channel
	closes  chan *amqp.Error
	returns chan amqp.Return
}

func (c *Config) applyDefaults() {
	c.URL = cmp.Or(c.URL, URLDefault)
	c.RoutingKeyTemplate = cmp.Or(c.RoutingKeyTemplate, RoutingKeyTemplateDefault)
	c.ConfirmTimeout = cmp.Or(c.ConfirmTimeout, ConfirmTimeoutDefault)
	c.DialTimeout = cmp.Or(c.DialTimeout, DialTimeoutDefault)
	c.ReconnectDelay = cmp.Or(c.ReconnectDelay, ReconnectDelayDefault)
	c.MaxReconnectDelay = cmp.Or(c.MaxReconnectDelay, MaxReconnectDelayDefault)
	c.MaxIdleChannels = cmp.Or(c.MaxIdleChannels, MaxIdleChannelsDefault)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// name is how errors name field (FieldNames).
func (c *Config) name(field string) string { return cmp.Or(c.FieldNames[field], "Config."+field) }

func (c *Config) invalid(field, format string, args ...any) error {
	return fmt.Errorf("%w: rabbitmq: %s: %s", dispatcher.ErrInvalidConfig, c.name(field), fmt.Sprintf(format, args...))
}

// validate checks the config (after defaults) and returns the parsed routing
// key template.
func (c *Config) validate() (*template.Template, error) {
	if _, err := amqp.ParseURI(c.URL); err != nil {
		return nil, c.invalid("URL", "%s: %v", redact.URL(c.URL, false), redact.Error(err, c.URL, false))
	}
	if len(c.Exchange) > 255 {
		return nil, c.invalid("Exchange", "longer than 255 bytes")
	}
	tmpl, err := template.New("routing key").Option("missingkey=zero").Parse(c.RoutingKeyTemplate)
	if err != nil {
		return nil, c.invalid("RoutingKeyTemplate", "parse: %v", err)
	}
	key, err := render(tmpl, sampleMessage())
	if err != nil {
		return nil, c.invalid("RoutingKeyTemplate", "execute on a sample message: %v", err)
	}
	if len(key) > 255 {
		return nil, c.invalid("RoutingKeyTemplate", "renders %d bytes on a sample message; the limit is 255", len(key))
	}
	for _, d := range []struct {
		field string
		v     time.Duration
	}{
		{"ConfirmTimeout", c.ConfirmTimeout},
		{"DialTimeout", c.DialTimeout},
		{"ReconnectDelay", c.ReconnectDelay},
		{"MaxReconnectDelay", c.MaxReconnectDelay},
	} {
		if d.v < 0 {
			return nil, c.invalid(d.field, "must be positive, got %s", d.v)
		}
	}
	if c.MaxReconnectDelay < c.ReconnectDelay {
		return nil, c.invalid("MaxReconnectDelay", "%s is less than ReconnectDelay %s", c.MaxReconnectDelay, c.ReconnectDelay)
	}
	if c.MaxIdleChannels < 0 {
		return nil, c.invalid("MaxIdleChannels", "must be positive, got %d", c.MaxIdleChannels)
	}
	return tmpl, nil
}

// New validates cfg, connects to the broker and returns a Publisher. Config
// errors wrap dispatcher.ErrInvalidConfig and name the field. After New
// succeeds the publisher reconnects by itself when the connection is lost.
func New(ctx context.Context, cfg Config) (*Publisher, error) {
	cfg.applyDefaults()
	tmpl, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	p := &Publisher{
		cfg:       cfg,
		mandatory: cfg.Mandatory == nil || *cfg.Mandatory,
		log:       cfg.Logger,
		key:       tmpl,
		url:       redact.URL(cfg.URL, false),
		dialSem:   make(chan struct{}, 1),
	}
	c, err := p.dial(ctx)
	if err != nil {
		return nil, fmt.Errorf("rabbitmq: connect to %s: %w (check that RabbitMQ is running and that %s, its credentials and vhost are right)", p.url, err, cfg.name("URL"))
	}
	p.cur = c
	p.log.Debug("rabbitmq: publisher connected", slog.String("url", p.url))
	return p, nil
}

// Publish publishes msg and waits for the broker's confirm. See the package
// documentation for the error mapping.
func (p *Publisher) Publish(ctx context.Context, msg dispatcher.Message) error {
	key, err := render(p.key, msg)
	if err != nil {
		return dispatcher.Permanent(fmt.Errorf("%w: %s for message %s: %v", ErrInvalidRoutingKey, p.cfg.name("RoutingKeyTemplate"), msg.ID, err))
	}
	if len(key) > 255 {
		return dispatcher.Permanent(fmt.Errorf("%w: %d bytes for message %s; the limit is 255", ErrInvalidRoutingKey, len(key), msg.ID))
	}
	pub := p.publishing(ctx, msg)

	ctx, cancel := context.WithTimeout(ctx, p.cfg.ConfirmTimeout)
	defer cancel()
	c, ch, err := p.acquire(ctx)
	if err != nil {
		return p.unavailable(err)
	}
	if reason := c.blocked.Load(); reason != nil {
		p.release(c, ch)
		return dispatcher.Unavailable(fmt.Errorf("%w (%s)", ErrBlocked, *reason))
	}

	drainReturns(ch.returns)
	dc, err := ch.ch.PublishWithDeferredConfirmWithContext(ctx, p.cfg.Exchange, key, p.mandatory, false, pub)
	if err != nil {
		p.discard(ch)
		return p.closeError(err, key)
	}
	select {
	case <-dc.Done():
	case <-ctx.Done():
		p.discard(ch)
		return dispatcher.Unavailable(fmt.Errorf("rabbitmq: no confirm for message %s to exchange %q within %s: %w",
			msg.ID, p.cfg.Exchange, p.cfg.ConfirmTimeout, ctx.Err()))
	}

	if dc.Acked() {
		// The broker sends basic.return before the basic.ack of the same
		// message, and the client hands the return to ch.returns before it
		// resolves the confirm: if there is one, it is there now.
		select {
		case r, ok := <-ch.returns:
			if ok && r.MessageId == pub.MessageId {
				p.release(c, ch)
				return dispatcher.Permanent(fmt.Errorf("%w: exchange %q, routing key %q: %d %s (bind a queue for the key, or set an alternate exchange)",
					ErrUnroutable, p.cfg.Exchange, key, r.ReplyCode, r.ReplyText))
			}
		default:
		}
		p.release(c, ch)
		return nil
	}

	// Not acked: a nack, or the channel closed before the confirm. The
	// client sends the close error to ch.closes before it fails pending
	// confirms, so a close is visible here.
	select {
	case e, ok := <-ch.closes:
		p.discard(ch)
		if !ok || e == nil {
			return p.closeError(nil, key)
		}
		return p.closeError(e, key)
	default:
	}
	if ch.ch.IsClosed() {
		p.discard(ch)
		return p.closeError(nil, key)
	}
	p.release(c, ch)
	return dispatcher.Retryable(fmt.Errorf("%w: message %s, exchange %q, routing key %q", ErrNacked, msg.ID, p.cfg.Exchange, key))
}

// closeError classifies the error that ended a channel (nil: closed without
// a broker error, or the connection went away).
func (p *Publisher) closeError(err error, key string) error {
	if err == nil {
		err = amqp.ErrClosed
	}
	var amqpErr *amqp.Error
	if errors.As(err, &amqpErr) {
		return classifyAMQPError(amqpErr, p.cfg.Exchange, key, p.cfg.name("Exchange"))
	}
	return dispatcher.Unavailable(fmt.Errorf("rabbitmq: publish to exchange %q: %w", p.cfg.Exchange, redact.Error(err, p.cfg.URL, false)))
}

// classifyAMQPError maps a channel or connection exception; exchangeField
// names the setting of the exchange.
func classifyAMQPError(e *amqp.Error, exchange, key, exchangeField string) error {
	switch e.Code {
	case amqp.NotFound:
		return dispatcher.Permanent(fmt.Errorf("%w: %q (declare it, or fix %s): %w", ErrExchangeNotFound, exchange, exchangeField, e))
	case amqp.AccessRefused, amqp.PreconditionFailed:
		return dispatcher.Permanent(fmt.Errorf("rabbitmq: publish to exchange %q, routing key %q: %w", exchange, key, e))
	case amqp.ConnectionForced, amqp.ResourceError, amqp.InternalError:
		// The broker closed the connection: shutting down, out of a
		// resource, or failing itself.
		return dispatcher.Unavailable(fmt.Errorf("rabbitmq: publish to exchange %q: %w", exchange, e))
	}
	if e == amqp.ErrClosed || (e.Code == amqp.FrameError && !e.Server) {
		// The client's "channel/connection is not open", or its read or
		// write on the connection failed (code 501, reason "EOF", a reset):
		// the connection went away.
		return dispatcher.Unavailable(fmt.Errorf("rabbitmq: publish to exchange %q: %w", exchange, e))
	}
	return dispatcher.Retryable(fmt.Errorf("rabbitmq: publish to exchange %q: %w", exchange, e))
}

// unavailable wraps an error from acquire (no usable connection or channel).
func (p *Publisher) unavailable(err error) error {
	var ue *dispatcher.UnavailableError
	if errors.As(err, &ue) {
		return err
	}
	if errors.Is(err, ErrClosed) {
		return dispatcher.Unavailable(err)
	}
	return dispatcher.Unavailable(fmt.Errorf("%w to %s: %w", ErrNotConnected, p.url, redact.Error(err, p.cfg.URL, false)))
}

// publishing builds the AMQP message of msg.
func (p *Publisher) publishing(ctx context.Context, msg dispatcher.Message) amqp.Publishing {
	attrs := cloudevents.From(msg, p.cfg.Source)
	headers := make(amqp.Table, len(msg.Headers)+8)
	for k, v := range msg.Headers {
		lower := strings.ToLower(k)
		reason := ""
		switch {
		case strings.HasPrefix(lower, "cloudevents_"), strings.HasPrefix(lower, "cloudevents:"):
			reason = "reserved for CloudEvents attributes"
		case k == "" || len(k) > 255:
			reason = "name empty or longer than 255 bytes"
		}
		if reason != "" {
			p.log.LogAttrs(ctx, slog.LevelWarn, "rabbitmq: user header not forwarded",
				slog.String("id", msg.ID), slog.String("header", k), slog.String("reason", reason))
			continue
		}
		headers[k] = v
	}
	for k, v := range attrs.Map(CloudEventsPrefix) {
		headers[k] = v
	}
	// datacontenttype travels as the content_type property, not a header.
	delete(headers, CloudEventsPrefix+"datacontenttype")
	return amqp.Publishing{
		Headers:      headers,
		ContentType:  attrs.DataContentType,
		DeliveryMode: amqp.Persistent,
		MessageId:    attrs.IdempotencyKey(),
		Timestamp:    msg.CreatedAt,
		Type:         msg.EventType,
		Body:         msg.Payload,
	}
}

// Ping reports whether the publisher can publish: it (re)connects if needed,
// checks that the broker has not blocked the connection, and that
// Config.Exchange exists (a passive declare; skipped for the default
// exchange). It waits at most Config.ConfirmTimeout when ctx has no deadline.
func (p *Publisher) Ping(ctx context.Context) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, p.cfg.ConfirmTimeout)
		defer cancel()
	}
	c, ch, err := p.acquire(ctx)
	if err != nil {
		return p.unavailable(err)
	}
	if reason := c.blocked.Load(); reason != nil {
		p.release(c, ch)
		return fmt.Errorf("%w (%s)", ErrBlocked, *reason)
	}
	if p.cfg.Exchange == "" {
		p.release(c, ch)
		return nil
	}
	done := make(chan error, 1)
	go func() { done <- ch.ch.ExchangeDeclarePassive(p.cfg.Exchange, "topic", false, false, false, false, nil) }()
	select {
	case err = <-done:
	case <-ctx.Done():
		p.discard(ch)
		return fmt.Errorf("rabbitmq: check %s %q: %w", p.cfg.name("Exchange"), p.cfg.Exchange, ctx.Err())
	}
	if err != nil {
		p.discard(ch)
		var amqpErr *amqp.Error
		if errors.As(err, &amqpErr) && amqpErr.Code == amqp.NotFound {
			return fmt.Errorf("%w: %s %q: %w", ErrExchangeNotFound, p.cfg.name("Exchange"), p.cfg.Exchange, err)
		}
		return fmt.Errorf("rabbitmq: check %s %q: %w", p.cfg.name("Exchange"), p.cfg.Exchange, redact.Error(err, p.cfg.URL, false))
	}
	p.release(c, ch)
	return nil
}

// Close closes the connection; Publish and Ping fail with ErrClosed after
// it. It is safe to call more than once.
func (p *Publisher) Close() error {
	p.mu.Lock()
	c := p.cur
	p.cur, p.closed = nil, true
	p.mu.Unlock()
	if c == nil || c.c.IsClosed() {
		return nil
	}
	if err := c.c.CloseDeadline(time.Now().Add(p.cfg.ConfirmTimeout)); err != nil && !errors.Is(err, amqp.ErrClosed) {
		return fmt.Errorf("rabbitmq: close: %w", redact.Error(err, p.cfg.URL, false))
	}
	return nil
}

// acquire returns the current connection and a channel for one publish,
// reconnecting first when the connection is gone.
func (p *Publisher) acquire(ctx context.Context) (*conn, *channel, error) {
	for {
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			return nil, nil, ErrClosed
		}
		c := p.cur
		p.mu.Unlock()

		if c == nil || c.c.IsClosed() {
			if err := p.reconnect(ctx); err != nil {
				return nil, nil, err
			}
			continue
		}
		if ch := c.takeIdle(); ch != nil {
			return c, ch, nil
		}
		ch, err := c.openChannel()
		if err != nil {
			if c.c.IsClosed() {
				continue // lost meanwhile: reconnect
			}
			return nil, nil, fmt.Errorf("open channel: %w", err)
		}
		return c, ch, nil
	}
}

// reconnect replaces the current connection (nil or closed) with a new one,
// unless another goroutine did so already.
func (p *Publisher) reconnect(ctx context.Context) error {
	select {
	case p.dialSem <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("%w: waiting for the reconnection in progress: %w", ErrNotConnected, ctx.Err())
	}
	defer func() { <-p.dialSem }()

	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return ErrClosed
	}
	if p.cur != nil && !p.cur.c.IsClosed() {
		p.mu.Unlock()
		return nil // someone else reconnected
	}
	wait := time.Until(p.nextDial)
	p.mu.Unlock()

	if wait > 0 {
		if deadline, ok := ctx.Deadline(); ok && time.Until(deadline) < wait {
			return dispatcher.UnavailableAfter(fmt.Errorf("%w to %s: next reconnection attempt in %s",
				ErrNotConnected, p.url, wait.Round(time.Millisecond)), wait)
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%w: waiting to reconnect: %w", ErrNotConnected, ctx.Err())
		}
	}

	c, err := p.dial(ctx)
	p.mu.Lock()
	defer p.mu.Unlock()
	if err != nil {
		p.failures++
		delay := backoff(p.cfg.ReconnectDelay, p.cfg.MaxReconnectDelay, p.failures)
		p.nextDial = time.Now().Add(delay)
		p.log.Warn("rabbitmq: reconnection failed", slog.String("url", p.url), slog.Int("failures", p.failures),
			slog.Duration("next_attempt_in", delay), slog.Any("error", err))
		return err
	}
	if p.closed {
		_ = c.c.Close()
		return ErrClosed
	}
	p.log.Info("rabbitmq: reconnected", slog.String("url", p.url), slog.Int("failed_attempts", p.failures))
	p.failures, p.nextDial = 0, time.Time{}
	p.cur = c
	return nil
}

// backoff is the wait after n consecutive failures: min doubling up to max,
// with the upper half jittered.
func backoff(minDelay, maxDelay time.Duration, n int) time.Duration {
	d := minDelay
	for i := 1; i < n && d < maxDelay; i++ {
		d *= 2
	}
	d = min(d, maxDelay)
	if d <= 1 {
		return d
	}
	return d/2 + rand.N(d/2+1)
}

// dial connects within ctx and Config.DialTimeout and watches the connection.
func (p *Publisher) dial(ctx context.Context) (*conn, error) {
	timeout := p.cfg.DialTimeout
	if deadline, ok := ctx.Deadline(); ok {
		timeout = min(timeout, time.Until(deadline))
	}
	if timeout <= 0 {
		return nil, fmt.Errorf("dial: %w", context.DeadlineExceeded)
	}
	props := amqp.NewConnectionProperties()
	props.SetClientConnectionName("pgoutbox")
	ac, err := amqp.DialConfig(p.cfg.URL, amqp.Config{
		Properties: props,
		Dial: func(network, addr string) (net.Conn, error) {
			d := net.Dialer{Timeout: timeout}
			nc, err := d.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			// Bounds the TLS and AMQP handshake; the client clears it once open.
			if err := nc.SetDeadline(time.Now().Add(timeout)); err != nil {
				_ = nc.Close()
				return nil, err
			}
			return nc, nil
		},
	})
	if err != nil {
		return nil, redact.Error(err, p.cfg.URL, false)
	}
	c := &conn{c: ac}
	closes := ac.NotifyClose(make(chan *amqp.Error, 1))
	go func() {
		if e, ok := <-closes; ok && e != nil {
			p.log.Warn("rabbitmq: connection lost", slog.String("url", p.url), slog.Any("error", e))
		}
	}()
	blockings := ac.NotifyBlocked(make(chan amqp.Blocking, 1))
	go func() {
		for b := range blockings {
			if b.Active {
				reason := b.Reason
				c.blocked.Store(&reason)
				p.log.Warn("rabbitmq: connection blocked by the broker", slog.String("url", p.url), slog.String("reason", reason))
			} else {
				c.blocked.Store(nil)
				p.log.Info("rabbitmq: connection unblocked", slog.String("url", p.url))
			}
		}
	}()
	return c, nil
}

// openChannel opens a confirm-mode channel on c.
func (c *conn) openChannel() (*channel, error) {
	ch, err := c.c.Channel()
	if err != nil {
		return nil, err
	}
	if err := ch.Confirm(false); err != nil {
		_ = ch.Close()
		return nil, err
	}
	return &channel{
		ch:      ch,
		closes:  ch.NotifyClose(make(chan *amqp.Error, 1)),
		returns: ch.NotifyReturn(make(chan amqp.Return, 4)),
	}, nil
}

func (c *conn) takeIdle() *channel {
	c.mu.Lock()
	defer c.mu.Unlock()
	for len(c.idle) > 0 {
		ch := c.idle[len(c.idle)-1]
		c.idle = c.idle[:len(c.idle)-1]
		if !ch.ch.IsClosed() {
			return ch
		}
	}
	return nil
}

// release puts ch back in c's idle pool, or closes it when c is no longer
// current or the pool is full.
func (p *Publisher) release(c *conn, ch *channel) {
	if ch.ch.IsClosed() {
		return
	}
	p.mu.Lock()
	current := p.cur == c && !p.closed
	p.mu.Unlock()
	if current && !c.c.IsClosed() {
		c.mu.Lock()
		if len(c.idle) < p.cfg.MaxIdleChannels {
			c.idle = append(c.idle, ch)
			c.mu.Unlock()
			return
		}
		c.mu.Unlock()
	}
	p.discard(ch)
}

// discard closes ch in the background: Channel.Close waits for the broker's
// close-ok, which a lost connection never sends until it is torn down.
func (p *Publisher) discard(ch *channel) {
	go func() { _ = ch.ch.Close() }()
}

func drainReturns(returns chan amqp.Return) {
	for {
		select {
		case _, ok := <-returns:
			if !ok {
				return
			}
		default:
			return
		}
	}
}

func render(t *template.Template, msg dispatcher.Message) (string, error) {
	var b strings.Builder
	if err := t.Execute(&b, msg); err != nil {
		return "", err
	}
	return b.String(), nil
}

// sampleMessage is what New executes the routing key template on.
func sampleMessage() dispatcher.Message {
	return dispatcher.Message{
		ID: "1", OutboxID: 1, AggregateType: "aggregate", AggregateID: "aggregate-1",
		EventType: "Event", Payload: []byte(`{}`), Headers: map[string]string{},
		Attempt: 1, CreatedAt: time.Unix(0, 0).UTC(),
	}
}
