package dispatcher_test

import (
	"context"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/pgoutbox/pgoutbox/dispatcher"
)

// outageProbes is how many probes a 24-hour outage takes at the default
// BreakerProbeMax (30 s): the tests below run that many at a short scale.
// Nothing a probe does depends on the time between probes: a probe's
// attempt is refunded by the same fenced write that hands it back.
const outageProbes = 24 * 60 * 2

// breakerGauge reads pgoutbox.breaker.open from reader.
func breakerGauge(t *testing.T, reader *sdkmetric.ManualReader) (int64, bool) {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if g, ok := m.Data.(metricdata.Gauge[int64]); ok && m.Name == "pgoutbox.breaker.open" && len(g.DataPoints) == 1 {
				return g.DataPoints[0].Value, true
			}
		}
	}
	return 0, false
}

// orderLog records, per aggregate, the outbox ids a receiver accepted, in
// the order it accepted them.
type orderLog struct {
	mu  sync.Mutex
	ids map[string][]int64
}

func (o *orderLog) record(r *http.Request) {
	id, _ := strconv.ParseInt(r.Header.Get("ce-id"), 10, 64)
	o.mu.Lock()
	defer o.mu.Unlock()
	o.ids[r.Header.Get("ce-subject")] = append(o.ids[r.Header.Get("ce-subject")], id)
}

// A receiver down for what would be a day of probes at the default
// BreakerProbeMax: the breaker opens, claims stop (only probes claim, one
// message each), no attempt is spent and nothing goes to dead; the gauge
// and the log say so. When the receiver is back the first probe closes
// the breaker and the backlog drains, each ordered aggregate in commit
// order, every message delivered on its first counted attempt.
func TestBreaker_OutageBurnsNoAttemptsThenDrainsInCommitOrder(t *testing.T) {
	t.Parallel()
	b := setup(t)
	order := &orderLog{ids: map[string][]int64{}}
	rc := newReceiver(t, http.StatusServiceUnavailable)
	rc.handle = func(r *http.Request) {
		if rc.status.Load() == http.StatusNoContent {
			order.record(r)
		}
	}
	b.enqueue(t, 200, "unordered", false)
	var aggs []string
	for i := range 10 {
		agg := "agg-" + strconv.Itoa(i)
		aggs = append(aggs, agg)
		b.enqueue(t, 10, agg, true)
	}
	var logs syncBuffer
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	d, _ := b.start(t, rc.publisher(t), fast(dispatcher.Config{
		// A lease no busy machine outlasts: a takeover would count an attempt.
		Lease: time.Minute, Batch: 50, BatchMin: 50, MaxAttempts: 2, BreakerProbe: time.Millisecond, BreakerProbeMax: time.Millisecond,
		MeterProvider: mp, Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo})),
	}))
	waitFor(t, 30*time.Second, "the breaker open", func() bool { return d.Stats().BreakerOpen })
	if v, ok := breakerGauge(t, reader); !ok || v != 1 {
		t.Errorf("pgoutbox.breaker.open = %d (reported: %v) while open, want 1", v, ok)
	}
	open := d.Stats()
	waitFor(t, 5*time.Minute, "a day's worth of probes", func() bool { return d.Stats().Probes-open.Probes >= outageProbes })
	during := d.Stats()
	if claims, probes := during.Claimed-open.Claimed, during.Probes-open.Probes; claims > probes+100 {
		t.Errorf("%d messages claimed during %d probes: claims did not stop", claims, probes)
	}
	if n := b.count(t, "status = 'dead' OR (status = 'pending' AND attempts > 0)"); n != 0 {
		t.Fatalf("%d messages dead or with an attempt spent during the outage, want 0", n)
	}

	rc.status.Store(http.StatusNoContent)
	waitFor(t, 60*time.Second, "every message delivered", func() bool { return b.count(t, "status = 'done'") == 300 })
	if n := b.count(t, "attempts <> 1"); n != 0 {
		t.Errorf("%d messages took more than their one counted attempt", n)
	}
	after := d.Stats()
	if after.BreakerOpen || after.BreakerOpens < 1 || after.Dead != 0 {
		t.Errorf("after the outage: open %v, opens %d, dead %d; want closed, at least 1, 0", after.BreakerOpen, after.BreakerOpens, after.Dead)
	}
	if v, ok := breakerGauge(t, reader); !ok || v != 0 {
		t.Errorf("pgoutbox.breaker.open = %d (reported: %v) after the outage, want 0", v, ok)
	}
	order.mu.Lock()
	for _, agg := range aggs {
		ids := order.ids[agg]
		if len(ids) != 10 || !slices.IsSorted(ids) {
			t.Errorf("aggregate %s delivered %v, want its 10 events in commit order", agg, ids)
		}
	}
	order.mu.Unlock()
	for _, want := range []string{"breaker open", "breaker closed"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("no log line saying %q", want)
		}
	}
}

// With the breaker off (a negative BreakerThreshold), an unavailable
// receiver costs attempts as any retryable failure does.
func TestBreaker_OffSpendsAttempts(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rc := newReceiver(t, http.StatusServiceUnavailable)
	b.enqueue(t, 20, "a", false)
	d, _ := b.start(t, rc.publisher(t), fast(dispatcher.Config{MaxAttempts: 2, BreakerThreshold: -1}))
	waitFor(t, 30*time.Second, "every message dead", func() bool { return b.count(t, "status = 'dead'") == 20 })
	if s := d.Stats(); s.BreakerOpens != 0 || s.Unavailable != 0 {
		t.Errorf("breaker off: %d opens, %d refunded; want 0 and 0", s.BreakerOpens, s.Unavailable)
	}
}

// A probe the receiver refuses for a reason of the message's own (422)
// shows the receiver is back: the breaker closes and each message spends
// its attempt as a message-level failure. (A publish that got its 503 just
// before the receiver switched, while another got its 422, counts as that
// message's own failure: at most one attempt more.)
func TestBreaker_MessageLevelAnswerClosesIt(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rc := newReceiver(t, http.StatusServiceUnavailable)
	b.enqueue(t, 30, "a", false)
	d, _ := b.start(t, rc.publisher(t), fast(dispatcher.Config{Lease: time.Minute, MaxAttempts: 5,
		BreakerProbe: 5 * time.Millisecond, BreakerProbeMax: 5 * time.Millisecond}))
	waitFor(t, 30*time.Second, "the breaker open and probing", func() bool { s := d.Stats(); return s.BreakerOpen && s.Probes >= 3 })
	rc.status.Store(http.StatusUnprocessableEntity)
	waitFor(t, 30*time.Second, "every message dead", func() bool { return b.count(t, "status = 'dead'") == 30 })
	if s := d.Stats(); s.BreakerOpen {
		t.Error("the breaker is still open after the receiver answered 422")
	}
	if n := b.count(t, "attempts > 2 OR attempts < 1"); n != 0 {
		t.Errorf("%d dead messages with other than the one attempt the 422 cost (two at the switch)", n)
	}
}
