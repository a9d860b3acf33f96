package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/pgoutbox/pgoutbox/dispatcher"
	"github.com/pgoutbox/pgoutbox/publisher/cloudevents"
)

// received is one request as the test receiver saw it.
type received struct {
	Method string
	Header http.Header
	Body   []byte
}

// receiver is an httptest server recording requests and answering with
// respond (204 when nil).
type receiver struct {
	*httptest.Server
	mu       sync.Mutex
	requests []received
	respond  func(w http.ResponseWriter, r *http.Request)
}

func newReceiver(t *testing.T, respond func(w http.ResponseWriter, r *http.Request)) *receiver {
	t.Helper()
	rc := &receiver{respond: respond}
	rc.Server = httptest.NewServer(http.HandlerFunc(rc.handle))
	t.Cleanup(rc.Close)
	return rc
}

func (rc *receiver) handle(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	rc.mu.Lock()
	rc.requests = append(rc.requests, received{Method: r.Method, Header: r.Header.Clone(), Body: body})
	rc.mu.Unlock()
	if rc.respond == nil {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	rc.respond(w, r)
}

func (rc *receiver) received() []received {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]received(nil), rc.requests...)
}

func testMessage() dispatcher.Message {
	return dispatcher.Message{
		ID:            "42",
		OutboxID:      42,
		AggregateType: "order",
		AggregateID:   "o-1",
		EventType:     "OrderPaid",
		Payload:       json.RawMessage(`{"order_id":"o-1","amount":1250}`),
		Headers:       map[string]string{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
		Attempt:       1,
		CreatedAt:     time.Date(2026, 11, 29, 10, 0, 0, 123000000, time.UTC),
	}
}

func newPublisher(t *testing.T, cfg Config) *Publisher {
	t.Helper()
	p, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

func respondWith(status int, header map[string]string, body string) func(http.ResponseWriter, *http.Request) {
	return func(w http.ResponseWriter, _ *http.Request) {
		for k, v := range header {
			w.Header().Set(k, v)
		}
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	}
}

func TestPublish_SuccessPostsExactPayloadWithCloudEventsHeaders(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t, nil)
	p := newPublisher(t, Config{URL: rc.URL + "/hooks/orders", Source: "urn:shop"})
	msg := testMessage()

	if err := p.Publish(context.Background(), msg); err != nil {
		t.Fatalf("Publish: %v", err)
	}

	reqs := rc.received()
	if len(reqs) != 1 {
		t.Fatalf("receiver got %d requests, want 1", len(reqs))
	}
	got := reqs[0]
	if got.Method != http.MethodPost {
		t.Errorf("method = %s, want POST", got.Method)
	}
	if string(got.Body) != string(msg.Payload) {
		t.Errorf("body = %s, want %s", got.Body, msg.Payload)
	}
	want := map[string]string{
		"Content-Type":    "application/json",
		"Ce-Specversion":  "1.0",
		"Ce-Id":           "42",
		"Ce-Type":         "OrderPaid",
		"Ce-Source":       "urn:shop",
		"Ce-Subject":      "o-1",
		"Ce-Time":         "2026-11-29T10:00:00.123Z",
		"Idempotency-Key": cloudevents.IdempotencyKey("urn:shop", "42"),
		"Webhook-Id":      cloudevents.IdempotencyKey("urn:shop", "42"),
		"Traceparent":     msg.Headers["traceparent"],
	}
	for name, value := range want {
		if g := got.Header.Get(name); g != value {
			t.Errorf("header %s = %q, want %q", name, g, value)
		}
	}
	for _, name := range []string{"Ce-Datacontenttype", HeaderTimestamp, HeaderSignature} {
		if _, ok := got.Header[name]; ok {
			t.Errorf("header %s present, want absent", name)
		}
	}
}

func TestPublish_DefaultSourceIsTheMessageSourceElsePgoutbox(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t, nil)
	p := newPublisher(t, Config{URL: rc.URL})
	if err := p.Publish(context.Background(), testMessage()); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	msg := testMessage()
	msg.Source = "pgoutbox://db:5432/app/public.outbox"
	if err := p.Publish(context.Background(), msg); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	for i, want := range []string{"pgoutbox", msg.Source} {
		h := rc.received()[i].Header
		if got := h.Get("Ce-Source"); got != want {
			t.Fatalf("request %d: ce-source = %q, want %q", i, got, want)
		}
		if got, key := h.Get(HeaderIdempotencyKey), cloudevents.IdempotencyKey(want, "42"); got != key {
			t.Fatalf("request %d: Idempotency-Key = %q, want %q", i, got, key)
		}
	}
}

