package inbox

import (
	"context"
	"sync"
	"sync/atomic"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

const meterName = "github.com/pgoutbox/pgoutbox/inbox"

// Stats is a snapshot of one Inbox's counters since it was created, and the
// parked gauges of its last sweep.
type Stats struct {
	Processed     int64 // handlers committed on arrival
	Duplicates    int64 // deliveries of events already received (handler not run)
	Parked        int64 // early events parked
	Released      int64 // parked events processed later, in order
	Late          int64 // ordered events older than one already processed (handler not run)
	Gaps          int64 // gaps declared, every reason
	HandlerErrors int64 // handler runs that failed (rolled back)
	Invalid       int64 // messages rejected by validation (ErrInvalidMessage)
	Purged        int64 // records deleted by retention

	// From the last sweep (every aggregate of the table, all consumers):
	ParkedNow        int64   // events parked now
	OldestParkedSecs float64 // how long the oldest parked event has waited
}

// counter indexes.
const (
	cProcessed = iota
	cDuplicate
	cParked
	cReleased
	cLate
	cHandlerError
	cInvalid
	numCounters
)

var counterNames = [numCounters]string{"processed", "duplicate", "parked", "released", "late", "handler_error", "invalid"}

type metrics struct {
	counts [numCounters]atomic.Int64
	attrs  [numCounters]metric.AddOption
	gaps   atomic.Int64
	purged atomic.Int64

	mu               sync.Mutex
	parkedNow        int64
	oldestParkedSecs float64

	messages    metric.Int64Counter
	gapCounter  metric.Int64Counter
	parkedGauge metric.Int64ObservableGauge
	ageGauge    metric.Float64ObservableGauge
	meter       metric.Meter
}

func newMetrics(mp metric.MeterProvider) (*metrics, error) {
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	m := &metrics{}
	for i, name := range counterNames {
		m.attrs[i] = metric.WithAttributeSet(attribute.NewSet(attribute.String("outcome", name)))
	}
	meter := mp.Meter(meterName)
	var err error
	if m.messages, err = meter.Int64Counter("pgoutbox.inbox.messages",
		metric.WithDescription("Messages by outcome: processed, duplicate, parked, released, late, handler_error, invalid.")); err != nil {
		return nil, err
	}
	if m.gapCounter, err = meter.Int64Counter("pgoutbox.inbox.gaps",
		metric.WithDescription("Gaps declared in an aggregate's order, by reason: skipped, timeout, overflow, start.")); err != nil {
		return nil, err
	}
	if m.parkedGauge, err = meter.Int64ObservableGauge("pgoutbox.inbox.parked", metric.WithUnit("{message}"),
		metric.WithDescription("Early events parked, waiting for their predecessor (last sweep).")); err != nil {
		return nil, err
	}
	if m.ageGauge, err = meter.Float64ObservableGauge("pgoutbox.inbox.parked.oldest_age", metric.WithUnit("s"),
		metric.WithDescription("How long the oldest parked event has waited (last sweep).")); err != nil {
		return nil, err
	}
	m.meter = meter
	return m, nil
}

// observeParked registers the callback of the parked gauges; Run
// unregisters it when it returns (the sweep that feeds them stops then).
func (m *metrics) observeParked() (metric.Registration, error) {
	return m.meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		m.mu.Lock()
		defer m.mu.Unlock()
		o.ObserveInt64(m.parkedGauge, m.parkedNow)
		o.ObserveFloat64(m.ageGauge, m.oldestParkedSecs)
		return nil
	}, m.parkedGauge, m.ageGauge)
}

func (m *metrics) add(c int) {
	m.counts[c].Add(1)
	m.messages.Add(context.Background(), 1, m.attrs[c])
}

func (m *metrics) gap(r GapReason) {
	m.gaps.Add(1)
	m.gapCounter.Add(context.Background(), 1, metric.WithAttributes(attribute.String("reason", string(r))))
}

func (m *metrics) setParked(n int64, oldest float64) {
	m.mu.Lock()
	m.parkedNow, m.oldestParkedSecs = n, oldest
	m.mu.Unlock()
}

func (m *metrics) stats() Stats {
	m.mu.Lock()
	defer m.mu.Unlock()
	return Stats{
		Processed:        m.counts[cProcessed].Load(),
		Duplicates:       m.counts[cDuplicate].Load(),
		Parked:           m.counts[cParked].Load(),
		Released:         m.counts[cReleased].Load(),
		Late:             m.counts[cLate].Load(),
		Gaps:             m.gaps.Load(),
		HandlerErrors:    m.counts[cHandlerError].Load(),
		Invalid:          m.counts[cInvalid].Load(),
		Purged:           m.purged.Load(),
		ParkedNow:        m.parkedNow,
		OldestParkedSecs: m.oldestParkedSecs,
	}
}
