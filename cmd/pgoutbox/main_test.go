package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pgoutbox/pgoutbox/dispatcher"
	"github.com/pgoutbox/pgoutbox/internal/pgtest"
)

// asPgoutbox makes the test binary run main itself: the tests start it as
// a separate process, so that a real SIGTERM reaches the real signal
// handling.
const asPgoutbox = "PGOUTBOX_TEST_AS_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(asPgoutbox) == "1" {
		main() // exits
	}
	pgtest.Main(m)
}

// pgoutbox runs the command as a process of its own against databaseURL.
func pgoutbox(databaseURL string, args ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), asPgoutbox+"=1", "DATABASE_URL="+databaseURL)
	return cmd
}

// A relay that runs for a few seconds (less than its heartbeat interval,
// as a newcomer's first run does), publishes three events and is stopped
// by SIGTERM is, in the relays view, stopped, with the claim and the
// finalize it made: not "running" (then "silent"), and not "never
// claimed". `pgoutbox stats` reads the same rows as the console.
func TestRun_SIGTERMLeavesTheRelayStoppedWithItsLastClaimAndFinalize(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	u := pgtest.NewURL(t)
	pool := pgtest.Pool(t, u)
	const events = 3
	for i := range events {
		if _, err := dispatcher.Enqueue(ctx, pool, dispatcher.Event{AggregateType: "order", AggregateID: fmt.Sprint("o-", i),
			EventType: "OrderPaid", Payload: []byte(`{}`)}); err != nil {
			t.Fatal(err)
		}
	}

	relay := pgoutbox(u, "run", "--publisher", "stdout")
	var stderr strings.Builder
	relay.Stderr = &stderr
	out, err := relay.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := relay.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = relay.Process.Kill() })
	published := make(chan int, events)
	go func() {
		sc := bufio.NewScanner(out)
		for n := 1; sc.Scan(); n++ {
			published <- n
		}
		close(published)
		_, _ = io.Copy(io.Discard, out)
	}()
	timeout := time.After(2 * time.Minute)
	for n := 0; n < events; {
		select {
		case got, ok := <-published:
			if !ok {
				t.Fatalf("the relay ended after publishing %d of %d events\n%s", n, events, stderr.String())
			}
			n = got
		case <-timeout:
			t.Fatalf("the relay published fewer than %d events in 2 minutes\n%s", events, stderr.String())
		}
	}
	if err := relay.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	for range published { // until the relay closes its stdout
	}
	if err := relay.Wait(); err != nil {
		t.Fatalf("the relay stopped by SIGTERM: %v, want exit 0\n%s", err, stderr.String())
	}

	stats, err := pgoutbox(u, "stats", "--json").Output()
	if err != nil {
		t.Fatalf("stats --json: %v", err)
	}
	var rep struct {
		Relays []dispatcher.Relay `json:"relays"`
	}
	if err := json.Unmarshal(stats, &rep); err != nil {
		t.Fatalf("stats --json: %v\n%s", err, stats)
	}
	if len(rep.Relays) != 1 {
		t.Fatalf("stats --json lists %d relays, want the one that ran: %+v", len(rep.Relays), rep.Relays)
	}
	r := rep.Relays[0]
	if r.State != dispatcher.RelayStopped || r.StoppedAt == nil || r.InFlight != 0 {
		t.Errorf("relay %s: state %q, stopped at %v, %d in flight; want stopped, nothing in flight", r.OwnerPrefix, r.State, r.StoppedAt, r.InFlight)
	}
	if r.LastClaimAt == nil || r.LastClaimAgeSeconds < 0 || r.LastFinalizeAt == nil || r.LastFinalizeAgeSeconds < 0 {
		t.Errorf("relay %s: last claim %v, last finalize %v; want both recorded (it claimed and finalized %d events)",
			r.OwnerPrefix, r.LastClaimAt, r.LastFinalizeAt, events)
	}
	if r.LastClaimAt != nil && r.LastFinalizeAt != nil && r.StoppedAt != nil &&
		(r.LastClaimAt.After(*r.LastFinalizeAt) || r.LastFinalizeAt.After(*r.StoppedAt)) {
		t.Errorf("relay %s: last claim %v, last finalize %v, stopped %v; want them in that order",
			r.OwnerPrefix, *r.LastClaimAt, *r.LastFinalizeAt, *r.StoppedAt)
	}

	text, err := pgoutbox(u, "stats").Output()
	if err != nil {
		t.Fatalf("stats: %v", err)
	}
	var line string
	for l := range strings.SplitSeq(string(text), "\n") {
		if strings.Contains(l, r.OwnerPrefix) {
			line = l
		}
	}
	if !strings.Contains(line, " stopped ") || strings.Contains(line, "never") {
		t.Errorf("stats shows the relay as %q, want it stopped, with its last claim and finalize\n%s", line, text)
	}
}
