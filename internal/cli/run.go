package cli

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/pgoutbox/pgoutbox/dispatcher"
	"github.com/pgoutbox/pgoutbox/internal/redact"
	"github.com/pgoutbox/pgoutbox/publisher/jetstream"
	"github.com/pgoutbox/pgoutbox/publisher/kafka"
	"github.com/pgoutbox/pgoutbox/publisher/rabbitmq"
	"github.com/pgoutbox/pgoutbox/publisher/stdout"
	"github.com/pgoutbox/pgoutbox/publisher/webhook"
)

// Environment variables read by run (so that secrets need not be on the
// command line, where ps shows them).
const (
	envHTTPSecret = "PGOUTBOX_HTTP_SECRET"
	envNATSURL    = "PGOUTBOX_NATS_URL"
	envAMQPURL    = "PGOUTBOX_AMQP_URL"
	envListenURL  = "PGOUTBOX_LISTEN_URL"
)

const runAbout = `Runs the relay: claims outbox messages under a lease, publishes them through
the chosen publisher, and finalizes them with fenced writes, until SIGINT or
SIGTERM (graceful shutdown: claimed messages not yet started are handed back,
publishes in flight get --shutdown-timeout; then exit 0).

Before anything is claimed, run validates every flag, pings PostgreSQL, checks
the outbox table (--table, --schema: the table, its columns and its attempt
history table, and pgoutbox's version table where there is one), and builds the
publisher: a misconfigured publisher
(malformed URL, bad template, rejected credentials) exits 1. A broker that is
merely unreachable is not fatal: run logs a warning and keeps going (nats and
amqp, which connect when built, retry connecting and claim nothing until they
are connected); /healthz says "not ready" until a publisher ping succeeds.

Publishers (--publisher):
  http      POST each message as a CloudEvent (binary mode) to --http-url;
            signed with HMAC-SHA256 when --http-secret / $PGOUTBOX_HTTP_SECRET is set
  nats      NATS JetStream, subject from --nats-subject (a Go template)
  amqp      RabbitMQ with publisher confirms, routing key from --amqp-routing-key
  kafka     Apache Kafka (idempotent, acks=all), topic --kafka-topic or --kafka-topic-template
  stdout    one JSON line per message on standard output (logs go to stderr)
  discard   drop every message (measures the relay itself)

Templates (--nats-subject, --amqp-routing-key, --kafka-topic-template) are Go
text/templates over the message: {{.AggregateType}}, {{.AggregateID}},
{{.EventType}}, {{.ID}}, {{.Headers.name}}.

Durations use Go's syntax: 200ms, 3s, 1m, 1h30m (--max-defer-age also takes
days: 7d).

With --metrics-addr, GET /metrics serves Prometheus text format and GET
/healthz answers 200 "ok" once both PostgreSQL and the publisher answer a
ping (re-checked every --health-interval), 503 with the reason otherwise.
GET /readyz is the same as /healthz (readiness); GET /livez answers 200
while the process serves (liveness: an outage of PostgreSQL or the broker
does not fail it, since restarting the relay would not help).`

const runExamples = `  export DATABASE_URL=postgres://app:secret@db:5432/app
  export PGOUTBOX_HTTP_SECRET=whsec_...
  pgoutbox run --publisher http --http-url https://hooks.example.com/outbox --metrics-addr :9090
  pgoutbox run --publisher nats --nats-url nats://nats:4222 --nats-subject 'events.{{.AggregateType}}.{{.EventType}}'
  pgoutbox run --publisher amqp --amqp-url amqp://app:secret@rabbit:5672/ --amqp-exchange events
  pgoutbox run --publisher kafka --kafka-brokers k1:9092,k2:9092 --kafka-topic-template '{{.AggregateType}}.events'
  pgoutbox run --publisher stdout --ordered --log-level debug
  pgoutbox run --publisher discard --batch 200 --concurrency 64`

// runConfig is everything run needs, validated.
type runConfig struct {
	publisher   string
	disp        dispatcher.Config
	metricsAddr string
	healthEvery time.Duration
	logLevel    slog.Level
	logJSON     bool

	http struct {
		url, secret string
		timeout     time.Duration
		deferStatus int
		unavailable []int
	}
	nats struct {
		url, subject, expectStream string
		timeout                    time.Duration
	}
	amqp struct {
		url, exchange, routingKey string
		timeout                   time.Duration
	}
	kafka struct {
		brokers         []string
		topic, template string
		timeout         time.Duration
	}
	stdoutCE bool
	ceSource string

	telemetry telemetryConfig // telemetry.go
}

var publisherNames = []string{"http", "nats", "amqp", "kafka", "stdout", "discard"}

