package stdout

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/pgoutbox/pgoutbox/dispatcher"
	"github.com/pgoutbox/pgoutbox/publisher/cloudevents"
)

// Config configures a Publisher.
type Config struct {
	// Writer receives one JSON line per message. Writes are serialized by
	// the Publisher, so Writer need not be safe for concurrent use. Defaults
	// to os.Stdout.
	Writer io.Writer
	// CloudEvents adds the "ce" object (the message's CloudEvents
	// attributes) to every line. Defaults to false.
	CloudEvents bool
	// Source is the CloudEvents source in the "ce" object. Defaults to "":
	// Message.Source, the per-outbox source the dispatcher sets.
	Source string
}

// Publisher writes messages as JSON lines. It is safe for concurrent use.
type Publisher struct {
	cfg Config
	mu  sync.Mutex // serializes writes to cfg.Writer
}

var _ dispatcher.Publisher = (*Publisher)(nil)

// New applies cfg's defaults and returns a Publisher. Every Config is valid;
// the error is there for symmetry with the other publishers and is always
// nil.
func New(cfg Config) (*Publisher, error) {
	if cfg.Writer == nil {
		cfg.Writer = os.Stdout
	}
	return &Publisher{cfg: cfg}, nil
}

// line is the JSON shape of one message.
type line struct {
	ID             string            `json:"id"`
	IdempotencyKey string            `json:"idempotency_key"`
	AggregateType  string            `json:"aggregate_type"`
	AggregateID    string            `json:"aggregate_id"`
	EventType      string            `json:"event_type"`
	Payload        json.RawMessage   `json:"payload"`
	Headers        map[string]string `json:"headers"`
	Attempt        int               `json:"attempt"`
	CreatedAt      time.Time         `json:"created_at"`
	CE             map[string]string `json:"ce,omitempty"`
}

// Publish writes msg as one JSON line (see the package documentation for the
// error mapping).
func (p *Publisher) Publish(ctx context.Context, msg dispatcher.Message) error {
	if err := ctx.Err(); err != nil {
		return dispatcher.Unavailable(fmt.Errorf("stdout: %w", err))
	}
	l := line{
		ID:             msg.ID,
		IdempotencyKey: cloudevents.From(msg, p.cfg.Source).IdempotencyKey(),
		AggregateType:  msg.AggregateType,
		AggregateID:    msg.AggregateID,
		EventType:      msg.EventType,
		Payload:        msg.Payload,
		Headers:        msg.Headers,
		Attempt:        msg.Attempt,
		CreatedAt:      msg.CreatedAt.UTC(),
	}
	if l.Headers == nil {
		l.Headers = map[string]string{}
	}
	if p.cfg.CloudEvents {
		l.CE = cloudevents.From(msg, p.cfg.Source).Map("")
	}
	b, err := json.Marshal(l)
	if err != nil {
		return dispatcher.Permanent(fmt.Errorf("stdout: encode message %s: %w", msg.ID, err))
	}
	b = append(b, '\n')

	p.mu.Lock()
	n, err := p.cfg.Writer.Write(b)
	p.mu.Unlock()
	if err == nil && n < len(b) {
		err = io.ErrShortWrite
	}
	if err != nil {
		// Whatever reads the output (a pipe, a file system) failed, not the
		// message.
		return dispatcher.Unavailable(fmt.Errorf("stdout: write message %s: %w", msg.ID, err))
	}
	return nil
}
