package cli

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"log/slog"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/pgoutbox/pgoutbox/dispatcher"
	"github.com/pgoutbox/pgoutbox/inbox"
	"github.com/pgoutbox/pgoutbox/internal/inboxtest"
	"github.com/pgoutbox/pgoutbox/internal/pgtest"
	"github.com/pgoutbox/pgoutbox/publisher/jetstream"
	"github.com/pgoutbox/pgoutbox/publisher/kafka"
)

const verifySource = "urn:verify:outbox"

// verifyOutbox is an outbox with ordered events of aggregates a (3) and b
// (2) and two unordered ones: every row done but b's second (skipped) and
// the second unordered one (still pending). It returns the URL and the
// messages of the rows, as a relay would publish them.
func verifyOutbox(t *testing.T) (string, []dispatcher.Message) {
	t.Helper()
	url := pgtest.NewURL(t)
	pool := pgtest.Pool(t, url)
	ctx := context.Background()
	for _, ev := range []struct {
		agg     string
		ordered bool
	}{{"a", true}, {"b", true}, {"a", true}, {"u1", false}, {"b", true}, {"a", true}, {"u2", false}} {
		if _, err := dispatcher.Enqueue(ctx, pool, dispatcher.Event{AggregateType: "order", AggregateID: ev.agg, EventType: "E",
			Payload: json.RawMessage(`{}`), Ordered: ev.ordered}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := pool.Exec(ctx, `SELECT outbox_resolve_heads(100)`); err != nil { // as a relay does
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `UPDATE outbox SET status = 'done', done_at = now() WHERE id <> 7;
		UPDATE outbox SET status = 'skipped', last_error = 'skipped: test' WHERE id = 5`); err != nil {
		t.Fatal(err)
	}
	rows, err := pool.Query(ctx, `SELECT id, aggregate_id, coalesce(seq, 0),
		coalesce((SELECT max(p.seq) FROM outbox p WHERE p.aggregate_id = o.aggregate_id AND p.seq < o.seq), 0)
		FROM outbox o ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	var msgs []dispatcher.Message
	for rows.Next() {
		var id, seq, prev int64
		var agg string
		if err := rows.Scan(&id, &agg, &seq, &prev); err != nil {
			t.Fatal(err)
		}
		msgs = append(msgs, dispatcher.Message{ID: dispatcher.IDString(id), OutboxID: id, Source: verifySource, AggregateType: "order",
			AggregateID: agg, EventType: "E", Payload: []byte(`{}`), Headers: map[string]string{}, Ordered: seq != 0,
			Position: dispatcher.Position{Seq: seq, Prev: prev}})
	}
	if rows.Err() != nil {
		t.Fatal(rows.Err())
	}
	return url, msgs
}

func verifyJSON(t *testing.T, r result) verifyReport {
	t.Helper()
	var rep verifyReport
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatalf("%v\n%s", err, r)
	}
	return rep
}

// pick returns the messages with these ids, in this order.
func pick(msgs []dispatcher.Message, ids ...int) []dispatcher.Message {
	var out []dispatcher.Message
	for _, id := range ids {
		out = append(out, msgs[id-1])
	}
	return out
}

func toInbox(m dispatcher.Message) inbox.Message {
	return inbox.Message{Source: m.Source, ID: m.ID, Type: m.EventType, Subject: m.AggregateID, Data: m.Payload,
		Position: inbox.Position{Seq: m.Position.Seq, Prev: m.Position.Prev}}
}

// An inbox that processed everything it should: verify passes. Then one
// event is missing, another duplicated, one processed out of order and one
// parked: verify names each, per aggregate, and exits 1.
func TestVerify_InboxTable(t *testing.T) {
	t.Parallel()
	outboxURL, msgs := verifyOutbox(t)
	consumer := inboxtest.NewPool(t)
	ib, err := inbox.New(inbox.Config{DB: consumer, Handler: inboxtest.Effect, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, m := range pick(msgs, 1, 2, 3, 4, 6) {
		if _, err := ib.Process(ctx, toInbox(m)); err != nil {
			t.Fatal(err)
		}
	}
	args := []string{"verify", "--database-url", outboxURL, "--inbox-url", consumer.Config().ConnString(), "--ce-source", verifySource, "--json"}
	r := call(t, invocation{}, args...)
	wantCode(t, r, ExitOK)
	rep := verifyJSON(t, r)
	if rep.Delivered != 5 || rep.Missing != 0 || rep.OutOfOrder != 0 || rep.OrderChecked != 4 || rep.Outbox.Skipped != 1 || rep.Outbox.Undelivered != 1 {
		t.Fatalf("clean inbox: %+v", rep)
	}

	// Event 4 (unordered) delivered twice; event 6 (a's third) processed
	// before event 3 as far as the inbox records; a's event 1 lost; b's
	// event 5 (skipped at the source) never comes, so a newer b event parks.
	if _, err := ib.Process(ctx, toInbox(msgs[3])); err != nil {
		t.Fatal(err)
	}
	if _, err := consumer.Exec(ctx, `UPDATE inbox SET prior_seq = (SELECT seq FROM inbox WHERE id = '6') WHERE id = '3';
		DELETE FROM inbox WHERE id = '1'`); err != nil {
		t.Fatal(err)
	}
	later := toInbox(msgs[4])
	later.ID, later.Position.Seq, later.Position.Prev = "99", 999, msgs[4].Position.Seq
	if out, err := ib.Process(ctx, later); err != nil || out != inbox.Parked {
		t.Fatalf("%v %v", out, err)
	}
	r = call(t, invocation{}, args...)
	wantCode(t, r, ExitFailure)
	rep = verifyJSON(t, r)
	if rep.Missing != 1 || rep.Duplicated != 1 || rep.OutOfOrder != 1 || rep.Unknown != 1 || rep.Parked != 1 {
		t.Fatalf("report %+v", rep)
	}
	byAgg := map[string]*aggregateReport{}
	for _, a := range rep.Aggregates {
		byAgg[a.AggregateID] = a
	}
	if a := byAgg["a"]; a == nil || !slices.Equal(a.Missing, []int64{1}) || !slices.Equal(a.OutOfOrder, []int64{3}) {
		t.Fatalf("aggregate a: %+v", a)
	}
	if u := byAgg["u1"]; u == nil || !slices.Equal(u.Duplicated, []int64{4}) {
		t.Fatalf("aggregate u1: %+v", u)
	}
	if b := byAgg["b"]; b == nil || !slices.Equal(b.Parked, []int64{99}) {
		t.Fatalf("aggregate b: %+v", b)
	}
	// The table form says the same.
	r = call(t, invocation{}, args[:len(args)-1]...)
	wantCode(t, r, ExitFailure)
	mustContain(t, r, "stdout", "delivered 4, missing 1, duplicated 1, out of commit order 1 (of 3 ordered events checked), parked 1, gaps 0, unknown 1")
	mustContain(t, r, "stderr", "verify: 1 missing, 1 out of commit order, 1 parked")
}

// A JetStream stream holding a's second event before its first, a copy
// of an unordered event, and without b's first: verify reads it from the
// start and reports each.
func TestVerify_JetStreamStream(t *testing.T) {
	t.Parallel()
	outboxURL, msgs := verifyOutbox(t)
	ctx := context.Background()
	sfx := make([]byte, 6)
	_, _ = rand.Read(sfx)
	name, subject := "VERIFY_"+hex.EncodeToString(sfx), "verify."+hex.EncodeToString(sfx)
	pub, err := jetstream.New(ctx, jetstream.Config{URL: testNATSURL(), SubjectTemplate: subject + ".{{.AggregateID}}"})
	if err != nil {
		t.Fatalf("NATS with JetStream at %s: %v", testNATSURL(), err)
	}
	defer pub.Close()
	js := jetstreamFor(t)
	if _, err := js.CreateStream(ctx, natsjs.StreamConfig{Name: name, Subjects: []string{subject + ".>"}, Storage: natsjs.MemoryStorage,
		Duplicates: 100 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = js.DeleteStream(context.Background(), name) })
	for _, m := range pick(msgs, 3, 1, 4, 6) {
		if err := pub.Publish(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	// A copy of event 4 after the duplicate window.
	copy4 := msgs[3]
	deadline := time.Now().Add(30 * time.Second)
	for {
		if err := pub.Publish(ctx, copy4); err != nil {
			t.Fatal(err)
		}
		s, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if s.CachedInfo().State.Msgs == 5 || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond) // the stream's duplicate window (100ms) must pass
	}
	r := call(t, invocation{}, "verify", "--database-url", outboxURL, "--nats-url", testNATSURL(), "--stream", name, "--ce-source", verifySource, "--json")
	wantCode(t, r, ExitFailure)
	rep := verifyJSON(t, r)
	if rep.Delivered != 4 || rep.Missing != 1 || rep.Duplicated != 1 || rep.OutOfOrder != 1 {
		t.Fatalf("report %+v", rep)
	}
}

// The same over a Kafka topic (kfake), whose records are read from every
// partition's start.
func TestVerify_KafkaTopic(t *testing.T) {
	t.Parallel()
	outboxURL, msgs := verifyOutbox(t)
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, "verify"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	p, err := kafka.New(kafka.Config{Brokers: c.ListenAddrs(), Topic: "verify", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for _, m := range pick(msgs, 3, 1, 4, 4, 6, 2) {
		if err := p.Publish(context.Background(), m); err != nil {
			t.Fatal(err)
		}
	}
	r := call(t, invocation{}, "verify", "--database-url", outboxURL, "--kafka-brokers", c.ListenAddrs()[0], "--topic", "verify",
		"--ce-source", verifySource, "--json")
	wantCode(t, r, ExitFailure)
	rep := verifyJSON(t, r)
	if rep.Delivered != 5 || rep.Missing != 0 || rep.Duplicated != 1 || rep.OutOfOrder != 1 {
		t.Fatalf("report %+v", rep)
	}
}

func TestVerify_UsageErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ args, want string }{
		{"verify", "give exactly one receiver"},
		{"verify --inbox-url x --nats-url y", "give exactly one receiver"},
		{"verify --nats-url nats://x", "--nats-url needs --stream"},
		{"verify --kafka-brokers k:9092", "--kafka-brokers needs --topic"},
	} {
		r := call(t, invocation{env: map[string]string{"DATABASE_URL": "postgres://u@127.0.0.1:1/db"}}, strings.Fields(tc.args)...)
		wantCode(t, r, ExitUsage)
		mustContain(t, r, "stderr", tc.want)
	}
}

// testNATSURL is the test NATS server: NATS_URL, or a local one.
func testNATSURL() string { return cmp.Or(os.Getenv("NATS_URL"), "nats://127.0.0.1:4222") }

func jetstreamFor(t *testing.T) natsjs.JetStream {
	t.Helper()
	nc, err := nats.Connect(testNATSURL(), nats.Timeout(3*time.Second))
	if err != nil {
		t.Fatalf("NATS with JetStream not reachable at %s: start nats-server -js or set NATS_URL: %v", testNATSURL(), err)
	}
	t.Cleanup(nc.Close)
	js, err := natsjs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}
