package cli

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/pgoutbox/pgoutbox/dispatcher"
)

// Health checks behind /healthz.
const (
	checkDB = iota
	checkPublisher
	numChecks
)

var checkNames = [numChecks]string{"database", "publisher"}

// readiness is what /healthz answers: health for one database,
// fleetReady for several (fleet_run.go).
type readiness interface{ ready() (bool, string) }

// health is the last result of each readiness check.
type health struct {
	mu      sync.Mutex
	checked [numChecks]bool
	errs    [numChecks]error
}

// set records a check result and reports whether readiness of that check
// changed.
func (h *health) set(which int, err error) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	changed := !h.checked[which] || (h.errs[which] == nil) != (err == nil)
	h.checked[which], h.errs[which] = true, err
	return changed
}

// ready reports whether every check passed, and why not.
func (h *health) ready() (bool, string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	var reasons []string
	for i := range numChecks {
		switch {
		case !h.checked[i]:
			reasons = append(reasons, checkNames[i]+": not checked yet")
		case h.errs[i] != nil:
			reasons = append(reasons, checkNames[i]+": "+compactErr(h.errs[i].Error()))
		}
	}
	return len(reasons) == 0, strings.Join(reasons, "; ")
}

func (h *health) up(which int) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.checked[which] && h.errs[which] == nil
}

// counter is one dispatcher counter exposed under the name /metrics had
// before the relay used the OpenTelemetry SDK (see the README's mapping).
type counter struct {
	name, help string
	value      func(s *dispatcher.Stats) int64
}

// counters are read from Stats() at each collection. The dispatcher's own
// instruments (pgoutbox.messages.claimed, .outcomes, the histograms and the
// queue gauges) are exported beside them by the same exporter; claimed is
// one of those already (pgoutbox_messages_claimed_total).
var counters = []counter{
	{"pgoutbox_messages_published_total", "Messages published and finalized done.", func(s *dispatcher.Stats) int64 { return s.Published }},
	{"pgoutbox_messages_retried_total", "Messages rescheduled after a retryable failure.", func(s *dispatcher.Stats) int64 { return s.Retried }},
	{"pgoutbox_messages_deferred_total", "Messages rescheduled by a business defer (attempt refunded).", func(s *dispatcher.Stats) int64 { return s.Deferred }},
	{"pgoutbox_messages_dead_total", "Messages this process sent to dead.", func(s *dispatcher.Stats) int64 { return s.Dead }},
	{"pgoutbox_messages_recovered_total", "Messages claimed from an expired lease and published alone.", func(s *dispatcher.Stats) int64 { return s.Recovered }},
	{"pgoutbox_messages_lease_lost_total", "Fenced writes that changed no row (lease taken over or reaped).", func(s *dispatcher.Stats) int64 { return s.LeaseLost }},
	{"pgoutbox_messages_released_total", "Claimed messages handed back unstarted (shutdown, near expiry, the breaker open).", func(s *dispatcher.Stats) int64 { return s.Released }},
	{"pgoutbox_messages_unavailable_total", "Publishes that found the receiver or broker unavailable: handed back, attempt refunded.", func(s *dispatcher.Stats) int64 { return s.Unavailable }},
	{"pgoutbox_breaker_opens_total", "Times the breaker opened (the receiver or broker unavailable: claiming paused, probes).", func(s *dispatcher.Stats) int64 { return s.BreakerOpens }},
	{"pgoutbox_breaker_probes_total", "Messages published as the breaker's probe.", func(s *dispatcher.Stats) int64 { return s.Probes }},
	{"pgoutbox_messages_near_expiry_total", "Messages not started because their lease was too close to expiry.", func(s *dispatcher.Stats) int64 { return s.NearExpiry }},
	{"pgoutbox_messages_unclassified_total", "Unclassified publisher errors left to lease recovery.", func(s *dispatcher.Stats) int64 { return s.Unclassified }},
	{"pgoutbox_messages_reaped_total", "Messages this process's reap sent to dead (lease expired after max attempts).", func(s *dispatcher.Stats) int64 { return s.Reaped }},
	{"pgoutbox_publisher_panics_total", "Publisher panics (treated as crashes).", func(s *dispatcher.Stats) int64 { return s.Panics }},
	{"pgoutbox_lease_extensions_total", "Lease extensions by the heartbeat.", func(s *dispatcher.Stats) int64 { return s.Heartbeats }},
	{"pgoutbox_notifications_total", "NOTIFY wake-ups received.", func(s *dispatcher.Stats) int64 { return s.Notifications }},
	{"pgoutbox_wake_window_polls_total", "Short idle waits inside a wake window after a NOTIFY.", func(s *dispatcher.Stats) int64 { return s.WakePolls }},
	{"pgoutbox_database_errors_total", "Transient database errors retried.", func(s *dispatcher.Stats) int64 { return s.DBErrors }},
	{"pgoutbox_finalize_flushes_total", "Batched finalize statements.", func(s *dispatcher.Stats) int64 { return s.Flushes }},
}

