package dispatcher

import (
	"log/slog"
	"time"
)

// What a crash costs. A dispatcher that dies (SIGKILL, OOM, power) leaves
// everything it had in flight — at most max(2 × claim size, claim size +
// Concurrency) messages, the claim size bounded by Batch and by BatchWork —
// processing under a lease nobody renews. Those messages wait out the rest of
// their Lease; then the recovery lane of any dispatcher takes them over one
// at a time (OutboxClaimExpired). recoveryPass makes that visible: the lane
// logs, per pass, how many expired leases it recovered and how long the pass
// took, so thousands of messages waiting out a lease never go unnoticed
// (Stats.Recovered and pgoutbox_messages_recovered_total count them as well;
// the queue gauge pgoutbox_leases_expired shows them while they wait).

// recoveryPass counts the messages one recovery pass took over.
type recoveryPass struct {
	d     *Dispatcher
	start time.Time
	n     int64
}

func (d *Dispatcher) newRecoveryPass() *recoveryPass {
	return &recoveryPass{d: d, start: time.Now()}
}

func (p *recoveryPass) add() {
	if p.n == 0 {
		p.d.log.Warn("recovering messages whose lease expired: a dispatcher stopped without finalizing or handing them back (crash, kill, or a stall longer than Lease)",
			slog.Duration("lease", p.d.cfg.Lease))
	}
	p.n++
}

func (p *recoveryPass) done() {
	if p.n == 0 {
		return
	}
	p.d.log.Warn("recovered messages whose lease had expired", slog.Int64("count", p.n),
		slog.Duration("took", time.Since(p.start).Round(time.Millisecond)), slog.Duration("lease", p.d.cfg.Lease))
}