func TestPublish_MessageHeadersNeverOverrideReservedOrStaticHeaders(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t, nil)
	p := newPublisher(t, Config{
		URL:     rc.URL,
		Secret:  "s3cret",
		Headers: map[string]string{"Authorization": "Bearer operator"},
	})
	msg := testMessage()
	msg.Headers = map[string]string{
		"ce-id":             "forged",
		"CE-TYPE":           "Forged",
		"ce-source":         "forged",
		"Idempotency-Key":   "forged",
		"webhook-id":        "forged",
		"content-type":      "text/plain",
		"Webhook-Signature": "v1,forged",
		"Authorization":     "Bearer producer",
		"Content-Length":    "1",
		"X-Tenant":          "acme",
	}

	if err := p.Publish(context.Background(), msg); err != nil {
		t.Fatalf("Publish: %v", err)
	}

	h := rc.received()[0].Header
	want := map[string]string{
		"Ce-Id":           "42",
		"Ce-Type":         "OrderPaid",
		"Ce-Source":       "pgoutbox",
		"Idempotency-Key": cloudevents.IdempotencyKey("pgoutbox", "42"),
		"Webhook-Id":      cloudevents.IdempotencyKey("pgoutbox", "42"),
		"Content-Type":    "application/json",
		"Authorization":   "Bearer operator",
		"X-Tenant":        "acme",
	}
	for name, value := range want {
		if got := h.Values(name); len(got) != 1 || got[0] != value {
			t.Errorf("header %s = %q, want [%q]", name, got, value)
		}
	}
	if got := h.Get(HeaderSignature); got == "v1,forged" || !strings.HasPrefix(got, "v1,") {
		t.Errorf("signature = %q, want the publisher's", got)
	}
}

func TestPublish_CloudEventsValuesArePercentEncoded(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t, nil)
	p := newPublisher(t, Config{URL: rc.URL})
	msg := testMessage()
	msg.AggregateID = "Zoë \"x\" 100%\n"

	if err := p.Publish(context.Background(), msg); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	if got, want := rc.received()[0].Header.Get("Ce-Subject"), "Zo%C3%AB%20%22x%22%20100%25%0A"; got != want {
		t.Fatalf("ce-subject = %q, want %q", got, want)
	}
}

func TestPublish_InvalidMessageHeaderIsPermanent(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t, nil)
	p := newPublisher(t, Config{URL: rc.URL})
	for name, headers := range map[string]map[string]string{
		"name":  {"Bad Name": "x"},
		"value": {"X-Trace": "line1\r\nInjected: yes"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			msg := testMessage()
			msg.Headers = headers
			err := p.Publish(context.Background(), msg)
			var perm *dispatcher.PermanentError
			if !errors.As(err, &perm) {
				t.Fatalf("err = %v, want PermanentError", err)
			}
			if strings.Contains(err.Error(), "line1") {
				t.Fatalf("error leaks the header value: %v", err)
			}
		})
	}
	t.Cleanup(func() {
		if n := len(rc.received()); n != 0 {
			t.Errorf("receiver got %d requests, want 0", n)
		}
	})
}

