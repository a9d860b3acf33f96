package rabbitmq

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	gocmp "github.com/google/go-cmp/cmp"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/pgoutbox/pgoutbox/dispatcher"
	"github.com/pgoutbox/pgoutbox/internal/redact"
	"github.com/pgoutbox/pgoutbox/internal/tcpproxy"
	"github.com/pgoutbox/pgoutbox/internal/testlog"
	"github.com/pgoutbox/pgoutbox/publisher/cloudevents"
)

// amqpURL is the test broker: AMQP_URL, or a local RabbitMQ.
func amqpURL() string { return cmp.Or(os.Getenv("AMQP_URL"), URLDefault) }

func randSuffix(t *testing.T) string {
	t.Helper()
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		t.Fatalf("rand: %v", err)
	}
	return hex.EncodeToString(b)
}

// testBundle is a unique topic exchange and a queue bound to it with
// "order.*" on the shared broker.
type testBundle struct {
	conn     *amqp.Connection
	ch       *amqp.Channel
	exchange string
	queue    string
}

// connect opens an admin connection, failing the test with instructions
// when the broker is not reachable.
func connect(t *testing.T) *amqp.Connection {
	t.Helper()
	conn, err := amqp.DialConfig(amqpURL(), amqp.Config{Dial: amqp.DefaultDial(5 * time.Second)})
	if err != nil {
		t.Fatalf("RabbitMQ not reachable at %s: start rabbitmq-server or set AMQP_URL: %v", redact.URL(amqpURL(), false), redact.Error(err, amqpURL(), false))
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// setup declares a unique exchange and queue and deletes them when the test
// ends. queueArgs are the queue's arguments.
func setup(t *testing.T, queueArgs amqp.Table) *testBundle {
	t.Helper()
	conn := connect(t)
	ch, err := conn.Channel()
	if err != nil {
		t.Fatalf("channel: %v", err)
	}
	sfx := randSuffix(t)
	b := &testBundle{conn: conn, ch: ch, exchange: "pgoutbox.test." + sfx, queue: "pgoutbox.test." + sfx}
	if err := ch.ExchangeDeclare(b.exchange, "topic", false, false, false, false, nil); err != nil {
		t.Fatalf("declare exchange: %v", err)
	}
	if _, err := ch.QueueDeclare(b.queue, false, false, false, false, queueArgs); err != nil {
		t.Fatalf("declare queue: %v", err)
	}
	if err := ch.QueueBind(b.queue, "order.*", b.exchange, false, nil); err != nil {
		t.Fatalf("bind queue: %v", err)
	}
	t.Cleanup(func() {
		if _, err := ch.QueueDelete(b.queue, false, false, false); err != nil {
			t.Errorf("delete queue %s: %v", b.queue, err)
		}
		if err := ch.ExchangeDelete(b.exchange, false, false); err != nil {
			t.Errorf("delete exchange %s: %v", b.exchange, err)
		}
	})
	return b
}

// get takes the next message from the queue, waiting up to 5s.
func (b *testBundle) get(t *testing.T) amqp.Delivery {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		d, ok, err := b.ch.Get(b.queue, true)
		if err != nil {
			t.Fatalf("get from %s: %v", b.queue, err)
		}
		if ok {
			return d
		}
		if time.Now().After(deadline) {
			t.Fatalf("no message in %s after 30s", b.queue)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// drain takes every message from the queue.
func (b *testBundle) drain(t *testing.T) []amqp.Delivery {
	t.Helper()
	var out []amqp.Delivery
	for {
		d, ok, err := b.ch.Get(b.queue, true)
		if err != nil {
			t.Fatalf("get from %s: %v", b.queue, err)
		}
		if !ok {
			return out
		}
		out = append(out, d)
	}
}

func newPublisher(t *testing.T, cfg Config) *Publisher {
	t.Helper()
	cfg.URL = cmp.Or(cfg.URL, amqpURL())
	if cfg.Logger == nil {
		cfg.Logger = testlog.New(t)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p, err := New(ctx, cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// key is the message_id of outbox id under the default source.
func key(id string) string { return cloudevents.IdempotencyKey(cloudevents.DefaultSource, id) }

func testMessage(id int64) dispatcher.Message {
	return dispatcher.Message{
		ID: dispatcher.IDString(id), OutboxID: id,
		AggregateType: "order", AggregateID: "o-1", EventType: "OrderPaid",
		Payload:   []byte(`{"amount":42}`),
		Headers:   map[string]string{},
		Attempt:   1,
		CreatedAt: time.Date(2026, 11, 29, 10, 0, 0, 123000000, time.UTC),
	}
}

func publish(t *testing.T, p *Publisher, msg dispatcher.Message) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	return p.Publish(ctx, msg)
}

func isRetryable(err error) bool {
	var re *dispatcher.RetryableError
	return errors.As(err, &re)
}

func isUnavailable(err error) bool {
	var ue *dispatcher.UnavailableError
	return errors.As(err, &ue)
}

func isPermanent(err error) bool {
	var pe *dispatcher.PermanentError
	return errors.As(err, &pe)
}

func TestPublish_DeliversPersistentCloudEventWithMessageID(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	p := newPublisher(t, Config{Exchange: b.exchange, Source: "urn:shop"})
	msg := testMessage(42)
	msg.Headers = map[string]string{
		"traceparent":         "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
		"cloudEvents_id":      "spoofed",
		"CLOUDEVENTS:type":    "spoofed",
		"cloudevents_subject": "spoofed",
		"x-tenant":            "acme",
	}

	if err := publish(t, p, msg); err != nil {
		t.Fatalf("Publish: %v", err)
	}

	d := b.get(t)
	if string(d.Body) != `{"amount":42}` {
		t.Fatalf("body = %s", d.Body)
	}
	if d.RoutingKey != "order.OrderPaid" {
		t.Fatalf("routing key = %q", d.RoutingKey)
	}
	gotProps := map[string]any{
		"message_id": d.MessageId, "content_type": d.ContentType, "type": d.Type,
		"delivery_mode": d.DeliveryMode, "timestamp": d.Timestamp.UTC(),
	}
	wantProps := map[string]any{
		"message_id": cloudevents.IdempotencyKey("urn:shop", "42"), "content_type": "application/json", "type": "OrderPaid",
		"delivery_mode": amqp.Persistent, "timestamp": time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC),
	}
	if diff := gocmp.Diff(wantProps, gotProps); diff != "" {
		t.Fatalf("properties (-want +got):\n%s", diff)
	}
	wantHeaders := amqp.Table{
		"cloudEvents_specversion": "1.0",
		"cloudEvents_id":          "42",
		"cloudEvents_type":        "OrderPaid",
		"cloudEvents_source":      "urn:shop",
		"cloudEvents_subject":     "o-1",
		"cloudEvents_time":        "2026-11-29T10:00:00.123Z",
		"traceparent":             "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
		"x-tenant":                "acme",
	}
	if diff := gocmp.Diff(wantHeaders, d.Headers); diff != "" {
		t.Fatalf("headers (-want +got):\n%s", diff)
	}
}

func TestPublish_RepublishCarriesSameMessageID(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	p := newPublisher(t, Config{Exchange: b.exchange})
	msg := testMessage(7)

	for i := range 2 {
		if err := publish(t, p, msg); err != nil {
			t.Fatalf("Publish #%d: %v", i+1, err)
		}
	}

	for i := range 2 {
		d := b.get(t)
		if d.MessageId != key("7") || d.Headers["cloudEvents_id"] != "7" {
			t.Fatalf("delivery #%d: message_id %q, cloudEvents_id %v; want 7", i+1, d.MessageId, d.Headers["cloudEvents_id"])
		}
	}
}

func TestPublish_UnroutableWithMandatoryIsPermanent(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	p := newPublisher(t, Config{Exchange: b.exchange, MaxIdleChannels: 1})
	msg := testMessage(1)
	msg.AggregateType = "invoice" // "invoice.OrderPaid" matches no binding

	err := publish(t, p, msg)

	if !isPermanent(err) || !errors.Is(err, ErrUnroutable) {
		t.Fatalf("Publish = %v; want Permanent wrapping ErrUnroutable", err)
	}
	// The return does not leak into the next publish on the reused channel.
	if err := publish(t, p, testMessage(2)); err != nil {
		t.Fatalf("routable Publish after a return: %v", err)
	}
	if d := b.get(t); d.MessageId != key("2") {
		t.Fatalf("delivered message_id %q; want 2", d.MessageId)
	}
}

func TestPublish_UnroutableWithoutMandatoryIsDroppedByBroker(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	off := false
	p := newPublisher(t, Config{Exchange: b.exchange, Mandatory: &off})
	msg := testMessage(1)
	msg.AggregateType = "invoice"

	if err := publish(t, p, msg); err != nil {
		t.Fatalf("Publish = %v; want nil", err)
	}
}

func TestPublish_UnroutableOnDefaultExchangeIsPermanent(t *testing.T) {
	t.Parallel()
	setup(t, nil)
	p := newPublisher(t, Config{RoutingKeyTemplate: "pgoutbox.noqueue." + randSuffix(t)})

	if err := publish(t, p, testMessage(1)); !isPermanent(err) || !errors.Is(err, ErrUnroutable) {
		t.Fatalf("Publish = %v; want Permanent wrapping ErrUnroutable", err)
	}
}

func TestPublish_MissingExchangeIsPermanentAndChannelRecovers(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	missing := "pgoutbox.test.missing." + randSuffix(t)
	p := newPublisher(t, Config{Exchange: missing})
	connBefore := p.cur

	err := publish(t, p, testMessage(1))
	if !isPermanent(err) || !errors.Is(err, ErrExchangeNotFound) {
		t.Fatalf("Publish = %v; want Permanent wrapping ErrExchangeNotFound", err)
	}
	if err := p.Ping(context.Background()); !errors.Is(err, ErrExchangeNotFound) {
		t.Fatalf("Ping = %v; want ErrExchangeNotFound", err)
	}

	// Once the exchange exists, the same publisher delivers on a new channel
	// of the same connection.
	if err := b.ch.ExchangeDeclare(missing, "topic", false, true, false, false, nil); err != nil {
		t.Fatalf("declare exchange: %v", err)
	}
	if err := b.ch.QueueBind(b.queue, "order.*", missing, false, nil); err != nil {
		t.Fatalf("bind queue: %v", err)
	}
	t.Cleanup(func() { _ = b.ch.ExchangeDelete(missing, false, false) })

	if err := publish(t, p, testMessage(2)); err != nil {
		t.Fatalf("Publish after the exchange exists: %v", err)
	}
	if d := b.get(t); d.MessageId != key("2") {
		t.Fatalf("delivered message_id %q; want 2", d.MessageId)
	}
	if p.cur != connBefore {
		t.Fatalf("publisher reconnected; a channel exception should only replace the channel")
	}
	if err := p.Ping(context.Background()); err != nil {
		t.Fatalf("Ping after the exchange exists: %v", err)
	}
}

func TestPublish_NackIsRetryable(t *testing.T) {
	t.Parallel()
	b := setup(t, amqp.Table{"x-max-length": int32(1), "x-overflow": "reject-publish"})
	p := newPublisher(t, Config{Exchange: b.exchange})

	if err := publish(t, p, testMessage(1)); err != nil {
		t.Fatalf("first Publish: %v", err)
	}
	err := publish(t, p, testMessage(2)) // the queue is full

	if !isRetryable(err) || !errors.Is(err, ErrNacked) {
		t.Fatalf("Publish to a full reject-publish queue = %v; want Retryable wrapping ErrNacked", err)
	}
	// The nack does not poison the channel.
	if d := b.get(t); d.MessageId != key("1") {
		t.Fatalf("delivered message_id %q; want 1", d.MessageId)
	}
	if err := publish(t, p, testMessage(3)); err != nil {
		t.Fatalf("Publish after a nack: %v", err)
	}
}

func TestPublish_ConcurrentPublishesAreAllConfirmed(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	p := newPublisher(t, Config{Exchange: b.exchange})
	const goroutines, each = 8, 25
	var wg sync.WaitGroup
	errs := make(chan error, goroutines*each)
	for g := range goroutines {
		wg.Go(func() {
			for i := range each {
				msg := testMessage(int64(g*each + i + 1))
				if i%5 == 0 {
					msg.AggregateType = "invoice" // unroutable, interleaved
				}
				err := publish(t, p, msg)
				switch {
				case i%5 == 0 && !errors.Is(err, ErrUnroutable):
					errs <- errors.Join(errors.New("want ErrUnroutable for "+msg.ID), err)
				case i%5 != 0 && err != nil:
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("Publish: %v", err)
	}

	want := map[string]bool{}
	for g := range goroutines {
		for i := range each {
			if i%5 != 0 {
				want[key(dispatcher.IDString(int64(g*each+i+1)))] = true
			}
		}
	}
	got := map[string]bool{}
	deadline := time.Now().Add(30 * time.Second)
	for len(got) < len(want) && time.Now().Before(deadline) {
		for _, d := range b.drain(t) {
			if got[d.MessageId] {
				t.Errorf("message %s delivered twice", d.MessageId)
			}
			got[d.MessageId] = true
		}
	}
	if diff := gocmp.Diff(want, got); diff != "" {
		t.Fatalf("delivered message ids (-want +got):\n%s", diff)
	}
}

func TestPublish_BrokerDownIsUnavailableAndPublisherReconnects(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	u, err := url.Parse(amqpURL())
	if err != nil {
		t.Fatalf("AMQP_URL: %v", err)
	}
	proxy := tcpproxy.Start(t, u.Host)
	u.Host = proxy.Addr()
	p := newPublisher(t, Config{
		URL:               u.String(),
		Exchange:          b.exchange,
		ConfirmTimeout:    2 * time.Second,
		ReconnectDelay:    20 * time.Millisecond,
		MaxReconnectDelay: 200 * time.Millisecond,
	})
	if err := publish(t, p, testMessage(1)); err != nil {
		t.Fatalf("Publish before Down: %v", err)
	}

	proxy.Down()
	start := time.Now()
	err = publish(t, p, testMessage(2))
	if !isUnavailable(err) {
		t.Fatalf("Publish while down = %v; want an UnavailableError", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("Publish while down took %s; want at most ConfirmTimeout", d)
	}
	t.Logf("Publish while down: %v (after %s)", err, time.Since(start).Round(time.Millisecond))
	if strings.Contains(err.Error(), "guest:guest") {
		t.Fatalf("error leaks the password: %v", err)
	}
	// Still down: every attempt fails Unavailable, none blocks.
	for range 3 {
		if err := publish(t, p, testMessage(2)); !isUnavailable(err) {
			t.Fatalf("Publish while down = %v; want an UnavailableError", err)
		}
	}
	if err := p.Ping(context.Background()); err == nil {
		t.Fatalf("Ping while down = nil; want an error")
	}

	proxy.Up()
	deadline := time.Now().Add(20 * time.Second)
	for {
		err = publish(t, p, testMessage(2))
		if err == nil {
			break
		}
		if !isUnavailable(err) {
			t.Fatalf("Publish after Up = %v; want nil or Unavailable", err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("Publish still failing 20s after Up: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := p.Ping(context.Background()); err != nil {
		t.Fatalf("Ping after reconnect: %v", err)
	}

	got := map[string]int{}
	deadline = time.Now().Add(30 * time.Second)
	for got[key("2")] == 0 && time.Now().Before(deadline) {
		for _, d := range b.drain(t) {
			got[d.MessageId]++
		}
		time.Sleep(20 * time.Millisecond)
	}
	if got[key("1")] != 1 || got[key("2")] < 1 {
		t.Fatalf("deliveries by message_id = %v; want 1 once and 2 at least once", got)
	}
}

func TestPublish_AfterCloseIsUnavailable(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	p := newPublisher(t, Config{Exchange: b.exchange})
	if err := p.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := publish(t, p, testMessage(1)); !isUnavailable(err) || !errors.Is(err, ErrClosed) {
		t.Fatalf("Publish after Close = %v; want Unavailable wrapping ErrClosed", err)
	}
	if err := p.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

func TestPublish_InvalidRoutingKeyIsPermanent(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	for name, tc := range map[string]struct {
		template string
		mutate   func(*dispatcher.Message)
	}{
		"template failure": {"{{slice .AggregateID 0 3}}", func(m *dispatcher.Message) { m.AggregateID = "o" }},
		"longer than 255":  {"{{.AggregateID}}", func(m *dispatcher.Message) { m.AggregateID = strings.Repeat("x", 256) }},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			p := newPublisher(t, Config{Exchange: b.exchange, RoutingKeyTemplate: tc.template})
			msg := testMessage(1)
			tc.mutate(&msg)
			if err := publish(t, p, msg); !isPermanent(err) || !errors.Is(err, ErrInvalidRoutingKey) {
				t.Fatalf("Publish = %v; want Permanent wrapping ErrInvalidRoutingKey", err)
			}
		})
	}
}

func TestPublish_RoutingKeyTemplateCanReadHeaders(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	p := newPublisher(t, Config{Exchange: b.exchange, RoutingKeyTemplate: "order.{{.Headers.kind}}"})
	msg := testMessage(1)
	msg.Headers["kind"] = "paid"
	if err := publish(t, p, msg); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	if d := b.get(t); d.RoutingKey != "order.paid" {
		t.Fatalf("routing key = %q; want order.paid", d.RoutingKey)
	}
}

func TestPing_ReportsReadiness(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	for name, cfg := range map[string]Config{
		"default exchange":  {},
		"existing exchange": {Exchange: b.exchange},
	} {
		p := newPublisher(t, cfg)
		if err := p.Ping(context.Background()); err != nil {
			t.Fatalf("%s: Ping: %v", name, err)
		}
	}
}

func TestNew_RejectsInvalidConfigNamingTheField(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		cfg   Config
		field string
	}{
		"unparsable template":     {Config{RoutingKeyTemplate: "{{.AggregateType"}, "RoutingKeyTemplate"},
		"unknown field":           {Config{RoutingKeyTemplate: "{{.Nope}}"}, "RoutingKeyTemplate"},
		"key too long":            {Config{RoutingKeyTemplate: strings.Repeat("k", 256)}, "RoutingKeyTemplate"},
		"exchange too long":       {Config{Exchange: strings.Repeat("e", 256)}, "Exchange"},
		"wrong scheme":            {Config{URL: "http://guest:s3cret@127.0.0.1:5672/"}, "URL"},
		"unparsable URL":          {Config{URL: "amqp://guest:s3cret@[::1"}, "URL"},
		"negative confirm":        {Config{ConfirmTimeout: -time.Second}, "ConfirmTimeout"},
		"negative dial":           {Config{DialTimeout: -time.Second}, "DialTimeout"},
		"max below min reconnect": {Config{ReconnectDelay: time.Second, MaxReconnectDelay: time.Millisecond}, "MaxReconnectDelay"},
		"negative idle channels":  {Config{MaxIdleChannels: -1}, "MaxIdleChannels"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, err := New(context.Background(), tc.cfg)
			if !errors.Is(err, dispatcher.ErrInvalidConfig) {
				t.Fatalf("New = %v; want ErrInvalidConfig", err)
			}
			if !strings.Contains(err.Error(), "Config."+tc.field) {
				t.Fatalf("New = %v; want it to name Config.%s", err, tc.field)
			}
			if strings.Contains(err.Error(), "s3cret") {
				t.Fatalf("New = %v; leaks the password", err)
			}
		})
	}
}

func TestNew_UnreachableBrokerSaysWhatToDoWithoutThePassword(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	addr := ln.Addr().String()
	_ = ln.Close() // nothing listens there now

	_, err = New(context.Background(), Config{URL: "amqp://alice:s3cret@" + addr + "/", DialTimeout: 2 * time.Second})

	if err == nil {
		t.Fatalf("New = nil; want a connection error")
	}
	if errors.Is(err, dispatcher.ErrInvalidConfig) {
		t.Fatalf("New = %v; a connection failure is not a config error", err)
	}
	for _, want := range []string{"RabbitMQ is running", "Config.URL", "alice:xxxxx@" + addr} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("New = %v; want it to mention %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "s3cret") {
		t.Fatalf("New = %v; leaks the password", err)
	}
}

func TestNew_WrongCredentialsFailWithoutThePassword(t *testing.T) {
	t.Parallel()
	connect(t) // fails the test when the broker is missing
	u, err := url.Parse(amqpURL())
	if err != nil {
		t.Fatalf("AMQP_URL: %v", err)
	}
	u.User = url.UserPassword("pgoutbox-nobody", "s3cret-wrong")

	_, err = New(context.Background(), Config{URL: u.String()})

	if err == nil {
		t.Fatalf("New with wrong credentials = nil; want an error")
	}
	if strings.Contains(err.Error(), "s3cret-wrong") {
		t.Fatalf("New = %v; leaks the password", err)
	}
}

func TestClassifyAMQPError_MapsReplyCodes(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		code   int
		server bool // sent by the broker; false: the client's own (a failed read or write on the connection)
		want   string
	}{
		{amqp.NotFound, true, "permanent"},
		{amqp.AccessRefused, true, "permanent"},
		{amqp.PreconditionFailed, true, "permanent"},
		{amqp.ConnectionForced, true, "unavailable"},
		{amqp.ResourceError, true, "unavailable"},
		{amqp.InternalError, true, "unavailable"},
		{amqp.ChannelError, true, "retryable"},
		{amqp.FrameError, true, "retryable"},
		{amqp.FrameError, false, "unavailable"}, // the connection's read failed: "EOF", a reset
	} {
		err := classifyAMQPError(&amqp.Error{Code: tt.code, Server: tt.server, Reason: "x"}, "ex", "key", "Config.Exchange")
		if got := map[bool]string{true: "permanent"}[isPermanent(err)] + map[bool]string{true: "unavailable"}[isUnavailable(err)] +
			map[bool]string{true: "retryable"}[isRetryable(err)]; got != tt.want {
			t.Errorf("code %d (server %v): %v is %q; want %s", tt.code, tt.server, err, got, tt.want)
		}
	}
	if err := classifyAMQPError(amqp.ErrClosed, "ex", "key", "Config.Exchange"); !isUnavailable(err) {
		t.Errorf("the client's ErrClosed: %v; want unavailable", err)
	}
}

func TestBackoff_DoublesUpToMax(t *testing.T) {
	t.Parallel()
	for n, upper := range map[int]time.Duration{1: 100 * time.Millisecond, 2: 200 * time.Millisecond, 5: time.Second, 60: time.Second} {
		for range 50 {
			got := backoff(100*time.Millisecond, time.Second, n)
			if got < upper/2 || got > upper {
				t.Fatalf("backoff(n=%d) = %s; want within [%s, %s]", n, got, upper/2, upper)
			}
		}
	}
}

func TestRedactURL_HidesThePassword(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"amqp://127.0.0.1:5672/":           "amqp://127.0.0.1:5672/",
		"amqp://alice:s3cret@h:5672/vhost": "amqp://alice:xxxxx@h:5672/vhost",
		"amqp://alice@h:5672/":             "amqp://alice@h:5672/",
		"amqp://alice:s3cret@[::1":         "amqp://xxxxx@[::1",
	} {
		if got := redact.URL(in, false); got != want {
			t.Errorf("redact.URL(%q, false) = %q; want %q", in, got, want)
		}
	}
}