func (a *app) runRelay(ctx context.Context, args []string) error {
	f := newFlags("run", "pgoutbox run --publisher http|nats|amqp|kafka|stdout|discard [flags]", runAbout, runExamples)
	dbURL := f.databaseURLs(true)
	fr := addFleetRunFlags(f) // fleet_run.go
	publisher := f.String("publisher", "", "where messages go: http, nats, amqp, kafka, stdout or discard (required)")

	httpURL := f.String("http-url", "", "http: receiver URL, absolute http(s) (required with --publisher http)")
	httpSecret := f.String("http-secret", "", "http: HMAC-SHA256 signing secret (default: $"+envHTTPSecret+"; prefer the variable, ps shows flags)")
	f.hidden["http-secret"] = true
	httpTimeout := f.duration("http-timeout", webhook.TimeoutDefault, "http: bound on one request")
	httpDefer := f.int64("http-defer-status", webhook.DeferStatusDefault, "http: status (400-599) meaning \"not yet\": defer without spending an attempt")
	httpUnavailable := f.String("http-unavailable-status", joinInts(webhook.UnavailableStatusDefault),
		"http: statuses (400-599, comma-separated) meaning the receiver is unavailable, not the message wrong: no attempt spent, and --breaker-threshold of them in a row pause claiming (\"\": none)")

	natsURL := f.String("nats-url", "", "nats: server URL(s), comma-separated (default: $"+envNATSURL+", else "+jetstream.URLDefault+")")
	f.hidden["nats-url"] = true
	natsSubject := f.String("nats-subject", jetstream.SubjectTemplateDefault, "nats: subject template")
	natsTimeout := f.duration("nats-timeout", jetstream.PublishTimeoutDefault, "nats: bound on one publish (until the PubAck)")
	natsStream := f.String("nats-expect-stream", "", "nats: require this stream to store every message (and to exist at ping)")

	amqpURL := f.String("amqp-url", "", "amqp: broker URI (default: $"+envAMQPURL+", else amqp://guest:guest@127.0.0.1:5672/)")
	f.hidden["amqp-url"] = true
	amqpExchange := f.String("amqp-exchange", "", "amqp: exchange to publish to (must exist; default: the default exchange)")
	amqpKey := f.String("amqp-routing-key", rabbitmq.RoutingKeyTemplateDefault, "amqp: routing key template")
	amqpTimeout := f.duration("amqp-timeout", rabbitmq.ConfirmTimeoutDefault, "amqp: bound on one publish (until the broker's confirm)")

	kafkaBrokers := f.String("kafka-brokers", "", "kafka: seed brokers host:port, comma-separated (required with --publisher kafka)")
	kafkaTopic := f.String("kafka-topic", "", "kafka: topic (required unless --kafka-topic-template; fallback when the template renders empty)")
	kafkaTemplate := f.String("kafka-topic-template", "", "kafka: topic template")
	kafkaTimeout := f.duration("kafka-timeout", kafka.ProduceTimeoutDefault, "kafka: bound on one produce (until acknowledged)")

	stdoutCE := f.Bool("stdout-cloudevents", false, "stdout: add the CloudEvents attributes (\"ce\") to each line")
	ceSource := f.String("ce-source", "", "CloudEvents source attribute; with the outbox id it forms the idempotency key consumers deduplicate on (default: pgoutbox://HOST:PORT/DATABASE/SCHEMA.TABLE, host, port and database from the database URL, schema and table as the database resolves --schema and --table, e.g. .../public.outbox with or without --schema public; give every relay of one outbox the same value)")

	owner := f.String("owner", "", "relay name; each claim writes lease_owner = owner/run-id.claim-number (default: host-pid)")
	batch := f.int64("batch", dispatcher.BatchDefault, "most messages per claim (1-10000); the claim size adapts between --batch-min and this")
	batchMin := f.int64("batch-min", 0, fmt.Sprintf("claim size used on a quiet queue; a claim that comes back full makes the next one --batch (within --batch-work) (default %d, or --batch when smaller; equal to --batch: a fixed claim size)", dispatcher.BatchMinDefault))
	batchWork := f.duration("batch-work", dispatcher.BatchWorkDefault, "most publishing work one claim takes at the measured rate (bounds what is in flight with a slow publisher, and what a crash strands)")
	lease := f.duration("lease", dispatcher.LeaseDefault, "how long a claim owns a message before another dispatcher may take it over")
	maxAttempts := f.int64("max-attempts", dispatcher.MaxAttemptsDefault, "claims after which a failing message goes to dead")
	concurrency := f.int64("concurrency", dispatcher.ConcurrencyDefault, "publishes in flight at once")
	publishTimeout := f.duration("publish-timeout", dispatcher.PublishTimeoutDefault, "bound on one publish; must be shorter than --lease unless --heartbeat is set")
	heartbeat := f.duration("heartbeat", 0, "extend the lease of a publish still running after this long (at most --lease/2; 0 = off)")
	pollInterval := f.duration("poll-interval", dispatcher.PollIntervalDefault, "how long an idle dispatcher waits before claiming again (NOTIFY wakes it sooner)")
	wakeWindow := f.duration("wake-window", dispatcher.WakeWindowDefault, "after each NOTIFY keep claiming this long at short intervals, to pick up commits that skipped their NOTIFY while another was notifying (at least 10ms)")
	claim := f.String("claim", "all", "which messages to claim: all, ordered or unordered")
	ordered := f.Bool("ordered", false, "shorthand for --claim ordered")
	unclassified := f.String("unclassified", "crash", "what an unclassified publisher error does: crash (leave to lease recovery), retry, or dead")
	shutdownTimeout := f.duration("shutdown-timeout", dispatcher.ShutdownTimeoutDefault, "how long publishes in flight may finish after SIGINT/SIGTERM")
	maxDeferAge := f.durationDays("max-defer-age", dispatcher.MaxDeferAgeDefault, "how long after created_at a message may keep being deferred before it goes to dead")
	noListen := f.Bool("no-listen", false, "do not LISTEN for NOTIFY wake-ups, poll only (PgBouncer in transaction mode, when no direct connection is available for --listen-url)")
	listenURL := f.String("listen-url", "", "PostgreSQL URL of the LISTEN connection, straight to the server when --database-url goes through PgBouncer in transaction mode (default: $"+envListenURL+", else --database-url)")
	claimTimeout := f.duration("claim-timeout", dispatcher.ClaimTimeoutDefault, "bound on one claim statement; a claim that times out while the table is locked (DDL) goes on from where it was once the lock is gone; one that fails on one row or times out otherwise falls back to claiming without payloads and reading each message alone")
	writeTimeout := f.duration("write-timeout", dispatcher.WriteTimeoutDefault, "bound on each attempt of a finalize, hand-back or lease extension (retried with backoff)")
	reapGrace := f.duration("reap-grace", dispatcher.ReapGraceDefault, "how long after its lease expired a message with every attempt spent is left to its owner before it goes to dead")
	statsInterval := f.duration("stats-interval", dispatcher.StatsIntervalDefault, "how often the queue gauges are read from the database")
	breakerThreshold := f.int64("breaker-threshold", dispatcher.BreakerThresholdDefault, "publishes in a row that find the receiver or broker unavailable (connection refused, timeout, HTTP 502/503/504, broker down) before claiming pauses and one message at a time probes it; an unavailable publish spends no attempt (0: off, such publishes spend attempts like any retry)")
	breakerProbe := f.duration("breaker-probe", dispatcher.BreakerProbeDefault, "wait before the first probe once claiming paused; it doubles after each probe that fails, up to --breaker-probe-max")
	breakerProbeMax := f.duration("breaker-probe-max", dispatcher.BreakerProbeMaxDefault, "longest wait between probes while the receiver or broker is unavailable")

	metricsAddr := f.String("metrics-addr", "", "serve /metrics and /healthz on this address, e.g. 127.0.0.1:9090 or :9090 (default: off)")
	healthEvery := f.duration("health-interval", 5*time.Second, "how often /healthz re-checks PostgreSQL and the publisher")
	logLevel := f.String("log-level", "info", "debug, info, warn or error")
	logFormat := f.String("log-format", "text", "text or json")
	telFlags := addTelemetryFlags(f)

	if _, err := a.parse(f, args, 0); err != nil {
		return err
	}

	// Validate every flag before connecting anywhere.
	var rc runConfig
	rc.publisher = *publisher
	switch {
	case rc.publisher == "":
		return f.usageError("--publisher is required: one of %s", strings.Join(publisherNames, ", "))
	case !contains(publisherNames, rc.publisher):
		return f.usageError("unknown --publisher %q: expected one of %s", rc.publisher, strings.Join(publisherNames, ", "))
	}
	var wrong []string
	f.Visit(func(fl *flag.Flag) {
		prefix, _, ok := strings.Cut(fl.Name, "-")
		if !ok || !contains([]string{"http", "nats", "amqp", "kafka", "stdout"}, prefix) {
			return
		}
		if prefix != rc.publisher {
			wrong = append(wrong, "--"+fl.Name)
		}
	})
	if len(wrong) > 0 {
		return f.usageError("%s: not a flag of --publisher %s", strings.Join(wrong, ", "), rc.publisher)
	}
	checks := []error{
		f.checkRange("batch", *batch, 1, 10000),
		f.checkRange("max-attempts", *maxAttempts, 1, math.MaxInt32),
		f.checkPositive("batch-work", *batchWork),
		f.checkRange("concurrency", *concurrency, 1, 100000),
		f.checkPositive("lease", *lease),
		f.checkPositive("publish-timeout", *publishTimeout),
		f.checkPositive("poll-interval", *pollInterval),
		f.checkPositive("wake-window", *wakeWindow),
		f.checkPositive("shutdown-timeout", *shutdownTimeout),
		f.checkPositive("max-defer-age", *maxDeferAge),
		f.checkPositive("stats-interval", *statsInterval),
		f.checkPositive("claim-timeout", *claimTimeout),
		f.checkPositive("write-timeout", *writeTimeout),
		f.checkPositive("reap-grace", *reapGrace),
		f.checkPositive("health-interval", *healthEvery),
		f.checkPositive("http-timeout", *httpTimeout),
		f.checkPositive("nats-timeout", *natsTimeout),
		f.checkPositive("amqp-timeout", *amqpTimeout),
		f.checkPositive("kafka-timeout", *kafkaTimeout),
		f.checkRange("breaker-threshold", *breakerThreshold, 0, math.MaxInt32),
		f.checkPositive("breaker-probe", *breakerProbe),
		f.checkPositive("breaker-probe-max", *breakerProbeMax),
	}
	for _, err := range checks {
		if err != nil {
			return err
		}
	}
	switch {
	case *lease < 10*time.Millisecond:
		return f.usageError("--lease must be at least 10ms, got %s", *lease)
	case *heartbeat < 0:
		return f.usageError("--heartbeat must not be negative, got %s", *heartbeat)
	case *heartbeat == 0 && *publishTimeout >= *lease:
		return f.usageError("--publish-timeout (%s) must be shorter than --lease (%s), or set --heartbeat (at most half of --lease)", *publishTimeout, *lease)
	case *heartbeat > *lease/2:
		return f.usageError("--heartbeat (%s) must be at most half of --lease (%s)", *heartbeat, *lease)
	case f.visited("batch-min") && (*batchMin < 1 || *batchMin > *batch):
		return f.usageError("--batch-min must be between 1 and --batch (%d), got %d", *batch, *batchMin)
	case *wakeWindow < 10*time.Millisecond:
		return f.usageError("--wake-window must be at least 10ms, got %s", *wakeWindow)
	}
	if *httpDefer < 400 || *httpDefer > 599 {
		return f.usageError("--http-defer-status must be an HTTP status within 400-599, got %d", *httpDefer)
	}
	unavailable, perr := parseStatuses(*httpUnavailable)
	if perr != nil {
		return f.usageError("invalid --http-unavailable-status %q: %v", *httpUnavailable, perr)
	}
	if *breakerProbeMax < *breakerProbe {
		return f.usageError("--breaker-probe-max (%s) must be at least --breaker-probe (%s)", *breakerProbeMax, *breakerProbe)
	}
	threshold := int(*breakerThreshold)
	if threshold == 0 {
		threshold = -1 // off
	}

	cfg := dispatcher.Config{
		Owner:             *owner,
		Batch:             int(*batch),
		BatchMin:          int(*batchMin),
		BatchWork:         *batchWork,
		Lease:             *lease,
		MaxAttempts:       int(*maxAttempts),
		Concurrency:       int(*concurrency),
		PublishTimeout:    *publishTimeout,
		HeartbeatInterval: *heartbeat,
		PollInterval:      *pollInterval,
		WakeWindow:        *wakeWindow,
		DisableListen:     *noListen,
		MaxDeferAge:       *maxDeferAge,
		ShutdownTimeout:   *shutdownTimeout,
		StatsInterval:     *statsInterval,
		Source:            *ceSource,
		ClaimTimeout:      *claimTimeout,
		WriteTimeout:      *writeTimeout,
		ReapGrace:         *reapGrace,
		BreakerThreshold:  threshold,
		BreakerProbe:      *breakerProbe,
		BreakerProbeMax:   *breakerProbeMax,
		Table:             a.table,
		Schema:            a.schema,
	}
	switch *claim {
	case "all":
		cfg.Claim = dispatcher.ClaimAll
	case "ordered":
		cfg.Claim = dispatcher.ClaimOrderedOnly
	case "unordered":
		cfg.Claim = dispatcher.ClaimUnorderedOnly
	default:
		return f.usageError("invalid --claim %q: expected all, ordered or unordered", *claim)
	}
	if *ordered {
		if f.visited("claim") && *claim != "ordered" {
			return f.usageError("--ordered means --claim ordered; it contradicts --claim %s", *claim)
		}
		cfg.Claim = dispatcher.ClaimOrderedOnly
	}
	switch *unclassified {
	case "crash":
		cfg.UnclassifiedErrors = dispatcher.UnclassifiedAsCrash
	case "retry":
		cfg.UnclassifiedErrors = dispatcher.UnclassifiedAsRetryable
	case "dead":
		cfg.UnclassifiedErrors = dispatcher.UnclassifiedAsPermanent
	default:
		return f.usageError("invalid --unclassified %q: expected crash, retry or dead", *unclassified)
	}
	switch strings.ToLower(*logLevel) {
	case "debug":
		rc.logLevel = slog.LevelDebug
	case "info":
		rc.logLevel = slog.LevelInfo
	case "warn", "warning":
		rc.logLevel = slog.LevelWarn
	case "error":
		rc.logLevel = slog.LevelError
	default:
		return f.usageError("invalid --log-level %q: expected debug, info, warn or error", *logLevel)
	}
	switch *logFormat {
	case "text":
	case "json":
		rc.logJSON = true
	default:
		return f.usageError("invalid --log-format %q: expected text or json", *logFormat)
	}
	if *metricsAddr != "" {
		if _, port, err := net.SplitHostPort(*metricsAddr); err != nil || port == "" {
			return f.usageError("invalid --metrics-addr %q: expected host:port, such as 127.0.0.1:9090 or :9090", *metricsAddr)
		}
	}
	rc.metricsAddr, rc.healthEvery = *metricsAddr, *healthEvery
	tc, err := telFlags.resolve(f, a.getenv, a.secrets.Add)
	if err != nil {
		return err
	}
	rc.telemetry = tc
	rc.ceSource, rc.stdoutCE = *ceSource, *stdoutCE

	switch rc.publisher {
	case "http":
		if *httpURL == "" {
			return f.usageError("--http-url is required with --publisher http (for example https://hooks.example.com/outbox)")
		}
		rc.http.url, rc.http.timeout, rc.http.deferStatus, rc.http.unavailable = *httpURL, *httpTimeout, int(*httpDefer), unavailable
		rc.http.secret = *httpSecret
		if rc.http.secret == "" {
			rc.http.secret = a.getenv(envHTTPSecret)
		}
		a.secrets.Add(rc.http.secret)
		a.secrets.Add(redact.Secrets(rc.http.url, false)...)
		if u, err := url.Parse(rc.http.url); err == nil && u.RawQuery != "" {
			for _, vs := range u.Query() {
				a.secrets.Add(vs...) // query tokens (?token=...)
			}
		}
	case "nats":
		rc.nats.url = firstNonEmpty(*natsURL, a.getenv(envNATSURL), jetstream.URLDefault)
		rc.nats.subject, rc.nats.timeout, rc.nats.expectStream = *natsSubject, *natsTimeout, *natsStream
		a.secrets.Add(redact.Secrets(rc.nats.url, true)...)
	case "amqp":
		rc.amqp.url = firstNonEmpty(*amqpURL, a.getenv(envAMQPURL), rabbitmq.URLDefault)
		rc.amqp.exchange, rc.amqp.routingKey, rc.amqp.timeout = *amqpExchange, *amqpKey, *amqpTimeout
		a.secrets.Add(redact.Secrets(rc.amqp.url, false)...)
	case "kafka":
		for b := range strings.SplitSeq(*kafkaBrokers, ",") {
			if b = strings.TrimSpace(b); b != "" {
				rc.kafka.brokers = append(rc.kafka.brokers, b)
			}
		}
		if len(rc.kafka.brokers) == 0 {
			return f.usageError("--kafka-brokers is required with --publisher kafka (for example kafka1:9092,kafka2:9092)")
		}
		if *kafkaTopic == "" && *kafkaTemplate == "" {
			return f.usageError("--kafka-topic or --kafka-topic-template is required with --publisher kafka")
		}
		rc.kafka.topic, rc.kafka.template, rc.kafka.timeout = *kafkaTopic, *kafkaTemplate, *kafkaTimeout
	}

	if f.isFleet() {
		rc.disp = cfg
		return a.relayFleet(ctx, rc, f, fr, *listenURL) // fleet_run.go
	}
	d, err := a.resolveDatabase(f, *dbURL)
	if err != nil {
		return err
	}
	if err := a.resolveListenURL(f, &cfg, *listenURL); err != nil {
		return err
	}
	rc.disp = cfg
	return a.relay(ctx, rc, d)
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

func firstNonEmpty(values ...string) string {
	for _, v := range values {
		if v != "" {
			return v
		}
	}
	return ""
}

// relay runs the daemon with a validated configuration.
func (a *app) relay(ctx context.Context, rc runConfig, d *database) error {
	log, tel, err := a.relayTelemetry(ctx, &rc) // fleet_run.go
	if err != nil {
		return err
	}
	defer tel.shutdown(ctx, log)

	// The pool connects lazily: creating it lets dispatcher.New check the
	// dispatcher configuration before anything is contacted.
	pool, err := pgxpool.NewWithConfig(ctx, d.cfg)
	if err != nil {
		return failf("cannot reach PostgreSQL at %s: %s; check %s", d.redacted, a.secrets.Scrub(err.Error()), d.source)
	}
	defer pool.Close()
	if _, err := dispatcher.New(pool, stdout.Discard{}, rc.disp); err != nil {
		return failf("run: %s", strings.TrimPrefix(err.Error(), dispatcher.ErrInvalidConfig.Error()+": "))
	}

	spec := a.publisherSpec(rc, log)
	var pub dispatcher.Publisher
	var closePub func()
	defer func() {
		if closePub != nil {
			closePub()
		}
	}()
	// Publishers that do not connect when built are built now, so a
	// misconfiguration fails before the database is contacted.
	if !spec.connects {
		pub, closePub, err = spec.build(ctx)
		if err != nil {
			return a.publisherError(rc.publisher, spec, err)
		}
	}

	// The database first: a relay that cannot start says why, not its
	// settings and then why.
	if err := a.ping(ctx, pool); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return failf("cannot reach PostgreSQL at %s: %s; check %s", d.redacted, a.secrets.Scrub(compactErr(err.Error())), d.source)
	}
	if err := a.checkSchema(ctx, pool); err != nil {
		return err
	}
	log.Info("pgoutbox run starting", a.startupAttrs(rc, d)...)
	if rc.disp.Source == "" {
		rc.disp.Source = a.defaultSource(d)
	}

	h := &health{}
	h.set(checkDB, nil)
	var disp atomic.Pointer[dispatcher.Dispatcher]
	if rc.metricsAddr != "" {
		if err := observeRelay(tel.meter(), &disp, h, time.Now); err != nil {
			return failf("run: metrics: %s", err)
		}
		stop, err := a.serveMetrics(ctx, rc.metricsAddr, h, tel.metricsHandler(), log)
		if err != nil {
			return err
		}
		defer stop()
	}

	if spec.connects {
		pub, closePub, err = a.connectPublisher(ctx, rc, spec, h, log)
		if err != nil {
			return err
		}
		if pub == nil { // interrupted while waiting
			log.Info("pgoutbox run stopped before the publisher connected")
			return nil
		}
	}

	pinger, _ := pub.(dispatcher.Pinger)
	if pinger != nil {
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := pinger.Ping(pctx)
		cancel()
		if err != nil && ctx.Err() == nil {
			h.set(checkPublisher, err)
			log.Warn("publisher is not reachable; starting anyway (messages are retried with backoff; /healthz stays not ready until a ping succeeds)",
				slog.String("publisher", rc.publisher), slog.String("error", a.secrets.Scrub(err.Error())))
		} else {
			h.set(checkPublisher, nil)
		}
	} else {
		h.set(checkPublisher, nil)
	}
	if rc.metricsAddr != "" {
		go a.healthLoop(ctx, rc.healthEvery, pool, pinger, h, log)
	}

	dp, err := dispatcher.New(pool, pub, rc.disp)
	if err != nil {
		return failf("run: %s", err)
	}
	disp.Store(dp)
	log.Info("dispatching", slog.String("owner", dp.Owner()), slog.String("source", dp.Source()))
	defer tuneRelayGC(a.getenv)() // gc.go
	if err := dp.Run(ctx); err != nil {
		return failf("run: %s", a.secrets.Scrub(err.Error()))
	}
	s := dp.Stats()
	log.Info("pgoutbox run stopped", slog.Int64("published", s.Published), slog.Int64("retried", s.Retried),
		slog.Int64("dead", s.Dead), slog.Int64("released", s.Released), slog.Int64("unavailable", s.Unavailable),
		slog.Int64("breaker_opens", s.BreakerOpens))
	return nil
}