// The statuses of Config.UnavailableStatus say the receiver is unavailable
// (dispatcher.UnavailableError: no attempt spent, the breaker's business);
// other 408, 429 and 5xx are retryable failures of the message. Both carry
// Retry-After as the least wait.
func TestPublish_UnavailableAndRetryableStatusesHonourRetryAfter(t *testing.T) {
	t.Parallel()
	httpDate := time.Now().Add(90 * time.Second).UTC().Format(http.TimeFormat)
	tests := []struct {
		name        string
		status      int
		header      map[string]string
		unavailable []int // Config.UnavailableStatus; nil: the default
		wantKind    string
		wantAfter   time.Duration // minimum
		maxAfter    time.Duration
	}{
		{name: "500 without Retry-After", status: 500, wantKind: "retryable"},
		{name: "500 with Retry-After", status: 500, header: map[string]string{"Retry-After": "4"}, wantKind: "retryable", wantAfter: 4 * time.Second, maxAfter: 4 * time.Second},
		{name: "501", status: 501, wantKind: "retryable"},
		{name: "502", status: 502, wantKind: "unavailable"},
		{name: "504", status: 504, wantKind: "unavailable"},
		{name: "503 with Retry-After seconds", status: 503, header: map[string]string{"Retry-After": "7"}, wantKind: "unavailable", wantAfter: 7 * time.Second, maxAfter: 7 * time.Second},
		{name: "503 with Retry-After HTTP-date", status: 503, header: map[string]string{"Retry-After": httpDate}, wantKind: "unavailable", wantAfter: 80 * time.Second, maxAfter: 91 * time.Second},
		{name: "429 with Retry-After", status: 429, header: map[string]string{"Retry-After": "3"}, wantKind: "unavailable", wantAfter: 3 * time.Second, maxAfter: 3 * time.Second},
		{name: "429 without Retry-After", status: 429, wantKind: "unavailable"},
		{name: "408", status: 408, wantKind: "unavailable"},
		{name: "503 with unparsable Retry-After", status: 503, header: map[string]string{"Retry-After": "soon"}, wantKind: "unavailable"},
		{name: "503 not configured unavailable", status: 503, unavailable: []int{}, wantKind: "retryable"},
		{name: "500 configured unavailable", status: 500, unavailable: []int{500}, wantKind: "unavailable"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rc := newReceiver(t, respondWith(tt.status, tt.header, "busy"))
			p := newPublisher(t, Config{URL: rc.URL, UnavailableStatus: tt.unavailable})

			err := p.Publish(context.Background(), testMessage())

			var (
				re    *dispatcher.RetryableError
				ue    *dispatcher.UnavailableError
				after time.Duration
			)
			switch {
			case tt.wantKind == "retryable" && errors.As(err, &re):
				after = re.After
			case tt.wantKind == "unavailable" && errors.As(err, &ue):
				after = ue.After
			default:
				t.Fatalf("err = %v, want a %s error", err, tt.wantKind)
			}
			if after < tt.wantAfter || after > tt.maxAfter {
				t.Errorf("After = %s, want within [%s, %s]", after, tt.wantAfter, tt.maxAfter)
			}
			var se *StatusError
			if !errors.As(err, &se) || se.StatusCode != tt.status {
				t.Errorf("err = %v, want a StatusError with %d", err, tt.status)
			}
		})
	}
}

