package kafka

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"testing"
	"time"

	gocmp "github.com/google/go-cmp/cmp"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pgoutbox/pgoutbox/dispatcher"
	"github.com/pgoutbox/pgoutbox/publisher/cloudevents"
)

const testTopic = "orders"

// newCluster starts an in-process single-broker Kafka with testTopic (3
// partitions) and extra options.
func newCluster(t *testing.T, opts ...kfake.Opt) *kfake.Cluster {
	t.Helper()
	opts = append([]kfake.Opt{kfake.NumBrokers(1), kfake.SeedTopics(3, testTopic)}, opts...)
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		t.Fatalf("kfake.NewCluster: %v", err)
	}
	t.Cleanup(c.Close)
	return c
}

func newPublisher(t *testing.T, cfg Config) *Publisher {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler) // keep the client's outage warnings out of test output
	}
	p, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

func testMessage(id int64, aggregateID string) dispatcher.Message {
	return dispatcher.Message{
		ID:            dispatcher.IDString(id),
		OutboxID:      id,
		AggregateType: "order",
		AggregateID:   aggregateID,
		EventType:     "OrderPaid",
		Payload:       json.RawMessage(fmt.Sprintf(`{"order_id":%q,"seq":%d}`, aggregateID, id)),
		Headers:       map[string]string{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
		Attempt:       1,
		CreatedAt:     time.Date(2026, 11, 29, 10, 0, 0, 123000000, time.UTC),
	}
}

// consume reads n records from topic from the start.
func consume(t *testing.T, c *kfake.Cluster, topic string, n int) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(c.ListenAddrs()...),
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
	)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var recs []*kgo.Record
	for len(recs) < n {
		fetches := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("consumed %d of %d records before timeout", len(recs), n)
		}
		for _, e := range fetches.Errors() {
			t.Fatalf("fetch %s/%d: %v", e.Topic, e.Partition, e.Err)
		}
		recs = append(recs, fetches.Records()...)
	}
	return recs
}

func headerMap(r *kgo.Record) map[string]string {
	m := make(map[string]string, len(r.Headers))
	for _, h := range r.Headers {
		if _, dup := m[h.Key]; dup {
			m[h.Key] += "," + string(h.Value)
			continue
		}
		m[h.Key] = string(h.Value)
	}
	return m
}

func TestPublish_ProducesCloudEventRecordKeyedByAggregate(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	p := newPublisher(t, Config{Brokers: c.ListenAddrs(), Topic: testTopic, Source: "urn:shop"})
	msg := testMessage(42, "o-1")

	if err := p.Publish(context.Background(), msg); err != nil {
		t.Fatalf("Publish: %v", err)
	}

	recs := consume(t, c, testTopic, 1)
	r := recs[0]
	if string(r.Key) != "o-1" {
		t.Errorf("key = %q, want o-1", r.Key)
	}
	if string(r.Value) != string(msg.Payload) {
		t.Errorf("value = %s, want %s", r.Value, msg.Payload)
	}
	want := map[string]string{
		"ce_specversion":  "1.0",
		"ce_id":           "42",
		"ce_source":       "urn:shop",
		"ce_type":         "OrderPaid",
		"ce_subject":      "o-1",
		"ce_time":         "2026-11-29T10:00:00.123Z",
		"content-type":    "application/json",
		"idempotency_key": cloudevents.IdempotencyKey("urn:shop", "42"),
		"traceparent":     msg.Headers["traceparent"],
	}
	if diff := gocmp.Diff(want, headerMap(r)); diff != "" {
		t.Errorf("headers (-want +got):\n%s", diff)
	}
}

func TestPublish_MessageHeadersNeverOverrideReservedHeaders(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	p := newPublisher(t, Config{Brokers: c.ListenAddrs(), Topic: testTopic})
	msg := testMessage(7, "o-1")
	msg.Headers = map[string]string{"ce_id": "forged", "Idempotency_Key": "forged", "CE_TYPE": "Forged", "Content-Type": "text/plain", "tenant": "acme"}

	if err := p.Publish(context.Background(), msg); err != nil {
		t.Fatalf("Publish: %v", err)
	}

	got := headerMap(consume(t, c, testTopic, 1)[0])
	for name, value := range map[string]string{"ce_id": "7", "ce_type": "OrderPaid", "content-type": "application/json", "tenant": "acme",
		"idempotency_key": cloudevents.IdempotencyKey(cloudevents.DefaultSource, "7")} {
		if got[name] != value {
			t.Errorf("header %s = %q, want %q", name, got[name], value)
		}
	}
	for _, name := range []string{"CE_TYPE", "Content-Type", "Idempotency_Key"} {
		if _, ok := got[name]; ok {
			t.Errorf("header %s forwarded, want it dropped", name)
		}
	}
}

