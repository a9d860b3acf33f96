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

// idleAwaitTimeout bounds the wait of OutboxWakeAwaitIdle (the listen
// connection's lock_timeout): a producer transaction that began while no
// relay waited holds the idle lock shared until it ends (a long one, or a
// prepared one until COMMIT PREPARED). After a timeout the claimer claims
// once more and waits; the listener keeps trying to take the lock, and
// producers that insert meanwhile notify.
const idleAwaitTimeout = time.Second

// busyRoomWait is how long the claimer waits for room in flight before it
// stops saying it is busy (busyState.pausing).
const busyRoomWait = 50 * time.Millisecond

// busyAckTimeout bounds how long the claimer waits for the listener to take
// the idle lock before it waits for a notification anyway (the listener
// may be reconnecting).
const busyAckTimeout = 2 * time.Second

// busyState is the relay's side of the producers' wake-up (migration 00015,
// queries/wake.sql). Producers queue a NOTIFY only while a relay holds the
// idle lock. The listener holds it on its connection unless the claimer
// claims back to back (busy: it gives the lock up, and producers' commits
// run nothing for their wake-up); before the claimer waits outside a wake
// window, the listener makes sure the lock is held (or held by another
// relay), and when it had to take it, the claimer claims once more: what
// producers committed without notifying is visible by then. The claimer
// says what it wants (want, asked, poke); the listener, which owns the
// connection, does it and answers asked on idle (true: claim once more).
type busyState struct {
	want      atomic.Bool   // the claimer's wish: busy (the idle lock given up)
	canBusy   atomic.Bool   // this relay may give the lock up (it claims both kinds)
	asked     atomic.Bool   // the claimer waits for the lock to be taken
	settled   atomic.Bool   // the lock is held (or another relay's) and claimed after: waiting need not ask
	listening atomic.Bool   // the listener is connected and serving wishes
	wishes    atomic.Int64  // counts the claimer's changes of want and asked
	synced    atomic.Int64  // the wishes the listener had seen when it last acted on them
	poke      chan struct{} // cap 1: a wish changed
	idle      chan bool     // cap 1: the answer to asked
}

func newBusyState() busyState {
	return busyState{poke: make(chan struct{}, 1), idle: make(chan bool, 1)}
}

func (b *busyState) signal() {
	b.wishes.Add(1)
	select {
	case b.poke <- struct{}{}:
	default:
	}
}

// claiming is called by the claimer after the second round in a row that
// claimed messages: it claims again at once, so producers need not wake
// it. (After a single round with messages the next one usually finds
// none and the claimer polls its wake window, where a notification brings
// the next message sooner than the window's doubling polls.) Only a relay
// that claims both kinds gives the lock up: one that claims only ordered
// (or only unordered) messages must not stop producers of the other kind
// from waking the relays that claim it.
func (b *busyState) claiming() {
	if b.listening.Load() && b.canBusy.Load() && !b.want.Load() {
		b.want.Store(true)
		b.signal()
	}
}

// pausing is called by the claimer when it stops claiming back to back
// (a round found nothing and it polls its wake window, or it waited for
// room in flight longer than an instant): the listener takes the idle lock
// again, so producers notify.
func (b *busyState) pausing() {
	if b.want.Load() {
		b.want.Store(false)
		b.signal()
	}
}

// waiting is called by the claimer before it waits outside a wake window.
// It reports whether the claimer must claim once more first: the listener
// has just taken the idle lock (or found another relay's), so producers
// notify from now on, and what they committed before without notifying is
// visible. It returns false when the lock was held all along, when no
// listener is connected (the claimer polls), and after busyAckTimeout.
func (b *busyState) waiting(ctx context.Context) bool {
	b.want.Store(false)
	if !b.listening.Load() || b.settled.Load() {
		return false
	}
	select { // a stale answer
	case <-b.idle:
	default:
	}
	b.asked.Store(true)
	b.signal()
	t := time.NewTimer(busyAckTimeout)
	defer t.Stop()
	select {
	case again := <-b.idle:
		return again
	case <-t.C:
		return false
	case <-ctx.Done():
		return false
	}
}

// busyConn is the listener's side: the lock's state on its connection.
type busyConn struct {
	q       *db.Queries
	held    bool // this connection holds the idle lock
	covered bool // held, or another relay's was seen, since the claimer last claimed once more
	misses  int  // OutboxWakeIdle calls in a row that found the lock neither free nor another relay's
}

// retry is how long the listener waits before it tries the idle lock
// again: 5 ms after the first miss (producers' transactions in flight),
// doubling up to a second (a long producer transaction, another relay
// holding the lock).
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

// takeIdle tries to take the idle lock; with await it waits for it (up to
// idleAwaitTimeout) unless another relay holds it. It reports whether
// producers notify from now on (this connection or another relay holds the
// lock).
func (d *Dispatcher) takeIdle(ctx context.Context, bc *busyConn, await bool) (bool, error) {
	cctx, cancel := context.WithTimeout(ctx, d.cfg.WriteTimeout)
	r, err := bc.q.OutboxWakeIdle(cctx)
	cancel()
	if err != nil {
		return false, err
	}
	switch {
	case r.Held:
		bc.held, bc.misses = true, 0
		return true, nil
	case r.OtherRelay:
		bc.misses = 8 // retried each second: it takes over when that relay claims or goes
		return true, nil
	case !await:
		bc.misses++
		return false, nil
	}
	cctx, cancel = context.WithTimeout(ctx, idleAwaitTimeout+d.cfg.WriteTimeout)
	err = bc.q.OutboxWakeAwaitIdle(cctx)
	cancel()
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "55P03" { // lock_not_available: idleAwaitTimeout
		d.log.Debug("producer transactions in flight outlasted the wait for the idle lock; trying again", slog.Any("error", err))
		bc.misses++
		return false, nil
	}
	if err != nil {
		return false, err
	}
	bc.held, bc.misses = true, 0
	return true, nil
}

// syncBusy makes the connection's idle lock what the claimer wants and
// answers its question. An error is the connection's: the caller
// reconnects (the server releases the lock with the connection).
func (d *Dispatcher) syncBusy(ctx context.Context, bc *busyConn) error {
	if d.busy.want.Load() {
		d.busy.settled.Store(false) // before the lock goes: waiting asks again
		if bc.held {
			cctx, cancel := context.WithTimeout(ctx, d.cfg.WriteTimeout)
			_, err := bc.q.OutboxWakeBusy(cctx)
			cancel()
			if err != nil {
				return err
			}
			bc.held = false
		}
		bc.covered = false
		return nil
	}
	asked := d.busy.asked.Swap(false)
	answer := func(again bool) {
		if asked {
			select {
			case d.busy.idle <- again:
			default:
			}
		}
	}
	covered := bc.held
	if !bc.held {
		c, err := d.takeIdle(ctx, bc, asked)
		if err != nil {
			return err
		}
		covered = c
	}
	switch {
	case !covered:
		// Producers in flight keep the lock: claim once more anyway (what
		// they commit is claimed by the next tries and polls).
		bc.covered = false
		d.busy.settled.Store(false)
		answer(true)
		return nil
	case !bc.covered:
		// Covered again after a time without the lock: commits of that
		// time did not notify. Claim once more.
		bc.covered = true
		if asked {
			answer(true)
		} else {
			d.wakeUp()
		}
	default:
		answer(false)
	}
	d.busy.settled.Store(true)
	return nil
}