func TestPublish_DeferStatusDefersWithRetryAfterDelay(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		deferStatus int
		status      int
		header      map[string]string
		wantDelay   time.Duration
	}{
		{name: "425 with Retry-After", status: 425, header: map[string]string{"Retry-After": "30"}, wantDelay: 30 * time.Second},
		{name: "425 without Retry-After defaults to a minute", status: 425, wantDelay: time.Minute},
		{name: "425 with Retry-After zero defaults to a minute", status: 425, header: map[string]string{"Retry-After": "0"}, wantDelay: time.Minute},
		{name: "configured 409", deferStatus: 409, status: 409, header: map[string]string{"Retry-After": "5"}, wantDelay: 5 * time.Second},
		{name: "configured 503 takes precedence over retry", deferStatus: 503, status: 503, wantDelay: time.Minute},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rc := newReceiver(t, respondWith(tt.status, tt.header, "customer not replicated yet"))
			p := newPublisher(t, Config{URL: rc.URL, DeferStatus: tt.deferStatus})

			err := p.Publish(context.Background(), testMessage())

			var de *dispatcher.DeferError
			if !errors.As(err, &de) {
				t.Fatalf("err = %v, want DeferError", err)
			}
			if de.Delay != tt.wantDelay {
				t.Errorf("Delay = %s, want %s", de.Delay, tt.wantDelay)
			}
			if !strings.Contains(de.Reason, http.StatusText(tt.status)) || !strings.Contains(de.Reason, "customer not replicated yet") {
				t.Errorf("Reason = %q, want the status and body", de.Reason)
			}
		})
	}
}

func TestPublish_ClientErrorsArePermanentWithStatusAndBoundedBody(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", 5000)
	for _, status := range []int{400, 401, 404, 409, 422} {
		t.Run(http.StatusText(status), func(t *testing.T) {
			t.Parallel()
			rc := newReceiver(t, respondWith(status, nil, `{"error":"amount must be positive"}`+long))
			p := newPublisher(t, Config{URL: rc.URL})

			err := p.Publish(context.Background(), testMessage())

			var perm *dispatcher.PermanentError
			if !errors.As(err, &perm) {
				t.Fatalf("err = %v, want PermanentError", err)
			}
			var se *StatusError
			if !errors.As(err, &se) || se.StatusCode != status {
				t.Fatalf("err = %v, want a StatusError with %d", err, status)
			}
			if len(se.Body) > MaxErrorBody {
				t.Errorf("body snippet is %d bytes, want at most %d", len(se.Body), MaxErrorBody)
			}
			for _, want := range []string{http.StatusText(status), "amount must be positive"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not contain %q", err, want)
				}
			}
		})
	}
}

func TestPublish_RedirectIsNotFollowedAndIsPermanent(t *testing.T) {
	t.Parallel()
	target := newReceiver(t, nil)
	rc := newReceiver(t, func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, target.URL, http.StatusTemporaryRedirect)
	})
	client := &http.Client{} // follows redirects by default
	p := newPublisher(t, Config{URL: rc.URL, Client: client})

	err := p.Publish(context.Background(), testMessage())

	var perm *dispatcher.PermanentError
	if !errors.As(err, &perm) {
		t.Fatalf("err = %v, want PermanentError", err)
	}
	if n := len(target.received()); n != 0 {
		t.Fatalf("redirect target got %d requests, want 0", n)
	}
	if client.CheckRedirect != nil {
		t.Fatal("New modified the caller's http.Client")
	}
}

func TestPublish_ConnectionRefusedIsUnavailable(t *testing.T) {
	t.Parallel()
	addr := closedAddr(t)
	p := newPublisher(t, Config{URL: "http://" + addr + "/hook"})

	err := p.Publish(context.Background(), testMessage())

	var ue *dispatcher.UnavailableError
	if !errors.As(err, &ue) {
		t.Fatalf("err = %v, want UnavailableError", err)
	}
	var opErr *net.OpError
	if !errors.As(err, &opErr) {
		t.Fatalf("err = %v, want a *net.OpError in the chain", err)
	}
}

func TestPublish_ServerSlowerThanTimeoutIsUnavailable(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-time.After(5 * time.Second):
		}
		w.WriteHeader(http.StatusNoContent)
	})
	p := newPublisher(t, Config{URL: rc.URL, Timeout: 100 * time.Millisecond})

	start := time.Now()
	err := p.Publish(context.Background(), testMessage())
	elapsed := time.Since(start)

	var ue *dispatcher.UnavailableError
	if !errors.As(err, &ue) {
		t.Fatalf("err = %v, want UnavailableError", err)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("err = %v, want context.DeadlineExceeded in the chain", err)
	}
	if elapsed > 2*time.Second {
		t.Errorf("Publish took %s, want about the 100ms Timeout", elapsed)
	}
}