// The flags that set each publisher's Config fields: its errors (a
// message's last_error, the log) name the flag to fix, not the field.
var (
	httpFields = map[string]string{"URL": "--http-url", "Secret": "--http-secret ($" + envHTTPSecret + ")", "Timeout": "--http-timeout",
		"DeferStatus": "--http-defer-status", "UnavailableStatus": "--http-unavailable-status"}
	natsFields = map[string]string{"URL": "--nats-url", "SubjectTemplate": "--nats-subject", "PublishTimeout": "--nats-timeout",
		"ExpectStream": "--nats-expect-stream"}
	amqpFields = map[string]string{"URL": "--amqp-url", "Exchange": "--amqp-exchange", "RoutingKeyTemplate": "--amqp-routing-key",
		"ConfirmTimeout": "--amqp-timeout"}
	kafkaFields = map[string]string{"Brokers": "--kafka-brokers", "Topic": "--kafka-topic", "TopicTemplate": "--kafka-topic-template",
		"ProduceTimeout": "--kafka-timeout"}
)

// parseStatuses parses a comma-separated list of HTTP statuses within
// 400-599 ("" is none).
func parseStatuses(s string) ([]int, error) {
	out := []int{}
	for field := range strings.SplitSeq(s, ",") {
		if field = strings.TrimSpace(field); field == "" {
			continue
		}
		n, err := strconv.Atoi(field)
		if err != nil || n < 400 || n > 599 {
			return nil, fmt.Errorf("%q is not an HTTP status within 400-599", field)
		}
		out = append(out, n)
	}
	return out, nil
}

