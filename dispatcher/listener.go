package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
)

// listen holds one dedicated connection (outside the pool) in LISTEN on the
// outbox channel and turns every notification into a wake-up of the claimer
// followed by a wake window (Config.WakeWindow) of short idle waits, which
// covers the commits that skipped their NOTIFY while another was notifying.
// A notification is a hint only: polling remains the fallback, and after
// every (re)connect the claimer is woken to pick up what was inserted while
// nobody listened. It reconnects with backoff until ctx ends.
func (d *Dispatcher) listen(ctx context.Context) {
	failures := 0
	for ctx.Err() == nil {
		err := d.listenOnce(ctx)
		if ctx.Err() != nil {
			return
		}
		failures++
		delay := max(FullJitter(failures, 100*time.Millisecond, DatabaseRetryMaxDefault), 50*time.Millisecond)
		d.log.Warn("listen connection lost; polling until it is back", slog.Any("error", err),
			slog.Duration("retry_in", delay))
		select {
		case <-time.After(delay):
		case <-ctx.Done():
			return
		}
	}
}

func (d *Dispatcher) listenOnce(ctx context.Context) error {
	cfg := d.pool.Config().ConnConfig.Copy()
	if d.listenC != nil {
		cfg = d.listenC.Copy()
	}
	cctx, cancel := context.WithTimeout(ctx, d.cfg.ClaimTimeout)
	conn, err := pgx.ConnectConfig(cctx, cfg)
	cancel()
	if err != nil {
		return err
	}
	defer func() {
		closeCtx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		conn.Close(closeCtx)
	}()
	tuneConn(conn.PgConn().Conn())
	sctx, cancel := context.WithTimeout(ctx, d.cfg.WriteTimeout)
	err = PrepareSession(sctx, conn)
	cancel()
	if err != nil {
		return err
	}
	// LISTEN takes no parameters; the channel name was validated as a plain
	// identifier in Config.validate and is quoted here.
	lctx, cancel := context.WithTimeout(ctx, d.cfg.WriteTimeout)
	_, err = conn.Exec(lctx, "LISTEN "+pgx.Identifier{d.cfg.Channel}.Sanitize())
	cancel()
	if err != nil {
		return err
	}
	bc := &busyConn{q: d.listenQueries(conn)}
	lctx, cancel = context.WithTimeout(ctx, d.cfg.WriteTimeout)
	err = bc.q.OutboxWakeSession(lctx, idleAwaitTimeout.String())
	cancel()
	if err != nil {
		return err
	}
	// The idle lock before the first claim: from here on producers notify
	// (busy.go), and the claim below sees what they committed before.
	covered, err := d.takeIdle(ctx, bc, true)
	if err != nil {
		return err
	}
	bc.covered = covered // if not, taken by a later try, which wakes the claimer
	d.busy.settled.Store(covered)
	d.busy.canBusy.Store(d.cfg.Claim == ClaimAll)
	d.busy.listening.Store(true)
	defer d.busy.listening.Store(false)
	defer d.busy.settled.Store(false)
	d.log.Debug("listening", slog.String("channel", d.cfg.Channel))
	d.notified()
	// Counted after the wake-up is armed: whoever sees Stats().Listens move
	// knows LISTEN is registered and the claimer has been asked to claim.
	d.metrics.listens.Add(1)
	for {
		// The claimer's wish first: busy (the idle lock given up, producers
		// queue no wake-up) or waiting (busy.go).
		wishes := d.busy.wishes.Load()
		if err := d.syncBusy(ctx, bc); err != nil {
			return err
		}
		d.busy.synced.Store(wishes)
		// Wait at most ListenPing for a notification, then check that the
		// server still answers: a connection that silently stopped
		// forwarding would otherwise wait here for ever while the claimer
		// believes NOTIFY still works. A timed-out wait leaves the
		// connection usable (pgconn closes it only on other errors). A new
		// wish of the claimer ends the wait early; so does an idle lock
		// not taken (producers' transactions in flight, or another relay's),
		// to try again.
		wait := d.cfg.ListenPing
		if !d.busy.want.Load() && !bc.held {
			wait = min(wait, bc.retry())
		}
		wctx, cancel := context.WithTimeout(ctx, wait)
		poked := make(chan struct{})
		go func() {
			defer close(poked)
			select {
			case <-d.busy.poke:
				cancel()
			case <-wctx.Done():
			}
		}()
		_, err := conn.WaitForNotification(wctx)
		cancel()
		<-poked
		if err == nil {
			d.metrics.notifications.Add(1)
			d.notified()
			continue
		}
		if ctx.Err() != nil || conn.IsClosed() {
			return err
		}
		if errors.Is(err, context.Canceled) {
			continue // a wish of the claimer's
		}
		if !errors.Is(err, context.DeadlineExceeded) {
			return err
		}
		if wait < d.cfg.ListenPing {
			continue
		}
		pctx, cancel := context.WithTimeout(ctx, d.cfg.WriteTimeout)
		err = conn.Ping(pctx)
		cancel()
		if err != nil {
			d.metrics.dbErrors.Add(1)
			return fmt.Errorf("listen connection health check: %w", err)
		}
	}
}
