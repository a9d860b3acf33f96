package dispatcher

import (
	"log/slog"
	"sync"
	"time"
)

// failureLogEvery is how often a dispatcher logs a delivery failure of one
// event type at most: the first failure is logged at once, the ones within
// the next failureLogEvery are counted and reported by the next line
// (suppressed).
const failureLogEvery = 10 * time.Second

// failureLogKeys bounds the event types remembered; past it the memory
// starts over (a burst of many event types then logs a line each again).
const failureLogKeys = 1024

// failureLog rate-limits the WARN lines of delivery failures per event
// type (the publisher is the dispatcher's), so a failing receiver is loud
// at the default level without one line per message.
type failureLog struct {
	mu   sync.Mutex
	keys map[string]*failureKey
}

type failureKey struct {
	at         time.Time // the last line logged
	suppressed int       // failures since, not logged
}

// allow reports whether a failure of eventType is logged now, and how many
// were suppressed since the last line.
func (f *failureLog) allow(eventType string, now time.Time) (bool, int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.keys == nil || len(f.keys) >= failureLogKeys {
		f.keys = map[string]*failureKey{}
	}
	k := f.keys[eventType]
	if k == nil {
		f.keys[eventType] = &failureKey{at: now}
		return true, 0
	}
	if now.Sub(k.at) < failureLogEvery {
		k.suppressed++
		return false, 0
	}
	n := k.suppressed
	k.at, k.suppressed = now, 0
	return true, n
}

// logFailure logs j's failed delivery at WARN, rate-limited per event type
// (failureLog): what became of it (msg), its id, attempt, error, and when
// it is tried again (nextTry < 0: never).
func (d *Dispatcher) logFailure(j *job, msg string, nextTry time.Duration) {
	ok, suppressed := d.failures.allow(j.msg.EventType, time.Now())
	if !ok {
		return
	}
	attrs := []slog.Attr{slog.String("publisher", d.breaker.dest), slog.String("event_type", j.msg.EventType),
		slog.Int64("outbox_id", j.id), slog.String("aggregate_id", j.msg.AggregateID), slog.Int("attempt", int(j.attempts)),
		slog.String("error", j.res.text)}
	if nextTry >= 0 {
		attrs = append(attrs, slog.Duration("next_try_in", nextTry))
	}
	if suppressed > 0 {
		attrs = append(attrs, slog.Int("suppressed", suppressed))
	}
	d.log.LogAttrs(j.spanCtx(), slog.LevelWarn, msg, attrs...)
}