func TestPublish_SameAggregateKeepsPartitionAndOrder(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	p := newPublisher(t, Config{Brokers: c.ListenAddrs(), Topic: testTopic})
	aggregates := []string{"o-1", "o-2", "o-3", "o-4", "o-5"}
	var id int64
	for range 6 {
		for _, agg := range aggregates {
			id++
			if err := p.Publish(context.Background(), testMessage(id, agg)); err != nil {
				t.Fatalf("Publish %d: %v", id, err)
			}
		}
	}

	recs := consume(t, c, testTopic, int(id))
	partitions := map[string]int32{}
	order := map[string][]string{}
	usedPartitions := map[int32]bool{}
	for _, r := range recs {
		agg := string(r.Key)
		if part, seen := partitions[agg]; seen && part != r.Partition {
			t.Fatalf("aggregate %s on partitions %d and %d", agg, part, r.Partition)
		}
		partitions[agg] = r.Partition
		usedPartitions[r.Partition] = true
		order[agg] = append(order[agg], headerMap(r)["ce_id"])
	}
	for agg, ids := range order {
		if len(ids) != 6 || !slices.IsSortedFunc(ids, func(a, b string) int { return cmp.Compare(atoi(t, a), atoi(t, b)) }) {
			t.Errorf("aggregate %s ids = %v, want 6 in publish order", agg, ids)
		}
	}
	if len(usedPartitions) < 2 {
		t.Errorf("%d aggregates all landed on %d partition(s); the key does not spread them", len(aggregates), len(usedPartitions))
	}
}

func TestPublish_RepublishCarriesSameCloudEventsID(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	p := newPublisher(t, Config{Brokers: c.ListenAddrs(), Topic: testTopic})
	msg := testMessage(42, "o-1")
	for attempt := 1; attempt <= 2; attempt++ {
		msg.Attempt = attempt
		if err := p.Publish(context.Background(), msg); err != nil {
			t.Fatalf("Publish attempt %d: %v", attempt, err)
		}
	}

	recs := consume(t, c, testTopic, 2)
	// A consumer deduplicating on ce_id applies the event once.
	seen := map[string]int{}
	for _, r := range recs {
		seen[headerMap(r)["ce_id"]]++
	}
	if diff := gocmp.Diff(map[string]int{"42": 2}, seen); diff != "" {
		t.Fatalf("records by ce_id (-want +got):\n%s", diff)
	}
}

func TestPublish_TopicTemplateRoutesPerMessage(t *testing.T) {
	t.Parallel()
	c := newCluster(t, kfake.SeedTopics(1, "acme-order", "fallback"))
	p := newPublisher(t, Config{
		Brokers:       c.ListenAddrs(),
		Topic:         "fallback",
		TopicTemplate: `{{with .Headers.tenant}}{{.}}-{{$.AggregateType | lower}}{{end}}`,
	})
	routed := testMessage(1, "o-1")
	routed.Headers = map[string]string{"tenant": "acme"}
	routed.AggregateType = "Order"
	fallback := testMessage(2, "o-2")

	for _, msg := range []dispatcher.Message{routed, fallback} {
		if err := p.Publish(context.Background(), msg); err != nil {
			t.Fatalf("Publish %s: %v", msg.ID, err)
		}
	}
	if got := headerMap(consume(t, c, "acme-order", 1)[0])["ce_id"]; got != "1" {
		t.Errorf("acme-order got ce_id %s, want 1", got)
	}
	if got := headerMap(consume(t, c, "fallback", 1)[0])["ce_id"]; got != "2" {
		t.Errorf("fallback got ce_id %s, want 2", got)
	}
}

