package cli

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

func TestRun_KafkaProducesToTheTemplatedTopic(t *testing.T) {
	t.Parallel()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "order.events", "fallback"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	d := newDB(t)
	id := enqueueCLI(t, d, "--payload", `{"amount":7}`)

	b := start(t, invocation{env: d.env()}, "run", "--publisher", "kafka", "--kafka-brokers", strings.Join(c.ListenAddrs(), ","),
		"--kafka-topic", "fallback", "--kafka-topic-template", "{{.AggregateType}}.events", "--ce-source", "urn:test",
		"--poll-interval", "50ms")
	eventually(t, 30*time.Second, "the message to be done", func() bool { return d.status(t, id) == "done" })
	wantCode(t, b.stop(t), ExitOK)

	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumeTopics("order.events"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var recs []*kgo.Record
	for len(recs) == 0 && ctx.Err() == nil {
		recs = append(recs, cl.PollFetches(ctx).Records()...)
	}
	if len(recs) != 1 {
		t.Fatalf("consumed %d records from order.events, want 1", len(recs))
	}
	h := map[string]string{}
	for _, kv := range recs[0].Headers {
		h[kv.Key] = string(kv.Value)
	}
	if string(recs[0].Key) != "o-1" || h["ce_id"] != strconv.FormatInt(id, 10) || h["ce_source"] != "urn:test" || string(recs[0].Value) != `{"amount": 7}` {
		t.Errorf("record key %q value %q headers %v", recs[0].Key, recs[0].Value, h)
	}
}

// Kafka connects lazily: brokers that are down at startup are a warning,
// not an error.
func TestRun_KafkaDownAtStartupWarnsAndKeepsGoing(t *testing.T) {
	t.Parallel()
	d := newDB(t)
	b := start(t, invocation{env: d.env()}, "run", "--publisher", "kafka", "--kafka-brokers", "127.0.0.1:"+strconv.Itoa(closedPort(t)),
		"--kafka-topic", "events", "--kafka-timeout", "500ms", "--poll-interval", "50ms")
	eventually(t, 30*time.Second, "the startup warning", func() bool {
		return strings.Contains(b.stderr.String(), "publisher is not reachable; starting anyway")
	})
	if _, done := b.exited(); done {
		t.Fatalf("run exited\n%s", b.stderr.String())
	}
	wantCode(t, b.stop(t), ExitOK)
}
