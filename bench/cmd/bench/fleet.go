package main

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgoutbox/pgoutbox/dispatcher"
)

// Item "fleet": a burst onto relays that are already running. The defaults
// rows start the relay processes on a standing backlog, so their start-up
// (four processes, their connections, the schema check, the claim size's
// first claims on cold backends) is part of what four relays are timed on.
// A fleet in production is running when the backlog lands: here the
// producers' transactions are open while the relays start and settle, and
// the backlog becomes visible when they commit, one after the other, as
// producers' commits do.

// fleetSettle is how long the relays run on the empty queue before the
// burst commits: past their start-up, their first claims and the first
// read of their queue gauges (a second after the claim loop first finds
// nothing: dispatcher/stats.go).
const fleetSettle = 3 * time.Second

// fleetTxs is the number of producer transactions the burst is made of
// (enqueueTx events each, as enqueueOutbox's).
const fleetTxs = 20

// runFleet is the item "fleet": one and four `pgoutbox run` processes,
// alternating round by round, each drains a burst of n committed while it
// runs.
func runFleet(ctx context.Context, e *env) error {
	n := fleetTxs * enqueueTx
	e.res.FleetN = n
	systems := []int{1, 4}
	for round := -1; round < e.o.rounds; round++ {
		k := (round + 1) % len(systems)
		for _, relays := range append(append([]int(nil), systems[k:]...), systems[:k]...) {
			rate, cpu, err := drainBurst(ctx, e, relays, n)
			if err != nil {
				return fmt.Errorf("%d relay(s): %w", relays, err)
			}
			logf("round %d fleet of %d: %.0f msg/s, relay CPU %s per message (load average %s)", round, relays, rate, perMessage(cpu*time.Duration(n), n), loadAverage())
			if round < 0 {
				continue
			}
			if relays == 1 {
				e.res.FleetOne = append(e.res.FleetOne, rate)
				e.res.FleetOneCPU = append(e.res.FleetOneCPU, cpu)
			} else {
				e.res.FleetFour = append(e.res.FleetFour, rate)
				e.res.FleetFourCPU = append(e.res.FleetFourCPU, cpu)
			}
		}
	}
	logf("fleet: a burst of %d onto running relays: one %.0f msg/s, four %.0f msg/s (%.2fx one)", n,
		median(e.res.FleetOne), median(e.res.FleetFour), median(e.res.FleetFour)/median(e.res.FleetOne))
	return nil
}

// drainBurst opens fleetTxs producer transactions of enqueueTx events each,
// starts k relays, lets them settle on the empty queue, commits the
// transactions and measures from the first COMMIT to the finalize that
// made the last message done (max(done_at), the database clock). It
// returns msg/s and the relays' CPU time per message (start-up and the
// idle settle included).
func drainBurst(ctx context.Context, e *env, k, n int) (float64, time.Duration, error) {
	if _, err := relayBin.get(); err != nil {
		return 0, 0, err
	}
	if err := resetOutbox(ctx, e.outbox); err != nil {
		return 0, 0, err
	}
	if err := settle(ctx, e.outbox, "outbox"); err != nil {
		return 0, 0, err
	}
	var txs []pgx.Tx
	var conns []*pgx.Conn
	defer func() {
		for _, tx := range txs {
			_ = tx.Rollback(ctx) // after a commit: pgx.ErrTxClosed, ignored
		}
		for _, c := range conns {
			_ = c.Close(ctx)
		}
	}()
	for t := 0; t < n/enqueueTx; t++ {
		c, err := pgx.Connect(ctx, e.outboxURL)
		if err != nil {
			return 0, 0, err
		}
		conns = append(conns, c)
		tx, err := c.Begin(ctx)
		if err != nil {
			return 0, 0, err
		}
		txs = append(txs, tx)
		events := benchEvents(make([]dispatcher.Event, 0, enqueueTx), t*enqueueTx, (t+1)*enqueueTx, false, 1000)
		if _, err := dispatcher.EnqueueMany(ctx, tx, events); err != nil {
			return 0, 0, err
		}
	}
	if _, err := e.outbox.Exec(ctx, "CHECKPOINT"); err != nil {
		return 0, 0, err
	}

	procs := make([]*relayProc, 0, k)
	defer func() {
		for _, p := range procs {
			_ = p.stop()
		}
	}()
	for i := 0; i < k; i++ {
		p, err := startRelay(e.outboxURL, "discard")
		if err != nil {
			return 0, 0, err
		}
		procs = append(procs, p)
	}
	// Every relay serves /metrics (it has passed its start-up checks), then
	// the settle.
	for _, p := range procs {
		for {
			if _, err := p.published(); err == nil {
				break
			}
			select {
			case err := <-p.done:
				p.done <- err
				return 0, 0, fmt.Errorf("a relay exited before the burst: %v\n%s", err, p.stderr.String())
			case <-time.After(20 * time.Millisecond):
			case <-ctx.Done():
				return 0, 0, ctx.Err()
			}
		}
	}
	select {
	case <-time.After(fleetSettle):
	case <-ctx.Done():
		return 0, 0, ctx.Err()
	}
	for _, p := range procs {
		if v, err := p.published(); err != nil || v != 0 {
			return 0, 0, fmt.Errorf("before the burst: a relay published %d, %v", v, err)
		}
	}

	var start time.Time
	if err := e.outbox.QueryRow(ctx, "SELECT clock_timestamp()").Scan(&start); err != nil {
		return 0, 0, err
	}
	// One after the other, as producers' commits come: committed all at
	// once (concurrently, 20 goroutines), four relays kept up with one
	// (tuning log, entry 21); spread over the commits, they did not.
	committing := time.Now()
	for _, tx := range txs {
		if err := tx.Commit(ctx); err != nil {
			return 0, 0, err
		}
	}
	logf("  %d relay(s): the %d commits took %s", k, len(txs), time.Since(committing).Round(time.Millisecond))
	if _, err := awaitPublished(ctx, procs, n); err != nil {
		return 0, 0, err
	}
	cpu, _, err := stopRelays(procs)
	procs = nil
	if err != nil {
		return 0, 0, err
	}
	end, err := lastDone(ctx, e.outbox)
	if err != nil {
		return 0, 0, err
	}
	done, err := countDone(ctx, e.outbox)
	if err != nil {
		return 0, 0, err
	}
	if done != int64(n) {
		return 0, 0, fmt.Errorf("%d rows done, want %d", done, n)
	}
	return float64(n) / end.Sub(start).Seconds(), cpu / time.Duration(n), nil
}
