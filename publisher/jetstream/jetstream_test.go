package jetstream

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	gocmp "github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/pgoutbox/pgoutbox/dispatcher"
	"github.com/pgoutbox/pgoutbox/internal/redact"
	"github.com/pgoutbox/pgoutbox/internal/tcpproxy"
	"github.com/pgoutbox/pgoutbox/internal/testlog"
	"github.com/pgoutbox/pgoutbox/publisher/cloudevents"
)

// natsURL is the test server: NATS_URL, or a local nats-server -js.
func natsURL() string { return cmp.Or(os.Getenv("NATS_URL"), URLDefault) }

func randSuffix(t *testing.T) string {
	t.Helper()
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		t.Fatalf("rand: %v", err)
	}
	return hex.EncodeToString(b)
}

// testBundle is a unique stream on the shared server, bound to prefix+".>".
type testBundle struct {
	js     natsjs.JetStream
	stream natsjs.Stream
	name   string // stream name
	prefix string // subject prefix the stream captures
}

// setup creates a stream for a unique subject prefix and deletes it when the
// test ends. It fails the test when NATS with JetStream is not reachable.
func setup(t *testing.T) *testBundle {
	t.Helper()
	nc, err := nats.Connect(natsURL(), nats.Timeout(3*time.Second), nats.MaxReconnects(0))
	if err != nil {
		t.Fatalf("NATS with JetStream not reachable at %s: start nats-server -js or set NATS_URL: %v", redact.URL(natsURL(), true), err)
	}
	t.Cleanup(nc.Close)
	js, err := natsjs.New(nc)
	if err != nil {
		t.Fatalf("jetstream.New: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := js.AccountInfo(ctx); err != nil {
		t.Fatalf("JetStream not enabled at %s: start nats-server -js or set NATS_URL: %v", redact.URL(natsURL(), true), err)
	}
	sfx := randSuffix(t)
	b := &testBundle{js: js, name: "PGOUTBOX_TEST_" + sfx, prefix: "pgoutbox.test." + sfx}
	b.stream, err = js.CreateStream(ctx, natsjs.StreamConfig{
		Name:       b.name,
		Subjects:   []string{b.prefix + ".>"},
		Storage:    natsjs.MemoryStorage,
		Duplicates: time.Minute,
		MaxAge:     10 * time.Minute,
	})
	if err != nil {
		t.Fatalf("create stream %s: %v", b.name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := js.DeleteStream(ctx, b.name); err != nil {
			t.Errorf("delete stream %s: %v", b.name, err)
		}
	})
	return b
}

// msgCount is the number of messages the stream holds.
func (b *testBundle) msgCount(t *testing.T) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	info, err := b.stream.Info(ctx)
	if err != nil {
		t.Fatalf("stream info: %v", err)
	}
	return info.State.Msgs
}

