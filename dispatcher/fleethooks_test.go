package dispatcher_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/pgoutbox/pgoutbox/dispatcher"
)

// countingLimiter is a Limiter of n slots that records how many it handed
// out and how many came back.
type countingLimiter struct {
	slots              chan struct{}
	acquired, released atomic.Int64
}

func newCountingLimiter(n int) *countingLimiter {
	l := &countingLimiter{slots: make(chan struct{}, n)}
	for range n {
		l.slots <- struct{}{}
	}
	return l
}

func (l *countingLimiter) Acquire(ctx context.Context) error {
	select {
	case <-l.slots:
		l.acquired.Add(1)
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (l *countingLimiter) Release() {
	l.released.Add(1)
	l.slots <- struct{}{}
}

func TestLimiterBoundsThePublishesOfSeveralDispatchers(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.enqueue(t, 300, "a", false)
	lim := newCountingLimiter(2)
	var running, most atomic.Int64
	pub := newRecorder(func(ctx context.Context, m dispatcher.Message) error {
		n := running.Add(1)
		defer running.Add(-1)
		for {
			old := most.Load()
			if n <= old || most.CompareAndSwap(old, n) {
				break
			}
		}
		// Every third message fails once: its slot must come back too.
		if m.OutboxID%3 == 0 && m.Attempt == 1 {
			return dispatcher.Retryable(errors.New("try again")) // a failure of the message: a timeout would count as an outage
		}
		return nil
	})
	for range 2 {
		b.start(t, pub, fast(dispatcher.Config{Concurrency: 8, Limiter: lim}))
	}
	waitFor(t, 60*time.Second, "every message published", func() bool { return b.count(t, "status = 'done'") == 300 })
	if got := most.Load(); got > 2 {
		t.Errorf("%d publishes ran at once across two dispatchers with Concurrency 8, want at most the limiter's 2", got)
	}
	waitFor(t, 10*time.Second, "every slot given back", func() bool { return lim.released.Load() == lim.acquired.Load() })
	if lim.acquired.Load() < 300 {
		t.Errorf("the limiter granted %d slots for at least 300 publishes", lim.acquired.Load())
	}
}

func TestLimiterWaitingAtShutdownHandsTheMessagesBack(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := b.enqueue(t, 5, "a", false)
	lim := newCountingLimiter(0) // never grants
	pub := newRecorder(nil)
	d, stop := b.start(t, pub, fast(dispatcher.Config{Limiter: lim}))
	waitFor(t, 30*time.Second, "the messages claimed", func() bool { return d.Stats().Claimed == 5 })
	stop()
	for _, id := range ids {
		if s := b.state(t, id); s.Status != "pending" || s.Attempts != 0 {
			t.Errorf("message %d after a shutdown while waiting for the limiter: %+v, want pending with its attempt refunded", id, s)
		}
	}
	if pub.published() != 0 || lim.acquired.Load() != 0 {
		t.Errorf("published %d, acquired %d: nothing may start without a slot", pub.published(), lim.acquired.Load())
	}
}

func TestWakeClaimsWithoutListenOrPoll(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pub := newRecorder(nil)
	d, _ := b.start(t, pub, fast(dispatcher.Config{DisableListen: true, PollInterval: time.Hour}))
	waitFor(t, 30*time.Second, "the claimer idle", func() bool { return d.Stats().IdleWaits > 0 })
	ids := b.enqueue(t, 1, "a", false)
	d.Wake()
	waitFor(t, 30*time.Second, "the message published after Wake", func() bool { return pub.count(ids[0]) == 1 })
}

func TestMetricAttributesOnEveryMeasurement(t *testing.T) {
	t.Parallel()
	b := setup(t)
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	b.enqueue(t, 3, "a", false)
	pub := newRecorder(nil)
	d, _ := b.start(t, pub, fast(dispatcher.Config{MeterProvider: mp, StatsInterval: 10 * time.Millisecond,
		MetricAttributes: []attribute.KeyValue{attribute.String("database", "tenant_1")}}))
	waitFor(t, 30*time.Second, "published and the gauges read", func() bool {
		return d.Stats().Published == 3 && !d.Stats().Queue.At.IsZero()
	})
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			seen[m.Name] = true
			for _, set := range attributeSets(m.Data) {
				if v, ok := set.Value("database"); !ok || v.AsString() != "tenant_1" {
					t.Errorf("%s: a data point without database=tenant_1: %v", m.Name, set.ToSlice())
				}
			}
		}
	}
	for _, name := range []string{"pgoutbox.messages.claimed", "pgoutbox.messages.outcomes", "pgoutbox.publish.duration",
		"pgoutbox.delivery.latency", "pgoutbox.finalize.batch_size", "pgoutbox.queue.depth", "pgoutbox.queue.oldest_age"} {
		if !seen[name] {
			t.Errorf("no %s collected", name)
		}
	}
}

// attributeSets are the attribute sets of every data point of data.
func attributeSets(data metricdata.Aggregation) []attribute.Set {
	var out []attribute.Set
	switch d := data.(type) {
	case metricdata.Sum[int64]:
		for _, p := range d.DataPoints {
			out = append(out, p.Attributes)
		}
	case metricdata.Gauge[int64]:
		for _, p := range d.DataPoints {
			out = append(out, p.Attributes)
		}
	case metricdata.Histogram[float64]:
		for _, p := range d.DataPoints {
			out = append(out, p.Attributes)
		}
	case metricdata.Histogram[int64]:
		for _, p := range d.DataPoints {
			out = append(out, p.Attributes)
		}
	}
	return out
}
