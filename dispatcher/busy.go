package dispatcher

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgoutbox/pgoutbox/db"
)

// busyBarrierTimeout bounds the wait of OutboxWakeBarrier (the listen
// connection's lock_timeout): a producer under SET CONSTRAINTS ALL
// IMMEDIATE, or a prepared transaction, holds the in-flight lock for as long
// as it stays open. After a timeout the claimer waits as if the barrier had
// passed; what such a producer commits later is claimed on the next poll.
const busyBarrierTimeout = time.Second

// busyRoomWait is how long the claimer waits for room in flight before it
// stops saying it is busy (busyState.pausing).
const busyRoomWait = 50 * time.Millisecond

// busyAckTimeout bounds how long the claimer waits for the listener to give
// the busy lock up before it waits for a notification anyway (the listener
// may be reconnecting).
const busyAckTimeout = 2 * time.Second

// busyState is the relay's side of the producers' NOTIFY skip (migration
// 00013, queries/wake.sql). While the claimer claims without waiting for a
// wake-up, the listener holds the busy lock on its connection and
// producers' COMMITs send no NOTIFY; before the claimer waits outside a
// wake window, the listener gives the lock up and passes the barrier (every
// COMMIT that skipped its NOTIFY has finished), and the claimer claims once
// more. The claimer says what it wants (want, poke); the listener, which
// owns the connection, does it and acknowledges the idle side (idle).
type busyState struct {
	want      atomic.Bool   // the claimer's wish: busy
	dirty     atomic.Bool   // busy was wished since the last barrier (waiting passes one)
	asked     atomic.Bool   // the claimer waits for idle to be acknowledged
	listening atomic.Bool   // the listener is connected and serving wishes
	poke      chan struct{} // cap 1: want changed
	idle      chan struct{} // cap 1: the lock is given up and the barrier passed
}

func newBusyState() busyState {
	return busyState{poke: make(chan struct{}, 1), idle: make(chan struct{}, 1)}
}

func (b *busyState) signal() {
	select {
	case b.poke <- struct{}{}:
	default:
	}
}

// claiming is called by the claimer after the second round in a row that
// claimed messages: it claims again at once, so producers need not wake
// it. (After a single round with messages the next one usually finds
// none and the claimer polls its wake window, where a notification brings
// the next message sooner than the window's doubling polls.)
func (b *busyState) claiming() {
	if b.listening.Load() && !b.want.Load() {
		b.dirty.Store(true)
		b.want.Store(true)
		b.signal()
	}
}

// pausing is called by the claimer when it stops claiming back to back
// (a round found nothing and it polls its wake window, or it waited for
// room in flight longer than an instant): producers notify again, and wake
// the other relays. No barrier yet: waiting passes it before the claimer
// waits outside a wake window.
func (b *busyState) pausing() {
	if b.want.Load() {
		b.want.Store(false)
		b.signal()
	}
}

// waiting is called by the claimer before it waits outside a wake window.
// It reports whether the claimer must claim once more first: the listener
// gave the busy lock up and passed the barrier, so commits that skipped
// their NOTIFY are visible now. It returns false at once when the claimer
// has not said it was busy since the last barrier.
func (b *busyState) waiting(ctx context.Context) bool {
	if !b.dirty.Load() {
		return false
	}
	select { // a stale acknowledgement
	case <-b.idle:
	default:
	}
	b.dirty.Store(false)
	b.want.Store(false)
	if !b.listening.Load() {
		return false // the connection, and the lock with it, is gone
	}
	b.asked.Store(true)
	b.signal()
	t := time.NewTimer(busyAckTimeout)
	defer t.Stop()
	select {
	case <-b.idle:
		return true
	case <-t.C:
		return false
	case <-ctx.Done():
		return false
	}
}

// busyConn is the listener's side: the lock's state on its connection.
type busyConn struct {
	q      *db.Queries
	held   bool
	misses int // OutboxWakeBusy calls in a row that did not take the lock
}

// retry is how long the listener waits before it tries the busy lock
// again: 5 ms after the first miss (a producer's COMMIT checks it for an
// instant), doubling up to a second (a session of some other application
// holding the pair).
func (bc *busyConn) retry() time.Duration {
	return min(5*time.Millisecond<<min(bc.misses, 8), time.Second)
}

// listenQueries are package db's queries on the listen connection, renamed
// for Config.Table and Config.Schema.
func (d *Dispatcher) listenQueries(conn *pgx.Conn) *db.Queries {
	if d.plans.rename == nil {
		return db.New(conn)
	}
	return db.New(renamedDBTX{dbtx: conn, n: d.plans.rename})
}

// syncBusy makes the connection's busy lock what the claimer wants. An
// error is the connection's: the caller reconnects (the server releases
// the lock with the connection).
func (d *Dispatcher) syncBusy(ctx context.Context, bc *busyConn) error {
	want := d.busy.want.Load()
	switch {
	case want && !bc.held:
		cctx, cancel := context.WithTimeout(ctx, d.cfg.WriteTimeout)
		ok, err := bc.q.OutboxWakeBusy(cctx)
		cancel()
		if err != nil {
			return err
		}
		bc.held = ok // not taken: producers notify; tried again after bc.retry()
		if ok {
			bc.misses = 0
		} else {
			bc.misses++
		}
	case !want:
		if bc.held {
			cctx, cancel := context.WithTimeout(ctx, d.cfg.WriteTimeout)
			_, err := bc.q.OutboxWakeIdle(cctx)
			cancel()
			if err != nil {
				return err
			}
			bc.held = false
		}
		if !d.busy.asked.Swap(false) {
			return nil
		}
		cctx, cancel := context.WithTimeout(ctx, d.cfg.WriteTimeout)
		err := bc.q.OutboxWakeBarrier(cctx)
		cancel()
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "55P03" { // lock_not_available: busyBarrierTimeout
			d.log.Debug("producers' commits in flight outlasted the barrier; the next poll claims them", slog.Any("error", err))
			err = nil
		}
		if err != nil {
			return err
		}
		select {
		case d.busy.idle <- struct{}{}:
		default:
		}
	}
	return nil
}
