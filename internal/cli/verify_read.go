package cli

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/pgoutbox/pgoutbox/db/inboxdb"
	"github.com/pgoutbox/pgoutbox/inbox"
	"github.com/pgoutbox/pgoutbox/inbox/inboxkafka"
	"github.com/pgoutbox/pgoutbox/inbox/inboxnats"
	"github.com/pgoutbox/pgoutbox/internal/redact"
)

// readInbox reads the inbox tables of the consumer's database: every record
// of source, and the gaps it declared.
func (a *app) readInbox(ctx context.Context, url, table, schema, source string) (*received, error) {
	d, err := a.resolveDatabase(newFlags("verify", "", "", ""), url)
	if err != nil {
		return nil, err
	}
	d.source = "--inbox-url"
	pool, err := a.connect(ctx, d)
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	dbtx, err := inbox.TableDBTX(pool, table, schema)
	if err != nil {
		return nil, failf("verify: --inbox-table/--inbox-schema: %v", err)
	}
	q := inboxdb.New(dbtx)
	rcv := &received{kind: "inbox", name: qualifiedName(schema, table) + " at " + d.redacted, byID: map[string]*receipt{}}
	for after := ""; ; {
		page, err := q.InboxReceived(ctx, inboxdb.InboxReceivedParams{Source: source, AfterID: after, Limit: 10000})
		if err != nil {
			return nil, a.dbError("verify: read the inbox", err)
		}
		for _, r := range page {
			rec := &receipt{copies: int(r.Deliveries), status: r.Status, prior: r.PriorSeq, hasSeq: r.Seq != nil}
			if r.AggregateID != nil {
				rec.aggregate = *r.AggregateID
			}
			rcv.byID[r.ID] = rec
		}
		if len(page) < 10000 {
			break
		}
		after = page[len(page)-1].ID
	}
	gaps, err := q.InboxGaps(ctx, source)
	if err != nil {
		return nil, a.dbError("verify: read the inbox's gaps", err)
	}
	for _, g := range gaps {
		vg := verifyGap{AggregateID: g.AggregateID, Before: g.BeforeSeq, Missing: g.MissingSeq, Reason: g.Reason}
		if g.AfterSeq != nil {
			vg.After = *g.AfterSeq
		}
		rcv.gaps = append(rcv.gaps, vg)
	}
	return rcv, nil
}

func qualifiedName(schema, table string) string {
	if schema == "" {
		return table
	}
	return schema + "." + table
}

// add records one copy of m, read in position order.
func (r *received) add(m inbox.Message, source string, order int) {
	if m.Source != source {
		return
	}
	if rec := r.byID[m.ID]; rec != nil {
		rec.copies++
		return
	}
	r.byID[m.ID] = &receipt{aggregate: m.Subject, copies: 1, status: "received", order: order}
}

// readStream reads a JetStream stream from its first message to the last
// one stored when the read began.
func (a *app) readStream(ctx context.Context, url, stream, source string) (*received, error) {
	a.secrets.Add(redact.Secrets(url, true)...)
	shown := redact.URL(url, true)
	nc, err := nats.Connect(url, nats.Timeout(10*time.Second), nats.MaxReconnects(-1))
	if err != nil {
		return nil, failf("verify: cannot reach NATS at %s: %s", shown, a.secrets.Scrub(err.Error()))
	}
	defer nc.Close()
	js, err := natsjs.New(nc)
	if err != nil {
		return nil, failf("verify: %s", a.secrets.Scrub(err.Error()))
	}
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return nil, failf("verify: stream %s at %s: %s", stream, shown, a.secrets.Scrub(err.Error()))
	}
	last := s.CachedInfo().State.LastSeq
	rcv := &received{kind: "stream", name: stream + " at " + shown, byID: map[string]*receipt{}}
	if s.CachedInfo().State.Msgs == 0 {
		return rcv, nil
	}
	cons, err := js.OrderedConsumer(ctx, stream, natsjs.OrderedConsumerConfig{DeliverPolicy: natsjs.DeliverAllPolicy})
	if err != nil {
		return nil, failf("verify: read stream %s: %s", stream, a.secrets.Scrub(err.Error()))
	}
	it, err := cons.Messages()
	if err != nil {
		return nil, failf("verify: read stream %s: %s", stream, a.secrets.Scrub(err.Error()))
	}
	defer it.Stop()
	for {
		msg, err := it.Next(natsjs.NextContext(ctx))
		if err != nil {
			return nil, failf("verify: read stream %s: %s", stream, a.secrets.Scrub(err.Error()))
		}
		meta, err := msg.Metadata()
		if err != nil {
			return nil, failf("verify: read stream %s: %s", stream, err)
		}
		if m, err := inboxnats.Message(msg); err == nil {
			rcv.add(m, source, int(meta.Sequence.Stream))
		}
		if meta.Sequence.Stream >= last {
			return rcv, nil
		}
	}
}

