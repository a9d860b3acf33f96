// Package inboxnats consumes pgoutbox's events from NATS JetStream into an
// inbox: each message runs through inbox.Process, and is acknowledged only
// after Process returned without error, that is after the inbox transaction
// committed (processed, duplicate, parked or late). A message whose handler
// or database write failed is negatively acknowledged with a delay, so
// JetStream delivers it again; one the inbox cannot record
// (inbox.ErrInvalidMessage) is terminated (it stays in the stream, and is
// logged).
//
// The messages are the jetstream publisher's (publisher/jetstream): the
// CloudEvents attributes, the position included, in "ce-" headers.
// Acknowledgements are not confirmed by the server (Msg.Ack): one lost on
// the way makes a redelivery, which the inbox recognizes as a duplicate.
package inboxnats

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/pgoutbox/pgoutbox/inbox"
	"github.com/pgoutbox/pgoutbox/inbox/internal/settle"
)

// Defaults applied to zero Config fields.
const (
	ConcurrencyDefault = 1
	NakDelayDefault    = time.Second
)

// Config configures Consume.
type Config struct {
	// Inbox processes each message. Required.
	Inbox *inbox.Inbox
	// Consumer is the JetStream pull consumer to read, with explicit
	// acknowledgements (natsjs.AckExplicitPolicy); several processes may
	// read the same durable consumer. Required.
	Consumer natsjs.Consumer
	// Concurrency is how many messages are processed at once (events of
	// one aggregate are still processed in order: the inbox serializes
	// them). Defaults to 1.
	Concurrency int
	// NakDelay is the redelivery delay asked for a message that failed.
	// Defaults to 1s.
	NakDelay time.Duration
	// Logger receives failures. Defaults to slog.Default().
	Logger *slog.Logger
}

// Consume reads cfg.Consumer and processes every message until ctx ends;
// it returns nil then, after the messages being processed have been
// settled. It returns an error only when reading cannot start.
func Consume(ctx context.Context, cfg Config) error {
	if cfg.Inbox == nil || cfg.Consumer == nil {
		return errors.New("inboxnats: Config.Inbox and Config.Consumer are required")
	}
	if cfg.Concurrency < 0 || cfg.NakDelay < 0 {
		return errors.New("inboxnats: Config.Concurrency and Config.NakDelay must not be negative")
	}
	cfg.Concurrency = cmp.Or(cfg.Concurrency, ConcurrencyDefault)
	cfg.NakDelay = cmp.Or(cfg.NakDelay, NakDelayDefault)
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	it, err := cfg.Consumer.Messages(natsjs.PullMaxMessages(max(2*cfg.Concurrency, 16)))
	if err != nil {
		return fmt.Errorf("inboxnats: read consumer: %w", err)
	}
	stop := context.AfterFunc(ctx, it.Stop)
	defer stop()
	msgs := make(chan natsjs.Msg)
	var wg sync.WaitGroup
	for range cfg.Concurrency {
		wg.Go(func() {
			for msg := range msgs {
				// Settle even when ctx has ended: the transaction decides.
				_, _ = Handle(context.WithoutCancel(ctx), cfg.Inbox, msg, cfg.NakDelay, cfg.Logger)
			}
		})
	}
	defer wg.Wait()
	defer close(msgs)
	for {
		msg, err := it.Next()
		if err != nil {
			if errors.Is(err, natsjs.ErrMsgIteratorClosed) || ctx.Err() != nil {
				return nil
			}
			// Missed heartbeats (a cut connection) and the like: the
			// iterator keeps going once the connection is back.
			cfg.Logger.Warn("inboxnats: reading the consumer failed; retrying", slog.Any("error", err))
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(100 * time.Millisecond):
			}
			continue
		}
		msgs <- msg
	}
}

// Handle processes one JetStream message and settles it: Ack after
// inbox.Process returned an outcome, Term for an invalid message,
// NakWithDelay(nakDelay) otherwise. It returns Process's outcome and error.
func Handle(ctx context.Context, ib *inbox.Inbox, msg natsjs.Msg, nakDelay time.Duration, log *slog.Logger) (inbox.Outcome, error) {
	m, err := Message(msg)
	return settle.Process(ctx, ib, m, err, settle.Ops{
		Adapter: "inboxnats",
		Ack:     msg.Ack,
		Reject:  func() error { return msg.TermWithReason("inbox: invalid message") },
		Retry:   func() error { return msg.NakWithDelay(nakDelay) },
	}, log)
}

// Message converts a JetStream message of the jetstream publisher into an
// inbox.Message.
func Message(msg natsjs.Msg) (inbox.Message, error) {
	h := msg.Headers()
	headers := make(map[string]string, len(h))
	for name, values := range h {
		if len(values) > 0 {
			headers[name] = values[0]
		}
	}
	return inbox.BindingNATS.Parse(headers, msg.Data())
}