func joinInts(ns []int) string {
	s := make([]string, len(ns))
	for i, n := range ns {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ",")
}

// pubSpec builds one kind of publisher.
type pubSpec struct {
	connects bool   // New dials the broker (nats, amqp)
	hint     string // flags to check on a config error
	build    func(ctx context.Context) (dispatcher.Publisher, func(), error)
}

func (a *app) publisherSpec(rc runConfig, log *slog.Logger) pubSpec {
	plog := log.With(slog.String("publisher", rc.publisher))
	switch rc.publisher {
	case "http":
		return pubSpec{hint: "--http-url, --http-timeout, --http-defer-status", build: func(context.Context) (dispatcher.Publisher, func(), error) {
			p, err := webhook.New(webhook.Config{URL: rc.http.url, Secret: rc.http.secret, Source: rc.ceSource,
				Timeout: rc.http.timeout, DeferStatus: rc.http.deferStatus, UnavailableStatus: rc.http.unavailable, FieldNames: httpFields})
			if err != nil {
				return nil, nil, err
			}
			return p, func() { _ = p.Close() }, nil
		}}
	case "nats":
		return pubSpec{connects: true, hint: "--nats-url, --nats-subject, --nats-expect-stream", build: func(ctx context.Context) (dispatcher.Publisher, func(), error) {
			p, err := jetstream.New(ctx, jetstream.Config{URL: rc.nats.url, SubjectTemplate: rc.nats.subject, Source: rc.ceSource,
				PublishTimeout: rc.nats.timeout, ExpectStream: rc.nats.expectStream, Logger: plog, FieldNames: natsFields})
			if err != nil {
				return nil, nil, err
			}
			return p, func() { _ = p.Close() }, nil
		}}
	case "amqp":
		return pubSpec{connects: true, hint: "--amqp-url, --amqp-exchange, --amqp-routing-key", build: func(ctx context.Context) (dispatcher.Publisher, func(), error) {
			p, err := rabbitmq.New(ctx, rabbitmq.Config{URL: rc.amqp.url, Exchange: rc.amqp.exchange, RoutingKeyTemplate: rc.amqp.routingKey,
				Source: rc.ceSource, ConfirmTimeout: rc.amqp.timeout, Logger: plog, FieldNames: amqpFields})
			if err != nil {
				return nil, nil, err
			}
			return p, func() { _ = p.Close() }, nil
		}}
	case "kafka":
		return pubSpec{hint: "--kafka-brokers, --kafka-topic, --kafka-topic-template", build: func(context.Context) (dispatcher.Publisher, func(), error) {
			p, err := kafka.New(kafka.Config{Brokers: rc.kafka.brokers, Topic: rc.kafka.topic, TopicTemplate: rc.kafka.template,
				Source: rc.ceSource, ProduceTimeout: rc.kafka.timeout, Logger: plog, FieldNames: kafkaFields})
			if err != nil {
				return nil, nil, err
			}
			return p, func() { _ = p.Close() }, nil
		}}
	case "stdout":
		return pubSpec{build: func(context.Context) (dispatcher.Publisher, func(), error) {
			p, err := stdout.New(stdout.Config{Writer: a.stdout, CloudEvents: rc.stdoutCE, Source: rc.ceSource})
			return p, nil, err
		}}
	}
	return pubSpec{build: func(context.Context) (dispatcher.Publisher, func(), error) { return stdout.Discard{}, nil, nil }}
}