// readTopic reads every partition of a Kafka topic from its start to the
// end offsets it had when the read began.
func (a *app) readTopic(ctx context.Context, brokers []string, topic, source string) (*received, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		return nil, failf("verify: kafka: %v", err)
	}
	defer cl.Close()
	ends, err := endOffsets(ctx, cl, topic)
	if err != nil {
		return nil, failf("verify: topic %s: %v", topic, err)
	}
	rcv := &received{kind: "topic", name: topic, byID: map[string]*receipt{}}
	left := map[int32]bool{} // partitions not read to their end yet
	for p, end := range ends {
		if end > 0 {
			left[p] = true
		}
	}
	order := 0
	for len(left) > 0 {
		fetches := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return nil, failf("verify: read topic %s: interrupted", topic)
		}
		for _, e := range fetches.Errors() {
			return nil, failf("verify: read topic %s partition %d: %v", e.Topic, e.Partition, e.Err)
		}
		fetches.EachRecord(func(r *kgo.Record) {
			end := ends[r.Partition]
			if r.Offset >= end {
				return
			}
			// Order within a partition; an aggregate's records share one.
			order++
			if m, err := inboxkafka.Message(r); err == nil {
				rcv.add(m, source, int(r.Partition)<<40|order)
			}
			if r.Offset >= end-1 {
				delete(left, r.Partition)
			}
		})
	}
	return rcv, nil
}

// endOffsets returns the high watermark of every partition of topic.
func endOffsets(ctx context.Context, cl *kgo.Client, topic string) (map[int32]int64, error) {
	meta := kmsg.NewPtrMetadataRequest()
	mt := kmsg.NewMetadataRequestTopic()
	mt.Topic = kmsg.StringPtr(topic)
	meta.Topics = append(meta.Topics, mt)
	mresp, err := meta.RequestWith(ctx, cl)
	if err != nil {
		return nil, err
	}
	if len(mresp.Topics) != 1 {
		return nil, errors.New("no metadata")
	}
	if err := kerr.ErrorForCode(mresp.Topics[0].ErrorCode); err != nil {
		return nil, err
	}
	lo := kmsg.NewPtrListOffsetsRequest()
	lt := kmsg.NewListOffsetsRequestTopic()
	lt.Topic = topic
	for _, p := range mresp.Topics[0].Partitions {
		lp := kmsg.NewListOffsetsRequestTopicPartition()
		lp.Partition = p.Partition
		lp.Timestamp = -1 // the end
		lt.Partitions = append(lt.Partitions, lp)
	}
	lo.Topics = append(lo.Topics, lt)
	lresp, err := lo.RequestWith(ctx, cl)
	if err != nil {
		return nil, err
	}
	ends := map[int32]int64{}
	for _, t := range lresp.Topics {
		for _, p := range t.Partitions {
			if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
				return nil, fmt.Errorf("partition %s: %w", strconv.Itoa(int(p.Partition)), err)
			}
			ends[p.Partition] = p.Offset
		}
	}
	return ends, nil
}
