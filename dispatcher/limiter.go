package dispatcher

import "context"

// Limiter bounds publishes across several dispatchers: each publish starts
// only after Acquire returned nil, and its slot is given back with Release
// as soon as Publish returns (before the fenced write that records a
// failure, so a database that fails its writes holds no slot while it
// retries them). Config.Limiter sets it; package fleet passes one share of a
// limit that all the databases of a relay divide among themselves.
//
// Acquire may block; it must return an error once ctx ends (shutdown), and
// the message is then handed back unstarted. A worker waiting in Acquire
// holds its claimed message: the lease check (too close to expiry: hand it
// back) runs after Acquire returns.
type Limiter interface {
	Acquire(ctx context.Context) error
	Release()
}

// acquireSlot waits for Config.Limiter, if any. It reports false when the
// job must not start (ctx ended while waiting); the caller hands it back.
func (d *Dispatcher) acquireSlot(ctx context.Context, j *job) bool {
	if d.cfg.Limiter == nil {
		return true
	}
	if err := d.cfg.Limiter.Acquire(ctx); err != nil {
		return false
	}
	j.slot = true
	return true
}

// releaseSlot gives back j's slot of Config.Limiter, if it holds one.
func (d *Dispatcher) releaseSlot(j *job) {
	if j.slot {
		j.slot = false
		d.cfg.Limiter.Release()
	}
}
