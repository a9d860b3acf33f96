package dispatcher

import (
	"context"
	"time"
)

// awaitBreaker is the claim loop while the breaker is open (breaker.go): it
// claims nothing until the next probe is due, then claims one message (an
// ordinary fenced claim, of the kinds this dispatcher claims) for a worker
// to publish as the probe, and waits for its verdict. It returns after each
// step; the claim loop calls it again while the breaker holds.
func (d *Dispatcher) awaitBreaker(ctx context.Context, jobs chan<- *job, rel *releaser) {
	state, next, changed := d.breaker.status()
	var wait <-chan time.Time
	switch state {
	case breakerClosed:
		return
	case breakerOpen:
		if rest := time.Until(next); rest > 0 {
			t := time.NewTimer(rest)
			defer t.Stop()
			select {
			case <-t.C:
			case <-changed:
			case <-ctx.Done():
			}
			return
		}
		d.breaker.armProbe()
		return
	case breakerProbeDue:
		// A job already queued becomes the probe when a worker takes it;
		// otherwise claim one. Nothing to claim: wait for a NOTIFY or the
		// poll interval, as an idle claimer does.
		if len(jobs) == 0 && d.claimProbe(ctx, jobs, rel) == 0 {
			t := time.NewTimer(d.cfg.PollInterval)
			defer t.Stop()
			wait = t.C
		}
	}
	select {
	case <-changed:
	case <-wait:
	case <-d.wake:
	case <-ctx.Done():
	}
}

// claimProbe claims one message to probe the destination with: unordered
// first, then ordered, as the dispatcher claims them. It returns how many
// it claimed (0 or 1); a claim error is logged and counts as none (the
// next call tries again).
func (d *Dispatcher) claimProbe(ctx context.Context, jobs chan<- *job, rel *releaser) int {
	for _, kind := range []ClaimMode{ClaimUnorderedOnly, ClaimOrderedOnly} {
		if d.cfg.Claim != ClaimAll && d.cfg.Claim != kind {
			continue
		}
		got, err := d.claimKind(ctx, kind, 1, jobs, rel)
		if err != nil {
			failures := 0
			d.dbError(ctx, "claim a probe", err, &failures)
			return 0
		}
		if got > 0 {
			return got
		}
	}
	return 0
}
