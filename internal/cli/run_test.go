package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgoutbox/pgoutbox/dispatcher"
	"github.com/pgoutbox/pgoutbox/publisher/cloudevents"
	"github.com/pgoutbox/pgoutbox/publisher/webhook"
)

// enqueueCLI enqueues one event through the enqueue command and returns its id.
func enqueueCLI(t *testing.T, d *testDB, extra ...string) int64 {
	t.Helper()
	args := append([]string{"enqueue", "--aggregate-type", "order", "--aggregate-id", "o-1", "--event-type", "OrderPaid"}, extra...)
	r := call(t, invocation{env: d.env()}, args...)
	wantCode(t, r, ExitOK)
	id, err := strconv.ParseInt(strings.TrimSpace(r.stdout), 10, 64)
	if err != nil {
		t.Fatalf("enqueue printed %q, want an id\n%s", r.stdout, r)
	}
	return id
}

func TestRun_StdoutPublishesEnqueuedMessageThenStopsOnSignal(t *testing.T) {
	t.Parallel()
	d := newDB(t)
	id := enqueueCLI(t, d, "--payload", `{"amount": 1250}`, "--header", "tenant=acme")

	b := start(t, invocation{env: d.env()}, "run", "--publisher", "stdout", "--poll-interval", "50ms")
	eventually(t, 30*time.Second, "the message to be done", func() bool { return d.status(t, id) == "done" })
	r := b.stop(t)
	wantCode(t, r, ExitOK)

	var line struct {
		ID        string            `json:"id"`
		EventType string            `json:"event_type"`
		Payload   json.RawMessage   `json:"payload"`
		Headers   map[string]string `json:"headers"`
		Attempt   int               `json:"attempt"`
	}
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 1 {
		t.Fatalf("want exactly one JSON line on stdout, got %d\n%s", len(lines), r)
	}
	if err := json.Unmarshal([]byte(lines[0]), &line); err != nil {
		t.Fatalf("stdout is not a JSON line: %v\n%s", err, r)
	}
	if line.ID != strconv.FormatInt(id, 10) || line.EventType != "OrderPaid" || line.Headers["tenant"] != "acme" || line.Attempt != 1 {
		t.Errorf("unexpected line %+v", line)
	}
	var payload map[string]int
	if err := json.Unmarshal(line.Payload, &payload); err != nil || payload["amount"] != 1250 {
		t.Errorf("payload %s, want {\"amount\": 1250}", line.Payload)
	}
	mustContain(t, r, "stderr", `msg="pgoutbox run starting" publisher=stdout`)
	mustContain(t, r, "stderr", `msg="pgoutbox run stopped" published=1`)
}

// receiver is an httptest webhook receiver that records requests.
type receiver struct {
	*httptest.Server
	mu       sync.Mutex
	requests []recorded
}

type recorded struct {
	path   string
	header http.Header
	body   string
}

func newReceiver(t *testing.T, status int) *receiver {
	t.Helper()
	rc := &receiver{}
	rc.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		rc.mu.Lock()
		rc.requests = append(rc.requests, recorded{path: r.URL.Path, header: r.Header.Clone(), body: string(body)})
		rc.mu.Unlock()
		w.WriteHeader(status)
	}))
	t.Cleanup(rc.Close)
	return rc
}

func (rc *receiver) got() []recorded {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]recorded(nil), rc.requests...)
}