// isConfigError tells a misconfiguration (exit 1 now) from a broker that is
// merely unreachable (retry).
func isConfigError(err error) bool {
	return errors.Is(err, dispatcher.ErrInvalidConfig) ||
		errors.Is(err, amqp.ErrCredentials) || errors.Is(err, amqp.ErrVhost) || errors.Is(err, amqp.ErrSASL) ||
		errors.Is(err, nats.ErrAuthorization) || errors.Is(err, nats.ErrAuthExpired) || errors.Is(err, nats.ErrAuthRevoked)
}

func (a *app) publisherError(name string, spec pubSpec, err error) error {
	msg := strings.TrimPrefix(a.secrets.Scrub(err.Error()), dispatcher.ErrInvalidConfig.Error()+": ")
	if spec.hint != "" {
		return failf("--publisher %s is misconfigured: %s; check %s", name, msg, spec.hint)
	}
	return failf("--publisher %s is misconfigured: %s", name, msg)
}

// connectPublisher builds a publisher that dials its broker, retrying with
// backoff while the broker is unreachable. It returns a nil publisher when
// ctx ends first.
func (a *app) connectPublisher(ctx context.Context, rc runConfig, spec pubSpec, h *health, log *slog.Logger) (dispatcher.Publisher, func(), error) {
	delay := time.Second
	for {
		pub, closer, err := spec.build(ctx)
		if err == nil {
			return pub, closer, nil
		}
		if ctx.Err() != nil {
			return nil, nil, nil
		}
		if isConfigError(err) {
			return nil, nil, a.publisherError(rc.publisher, spec, err)
		}
		h.set(checkPublisher, fmt.Errorf("not connected: %w", err))
		log.Warn("publisher is not reachable; retrying (nothing is claimed until it connects)",
			slog.String("publisher", rc.publisher), slog.String("error", a.secrets.Scrub(err.Error())),
			slog.Duration("retry_in", delay))
		select {
		case <-ctx.Done():
			return nil, nil, nil
		case <-time.After(delay):
		}
		delay = min(2*delay, 30*time.Second)
	}
}

