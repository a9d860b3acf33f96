package dispatcher

import (
	"testing"
	"time"
)

// One line per event type per failureLogEvery: the first failure at once,
// the next after the interval with the count of those suppressed between;
// event types do not share their budget.
func TestFailureLog_OneLinePerEventTypePerInterval(t *testing.T) {
	t.Parallel()
	var f failureLog
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	steps := []struct {
		eventType      string
		at             time.Duration
		ok             bool
		wantSuppressed int
	}{
		{"OrderPaid", 0, true, 0},
		{"OrderPaid", time.Second, false, 0},
		{"OrderShipped", time.Second, true, 0},
		{"OrderPaid", 2 * time.Second, false, 0},
		{"OrderPaid", failureLogEvery, true, 2},
		{"OrderPaid", failureLogEvery + time.Second, false, 0},
		{"OrderShipped", failureLogEvery + time.Second, true, 0},
	}
	for i, s := range steps {
		ok, n := f.allow(s.eventType, t0.Add(s.at))
		if ok != s.ok || n != s.wantSuppressed {
			t.Errorf("step %d (%s at %s): allow = %v, %d; want %v, %d", i, s.eventType, s.at, ok, n, s.ok, s.wantSuppressed)
		}
	}
}