func TestPublish_CallerCancellationIsUnavailable(t *testing.T) {
	t.Parallel()
	started := make(chan struct{})
	rc := newReceiver(t, func(w http.ResponseWriter, r *http.Request) {
		close(started)
		<-r.Context().Done()
	})
	p := newPublisher(t, Config{URL: rc.URL})
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-started
		cancel()
	}()

	err := p.Publish(ctx, testMessage())

	var ue *dispatcher.UnavailableError
	if !errors.As(err, &ue) || !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want UnavailableError wrapping context.Canceled", err)
	}
}

func TestPublish_RepublishCarriesSameIdempotencyKeyAndID(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t, nil)
	p := newPublisher(t, Config{URL: rc.URL, Secret: "s3cret"})
	msg := testMessage()

	for attempt := 1; attempt <= 3; attempt++ {
		msg.Attempt = attempt
		if err := p.Publish(context.Background(), msg); err != nil {
			t.Fatalf("Publish attempt %d: %v", attempt, err)
		}
	}

	// A receiver deduplicating on Idempotency-Key applies the event once.
	applied := map[string]int{}
	for _, r := range rc.received() {
		if key := cloudevents.IdempotencyKey(r.Header.Get("Ce-Source"), r.Header.Get("Ce-Id")); r.Header.Get("Idempotency-Key") != key || r.Header.Get(HeaderID) != key {
			t.Fatalf("Idempotency-Key %q, webhook-id %q, want the key of ce-source and ce-id %q",
				r.Header.Get("Idempotency-Key"), r.Header.Get(HeaderID), key)
		}
		applied[r.Header.Get("Idempotency-Key")]++
	}
	if diff := cmp.Diff(map[string]int{cloudevents.IdempotencyKey("pgoutbox", "42"): 3}, applied); diff != "" {
		t.Fatalf("deliveries by key (-want +got):\n%s", diff)
	}
}

func TestPublish_ReceiverDownThenBackIsRetriedAndDelivered(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	first := &receiver{}
	first.Server = httptest.NewUnstartedServer(http.HandlerFunc(first.handle))
	first.Listener.Close()
	first.Listener = ln
	first.Start()
	p := newPublisher(t, Config{URL: "http://" + addr + "/hook"})
	m1, m2 := testMessage(), testMessage()
	m2.ID, m2.OutboxID = "43", 43

	if err := p.Publish(context.Background(), m1); err != nil {
		t.Fatalf("Publish while up: %v", err)
	}
	first.Close() // receiver goes down; the client still holds an idle connection

	err = p.Publish(context.Background(), m2)
	var ue *dispatcher.UnavailableError
	if !errors.As(err, &ue) {
		t.Fatalf("Publish while down: err = %v, want UnavailableError", err)
	}

	ln2, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listen again on %s: %v", addr, err)
	}
	second := &receiver{}
	second.Server = httptest.NewUnstartedServer(http.HandlerFunc(second.handle))
	second.Listener.Close()
	second.Listener = ln2
	second.Start()
	t.Cleanup(second.Close)

	m2.Attempt = 2
	if err := p.Publish(context.Background(), m2); err != nil {
		t.Fatalf("Publish once back: %v", err)
	}
	if got := keys(first.received()); !cmp.Equal(got, []string{"42"}) {
		t.Errorf("first receiver got %v, want [42]", got)
	}
	if got := keys(second.received()); !cmp.Equal(got, []string{"43"}) {
		t.Errorf("second receiver got %v, want [43]", got)
	}
}

func keys(reqs []received) []string {
	var out []string
	for _, r := range reqs {
		out = append(out, r.Header.Get("Ce-Id"))
	}
	return out
}

