package kafka

import (
	"errors"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pgoutbox/pgoutbox/dispatcher"
)

func TestNew_RejectsInvalidConfigNamingTheField(t *testing.T) {
	t.Parallel()
	brokers := []string{"127.0.0.1:9092"}
	tests := []struct {
		name      string
		cfg       Config
		wantField string
	}{
		{name: "no brokers", cfg: Config{Topic: "orders"}, wantField: "Brokers"},
		{name: "empty broker", cfg: Config{Brokers: []string{""}, Topic: "orders"}, wantField: "Brokers"},
		{name: "no topic nor template", cfg: Config{Brokers: brokers}, wantField: "Topic"},
		{name: "invalid topic name", cfg: Config{Brokers: brokers, Topic: "orders/eu"}, wantField: "Topic"},
		{name: "topic name too long", cfg: Config{Brokers: brokers, Topic: strings.Repeat("a", 250)}, wantField: "Topic"},
		{name: "negative produce timeout", cfg: Config{Brokers: brokers, Topic: "orders", ProduceTimeout: -1}, wantField: "ProduceTimeout"},
		{name: "template does not parse", cfg: Config{Brokers: brokers, TopicTemplate: "{{.AggregateType"}, wantField: "TopicTemplate"},
		{name: "template fails on a sample", cfg: Config{Brokers: brokers, TopicTemplate: "{{.NoSuchField}}"}, wantField: "TopicTemplate"},
		{name: "template renders an invalid name", cfg: Config{Brokers: brokers, TopicTemplate: "{{.AggregateType}}/events"}, wantField: "TopicTemplate"},
		{name: "idempotence disabled", cfg: Config{Brokers: brokers, Topic: "orders", ClientOptions: []kgo.Opt{kgo.DisableIdempotentWrite()}}, wantField: "ClientOptions"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p, err := New(tt.cfg)
			if err == nil {
				_ = p.Close()
			}
			if !errors.Is(err, dispatcher.ErrInvalidConfig) {
				t.Fatalf("err = %v, want ErrInvalidConfig", err)
			}
			if !strings.Contains(err.Error(), tt.wantField) {
				t.Fatalf("err = %v, want it to name %s", err, tt.wantField)
			}
		})
	}
}

func TestNew_AcceptsTemplateThatRendersEmptyOnSample(t *testing.T) {
	t.Parallel()
	// The sample message has no headers: the template falls back to Topic
	// at run time, so New must not reject it.
	p, err := New(Config{Brokers: []string{"127.0.0.1:9092"}, TopicTemplate: "{{.Headers.topic}}"})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	_ = p.Close()
}

func TestNew_AppliesDefaultsAndForcesAllISRAcks(t *testing.T) {
	t.Parallel()
	p, err := New(Config{
		Brokers:       []string{"127.0.0.1:9092"},
		Topic:         "orders",
		ClientOptions: []kgo.Opt{kgo.RequiredAcks(kgo.LeaderAck())},
	})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	defer p.Close()
	if p.cfg.ProduceTimeout != ProduceTimeoutDefault {
		t.Errorf("ProduceTimeout = %s, want %s", p.cfg.ProduceTimeout, ProduceTimeoutDefault)
	}
	if acks := p.client.OptValue(kgo.RequiredAcks); acks != kgo.AllISRAcks() {
		t.Errorf("RequiredAcks = %v, want AllISRAcks", acks)
	}
	if disabled := p.client.OptValue(kgo.DisableIdempotentWrite); disabled != false {
		t.Errorf("DisableIdempotentWrite = %v, want false", disabled)
	}
}
