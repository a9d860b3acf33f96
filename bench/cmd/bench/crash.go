package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/pgoutbox/pgoutbox/dispatcher"
)

// crashResult is the crash item: what SIGKILL of a relay in the middle of a
// backlog costs with every default.
type crashResult struct {
	N            int
	KilledAfter  int64         // messages the killed relay had published
	Stranded     int64         // processing rows right after the kill (its in-flight messages)
	Lease        time.Duration // the default lease
	Recovered    time.Duration // kill -> last stranded message done
	RecoveryRate float64       // stranded messages per second once their leases expired
	Drained      time.Duration // kill -> every message done
}

// runCrash is the crash item (-full, or -only crash; over a minute, since
// the default lease is): one `pgoutbox run --publisher discard` drains a
// backlog of 100,000; once it has published 20,000 it is killed with
// SIGKILL, the rows it held (status processing) are counted, and a second
// relay with every default is started at once. Measured: how long after the
// kill the last stranded message is done.
func runCrash(ctx context.Context, e *env) error {
	const n = 100_000
	if err := resetOutbox(ctx, e.outbox); err != nil {
		return err
	}
	if err := enqueueOutbox(ctx, e.outbox, n, false, 1000); err != nil {
		return err
	}
	if err := settle(ctx, e.outbox, "outbox"); err != nil {
		return err
	}
	a, err := startRelay(e.outboxURL, "discard")
	if err != nil {
		return err
	}
	var published int64
	for deadline := time.Now().Add(5 * time.Minute); published < 20_000; {
		if published, err = a.published(); err != nil {
			return err
		}
		if time.Now().After(deadline) {
			_ = a.stop()
			return fmt.Errorf("crash: the first relay published only %d in 5 minutes", published)
		}
		time.Sleep(time.Millisecond)
	}
	if err := a.cmd.Process.Signal(os.Kill); err != nil {
		return err
	}
	<-a.done
	killed := time.Now()
	r := &crashResult{N: n, Lease: dispatcher.LeaseDefault}
	if r.KilledAfter, err = countDone(ctx, e.outbox); err != nil {
		return err
	}
	if err := e.outbox.QueryRow(ctx, "SELECT count(*) FROM outbox WHERE status = 'processing'").Scan(&r.Stranded); err != nil {
		return err
	}
	b, err := startRelay(e.outboxURL, "discard")
	if err != nil {
		return err
	}
	defer b.stop() //nolint:errcheck
	for deadline := killed.Add(r.Lease + 5*time.Minute); ; {
		var notDone int64
		if err := e.outbox.QueryRow(ctx, "SELECT count(*) FROM outbox WHERE status <> 'done'").Scan(&notDone); err != nil {
			return err
		}
		if notDone == 0 {
			r.Drained = time.Since(killed)
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("crash: %d messages not done %s after the kill", notDone, time.Since(killed).Round(time.Second))
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The stranded rows are the ones claimed twice (attempts 2): the last of
	// them done, on the database clock, against the kill on the same clock.
	var lastDone *time.Time
	var twice int64
	if err := e.outbox.QueryRow(ctx, "SELECT max(done_at), count(*) FROM outbox WHERE attempts > 1").Scan(&lastDone, &twice); err != nil {
		return err
	}
	logf("crash: killed after %d published, %d stranded (processing), %d claimed twice", r.KilledAfter, r.Stranded, twice)
	if lastDone == nil {
		return fmt.Errorf("crash: no message was claimed twice (%d stranded)", r.Stranded)
	}
	var killedDB time.Time
	if err := e.outbox.QueryRow(ctx, "SELECT now() - make_interval(secs => $1)", time.Since(killed).Seconds()).Scan(&killedDB); err != nil {
		return err
	}
	r.Recovered = (*lastDone).Sub(killedDB)
	if after := r.Recovered - r.Lease; after > 0 {
		r.RecoveryRate = float64(r.Stranded) / after.Seconds()
	}
	e.res.Crash = r
	logf("crash: killed after %d published; %d stranded; last stranded done %s after the kill (lease %s; %.0f recovered/s after it); all done after %s",
		r.KilledAfter, r.Stranded, r.Recovered.Round(time.Millisecond), r.Lease, r.RecoveryRate, r.Drained.Round(time.Millisecond))
	return nil
}