func TestPublish_ErrorsNeverContainSecretOrURLToken(t *testing.T) {
	t.Parallel()
	const token = "T0K3N-in-path"
	const secret = "s3cret-signing-key"
	down := closedAddr(t)
	rc := newReceiver(t, respondWith(500, nil, "oops"))
	for name, url := range map[string]string{
		"status":    rc.URL + "/services/" + token + "?sig=" + token,
		"transport": "http://user:" + token + "@" + down + "/services/" + token,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			p := newPublisher(t, Config{URL: url, Secret: secret, Headers: map[string]string{"Authorization": "Bearer " + token}})
			err := p.Publish(context.Background(), testMessage())
			if err == nil {
				t.Fatal("Publish succeeded, want an error")
			}
			for _, s := range []string{token, secret} {
				if strings.Contains(err.Error(), s) {
					t.Fatalf("error %q contains a secret", err)
				}
			}
		})
	}
}

func TestPing_SucceedsWhenHostAcceptsConnections(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t, nil)
	p := newPublisher(t, Config{URL: rc.URL + "/hook"})
	if err := p.Ping(context.Background()); err != nil {
		t.Fatalf("Ping: %v", err)
	}
	if n := len(rc.received()); n != 0 {
		t.Fatalf("Ping sent %d HTTP requests, want 0", n)
	}
}

func TestPing_ReportsRefusedConnection(t *testing.T) {
	t.Parallel()
	addr := closedAddr(t)
	p := newPublisher(t, Config{URL: "http://" + addr + "/hook"})
	err := p.Ping(context.Background())
	if err == nil || !strings.Contains(err.Error(), "cannot connect to "+addr) {
		t.Fatalf("err = %v, want a connection error naming %s", err, addr)
	}
}

func TestPing_ReportsUnresolvableHost(t *testing.T) {
	t.Parallel()
	p := newPublisher(t, Config{URL: "https://receiver.pgoutbox.invalid/hook", Timeout: 3 * time.Second})
	err := p.Ping(context.Background())
	var dnsErr *net.DNSError
	if !errors.As(err, &dnsErr) || !strings.Contains(err.Error(), "does not resolve") {
		t.Fatalf("err = %v, want a DNS error saying the host does not resolve", err)
	}
}

func TestClose_IsSafeAndPublishStillWorksWithCallerClient(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t, nil)
	p := newPublisher(t, Config{URL: rc.URL, Client: rc.Client()})
	if err := p.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := p.Publish(context.Background(), testMessage()); err != nil {
		t.Fatalf("Publish after Close with a caller client: %v", err)
	}
}

// closedAddr returns a loopback address nothing listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// A publish sends its request once: when the connection breaks before the
// answer, the transport must not send the POST again by itself (net/http
// replays requests that carry Idempotency-Key and a rewindable body); the
// publish fails as unavailable and the dispatcher decides about a retry.
func TestPublish_BrokenConnectionIsNotResentByTheTransport(t *testing.T) {
	t.Parallel()
	var requests atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		if requests.Add(1) == 2 { // the second request, on the reused connection: reset, no answer
			c, _, err := w.(http.Hijacker).Hijack()
			if err != nil {
				t.Error(err)
				return
			}
			_ = c.(*net.TCPConn).SetLinger(0)
			_ = c.Close()
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	p := newPublisher(t, Config{URL: srv.URL})
	if err := p.Publish(context.Background(), testMessage()); err != nil {
		t.Fatalf("first Publish: %v", err)
	}
	err := p.Publish(context.Background(), testMessage())
	var ue *dispatcher.UnavailableError
	if !errors.As(err, &ue) {
		t.Fatalf("Publish on a connection reset before the answer = %v, want UnavailableError", err)
	}
	if n := requests.Load(); n != 2 {
		t.Fatalf("the receiver saw %d requests for 2 publishes: the transport resent one", n)
	}
}