// startupAttrs is the configuration logged at startup: no secret, no
// password, no webhook path (it often embeds a token).
func (a *app) startupAttrs(rc runConfig, d *database) []any {
	c := rc.disp
	attrs := []any{
		slog.String("publisher", rc.publisher),
		slog.String("database", d.redacted),
		slog.String("claim", c.Claim.String()),
		slog.Int("batch", c.Batch),
		slog.Int("batch_min", cmp.Or(c.BatchMin, min(dispatcher.BatchMinDefault, c.Batch))),
		slog.Duration("batch_work", c.BatchWork),
		slog.Duration("lease", c.Lease),
		slog.Int("max_attempts", c.MaxAttempts),
		slog.Int("concurrency", c.Concurrency),
		slog.Duration("publish_timeout", c.PublishTimeout),
		slog.Duration("heartbeat", c.HeartbeatInterval),
		slog.Duration("poll_interval", c.PollInterval),
		slog.Duration("wake_window", c.WakeWindow),
		slog.Duration("shutdown_timeout", c.ShutdownTimeout),
		slog.Duration("max_defer_age", c.MaxDeferAge),
		slog.String("unclassified", []string{"crash", "retry", "dead"}[c.UnclassifiedErrors]),
		slog.Int("breaker_threshold", max(c.BreakerThreshold, 0)),
		slog.Duration("breaker_probe", c.BreakerProbe),
		slog.Duration("breaker_probe_max", c.BreakerProbeMax),
		slog.Bool("listen", !c.DisableListen),
	}
	if c.ListenURL != "" {
		attrs = append(attrs, slog.String("listen_url", redact.URL(c.ListenURL, false)))
	}
	if c.Owner != "" {
		attrs = append(attrs, slog.String("owner", c.Owner))
	}
	switch rc.publisher {
	case "http":
		host := "?"
		if u, err := url.Parse(rc.http.url); err == nil {
			host = u.Scheme + "://" + u.Host
		}
		attrs = append(attrs, slog.String("http_receiver", host), slog.Bool("http_signed", rc.http.secret != ""),
			slog.Duration("http_timeout", rc.http.timeout))
	case "nats":
		attrs = append(attrs, slog.String("nats_url", redact.URL(rc.nats.url, true)), slog.String("nats_subject", rc.nats.subject))
	case "amqp":
		attrs = append(attrs, slog.String("amqp_url", redact.URL(rc.amqp.url, false)), slog.String("amqp_exchange", rc.amqp.exchange),
			slog.String("amqp_routing_key", rc.amqp.routingKey))
	case "kafka":
		attrs = append(attrs, slog.String("kafka_brokers", strings.Join(rc.kafka.brokers, ",")),
			slog.String("kafka_topic", rc.kafka.topic), slog.String("kafka_topic_template", rc.kafka.template))
	}
	if rc.metricsAddr != "" {
		attrs = append(attrs, slog.String("metrics_addr", rc.metricsAddr))
	}
	attrs = append(attrs, rc.telemetry.logAttrs()...)
	return attrs
}