func newPublisher(t *testing.T, cfg Config) *Publisher {
	t.Helper()
	cfg.URL = cmp.Or(cfg.URL, natsURL())
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

func TestPublish_StoresCloudEventWithMsgIDHeader(t *testing.T) {
	t.Parallel()
	b := setup(t)
	p := newPublisher(t, Config{SubjectTemplate: b.prefix + ".{{.AggregateType}}.{{.EventType}}", Source: "urn:shop"})
	msg := testMessage(42)
	msg.AggregateID = `o 1/"é"`
	msg.Headers = map[string]string{
		"traceparent":  "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
		"ce-id":        "spoofed",
		"CE-Type":      "spoofed",
		"Nats-Msg-Id":  "spoofed",
		"Nats-Rollup":  "all",
		"Content-Type": "text/plain",
		"bad:name":     "x",
		"bad-value":    "a\r\nb",
	}

	if err := publish(t, p, msg); err != nil {
		t.Fatalf("Publish: %v", err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	got, err := b.stream.GetMsg(ctx, 1)
	if err != nil {
		t.Fatalf("GetMsg: %v", err)
	}
	if want := b.prefix + ".order.OrderPaid"; got.Subject != want {
		t.Fatalf("subject = %q; want %q", got.Subject, want)
	}
	if string(got.Data) != `{"amount":42}` {
		t.Fatalf("data = %s", got.Data)
	}
	wantHeaders := map[string]string{
		"Nats-Msg-Id":        cloudevents.IdempotencyKey("urn:shop", "42"),
		"ce-specversion":     "1.0",
		"ce-id":              "42",
		"ce-type":            "OrderPaid",
		"ce-source":          "urn:shop",
		"ce-subject":         "o%201/%22%C3%A9%22",
		"ce-time":            "2026-11-29T10:00:00.123Z",
		"ce-datacontenttype": "application/json",
		"content-type":       "application/json",
		"traceparent":        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
	}
	gotHeaders := map[string]string{}
	for k, v := range got.Header {
		if len(v) != 1 {
			t.Errorf("header %s has %d values: %q", k, len(v), v)
		}
		gotHeaders[k] = strings.Join(v, ",")
	}
	if diff := gocmp.Diff(wantHeaders, gotHeaders); diff != "" {
		t.Fatalf("headers (-want +got):\n%s", diff)
	}
}

func TestPublish_RepublishIsDroppedByDuplicateWindowAndReturnsNil(t *testing.T) {
	t.Parallel()
	b := setup(t)
	p := newPublisher(t, Config{SubjectTemplate: b.prefix + ".{{.AggregateType}}.{{.EventType}}"})
	msg := testMessage(7)

	for i := range 3 {
		if err := publish(t, p, msg); err != nil {
			t.Fatalf("Publish #%d: %v", i+1, err)
		}
	}
	if n := b.msgCount(t); n != 1 {
		t.Fatalf("stream holds %d messages; want 1", n)
	}
}

func TestPublish_NoStreamForSubjectIsUnavailableAfterNoStreamDelay(t *testing.T) {
	t.Parallel()
	setup(t) // fails the test when the server is missing
	p := newPublisher(t, Config{SubjectTemplate: "pgoutbox.nostream." + randSuffix(t) + ".{{.EventType}}"})

	err := publish(t, p, testMessage(1))

	var ue *dispatcher.UnavailableError
	if !errors.As(err, &ue) {
		t.Fatalf("Publish = %v; want an UnavailableError", err)
	}
	if ue.After != NoStreamRetryAfterDefault {
		t.Fatalf("After = %s; want %s", ue.After, NoStreamRetryAfterDefault)
	}
	if !errors.Is(err, ErrNoStream) {
		t.Fatalf("Publish = %v; want it to wrap ErrNoStream", err)
	}
}

func TestPublish_ExpectedStreamMismatchIsPermanent(t *testing.T) {
	t.Parallel()
	b := setup(t)
	p := newPublisher(t, Config{SubjectTemplate: b.prefix + ".{{.EventType}}", ExpectStream: "PGOUTBOX_OTHER_" + randSuffix(t)})

	err := publish(t, p, testMessage(1))

	var pe *dispatcher.PermanentError
	if !errors.As(err, &pe) {
		t.Fatalf("Publish = %v; want a PermanentError", err)
	}
	if n := b.msgCount(t); n != 0 {
		t.Fatalf("stream holds %d messages; want 0", n)
	}
}

func TestPublish_ExpectedStreamMatchStores(t *testing.T) {
	t.Parallel()
	b := setup(t)
	p := newPublisher(t, Config{SubjectTemplate: b.prefix + ".{{.EventType}}", ExpectStream: b.name})

	if err := publish(t, p, testMessage(1)); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	if n := b.msgCount(t); n != 1 {
		t.Fatalf("stream holds %d messages; want 1", n)
	}
}

func TestPublish_InvalidRenderedSubjectIsPermanent(t *testing.T) {
	t.Parallel()
	b := setup(t)
	withTenant := newPublisher(t, Config{SubjectTemplate: b.prefix + ".{{.AggregateType}}.{{.Headers.tenant}}"})
	withSlice := newPublisher(t, Config{SubjectTemplate: b.prefix + ".{{slice .AggregateID 0 3}}"})
	for name, tc := range map[string]struct {
		p      *Publisher
		mutate func(*dispatcher.Message)
	}{
		"space in token":   {withTenant, func(m *dispatcher.Message) { m.AggregateType = "order item"; m.Headers["tenant"] = "t1" }},
		"empty token":      {withTenant, func(m *dispatcher.Message) { m.AggregateType = ""; m.Headers["tenant"] = "t1" }},
		"wildcard token":   {withTenant, func(m *dispatcher.Message) { m.Headers["tenant"] = ">" }},
		"missing header":   {withTenant, func(m *dispatcher.Message) {}},
		"template failure": {withSlice, func(m *dispatcher.Message) { m.AggregateID = "o" }},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			msg := testMessage(1)
			tc.mutate(&msg)
			err := publish(t, tc.p, msg)
			var pe *dispatcher.PermanentError
			if !errors.As(err, &pe) || !errors.Is(err, ErrInvalidSubject) {
				t.Fatalf("Publish = %v; want Permanent wrapping ErrInvalidSubject", err)
			}
		})
	}
	if n := b.msgCount(t); n != 0 {
		t.Fatalf("stream holds %d messages; want 0", n)
	}
}

func TestPublish_SubjectTemplateCanReadHeaders(t *testing.T) {
	t.Parallel()
	b := setup(t)
	p := newPublisher(t, Config{SubjectTemplate: b.prefix + ".{{.Headers.tenant}}.{{.EventType}}"})
	msg := testMessage(1)
	msg.Headers["tenant"] = "acme"
	if err := publish(t, p, msg); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	got, err := b.stream.GetMsg(ctx, 1)
	if err != nil {
		t.Fatalf("GetMsg: %v", err)
	}
	if want := b.prefix + ".acme.OrderPaid"; got.Subject != want {
		t.Fatalf("subject = %q; want %q", got.Subject, want)
	}
}

func TestPublish_ConcurrentPublishesAreAllStored(t *testing.T) {
	t.Parallel()
	b := setup(t)
	p := newPublisher(t, Config{SubjectTemplate: b.prefix + ".{{.AggregateType}}.{{.EventType}}"})
	const goroutines, each = 8, 25
	var wg sync.WaitGroup
	errs := make(chan error, goroutines*each)
	for g := range goroutines {
		wg.Go(func() {
			for i := range each {
				if err := publish(t, p, testMessage(int64(g*each+i+1))); err != nil {
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
	if n := b.msgCount(t); n != goroutines*each {
		t.Fatalf("stream holds %d messages; want %d", n, goroutines*each)
	}
}

func TestPublish_ServerUnreachableIsUnavailableAndSucceedsAfterReconnect(t *testing.T) {
	t.Parallel()
	b := setup(t)
	u, err := url.Parse(natsURL())
	if err != nil {
		t.Fatalf("NATS_URL: %v", err)
	}
	proxy := tcpproxy.Start(t, u.Host)
	u.Host = proxy.Addr()
	p := newPublisher(t, Config{
		URL:             u.String(),
		SubjectTemplate: b.prefix + ".{{.AggregateType}}.{{.EventType}}",
		PublishTimeout:  2 * time.Second,
		Options:         []nats.Option{nats.ReconnectWait(50 * time.Millisecond), nats.ReconnectJitter(0, 0)},
	})
	if err := publish(t, p, testMessage(1)); err != nil {
		t.Fatalf("Publish before Down: %v", err)
	}

	proxy.Down()
	msg := testMessage(2)
	start := time.Now()
	err = publish(t, p, msg)
	var ue *dispatcher.UnavailableError
	if !errors.As(err, &ue) {
		t.Fatalf("Publish while down = %v; want an UnavailableError", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("Publish while down took %s; want at most PublishTimeout", d)
	}
	t.Logf("Publish while down: %v (after %s)", err, time.Since(start).Round(time.Millisecond))
	if err := p.Ping(context.Background()); err == nil {
		t.Fatalf("Ping while down = nil; want an error")
	}

	proxy.Up()
	deadline := time.Now().Add(20 * time.Second)
	for {
		err = publish(t, p, msg)
		if err == nil {
			break
		}
		if !errors.As(err, &ue) {
			t.Fatalf("Publish after Up = %v; want nil or Unavailable while reconnecting", err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("Publish still failing 20s after Up: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if n := b.msgCount(t); n != 2 {
		t.Fatalf("stream holds %d messages; want 2 (each message once)", n)
	}
	if err := p.Ping(context.Background()); err != nil {
		t.Fatalf("Ping after reconnect: %v", err)
	}
}

func TestPing_ChecksJetStreamAndExpectedStream(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ok := newPublisher(t, Config{SubjectTemplate: b.prefix + ".{{.EventType}}", ExpectStream: b.name})
	if err := ok.Ping(context.Background()); err != nil {
		t.Fatalf("Ping with existing stream: %v", err)
	}
	missing := newPublisher(t, Config{SubjectTemplate: b.prefix + ".{{.EventType}}", ExpectStream: "PGOUTBOX_MISSING_" + randSuffix(t)})
	if err := missing.Ping(context.Background()); err == nil {
		t.Fatalf("Ping with missing ExpectStream = nil; want an error")
	}
}

func TestPublish_AfterCloseIsUnavailable(t *testing.T) {
	t.Parallel()
	b := setup(t)
	p := newPublisher(t, Config{SubjectTemplate: b.prefix + ".{{.EventType}}"})
	if err := p.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	var ue *dispatcher.UnavailableError
	if err := publish(t, p, testMessage(1)); !errors.As(err, &ue) {
		t.Fatalf("Publish after Close = %v; want an UnavailableError", err)
	}
}

func TestNew_RejectsInvalidConfigNamingTheField(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		cfg   Config
		field string
	}{
		"unparsable template":      {Config{SubjectTemplate: "{{.AggregateType"}, "SubjectTemplate"},
		"unknown field":            {Config{SubjectTemplate: "{{.Nope}}"}, "SubjectTemplate"},
		"renders empty subject":    {Config{SubjectTemplate: "{{if false}}x{{end}}"}, "SubjectTemplate"},
		"renders space":            {Config{SubjectTemplate: "orders {{.EventType}}"}, "SubjectTemplate"},
		"renders empty token":      {Config{SubjectTemplate: "orders..{{.EventType}}"}, "SubjectTemplate"},
		"renders wildcard":         {Config{SubjectTemplate: "orders.>"}, "SubjectTemplate"},
		"negative publish timeout": {Config{PublishTimeout: -time.Second}, "PublishTimeout"},
		"negative no-stream delay": {Config{NoStreamRetryAfter: -time.Second}, "NoStreamRetryAfter"},
		"invalid expect stream":    {Config{ExpectStream: "a.b"}, "ExpectStream"},
		"unparsable URL":           {Config{URL: "nats://user:s3cret@[::1"}, "URL"},
		"empty URL in list":        {Config{URL: "nats://a:4222,,nats://b:4222"}, "URL"},
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

func TestNew_UnreachableServerSaysWhatToDoWithoutThePassword(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	addr := ln.Addr().String()
	_ = ln.Close() // nothing listens there now

	_, err = New(context.Background(), Config{URL: "nats://alice:s3cret@" + addr})

	if err == nil {
		t.Fatalf("New = nil; want a connection error")
	}
	if errors.Is(err, dispatcher.ErrInvalidConfig) {
		t.Fatalf("New = %v; a connection failure is not a config error", err)
	}
	for _, want := range []string{"nats-server", "Config.URL", "alice:xxxxx@" + addr} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("New = %v; want it to mention %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "s3cret") {
		t.Fatalf("New = %v; leaks the password", err)
	}
}

func TestClassify_MapsClientErrors(t *testing.T) {
	t.Parallel()
	p := &Publisher{cfg: Config{URL: "nats://tok3n@h:4222", NoStreamRetryAfter: 30 * time.Second}}
	apiErr := func(code natsjs.ErrorCode) error {
		return fmt.Errorf("nats: %w", &natsjs.APIError{Code: 400, ErrorCode: code, Description: "x"})
	}
	unavailableAPI := fmt.Errorf("nats: %w", &natsjs.APIError{Code: 503, ErrorCode: 10008, Description: "JetStream system temporarily unavailable"})
	const (
		retryable   = "retryable"
		permanent   = "permanent"
		unavailable = "unavailable"
	)
	for name, tc := range map[string]struct {
		err   error
		class string
	}{
		"no stream response":      {natsjs.ErrNoStreamResponse, unavailable},
		"no responders":           {nats.ErrNoResponders, unavailable},
		"timeout":                 {nats.ErrTimeout, unavailable},
		"deadline":                {context.DeadlineExceeded, unavailable},
		"canceled":                {context.Canceled, unavailable},
		"connection closed":       {nats.ErrConnectionClosed, unavailable},
		"reconnecting":            {nats.ErrConnectionReconnecting, unavailable},
		"reconnect buffer":        {nats.ErrReconnectBufExceeded, unavailable},
		"jetstream unavailable":   {unavailableAPI, unavailable},
		"invalid ack":             {natsjs.ErrInvalidJSAck, retryable},
		"stream store failed":     {apiErr(10077), retryable},
		"stream not match":        {apiErr(10060), permanent},
		"wrong last sequence":     {apiErr(natsjs.JSErrCodeStreamWrongLastSequence), permanent},
		"wrong last seq constant": {apiErr(natsjs.JSErrCodeStreamWrongLastSequenceConstant), permanent},
		"wrong last msg id":       {apiErr(10070), permanent},
		"message too large":       {apiErr(errCodeStreamMessageExceedsMaximum), permanent},
		"max payload":             {nats.ErrMaxPayload, permanent},
		"bad subject":             {nats.ErrBadSubject, permanent},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			got := p.classify(tc.err, "a.b")
			var re *dispatcher.RetryableError
			var pe *dispatcher.PermanentError
			var ue *dispatcher.UnavailableError
			switch {
			case errors.As(got, &re) && tc.class == retryable, errors.As(got, &pe) && tc.class == permanent,
				errors.As(got, &ue) && tc.class == unavailable:
			default:
				t.Fatalf("classify(%v) = %v; want %s", tc.err, got, tc.class)
			}
			if !errors.Is(got, tc.err) {
				t.Fatalf("classify(%v) = %v; want it to wrap the cause", tc.err, got)
			}
		})
	}
}

func TestRedactURL_HidesPasswordsAndTokens(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"nats://127.0.0.1:4222":                "nats://127.0.0.1:4222",
		"nats://alice:s3cret@h:4222":           "nats://alice:xxxxx@h:4222",
		"nats://t0ken@h:4222":                  "nats://xxxxx@h:4222",
		"alice:s3cret@h:4222":                  "xxxxx@h:4222",
		"nats://alice:s3cret@[::1":             "nats://xxxxx@[::1",
		"nats://a:p1@h1:4222,nats://b:p2@h2:1": "nats://a:xxxxx@h1:4222,nats://b:xxxxx@h2:1",
	} {
		if got := redact.URL(in, true); got != want {
			t.Errorf("redact.URL(%q, true) = %q; want %q", in, got, want)
		}
	}
	err := redact.Error(errors.New(`dial "nats://alice:s3cret@h:4222": password s3cret`), "nats://alice:s3cret@h:4222", true)
	if strings.Contains(err.Error(), "s3cret") {
		t.Fatalf("redact.Error = %q; leaks the password", err)
	}
}

func TestPercentEncode_FollowsNATSBinding(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"plain-ASCII_1.2":   "plain-ASCII_1.2",
		"Euro € 😀":          "Euro%20%E2%82%AC%20%F0%9F%98%80",
		`say "100%"`:        "say%20%22100%25%22",
		"tab\there":         "tab%09here",
		"2026-11-29T10:00Z": "2026-11-29T10:00Z",
	} {
		if got := percentEncode(in); got != want {
			t.Errorf("percentEncode(%q) = %q; want %q", in, got, want)
		}
	}
}
