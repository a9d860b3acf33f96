package kafka

import (
	"cmp"
	"fmt"
	"log/slog"
	"slices"
	"text/template"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pgoutbox/pgoutbox/dispatcher"
)

// ProduceTimeoutDefault bounds one Publish (and Ping and the flush in Close).
const ProduceTimeoutDefault = 10 * time.Second

// Config configures a Publisher.
type Config struct {
	// Brokers are the bootstrap brokers, "host:port". Required.
	Brokers []string
	// Topic receives every message, or the messages for which TopicTemplate
	// renders an empty string. It must be a valid Kafka topic name (1-249
	// characters among [a-zA-Z0-9._-]). Required when TopicTemplate is
	// empty. Defaults to "".
	Topic string
	// TopicTemplate, when set, chooses the topic per message: a text/template
	// executed with the dispatcher.Message as its data, such as
	// "{{.AggregateType}}.events" or "{{.Headers.tenant}}-{{.AggregateType}}".
	// A missing header renders as "" (missingkey=zero); surrounding spaces
	// are trimmed; an empty result falls back to Topic. The functions lower
	// and upper are available. New executes it on a sample message and
	// rejects a template that fails or renders an invalid topic name.
	// Defaults to "" (always Topic).
	TopicTemplate string
	// Source is the ce_source attribute, and with the outbox id the
	// idempotency_key header (cloudevents.IdempotencyKey). Defaults to "":
	// Message.Source, the per-outbox source the dispatcher sets.
	Source string
	// ProduceTimeout bounds the wait for one record's acknowledgement; the
	// caller's ctx deadline applies as well, whichever ends first. It also
	// bounds Ping and the flush in Close. Defaults to 10s
	// (ProduceTimeoutDefault).
	ProduceTimeout time.Duration
	// ClientOptions are extra franz-go options (TLS, SASL, client id,
	// compression, batch sizes, ...). They are applied after the publisher's
	// own SeedBrokers(Brokers), WithLogger, AllowIdempotentProduceCancellation
	// and ProducerLinger(0), so they can override those, and before
	// RequiredAcks(AllISRAcks()), which they cannot. They must not disable
	// idempotent writes. Defaults to none.
	ClientOptions []kgo.Opt
	// Logger receives the client's warnings and errors, and its debug log
	// when the logger is enabled at slog.LevelDebug. Defaults to
	// slog.Default().
	Logger *slog.Logger
	// FieldNames names this Config's fields in error messages, for a
	// program whose users set them under other names (the pgoutbox CLI maps
	// "TopicTemplate" to "--kafka-topic-template"). A field not in the map
	// is named as in Go. Defaults to none.
	FieldNames map[string]string
}

// name is how errors name field (FieldNames).
func (c Config) name(field string) string { return cmp.Or(c.FieldNames[field], field) }

func (c Config) withDefaults() Config {
	c.ProduceTimeout = cmp.Or(c.ProduceTimeout, ProduceTimeoutDefault)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// validate checks c (with defaults applied) and returns the parsed topic
// template, nil when there is none.
func (c Config) validate() (*template.Template, error) {
	if len(c.Brokers) == 0 {
		return nil, invalid("%s is required", c.name("Brokers"))
	}
	if slices.Contains(c.Brokers, "") {
		return nil, invalid("%s must not contain an empty address", c.name("Brokers"))
	}
	if c.Topic == "" && c.TopicTemplate == "" {
		return nil, invalid("%s is required when %s is empty", c.name("Topic"), c.name("TopicTemplate"))
	}
	if c.Topic != "" {
		if err := validTopic(c.Topic); err != nil {
			return nil, invalid("%s: %v", c.name("Topic"), err)
		}
	}
	if c.ProduceTimeout < 0 {
		return nil, invalid("%s must not be negative, got %s", c.name("ProduceTimeout"), c.ProduceTimeout)
	}
	if c.TopicTemplate == "" {
		return nil, nil
	}
	tmpl, err := parseTopicTemplate(c.TopicTemplate)
	if err != nil {
		return nil, invalid("%s: %v", c.name("TopicTemplate"), err)
	}
	topic, err := renderTopic(tmpl, sampleMessage())
	if err != nil {
		return nil, invalid("%s: on a sample message: %v", c.name("TopicTemplate"), err)
	}
	if topic != "" {
		if err := validTopic(topic); err != nil {
			return nil, invalid("%s: on a sample message: %v", c.name("TopicTemplate"), err)
		}
	}
	return tmpl, nil
}

func sampleMessage() dispatcher.Message {
	return dispatcher.Message{
		ID:            "1",
		OutboxID:      1,
		AggregateType: "sample",
		AggregateID:   "sample-1",
		EventType:     "SampleEvent",
		Payload:       []byte(`{}`),
		Headers:       map[string]string{},
		Attempt:       1,
		CreatedAt:     time.Now(),
	}
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: kafka: %s", dispatcher.ErrInvalidConfig, fmt.Sprintf(format, args...))
}
