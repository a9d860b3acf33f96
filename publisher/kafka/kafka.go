package kafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"text/template"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pgoutbox/pgoutbox/dispatcher"
)

// Publisher produces messages to Kafka. It is safe for concurrent use; Close
// it when done.
type Publisher struct {
	cfg       Config
	tmpl      *template.Template
	client    *kgo.Client
	closeOnce sync.Once
	closeErr  error
}

var (
	_ dispatcher.Publisher = (*Publisher)(nil)
	_ dispatcher.Pinger    = (*Publisher)(nil)
)

// New validates cfg, applies its defaults and creates the franz-go client
// (which connects lazily: use Ping to check the brokers). Errors wrap
// dispatcher.ErrInvalidConfig and name the offending field.
func New(cfg Config) (*Publisher, error) {
	cfg = cfg.withDefaults()
	tmpl, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	opts := []kgo.Opt{
		kgo.SeedBrokers(cfg.Brokers...),
		kgo.WithLogger(kgoLogger{cfg.Logger.With(slog.String("publisher", "kafka"))}),
		// A Publish must end by its deadline even when a request is in
		// flight to a broker that died; the outbox tolerates the possible
		// duplicate (consumers deduplicate on ce_id).
		kgo.AllowIdempotentProduceCancellation(),
		// Publish waits for each record, so lingering only adds latency;
		// records that queue behind an in-flight request are still batched.
		kgo.ProducerLinger(0),
	}
	opts = append(opts, cfg.ClientOptions...)
	opts = append(opts, kgo.RequiredAcks(kgo.AllISRAcks()))
	client, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, invalid("%s or %s rejected by the client: %v", cfg.name("Brokers"), cfg.name("ClientOptions"), err)
	}
	if disabled, _ := client.OptValue(kgo.DisableIdempotentWrite).(bool); disabled {
		client.Close()
		return nil, invalid("%s must not disable idempotent writes", cfg.name("ClientOptions"))
	}
	return &Publisher{cfg: cfg, tmpl: tmpl, client: client}, nil
}

// Publish produces msg and waits for its acknowledgement (see the package
// documentation for the record and the error mapping).
func (p *Publisher) Publish(ctx context.Context, msg dispatcher.Message) error {
	topic, err := p.topicFor(msg)
	if err != nil {
		return dispatcher.Permanent(err)
	}
	ctx, cancel := context.WithTimeout(ctx, p.cfg.ProduceTimeout)
	defer cancel()
	rec := buildRecord(msg, topic, p.cfg.Source)
	result := make(chan error, 1) // buffered: the promise must never block
	p.client.Produce(ctx, rec, func(_ *kgo.Record, err error) { result <- err })
	select {
	case err = <-result:
	case <-ctx.Done():
		// The client fails the buffered record once it notices the
		// deadline, or the record lands anyway (a duplicate consumers
		// drop by ce_id); either way the dispatcher gets its answer now.
		err = ctx.Err()
	}
	if err != nil {
		if errors.Is(err, kerr.UnknownTopicID) {
			// The topic was deleted and recreated (or the cluster
			// replaced): franz-go keeps failing it until it is purged,
			// after which the next attempt learns the new topic id.
			p.client.PurgeTopicsFromProducing(topic)
		}
		return classify(fmt.Errorf("kafka: produce to %s: %w", topic, err))
	}
	return nil
}

// Ping reports whether a broker answers a metadata request, bounded by ctx
// and Config.ProduceTimeout.
func (p *Publisher) Ping(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.ProduceTimeout)
	defer cancel()
	if err := p.client.Ping(ctx); err != nil {
		return fmt.Errorf("kafka: ping: %w", err)
	}
	return nil
}

// Close flushes buffered records (bounded by Config.ProduceTimeout) and
// closes the client. Publish after Close returns an Unavailable error. Close is
// idempotent and returns the flush error, if any.
func (p *Publisher) Close() error {
	p.closeOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), p.cfg.ProduceTimeout)
		defer cancel()
		if err := p.client.Flush(ctx); err != nil {
			p.closeErr = fmt.Errorf("kafka: close: flush: %w", err)
		}
		p.client.Close()
	})
	return p.closeErr
}