func TestPublish_TemplateRenderingAnInvalidTopicIsPermanent(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	p := newPublisher(t, Config{Brokers: c.ListenAddrs(), TopicTemplate: `{{.Headers.topic}}`})
	for name, headers := range map[string]map[string]string{
		"empty without fallback": {},
		"invalid characters":     {"topic": "orders/eu"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			msg := testMessage(1, "o-1")
			msg.Headers = headers
			err := p.Publish(context.Background(), msg)
			var perm *dispatcher.PermanentError
			if !errors.As(err, &perm) {
				t.Fatalf("err = %v, want PermanentError", err)
			}
		})
	}
}

func TestPublish_RecordLargerThanBrokerMaxIsPermanent(t *testing.T) {
	t.Parallel()
	c := newCluster(t, kfake.BrokerConfigs(map[string]string{"message.max.bytes": "1024"}))
	p := newPublisher(t, Config{
		Brokers:       c.ListenAddrs(),
		Topic:         testTopic,
		ClientOptions: []kgo.Opt{kgo.ProducerBatchCompression(kgo.NoCompression())},
	})
	msg := testMessage(1, "o-1")
	msg.Payload = json.RawMessage(`"` + randomHex(t, 4096) + `"`)

	err := p.Publish(context.Background(), msg)

	var perm *dispatcher.PermanentError
	if !errors.As(err, &perm) || !errors.Is(err, kerr.MessageTooLarge) {
		t.Fatalf("err = %v, want PermanentError wrapping MESSAGE_TOO_LARGE", err)
	}
	// A small record still goes through: the failure was the record's.
	if err := p.Publish(context.Background(), testMessage(2, "o-1")); err != nil {
		t.Fatalf("Publish small record after: %v", err)
	}
}

func TestPublish_RecordLargerThanClientBatchMaxIsPermanent(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	p := newPublisher(t, Config{
		Brokers:       c.ListenAddrs(),
		Topic:         testTopic,
		ClientOptions: []kgo.Opt{kgo.ProducerBatchMaxBytes(1024)},
	})
	msg := testMessage(1, "o-1")
	msg.Payload = json.RawMessage(`"` + randomHex(t, 4096) + `"`)

	err := p.Publish(context.Background(), msg)

	var perm *dispatcher.PermanentError
	if !errors.As(err, &perm) || !errors.Is(err, kerr.MessageTooLarge) {
		t.Fatalf("err = %v, want PermanentError wrapping MESSAGE_TOO_LARGE", err)
	}
}

func TestPublish_UnknownTopicIsPermanent(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	p := newPublisher(t, Config{Brokers: c.ListenAddrs(), Topic: "no-such-topic"})

	start := time.Now()
	err := p.Publish(context.Background(), testMessage(1, "o-1"))

	var perm *dispatcher.PermanentError
	if !errors.As(err, &perm) || !errors.Is(err, kerr.UnknownTopicOrPartition) {
		t.Fatalf("err = %v (after %s), want PermanentError wrapping UNKNOWN_TOPIC_OR_PARTITION", err, time.Since(start))
	}
}

func TestPublish_ClusterDownIsUnavailable(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	p := newPublisher(t, Config{Brokers: c.ListenAddrs(), Topic: testTopic, ProduceTimeout: 500 * time.Millisecond})
	if err := p.Publish(context.Background(), testMessage(1, "o-1")); err != nil {
		t.Fatalf("Publish while up: %v", err)
	}
	c.Close()

	start := time.Now()
	err := p.Publish(context.Background(), testMessage(2, "o-1"))
	elapsed := time.Since(start)

	var ue *dispatcher.UnavailableError
	if !errors.As(err, &ue) {
		t.Fatalf("err = %v, want UnavailableError", err)
	}
	if elapsed > 5*time.Second {
		t.Errorf("Publish took %s, want about the 500ms ProduceTimeout", elapsed)
	}
}

func TestPublish_UnreachableBrokerIsUnavailable(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	addrs := c.ListenAddrs()
	c.Close() // nothing listens on these addresses any more
	p := newPublisher(t, Config{Brokers: addrs, Topic: testTopic, ProduceTimeout: 300 * time.Millisecond})

	err := p.Publish(context.Background(), testMessage(1, "o-1"))

	var ue *dispatcher.UnavailableError
	if !errors.As(err, &ue) {
		t.Fatalf("err = %v, want UnavailableError", err)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("err = %v, want the ProduceTimeout deadline in the chain", err)
	}
}

