package dispatcher

import (
	"context"
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
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer func() {
		closeCtx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		conn.Close(closeCtx)
	}()
	// LISTEN takes no parameters; the channel name was validated as a plain
	// identifier in Config.validate and is quoted here.
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{d.cfg.Channel}.Sanitize()); err != nil {
		return err
	}
	d.log.Debug("listening", slog.String("channel", d.cfg.Channel))
	d.notified()
	for {
		if _, err := conn.WaitForNotification(ctx); err != nil {
			return err
		}
		d.metrics.notifications.Add(1)
		d.notified()
	}
}
