// Package inboxkafka consumes pgoutbox's events from Kafka into an inbox,
// with franz-go: each record runs through inbox.Process, and a partition's
// offset is committed only up to records for which Process returned
// without error, that is whose inbox transaction committed (processed,
// duplicate, parked or late).
//
// Kafka keeps order per partition and has no per-record negative
// acknowledgement: a record whose handler or database write failed is
// retried in place every Config.RetryDelay; the rest of its partition
// waits, and so does the next poll (the records already fetched of other
// partitions are processed meanwhile). A record the inbox cannot record
// (inbox.ErrInvalidMessage) is logged and passed over; it stays in the
// topic.
//
// The records are the kafka publisher's (publisher/kafka): keyed by
// aggregate, so an aggregate's events share a partition, with the
// CloudEvents attributes, the position included, as "ce_" headers.
package inboxkafka

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pgoutbox/pgoutbox/inbox"
)

// RetryDelayDefault is the default pause before a failed record is
// processed again.
const RetryDelayDefault = time.Second

// Config configures Consume.
type Config struct {
	// Inbox processes each record. Required.
	Inbox *inbox.Inbox
	// Client is a consumer-group client (kgo.ConsumerGroup,
	// kgo.ConsumeTopics) with kgo.DisableAutoCommit: Consume commits the
	// offsets itself. kgo.BlockRebalanceOnPoll is recommended, so that a
	// partition is not handed to another consumer while its records are
	// being processed (that only costs duplicates, which the inbox
	// recognizes). Required; Consume does not close it.
	Client *kgo.Client
	// RetryDelay is the pause before a failed record is processed again.
	// Defaults to 1s.
	RetryDelay time.Duration
	// Logger receives failures. Defaults to slog.Default().
	Logger *slog.Logger
}

// Consume polls cfg.Client and processes every record until ctx ends or the
// client is closed; it returns nil then, after committing the offsets of
// what was processed.
func Consume(ctx context.Context, cfg Config) error {
	if cfg.Inbox == nil || cfg.Client == nil {
		return errors.New("inboxkafka: Config.Inbox and Config.Client are required")
	}
	if cfg.RetryDelay < 0 {
		return errors.New("inboxkafka: Config.RetryDelay must not be negative")
	}
	cfg.RetryDelay = cmp.Or(cfg.RetryDelay, RetryDelayDefault)
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	cl := cfg.Client
	// With kgo.BlockRebalanceOnPoll a poll blocks rebalances (and Close,
	// which leaves the group) until AllowRebalance.
	defer cl.AllowRebalance()
	for {
		fetches := cl.PollFetches(ctx)
		if fetches.IsClientClosed() || ctx.Err() != nil {
			return nil
		}
		fetches.EachError(func(topic string, partition int32, err error) {
			cfg.Logger.Warn("inboxkafka: fetch failed; retrying", slog.String("topic", topic), slog.Int("partition", int(partition)), slog.Any("error", err))
		})
		var mu sync.Mutex
		var done []*kgo.Record // the last record processed of each partition
		var wg sync.WaitGroup
		fetches.EachPartition(func(p kgo.FetchTopicPartition) {
			wg.Go(func() {
				var last *kgo.Record
				for _, r := range p.Records {
					if !processRecord(ctx, cfg, r) {
						break // ctx ended: not processed, not committed
					}
					last = r
				}
				if last != nil {
					mu.Lock()
					done = append(done, last)
					mu.Unlock()
				}
			})
		})
		wg.Wait()
		if len(done) > 0 {
			if err := cl.CommitRecords(context.WithoutCancel(ctx), done...); err != nil {
				cfg.Logger.Warn("inboxkafka: committing offsets failed; the records will be delivered again", slog.Any("error", err))
			}
		}
		cl.AllowRebalance()
	}
}

// processRecord processes r until it is settled (an outcome, or an invalid
// message) and reports true, or false when ctx ended first.
func processRecord(ctx context.Context, cfg Config, r *kgo.Record) bool {
	for {
		m, err := Message(r)
		if err == nil {
			_, err = cfg.Inbox.Process(context.WithoutCancel(ctx), m)
		}
		switch {
		case err == nil:
			return true
		case errors.Is(err, inbox.ErrInvalidMessage):
			cfg.Logger.Error("inboxkafka: record passed over: the inbox cannot record it", slog.String("topic", r.Topic),
				slog.Int("partition", int(r.Partition)), slog.Int64("offset", r.Offset), slog.Any("error", err))
			return true
		}
		cfg.Logger.Warn("inboxkafka: record not processed; retrying it (its partition waits)", slog.String("id", m.ID),
			slog.Duration("in", cfg.RetryDelay), slog.Any("error", err))
		select {
		case <-ctx.Done():
			return false
		case <-time.After(cfg.RetryDelay):
		}
	}
}

// Message converts a record of the kafka publisher into an inbox.Message.
func Message(r *kgo.Record) (inbox.Message, error) {
	headers := make(map[string]string, len(r.Headers))
	for _, h := range r.Headers {
		if _, dup := headers[h.Key]; !dup {
			headers[h.Key] = string(h.Value)
		}
	}
	return inbox.BindingKafka.Parse(headers, r.Value)
}
