package dispatcher

import (
	"context"
	"sync"

	"github.com/pgoutbox/pgoutbox/db"
)

// An ordered event draws its seq at its producer's COMMIT, under its
// aggregate's lock, into a narrow row of outbox_sequenced; the event itself
// is not updated then. The relay moves the seq into the event and decides
// its head (OutboxDecideCommitted), right before each ordered claim, so a
// head committed just now is claimed by that claim.

// decideFloor is what OutboxDecideCommitted returned last: where its next
// read starts, and what lets that start move on. Shared by the claim loop
// and the recovery lane.
type decideFloor struct {
	mu      sync.Mutex
	after   int64    // no row of outbox_sequenced at or below this is left
	seen    int64    // the last seq drawn when the previous call ran
	holders []string // the transactions that then held an aggregate's lock
	server  string   // the server all this is about (OutboxClaimSnapshot's)
}

// decideCommitted runs OutboxDecideCommitted once on the pool. The relay's
// sessions are READ COMMITTED (OutboxSessionSettings), as the function
// requires; a session that is not (a pooler handing out a server connection
// set up otherwise) gets a READ COMMITTED transaction of its own.
func (d *Dispatcher) decideCommitted(ctx context.Context) error {
	cctx, cancel := context.WithTimeout(ctx, d.cfg.ClaimTimeout)
	defer cancel()
	n, err := d.decideStep(cctx, d.q)
	if err != nil && sqlState(err) == "P0001" {
		_, err = d.decideHeads(ctx)
		return err
	}
	if err == nil && int(n) >= sweepRows {
		d.wakeUp() // more than one statement's worth: the next round goes on
	}
	return err
}

// decideStep runs one OutboxDecideCommitted on q from the dispatcher's
// floor and keeps the floor it returns. The lock is not held across the
// statement: the claim loop and the recovery lane may each hold a pool
// connection while the other waits for one (a fleet's pools have two).
// Each call's result is a floor that held when it was read, and stays true
// on that server, so whichever lands last is kept.
func (d *Dispatcher) decideStep(ctx context.Context, q *db.Queries) (int32, error) {
	f := &d.decided
	f.mu.Lock()
	arg := db.OutboxDecideCommittedParams{MaxRows: int32(sweepRows), AfterSeq: f.after, SeenSeq: f.seen,
		SeenHolders: f.holders, Server: f.server}
	f.mu.Unlock()
	if arg.SeenHolders == nil {
		arg.SeenHolders = []string{}
	}
	r, err := q.OutboxDecideCommitted(ctx, arg)
	if err != nil {
		return 0, err
	}
	f.mu.Lock()
	f.after, f.seen, f.holders, f.server = r.AfterSeq, r.SeenSeq, r.SeenHolders, r.Server
	f.mu.Unlock()
	return r.Decided, nil
}

// decideFromStart runs OutboxDecideCommitted from no floor, leaving the
// floor as it is: the recovery lane's safety net (every SweepInterval), for
// a row of outbox_sequenced below the floor, which the floor's checks make
// the case only when outbox_seq handed out a value again without the server
// changing in a way OutboxClaimSnapshot sees.
func (d *Dispatcher) decideFromStart(ctx context.Context) (int64, error) {
	if d.cfg.Claim == ClaimUnorderedOnly {
		return 0, nil
	}
	return d.readCommittedLoop(ctx, "decide ordered events from the start", func(ctx context.Context, q *db.Queries) (int32, error) {
		r, err := q.OutboxDecideCommitted(ctx, db.OutboxDecideCommittedParams{MaxRows: int32(sweepRows), SeenHolders: []string{}})
		if err != nil {
			return 0, err
		}
		return r.Decided, nil
	})
}

// resolveHeads decides the ordered events committed and not decided yet on
// every recovery pass too, in a READ COMMITTED transaction whatever the
// session's default isolation: a dispatcher that claims no ordered message
// for a while leaves none undecided.
func (d *Dispatcher) resolveHeads(ctx context.Context) error {
	if d.cfg.Claim == ClaimUnorderedOnly {
		return nil
	}
	n, err := d.decideHeads(ctx)
	if n > 0 {
		d.wakeUp()
	}
	return err
}

// decideHeads runs OutboxDecideCommitted until it decides fewer than
// sweepRows rows.
func (d *Dispatcher) decideHeads(ctx context.Context) (int64, error) {
	return d.readCommittedLoop(ctx, "decide ordered events", func(ctx context.Context, q *db.Queries) (int32, error) {
		return d.decideStep(ctx, q)
	})
}