// serveMetrics binds addr and serves /metrics and /healthz until stop.
func (a *app) serveMetrics(ctx context.Context, addr string, h readiness, metrics http.Handler, log *slog.Logger) (func(), error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, failf("cannot listen on --metrics-addr %s: %s", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", metrics) // the OpenTelemetry Prometheus exporter (telemetry.go)
	ready := func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		ok, reason := h.ready()
		if !ok {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintf(w, "not ready: %s\n", a.secrets.Scrub(reason))
			return
		}
		fmt.Fprintln(w, "ok")
	}
	// /healthz and /readyz: readiness (PostgreSQL and the publisher answer).
	// /livez: liveness only (the process serves HTTP): a database or broker
	// outage is not cured by restarting the relay, so an orchestrator's
	// liveness probe must not fail on it.
	mux.HandleFunc("GET /healthz", ready)
	mux.HandleFunc("GET /readyz", ready)
	mux.HandleFunc("GET /livez", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		fmt.Fprintln(w, "ok")
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	log.Info("metrics listening", slog.String("addr", ln.Addr().String()))
	if a.metricsListening != nil {
		a.metricsListening(ln.Addr())
	}
	return func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}, nil
}

// healthLoop re-checks PostgreSQL and the publisher every interval, logging
// each change.
func (a *app) healthLoop(ctx context.Context, every time.Duration, pool *pgxpool.Pool, pinger dispatcher.Pinger, h *health, log *slog.Logger) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		// At least 1s: a short --health-interval must not turn a slow
		// (busy, not down) database or broker into "not ready".
		timeout := max(min(every, 5*time.Second), time.Second)
		cctx, cancel := context.WithTimeout(ctx, timeout)
		err := pool.Ping(cctx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		a.logChange(log, h, checkDB, err, "PostgreSQL")
		if pinger != nil {
			cctx, cancel := context.WithTimeout(ctx, timeout)
			err := pinger.Ping(cctx)
			cancel()
			if ctx.Err() != nil {
				return
			}
			a.logChange(log, h, checkPublisher, err, "publisher")
		}
	}
}

func (a *app) logChange(log *slog.Logger, h *health, which int, err error, what string) {
	if !h.set(which, err) {
		return
	}
	if err != nil {
		log.Warn(what+" is not reachable; /healthz not ready", slog.String("error", a.secrets.Scrub(err.Error())))
	} else {
		log.Info(what + " is reachable again")
	}
}
