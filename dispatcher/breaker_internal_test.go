package dispatcher

import (
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"
)

func testBreaker(threshold int) *breaker {
	return newBreaker(Config{BreakerThreshold: threshold, BreakerProbe: time.Nanosecond, BreakerProbeMax: time.Microsecond},
		"test", slog.New(slog.NewTextHandler(io.Discard, nil)))
}

// The breaker's states: threshold refunded failures open it; the claimer
// arms a probe; the first job a worker takes is the probe, the others are
// handed back; a probe that still finds the destination down re-opens it,
// and any publish that reaches the destination closes it, even one that
// ends while a probe is out (that probe's failure then re-opens nothing).
func TestBreaker_States(t *testing.T) {
	t.Parallel()
	b := testBreaker(3)
	down := errors.New("503")
	for i := range 3 {
		if !b.unavailable(time.Now(), time.Now(), down, 0, false) {
			t.Fatalf("failure %d: not refunded with nothing delivered", i)
		}
	}
	if !b.holding() {
		t.Fatal("3 failures in a row, threshold 3: the breaker is closed")
	}
	if publish, _ := b.admit(); publish {
		t.Fatal("open: a job was admitted")
	}
	time.Sleep(time.Millisecond) // past nextProbe
	b.armProbe()
	if publish, probe := b.admit(); !publish || !probe {
		t.Fatalf("probe due: admit = %v, %v; want the probe", publish, probe)
	}
	if publish, _ := b.admit(); publish {
		t.Fatal("probing: a second job was admitted")
	}
	if !b.unavailable(time.Now(), time.Now(), down, 0, true) {
		t.Fatal("the probe's failure was not refunded")
	}
	if s, _, _ := b.status(); s != breakerOpen || b.probed.Load() != 1 {
		t.Fatalf("after a failed probe: state %d, probes %d; want open, 1", s, b.probed.Load())
	}
	time.Sleep(time.Millisecond)
	b.armProbe()
	if _, probe := b.admit(); !probe {
		t.Fatal("no second probe")
	}
	b.reached() // a publish started before the outage got through
	if b.holding() {
		t.Fatal("a publish reached the destination: the breaker is still open")
	}
	b.unavailable(time.Now().Add(-time.Hour), time.Now(), down, 0, true) // the probe's late verdict
	if b.holding() {
		t.Fatal("a probe's failure after the breaker closed re-opened it")
	}
	if b.opens.Load() != 1 {
		t.Errorf("opened %d times, want 1", b.opens.Load())
	}
}

// A publish during which another got through is about its message: not
// refunded, and it does not count towards opening. One that another got
// through only after it ended is refunded.
func TestBreaker_FailureWhileADeliveryGotThroughIsTheMessages(t *testing.T) {
	t.Parallel()
	b := testBreaker(1)
	start := time.Now()
	b.reached()
	end := time.Now()
	if b.unavailable(start, end, errors.New("503"), 0, false) {
		t.Error("refunded although a publish got through while it ran")
	}
	if b.holding() {
		t.Error("opened on a failure that was not refunded")
	}
	b.reached() // after end
	if !b.unavailable(start, end, errors.New("503"), 0, false) {
		t.Error("not refunded although the only delivery since it started came after it ended")
	}
}

// Off (a negative threshold): nothing is refunded, nothing opens.
func TestBreaker_Off(t *testing.T) {
	t.Parallel()
	b := testBreaker(-1)
	for range 100 {
		if b.unavailable(time.Now(), time.Now(), errors.New("503"), 0, false) {
			t.Fatal("refunded with the breaker off")
		}
	}
	if b.holding() {
		t.Fatal("opened with the breaker off")
	}
}