// observeRelay registers the relay's own series on meter: the counters
// above and the queue gauges under their names of before, and the health
// gauges. disp is nil until the dispatcher runs (counters read 0); the
// queue gauges appear once the dispatcher has read them.
func observeRelay(meter metric.Meter, disp *atomic.Pointer[dispatcher.Dispatcher], h *health, now func() time.Time) error {
	ri, err := newRelayInstruments(meter)
	if err != nil {
		return err
	}
	statsAge, err := meter.Float64ObservableGauge("pgoutbox_queue_stats_age_seconds",
		metric.WithDescription("Seconds since the queue gauges were read from the database."))
	if err != nil {
		return err
	}
	ready, err := meter.Int64ObservableGauge("pgoutbox_ready", metric.WithDescription("1 when /healthz answers ok."))
	if err != nil {
		return err
	}
	claimSize, err := meter.Int64ObservableGauge("pgoutbox_claim_size",
		metric.WithDescription("The current adaptive claim size (between --batch-min and --batch)."))
	if err != nil {
		return err
	}
	_, err = meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		var s dispatcher.Stats
		if d := disp.Load(); d != nil {
			s = d.Stats()
		}
		ri.observe(o, &s)
		o.ObserveInt64(claimSize, s.ClaimSize)
		if q := s.Queue; !q.At.IsZero() {
			o.ObserveFloat64(statsAge, now().Sub(q.At).Seconds())
		}
		ok, _ := h.ready()
		for i := range numChecks {
			o.ObserveInt64(ri.up, int64(boolInt(h.up(i))), metric.WithAttributes(attribute.String("dependency", checkNames[i])))
		}
		o.ObserveInt64(ready, int64(boolInt(ok)))
		return nil
	}, append(ri.all, statsAge, ready, claimSize)...)
	return err
}

// relayInstruments are the series of the relay's own that one database and
// several (fleet_run.go) have in common: the counters above, the queue
// gauges, in-flight messages, and the dependencies' health.
type relayInstruments struct {
	ctrs                []metric.Int64ObservableCounter
	queue, inFlight, up metric.Int64ObservableGauge
	all                 []metric.Observable
}

func newRelayInstruments(meter metric.Meter) (*relayInstruments, error) {
	ri := &relayInstruments{ctrs: make([]metric.Int64ObservableCounter, len(counters))}
	for i, c := range counters {
		ctr, err := meter.Int64ObservableCounter(strings.TrimSuffix(c.name, "_total"), metric.WithDescription(c.help))
		if err != nil {
			return nil, err
		}
		ri.ctrs[i] = ctr
		ri.all = append(ri.all, ctr)
	}
	var err error
	if ri.queue, err = meter.Int64ObservableGauge("pgoutbox_queue_messages",
		metric.WithDescription("Outbox messages by status (table-wide, all dispatchers).")); err != nil {
		return nil, err
	}
	if ri.inFlight, err = meter.Int64ObservableGauge("pgoutbox_messages_in_flight",
		metric.WithDescription("Messages claimed by this process and not yet finalized or handed back (what a crash would leave to lease expiry).")); err != nil {
		return nil, err
	}
	if ri.up, err = meter.Int64ObservableGauge("pgoutbox_up",
		metric.WithDescription("Whether the last check of a dependency succeeded (1) or not (0).")); err != nil {
		return nil, err
	}
	ri.all = append(ri.all, ri.queue, ri.inFlight, ri.up)
	return ri, nil
}

// observe records s's counters, in-flight messages and queue gauges, with
// attrs (the database, for several) on each.
func (ri *relayInstruments) observe(o metric.Observer, s *dispatcher.Stats, attrs ...attribute.KeyValue) {
	with := metric.WithAttributes(attrs...)
	for i, c := range counters {
		o.ObserveInt64(ri.ctrs[i], c.value(s), with)
	}
	o.ObserveInt64(ri.inFlight, s.InFlight, with)
	if q := s.Queue; !q.At.IsZero() {
		for status, n := range q.ByStatus {
			o.ObserveInt64(ri.queue, n, metric.WithAttributes(append(attrs[:len(attrs):len(attrs)], attribute.String("status", status))...))
		}
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
