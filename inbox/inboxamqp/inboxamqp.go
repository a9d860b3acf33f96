// Package inboxamqp consumes pgoutbox's events from a RabbitMQ queue into an
// inbox: each delivery runs through inbox.Process and is acknowledged only
// after Process returned without error, that is after the inbox
// transaction committed (processed, duplicate, parked or late). A delivery
// whose handler or database write failed is requeued after
// Config.RequeueDelay, so RabbitMQ delivers it again; one the inbox cannot
// record (inbox.ErrInvalidMessage) is rejected without requeue (to the
// queue's dead-letter exchange, when it has one) and logged.
//
// The messages are the rabbitmq publisher's (publisher/rabbitmq): the
// CloudEvents attributes, the position included, as "cloudEvents_"
// headers. Consume keeps its own connection and reconnects after it is
// lost; RabbitMQ then delivers again whatever was unacknowledged, which the
// inbox recognizes as duplicates.
package inboxamqp

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/pgoutbox/pgoutbox/inbox"
	"github.com/pgoutbox/pgoutbox/inbox/internal/settle"
	"github.com/pgoutbox/pgoutbox/internal/redact"
)

// Defaults applied to zero Config fields.
const (
	URLDefault            = "amqp://guest:guest@127.0.0.1:5672/"
	ConcurrencyDefault    = 1
	RequeueDelayDefault   = time.Second
	ReconnectDelayDefault = time.Second
)

// Config configures Consume.
type Config struct {
	// Inbox processes each delivery. Required.
	Inbox *inbox.Inbox
	// URL is the RabbitMQ URL; credentials in it never appear in errors or
	// logs. Defaults to URLDefault.
	URL string
	// Queue is the queue to consume (it must exist, bound to the
	// publisher's exchange). Required.
	Queue string
	// Concurrency is how many deliveries are processed at once (events of
	// one aggregate are still processed in order: the inbox serializes
	// them); the channel's prefetch is twice as many. Defaults to 1.
	Concurrency int
	// RequeueDelay is how long a failed delivery is held before it is
	// requeued. Defaults to 1s.
	RequeueDelay time.Duration
	// ReconnectDelay is the pause before reconnecting after the
	// connection or channel is lost. Defaults to 1s.
	ReconnectDelay time.Duration
	// Logger receives failures and reconnects. Defaults to slog.Default().
	Logger *slog.Logger
}

// Consume consumes cfg.Queue until ctx ends, reconnecting whenever the
// connection is lost, and returns nil then, after the deliveries being
// processed have been settled. It returns an error only for an invalid
// Config.
func Consume(ctx context.Context, cfg Config) error {
	if cfg.Inbox == nil || cfg.Queue == "" {
		return errors.New("inboxamqp: Config.Inbox and Config.Queue are required")
	}
	if cfg.Concurrency < 0 || cfg.RequeueDelay < 0 || cfg.ReconnectDelay < 0 {
		return errors.New("inboxamqp: Config.Concurrency, RequeueDelay and ReconnectDelay must not be negative")
	}
	cfg.URL = cmp.Or(cfg.URL, URLDefault)
	cfg.Concurrency = cmp.Or(cfg.Concurrency, ConcurrencyDefault)
	cfg.RequeueDelay = cmp.Or(cfg.RequeueDelay, RequeueDelayDefault)
	cfg.ReconnectDelay = cmp.Or(cfg.ReconnectDelay, ReconnectDelayDefault)
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	for ctx.Err() == nil {
		if err := consumeOnce(ctx, cfg); err != nil && ctx.Err() == nil {
			cfg.Logger.Warn("inboxamqp: connection lost; reconnecting", slog.Duration("in", cfg.ReconnectDelay),
				slog.Any("error", redact.Error(err, cfg.URL, false)))
		}
		select {
		case <-ctx.Done():
		case <-time.After(cfg.ReconnectDelay):
		}
	}
	return nil
}

// consumeOnce consumes on one connection until it is lost or ctx ends.
func consumeOnce(ctx context.Context, cfg Config) error {
	conn, err := amqp.DialConfig(cfg.URL, amqp.Config{Heartbeat: 5 * time.Second, Dial: amqp.DefaultDial(10 * time.Second)})
	if err != nil {
		return fmt.Errorf("dial: %w", err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("channel: %w", err)
	}
	if err := ch.Qos(2*cfg.Concurrency, 0, false); err != nil {
		return fmt.Errorf("qos: %w", err)
	}
	deliveries, err := ch.ConsumeWithContext(ctx, cfg.Queue, "", false, false, false, false, nil)
	if err != nil {
		return fmt.Errorf("consume %s: %w", cfg.Queue, err)
	}
	closed := conn.NotifyClose(make(chan *amqp.Error, 1))
	work := make(chan amqp.Delivery)
	var wg sync.WaitGroup
	for range cfg.Concurrency {
		wg.Go(func() {
			for d := range work {
				_, _ = Handle(context.WithoutCancel(ctx), cfg.Inbox, d, cfg.RequeueDelay, cfg.Logger)
			}
		})
	}
	defer wg.Wait()
	defer close(work)
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-closed:
			if err == nil {
				return errors.New("connection closed")
			}
			return err
		case d, ok := <-deliveries:
			if !ok {
				return errors.New("the channel's deliveries ended")
			}
			work <- d
		}
	}
}

// Handle processes one delivery and settles it: Ack after inbox.Process
// returned an outcome; Reject without requeue for an invalid message;
// otherwise Nack with requeue after requeueDelay. It returns Process's
// outcome and error.
func Handle(ctx context.Context, ib *inbox.Inbox, d amqp.Delivery, requeueDelay time.Duration, log *slog.Logger) (inbox.Outcome, error) {
	m, err := Message(d)
	return settle.Process(ctx, ib, m, err, settle.Ops{
		Adapter: "inboxamqp",
		Ack:     func() error { return d.Ack(false) },
		Reject:  func() error { return d.Reject(false) },
		Retry: func() error {
			select {
			case <-ctx.Done():
			case <-time.After(requeueDelay):
			}
			return d.Nack(false, true)
		},
	}, log)
}

// Message converts a delivery of the rabbitmq publisher into an
// inbox.Message.
func Message(d amqp.Delivery) (inbox.Message, error) {
	headers := make(map[string]string, len(d.Headers))
	for name, v := range d.Headers {
		switch v := v.(type) {
		case string:
			headers[name] = v
		case []byte:
			headers[name] = string(v)
		default:
			headers[name] = fmt.Sprint(v)
		}
	}
	return inbox.BindingAMQP.Parse(headers, d.Body)
}