func TestPublish_CallerCancellationIsUnavailable(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	addrs := c.ListenAddrs()
	c.Close()
	p := newPublisher(t, Config{Brokers: addrs, Topic: testTopic})
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()

	err := p.Publish(ctx, testMessage(1, "o-1"))

	var ue *dispatcher.UnavailableError
	if !errors.As(err, &ue) {
		t.Fatalf("err = %v, want UnavailableError", err)
	}
}

func TestPublish_AfterCloseIsUnavailable(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	p := newPublisher(t, Config{Brokers: c.ListenAddrs(), Topic: testTopic})
	if err := p.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := p.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}

	err := p.Publish(context.Background(), testMessage(1, "o-1"))

	var ue *dispatcher.UnavailableError
	if !errors.As(err, &ue) || !errors.Is(err, kgo.ErrClientClosed) {
		t.Fatalf("err = %v, want UnavailableError wrapping ErrClientClosed", err)
	}
}

func TestPing_ReportsReachableAndUnreachableCluster(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	p := newPublisher(t, Config{Brokers: c.ListenAddrs(), Topic: testTopic, ProduceTimeout: 500 * time.Millisecond})
	if err := p.Ping(context.Background()); err != nil {
		t.Fatalf("Ping while up: %v", err)
	}
	c.Close()
	if err := p.Ping(context.Background()); err == nil {
		t.Fatal("Ping after the cluster closed = nil, want an error")
	}
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatalf("ce_id %q is not a number", s)
	}
	return n
}

func randomHex(t *testing.T, n int) string {
	t.Helper()
	b := make([]byte, n/2)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

func TestPublish_ClusterDownThenBackIsRetriedAndDelivered(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	addrs := c.ListenAddrs()
	_, port, err := net.SplitHostPort(addrs[0])
	if err != nil {
		t.Fatal(err)
	}
	// The restarted cluster's topic has a new topic id. franz-go v1.22+
	// fails the record with UNKNOWN_TOPIC_ID at once; v1.21 (the newest whose
	// go line is 1.25, the minimum in go.mod) retries it UnknownTopicRetries
	// (4) times, one metadata refresh apart, before failing it, and refreshes
	// at most every MetadataMinAge (5s by default: about 25s in all). Either
	// way Publish then purges the topic and the next attempt is delivered; a
	// short MetadataMinAge keeps this test quick with both.
	p := newPublisher(t, Config{Brokers: addrs, Topic: testTopic, ProduceTimeout: 500 * time.Millisecond,
		ClientOptions: []kgo.Opt{kgo.MetadataMinAge(250 * time.Millisecond)}})
	if err := p.Publish(context.Background(), testMessage(1, "o-1")); err != nil {
		t.Fatalf("Publish while up: %v", err)
	}
	c.Close()

	err = p.Publish(context.Background(), testMessage(2, "o-1"))
	var (
		re *dispatcher.RetryableError
		ue *dispatcher.UnavailableError
	)
	if !errors.As(err, &ue) {
		t.Fatalf("Publish while down: err = %v, want UnavailableError", err)
	}

	// A new cluster on the same address: its topic has a new topic id, as
	// after a topic is deleted and recreated.
	n, _ := strconv.Atoi(port)
	back := newCluster(t, kfake.Ports(n))
	// The dispatcher retries after its backoff until the broker answers
	// (the deadline only bounds a hang; it is no speed goal).
	deadline := time.Now().Add(60 * time.Second)
	for {
		err = p.Publish(context.Background(), testMessage(2, "o-1"))
		if err == nil || time.Now().After(deadline) {
			break
		}
		if !errors.As(err, &re) && !errors.As(err, &ue) {
			t.Fatalf("Publish while coming back: err = %v, want UnavailableError or RetryableError (the stale topic id)", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("Publish once back: %v", err)
	}
	recs := consume(t, back, testTopic, 1)
	if got := headerMap(recs[0])["ce_id"]; got != "2" {
		t.Fatalf("the restarted cluster got ce_id %s first, want 2", got)
	}
}