func TestRun_HTTPDeliversSignedAndNeverPrintsSecrets(t *testing.T) {
	t.Parallel()
	const (
		dbPassword = "pg-Pa55word-9f3c"
		secret     = "whsec-t0p-s3cr3t-4b1d"
		pathToken  = "tok-9c2e7a11"
	)
	for _, secretFrom := range []string{"flag", "env"} {
		t.Run("secret from "+secretFrom, func(t *testing.T) {
			t.Parallel()
			d := newDB(t)
			rcv := newReceiver(t, http.StatusOK)
			id := enqueueCLI(t, d, "--payload", `{"amount":1}`)

			// Trust authentication accepts any password: the URL carries one
			// so that the test can check it is never printed.
			env := map[string]string{"DATABASE_URL": withPassword(t, d.url, userOf(t, d.url), dbPassword)}
			args := []string{"run", "--publisher", "http", "--http-url", rcv.URL + "/hooks/" + pathToken,
				"--poll-interval", "50ms", "--log-level", "debug", "--metrics-addr", "127.0.0.1:0", "--health-interval", "50ms"}
			if secretFrom == "flag" {
				args = append(args, "--http-secret", secret)
			} else {
				env[envHTTPSecret] = secret
			}
			b := start(t, invocation{env: env}, args...)
			base := b.metricsURL(t)
			eventually(t, 30*time.Second, "the message to be done", func() bool { return d.status(t, id) == "done" })
			code, body := get(t, base+"/healthz")
			_, metrics := get(t, base+"/metrics")
			r := b.stop(t)
			wantCode(t, r, ExitOK)
			if code != http.StatusOK {
				t.Errorf("healthz %d %q, want 200", code, body)
			}

			reqs := rcv.got()
			if len(reqs) != 1 {
				t.Fatalf("receiver got %d requests, want 1", len(reqs))
			}
			req := reqs[0]
			// The body is the payload as jsonb stores it.
			// The source defaults to the outbox's database and table, and
			// the idempotency key is built from it and the id.
			pc, err := pgconn.ParseConfig(d.url)
			if err != nil {
				t.Fatal(err)
			}
			source := dispatcher.DefaultSource(pc, "public", "outbox")
			key := cloudevents.IdempotencyKey(source, strconv.FormatInt(id, 10))
			if req.path != "/hooks/"+pathToken || req.body != `{"amount": 1}` || req.header.Get("Ce-Source") != source ||
				req.header.Get("Idempotency-Key") != key || req.header.Get(webhook.HeaderID) != key {
				t.Errorf("unexpected request %+v, want ce-source %q and key %q", req, source, key)
			}
			mustContain(t, r, "stderr", "source="+source)
			if err := webhook.Verify(secret, req.header, []byte(req.body), time.Now(), time.Minute); err != nil {
				t.Errorf("signature does not verify with the secret: %v", err)
			}
			mustContain(t, r, "stderr", "http_signed=true")
			for _, s := range []string{dbPassword, secret, pathToken} {
				if strings.Contains(r.stdout+r.stderr+body+metrics, s) {
					t.Errorf("%q leaked into the output\n%s\n--- healthz: %s\n--- metrics:\n%s", s, r, body, metrics)
				}
			}
		})
	}
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// exposition checks the Prometheus text format: every sample belongs to a
// metric announced by # HELP and # TYPE lines, and every value parses.
var sampleRe = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\]|\\.)*"(?:,[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\]|\\.)*")*\})? (\S+)$`)

func checkExposition(t *testing.T, text string) map[string]float64 {
	t.Helper()
	typed := map[string]string{}
	helped := map[string]bool{}
	samples := map[string]float64{}
	for _, line := range strings.Split(strings.TrimSuffix(text, "\n"), "\n") {
		switch {
		case strings.HasPrefix(line, "# HELP "):
			f := strings.SplitN(line, " ", 4)
			helped[f[2]] = true
		case strings.HasPrefix(line, "# TYPE "):
			f := strings.Fields(line)
			if len(f) != 4 || (f[3] != "counter" && f[3] != "gauge" && f[3] != "histogram") {
				t.Errorf("bad TYPE line %q", line)
				continue
			}
			if !helped[f[2]] {
				t.Errorf("TYPE before HELP for %s", f[2])
			}
			typed[f[2]] = f[3]
		default:
			m := sampleRe.FindStringSubmatch(line)
			if m == nil {
				t.Errorf("malformed sample line %q", line)
				continue
			}
			family := m[1]
			for _, sfx := range []string{"_bucket", "_sum", "_count"} {
				if base, ok := strings.CutSuffix(m[1], sfx); ok && typed[base] == "histogram" {
					family = base
				}
			}
			if typed[family] == "" {
				t.Errorf("sample %q has no TYPE line before it", line)
			}
			if typed[m[1]] == "counter" && !strings.HasSuffix(m[1], "_total") {
				t.Errorf("counter %s does not end in _total", m[1])
			}
			v, err := strconv.ParseFloat(m[3], 64)
			if err != nil {
				t.Errorf("bad value in %q", line)
			}
			samples[m[1]+m[2]] = v
		}
	}
	return samples
}

func TestRun_MetricsAndHealthz(t *testing.T) {
	t.Parallel()
	d := newDB(t)
	d.kill(t, d.enqueue(t, 1, "OrderPaid", "o-2", false)...)
	b := start(t, invocation{env: d.env()}, "run", "--publisher", "discard", "--poll-interval", "50ms",
		"--metrics-addr", "127.0.0.1:0", "--health-interval", "50ms", "--stats-interval", "50ms")
	base := b.metricsURL(t)
	mustContainText(t, b.stderr.String(), `msg="metrics listening" addr=`+strings.TrimPrefix(base, "http://"))

	eventually(t, 30*time.Second, "healthz ok", func() bool {
		code, body := get(t, base+"/healthz")
		return code == http.StatusOK && body == "ok\n"
	})
	ids := d.enqueue(t, 3, "OrderPaid", "o-1", false)
	eventually(t, 30*time.Second, "the messages to be done", func() bool { return d.status(t, ids[2]) == "done" })

	var samples map[string]float64
	var text string
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("last /metrics:\n%s", text)
		}
	})
	// The gauges' refresh is paced by its own duration (sweepDuty: a read
	// that took 0.6 s on a loaded machine waits about 30 s for the next),
	// so the wait allows a few slow refreshes, not one --stats-interval.
	eventually(t, 3*time.Minute, "the gauges to show 3 done", func() bool {
		var code int
		code, text = get(t, base+"/metrics")
		if code != http.StatusOK {
			t.Fatalf("metrics status %d", code)
		}
		samples = checkExposition(t, text)
		return samples[`pgoutbox_queue_messages{status="done"}`] == 3 && samples["pgoutbox_messages_published_total"] == 3
	})
	for name, want := range map[string]float64{
		"pgoutbox_messages_claimed_total":           3,
		"pgoutbox_messages_dead_total":              0,
		`pgoutbox_queue_messages{status="pending"}`: 0,
		`pgoutbox_queue_messages{status="dead"}`:    1,
		"pgoutbox_leases_expired":                   0,
		"pgoutbox_aggregates_blocked":               0,
		`pgoutbox_up{dependency="database"}`:        1,
		`pgoutbox_up{dependency="publisher"}`:       1,
		"pgoutbox_ready":                            1,
		"pgoutbox_messages_in_flight":               0,
	} {
		got, ok := samples[name]
		if !ok || got != want {
			t.Errorf("%s = %v (present %v), want %v", name, got, ok, want)
		}
	}
	// Every dispatcher instrument reaches /metrics through the OpenTelemetry
	// Prometheus exporter, histograms included.
	for name, want := range map[string]float64{
		`pgoutbox_publish_duration_seconds_count{ok="true"}`:    3,
		`pgoutbox_delivery_latency_seconds_bucket{le="+Inf"}`:   3,
		`pgoutbox_messages_outcomes_total{outcome="published"}`: 3,
	} {
		if got, ok := samples[name]; !ok || got != want {
			t.Errorf("%s = %v (present %v), want %v", name, got, ok, want)
		}
	}
	for _, name := range []string{"pgoutbox_queue_oldest_age_seconds", "pgoutbox_queue_stats_age_seconds", "pgoutbox_messages_retried_total",
		"pgoutbox_finalize_batch_size_count", `pgoutbox_queue_depth{status="done"}`, "pgoutbox_claim_size", "pgoutbox_messages_in_flight"} {
		if _, ok := samples[name]; !ok {
			t.Errorf("%s missing", name)
		}
	}
	code, _ := get(t, base+"/nope")
	if code != http.StatusNotFound {
		t.Errorf("unknown path: %d, want 404", code)
	}
	wantCode(t, b.stop(t), ExitOK)
}

func mustContainText(t *testing.T, text, want string) {
	t.Helper()
	if !strings.Contains(text, want) {
		t.Errorf("output does not contain %q:\n%s", want, text)
	}
}

// closedPort returns a loopback port nothing listens on.
func closedPort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	return port
}

// A receiver that is down at startup is not fatal: run warns, keeps going,
// and /healthz turns ready once a ping succeeds.
func TestRun_HTTPReceiverDownAtStartupWarnsAndHealthzRecovers(t *testing.T) {
	t.Parallel()
	d := newDB(t)
	port := closedPort(t)
	b := start(t, invocation{env: d.env()}, "run", "--publisher", "http", "--http-url", fmt.Sprintf("http://127.0.0.1:%d/hook", port),
		"--poll-interval", "50ms", "--metrics-addr", "127.0.0.1:0", "--health-interval", "50ms")
	base := b.metricsURL(t)
	eventually(t, 30*time.Second, "the startup warning", func() bool {
		return strings.Contains(b.stderr.String(), "publisher is not reachable; starting anyway")
	})
	code, body := get(t, base+"/healthz")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, fmt.Sprintf("not ready: publisher: webhook: ping: cannot connect to 127.0.0.1:%d", port)) {
		t.Errorf("healthz = %d %q, want 503 naming the publisher", code, body)
	}
	_, text := get(t, base+"/metrics")
	if s := checkExposition(t, text); s["pgoutbox_ready"] != 0 || s[`pgoutbox_up{dependency="publisher"}`] != 0 || s[`pgoutbox_up{dependency="database"}`] != 1 {
		t.Errorf("metrics should show the publisher down:\n%s", text)
	}
	if _, done := b.exited(); done {
		t.Fatalf("run exited although the receiver is only unreachable\n%s", b.stderr.String())
	}

	// The receiver comes up on that port.
	ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		t.Fatalf("listen on the receiver port: %v", err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })
	eventually(t, 30*time.Second, "healthz ok", func() bool {
		code, _ := get(t, base+"/healthz")
		return code == http.StatusOK
	})
	id := d.enqueue(t, 1, "OrderPaid", "o-1", false)[0]
	eventually(t, 30*time.Second, "delivery", func() bool { return d.status(t, id) == "done" })
	r := b.stop(t)
	wantCode(t, r, ExitOK)
	mustContain(t, r, "stderr", "publisher is reachable again")
}

// A broker that is down at startup (amqp, nats connect when built) is
// retried; nothing is claimed meanwhile, and an interrupt exits 0.
func TestRun_BrokerDownAtStartupRetriesAndClaimsNothing(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ publisher, urlFlag, url, secret string }{
		{"amqp", "--amqp-url", "amqp://app:amqp-s3cr3t-77@127.0.0.1:%d/", "amqp-s3cr3t-77"},
		{"nats", "--nats-url", "nats://app:nats-s3cr3t-77@127.0.0.1:%d", "nats-s3cr3t-77"},
	} {
		t.Run(tc.publisher, func(t *testing.T) {
			t.Parallel()
			d := newDB(t)
			id := d.enqueue(t, 1, "OrderPaid", "o-1", false)[0]
			b := start(t, invocation{env: d.env()}, "run", "--publisher", tc.publisher, tc.urlFlag, fmt.Sprintf(tc.url, closedPort(t)),
				"--poll-interval", "50ms", "--metrics-addr", "127.0.0.1:0")
			base := b.metricsURL(t)
			eventually(t, 30*time.Second, "the retry warning", func() bool {
				return strings.Contains(b.stderr.String(), "publisher is not reachable; retrying (nothing is claimed until it connects)")
			})
			code, body := get(t, base+"/healthz")
			if code != http.StatusServiceUnavailable || !strings.Contains(body, "not ready: publisher: not connected") {
				t.Errorf("healthz = %d %q, want 503 publisher not connected", code, body)
			}
			time.Sleep(300 * time.Millisecond)
			r := b.stop(t)
			wantCode(t, r, ExitOK)
			if s := d.status(t, id); s != "pending" || d.count(t, "attempts > 0") != 0 {
				t.Errorf("message %s / attempts spent while the broker was down", s)
			}
			if strings.Contains(r.stdout+r.stderr+body, tc.secret) {
				t.Errorf("broker password leaked\n%s\n--- healthz: %s", r, body)
			}
		})
	}
}

func TestRun_PublisherMisconfigurationExits1BeforeClaiming(t *testing.T) {
	t.Parallel()
	d := newDB(t)
	id := d.enqueue(t, 1, "OrderPaid", "o-1", false)[0]
	for _, tc := range []struct {
		name string
		args []string
		want string
		// noDB: the publisher is checked before the database is contacted
		noDB bool
	}{
		{"http malformed url", []string{"--publisher", "http", "--http-url", "://hooks.example.com"}, "--publisher http is misconfigured: webhook: --http-url does not parse", true},
		{"http wrong scheme", []string{"--publisher", "http", "--http-url", "ftp://hooks.example.com/x"}, `--publisher http is misconfigured: webhook: --http-url must be an absolute http or https URL, got scheme "ftp"; check --http-url`, true},
		{"http no host", []string{"--publisher", "http", "--http-url", "http:///path"}, "--publisher http is misconfigured: webhook: --http-url has no host", true},
		{"kafka bad topic", []string{"--publisher", "kafka", "--kafka-brokers", "127.0.0.1:1", "--kafka-topic", "no spaces allowed"}, "--publisher kafka is misconfigured: kafka: --kafka-topic:", true},
		{"kafka bad template", []string{"--publisher", "kafka", "--kafka-brokers", "127.0.0.1:1", "--kafka-topic-template", "{{.Nope"}, "--publisher kafka is misconfigured: kafka: --kafka-topic-template:", true},
		{"amqp malformed url", []string{"--publisher", "amqp", "--amqp-url", "http://rabbit:5672/"}, "--publisher amqp is misconfigured: rabbitmq: --amqp-url:", false},
		{"amqp bad template", []string{"--publisher", "amqp", "--amqp-routing-key", "{{.Nope"}, "--publisher amqp is misconfigured: rabbitmq: --amqp-routing-key: parse", false},
		{"nats bad subject", []string{"--publisher", "nats", "--nats-subject", "orders.>.x"}, "--publisher nats is misconfigured: jetstream: --nats-subject:", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			env := d.env()
			if tc.noDB {
				env = map[string]string{"DATABASE_URL": "postgres://u:pw@127.0.0.1:1/db"}
			}
			r := call(t, invocation{env: env}, append([]string{"run", "--poll-interval", "50ms"}, tc.args...)...)
			wantCode(t, r, ExitFailure)
			mustContain(t, r, "stderr", "pgoutbox: "+tc.want)
			if strings.Contains(r.stderr, "cannot reach PostgreSQL") {
				t.Errorf("the database was contacted first\n%s", r)
			}
		})
	}
	if s := d.status(t, id); s != "pending" || d.count(t, "attempts > 0") != 0 {
		t.Errorf("a message was claimed (%s) although the publisher was misconfigured", s)
	}
}

func TestRun_MetricsAddrInUseExits1(t *testing.T) {
	t.Parallel()
	d := newDB(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	r := call(t, invocation{env: d.env()}, "run", "--publisher", "discard", "--metrics-addr", ln.Addr().String())
	wantCode(t, r, ExitFailure)
	mustContain(t, r, "stderr", "pgoutbox: cannot listen on --metrics-addr "+ln.Addr().String())
}

func TestRun_OrderedClaimOnlyDeliversOrderedMessages(t *testing.T) {
	t.Parallel()
	d := newDB(t)
	ordered := d.enqueue(t, 2, "OrderPaid", "o-1", true)
	plain := d.enqueue(t, 1, "OrderPaid", "o-2", false)[0]
	b := start(t, invocation{env: d.env()}, "run", "--publisher", "stdout", "--ordered", "--poll-interval", "50ms", "--log-format", "json")
	eventually(t, 30*time.Second, "ordered messages done", func() bool { return d.status(t, ordered[1]) == "done" })
	time.Sleep(200 * time.Millisecond)
	r := b.stop(t)
	wantCode(t, r, ExitOK)
	if s := d.status(t, plain); s != "pending" {
		t.Errorf("unordered message is %s with --ordered", s)
	}
	first := strings.Index(r.stdout, fmt.Sprintf(`"id":"%d"`, ordered[0]))
	second := strings.Index(r.stdout, fmt.Sprintf(`"id":"%d"`, ordered[1]))
	if first < 0 || second < first {
		t.Errorf("ordered messages out of order\n%s", r)
	}
	// JSON logs: every stderr line is a JSON object.
	for _, line := range strings.Split(strings.TrimSpace(r.stderr), "\n") {
		if !json.Valid([]byte(line)) {
			t.Errorf("log line is not JSON: %q", line)
		}
	}
	mustContain(t, r, "stderr", `"claim":"ordered"`)
}

// The default CloudEvents source, and so the idempotency key consumers
// deduplicate on, is one per table: relays started with different but
// equivalent flags (no --schema, --schema public, --table outbox, a
// search_path in the URL) publish one event under one key,
// pgoutbox://HOST:PORT/DATABASE/public.outbox.
func TestRun_DefaultSourceIsTheResolvedTableWhateverTheFlags(t *testing.T) {
	t.Parallel()
	d := newDB(t)
	pc, err := pgconn.ParseConfig(d.url)
	if err != nil {
		t.Fatal(err)
	}
	want := dispatcher.DefaultSource(pc, "public", "outbox")
	if !strings.HasSuffix(want, "/public.outbox") {
		t.Fatalf("DefaultSource = %q, want it to end in /public.outbox", want)
	}
	sep := "?"
	if strings.Contains(d.url, "?") {
		sep = "&"
	}
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
	}{
		{"no flags", d.env(), nil},
		{"--schema public", d.env(), []string{"--schema", "public"}},
		{"--table outbox", d.env(), []string{"--table", "outbox"}},
		{"--schema public --table outbox", d.env(), []string{"--schema", "public", "--table", "outbox"}},
		{"search_path in the URL", map[string]string{"DATABASE_URL": d.url + sep + "options=-csearch_path%3Dpublic"}, nil},
	} {
		id := enqueueCLI(t, d, "--payload", "{}")
		b := start(t, invocation{env: tc.env}, append([]string{"run", "--publisher", "stdout", "--poll-interval", "50ms"}, tc.args...)...)
		eventually(t, 30*time.Second, "the message to be done", func() bool { return d.status(t, id) == "done" })
		r := b.stop(t)
		wantCode(t, r, ExitOK)
		mustContain(t, r, "stderr", "source="+want)
		var line struct {
			ID             string `json:"id"`
			IdempotencyKey string `json:"idempotency_key"`
		}
		if err := json.Unmarshal([]byte(strings.TrimSpace(r.stdout)), &line); err != nil {
			t.Fatalf("%s: stdout is not one JSON line: %v\n%s", tc.name, err, r)
		}
		if key := cloudevents.IdempotencyKey(want, strconv.FormatInt(id, 10)); line.ID != strconv.FormatInt(id, 10) || line.IdempotencyKey != key {
			t.Errorf("%s: published %+v, want id %d with key %q (source %q)", tc.name, line, id, key, want)
		}
	}
}

// stats lists the relay processes as they record themselves: two `run`
// commands, two rows (text and --json), each with its owner prefix, host,
// pid and version; a stopped one says so.
func TestStats_RelaysAreTheRelayProcesses(t *testing.T) {
	t.Parallel()
	d := newDB(t)
	a := start(t, invocation{env: d.env()}, "run", "--publisher", "discard", "--owner", "relay-a", "--poll-interval", "50ms")
	b := start(t, invocation{env: d.env()}, "run", "--publisher", "discard", "--owner", "relay-b", "--poll-interval", "50ms")
	ids := d.enqueue(t, 50, "E", "a", false)
	eventually(t, 30*time.Second, "both relays recorded and every message done", func() bool {
		return d.count(t, "status <> 'done'") == 0 && d.count(t, fmt.Sprintf("id = %d AND (SELECT count(*) FROM outbox_relays WHERE stopped_at IS NULL) = 2", ids[0])) == 1
	})
	type relay struct {
		OwnerPrefix string `json:"owner_prefix"`
		Owner       string `json:"owner"`
		Host        string `json:"host"`
		PID         int    `json:"pid"`
		Version     string `json:"version"`
		State       string `json:"state"`
	}
	readRelays := func() []relay {
		r := call(t, invocation{env: d.env()}, "stats", "--json")
		wantCode(t, r, ExitOK)
		var rep struct {
			Relays []relay `json:"relays"`
		}
		if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
			t.Fatalf("stats --json: %v\n%s", err, r)
		}
		return rep.Relays
	}
	got := readRelays()
	if len(got) != 2 {
		t.Fatalf("stats --json lists %d relays, want 2: %+v", len(got), got)
	}
	for _, r := range got {
		if !strings.HasPrefix(r.OwnerPrefix, r.Owner+"/") || (r.Owner != "relay-a" && r.Owner != "relay-b") || r.Host == "" || r.PID == 0 || r.Version == "" || r.State != "running" {
			t.Errorf("relay %+v: want relay-a or relay-b, its prefix, host, pid, version, running", r)
		}
	}
	r := call(t, invocation{env: d.env()}, "stats")
	wantCode(t, r, ExitOK)
	for _, want := range []string{"relays (each relay's own record", got[0].OwnerPrefix, got[1].OwnerPrefix} {
		mustContain(t, r, "stdout", want)
	}
	wantCode(t, b.stop(t), ExitOK)
	states := map[string]string{}
	for _, r := range readRelays() {
		states[r.Owner] = r.State
	}
	if states["relay-a"] != "running" || states["relay-b"] != "stopped" {
		t.Errorf("after relay-b stopped: %v, want relay-a running, relay-b stopped", states)
	}
	wantCode(t, a.stop(t), ExitOK)
}
