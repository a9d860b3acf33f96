package dispatcher

import (
	"context"
	"errors"
	"time"
)

// publishClock times the publishes of one worker against PublishTimeout
// without a context and a timer of their own.
//
// context.WithTimeoutCause per publish cost about an eighth of the
// dispatcher's CPU in a drain (measured by profile): three to four
// allocations, a new runtime timer, and an insert into and a delete from
// the children of the worker's parent context, whose mutex every worker
// takes. Instead each worker keeps one cancellable context (a generation)
// and one timer, armed for the length of each publish. A publish that
// overruns fires it: the generation is cancelled with cause
// context.DeadlineExceeded, and the worker's next publish starts a new
// generation.
//
// What the publisher sees is what context.WithTimeoutCause gave it:
// Deadline is the start of the publish plus PublishTimeout, Done closes at
// that deadline or when the parent ends, Err is context.DeadlineExceeded
// after a timeout (context.Canceled after the parent's cancellation),
// context.Cause is context.DeadlineExceeded after a timeout, and values
// are the parent's. One difference: a context the publisher derives from
// it (context.WithTimeout(ctx, …)) ends with context.Canceled, cause
// context.DeadlineExceeded, where before it ended with
// context.DeadlineExceeded; timedOut accepts both.
//
// Only for publishes whose context is the worker's parent (no publish span,
// no heartbeat); the others keep a context of their own (worker.go).
type publishClock struct {
	parent  context.Context
	timeout time.Duration
	gen     *publishGen // nil: start a new one at the next publish
}

// publishGen is one generation of a worker's publish context.
type publishGen struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
	timer  *time.Timer // cancels ctx with cause context.DeadlineExceeded
}

func newPublishClock(parent context.Context, timeout time.Duration) *publishClock {
	return &publishClock{parent: parent, timeout: timeout}
}

// start arms the clock for a publish starting at now and returns its
// context, kept in into (the job's: no allocation per publish); stop must
// follow when the publish returns.
func (c *publishClock) start(now time.Time, into *publishCtx) *publishCtx {
	if c.gen == nil || c.gen.ctx.Err() != nil {
		c.renew()
	}
	c.gen.timer.Reset(c.timeout)
	*into = publishCtx{Context: c.gen.ctx, deadline: now.Add(c.timeout)}
	return into
}

// stop disarms the clock after a publish. If the timer fired (or is
// firing: Stop cannot tell), the generation is ended and the next publish
// gets a new one, so that a cancellation still on its way never reaches
// the next publish.
func (c *publishClock) stop() {
	if !c.gen.timer.Stop() {
		c.gen.cancel(context.DeadlineExceeded)
		c.gen = nil
	}
}

// close ends the current generation (the worker is done).
func (c *publishClock) close() {
	if c.gen != nil {
		c.gen.timer.Stop()
		c.gen.cancel(context.Canceled)
		c.gen = nil
	}
}

func (c *publishClock) renew() {
	if c.gen != nil {
		c.gen.cancel(context.Canceled)
	}
	ctx, cancel := context.WithCancelCause(c.parent)
	g := &publishGen{ctx: ctx, cancel: cancel}
	g.timer = time.AfterFunc(time.Hour, func() { cancel(context.DeadlineExceeded) })
	g.timer.Stop()
	c.gen = g
}

// publishCtx is the context of one publish timed by a publishClock.
type publishCtx struct {
	context.Context           // the generation: Done, Value (and so context.Cause)
	deadline        time.Time // the start of the publish plus PublishTimeout
}

// Deadline is the publish's deadline, or the parent's when that is earlier.
func (c *publishCtx) Deadline() (time.Time, bool) {
	if d, ok := c.Context.Deadline(); ok && d.Before(c.deadline) {
		return d, true
	}
	return c.deadline, true
}

// Err is context.DeadlineExceeded once the publish timed out, as for a
// context of context.WithTimeout.
func (c *publishCtx) Err() error {
	err := c.Context.Err()
	if err != nil && errors.Is(context.Cause(c.Context), context.DeadlineExceeded) {
		return context.DeadlineExceeded
	}
	return err
}
