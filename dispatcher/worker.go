package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgoutbox/pgoutbox/db"
)

// errPanic marks a publish that panicked.
var errPanic = errors.New("publisher panicked")

// probeAborted tells the breaker when j was its probe and ended without
// saying whether the destination is available.
func (d *Dispatcher) probeAborted(j *job) {
	if j.probe {
		d.breaker.probeAborted()
	}
}

// classify sets j's result from the publisher's classification of err, for
// the batch writer. It returns false when nothing is to be written: an
// unclassified error under UnclassifiedAsCrash leaves the message as a
// crash would (processing, attempt spent) for lease recovery.
func (d *Dispatcher) classify(ctx context.Context, j *job, err error, pctx context.Context, start, end time.Time) bool {
	var (
		def  *DeferError
		retr *RetryableError
		perm *PermanentError
	)
	// Timed out: the publish's own deadline passed (its context's cause),
	// and the error is that context's end. A context the publisher derived
	// from a worker clock's ends with context.Canceled (publishclock.go).
	timedOut := context.Cause(pctx) == context.DeadlineExceeded &&
		(errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled))
	errType := publishErrorType(err, timedOut)
	after, unavailable := unavailableAfter(err)
	if timedOut {
		err, unavailable = fmt.Errorf("publish timed out after %s: %w", d.cfg.PublishTimeout, err), true
	}
	if unavailable {
		if d.breaker.unavailable(start, end, err, after, j.probe) {
			delay := time.Duration(0)
			if !d.breaker.holding() {
				delay = max(FullJitter(int(j.attempts), d.cfg.BackoffBase, d.cfg.BackoffCap), after)
			}
			j.res = &result{kind: resRelease, delay: delay, text: err.Error(), err: err, errType: errType, unavailable: true}
		} else {
			d.retry(j, err, after, errType)
		}
		return true
	}
	if errors.As(err, &def) || errors.As(err, &retr) || errors.As(err, &perm) {
		d.breaker.reached() // the destination answered, about this message
	}
	switch {
	case errors.As(err, &def):
		j.res = &result{kind: resDefer, delay: max(def.Delay, 0), text: def.Reason, err: err}
	case errors.As(err, &retr):
		d.retry(j, err, retr.After, errType)
	case errors.As(err, &perm):
		j.res = &result{kind: resDead, text: err.Error(), err: err, errType: errType}
	default:
		switch d.cfg.UnclassifiedErrors {
		case UnclassifiedAsRetryable:
			d.retry(j, err, 0, errType)
		case UnclassifiedAsPermanent:
			j.res = &result{kind: resDead, text: "unclassified: " + err.Error(), err: err, errType: errType}
		default:
			d.metrics.add(outUnclassified, 1)
			d.log.ErrorContext(ctx, "unclassified publish error; message left processing until its lease expires (UnclassifiedAsCrash)",
				slog.Int64("outbox_id", j.id), slog.Int64("lease_version", j.leaseVersion),
				slog.Int("attempt", int(j.attempts)), slog.Any("error", err))
			j.endPublish(spanUnclassified, errType, err)
			return false
		}
	}
	return true
}

// retry sets j's result for a failure of the message: back to pending after
// a full-jitter backoff (at least after), or dead once its attempts are
// spent.
func (d *Dispatcher) retry(j *job, err error, after time.Duration, errType string) {
	if int(j.attempts) >= d.cfg.MaxAttempts {
		j.res = &result{kind: resDead, text: fmt.Sprintf("retries exhausted after %d attempts: %v", j.attempts, err), err: err, errType: errType}
		return
	}
	delay := max(FullJitter(int(j.attempts), d.cfg.BackoffBase, d.cfg.BackoffCap), after)
	j.res = &result{kind: resRetry, delay: delay, text: err.Error(), err: err, errType: errType}
}

func (d *Dispatcher) leaseLost(j *job, op string) {
	d.metrics.add(outLeaseLost, 1)
	d.log.WarnContext(j.spanCtx(), "lost lease", slog.Int64("outbox_id", j.id), slog.Int64("lease_version", j.leaseVersion),
		slog.String("op", op))
	j.endPublish(spanLeaseLost, "lease_lost", ErrLeaseLost)
	if d.cfg.OnLeaseLost != nil {
		d.cfg.OnLeaseLost(j.id, j.leaseVersion)
	}
}

// safePublish calls the publisher, turning a panic into errPanic.
func (d *Dispatcher) safePublish(ctx context.Context, msg Message) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: %v\n%s", errPanic, r, debug.Stack())
		}
	}()
	return d.pub.Publish(ctx, msg)
}

// heartbeat extends j's lease every HeartbeatInterval while the publish runs.
// If an extension finds the lease lost it cancels the publish. stop ends it;
// lost reports whether the lease was found lost.
func (d *Dispatcher) heartbeat(ctx context.Context, j *job, cancel context.CancelCauseFunc) (stop func(), lost func() bool) {
	done := make(chan struct{})
	lostCh := make(chan struct{})
	go func() {
		t := time.NewTicker(d.cfg.HeartbeatInterval)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-t.C:
			}
			ectx, ecancel := context.WithTimeout(ctx, d.cfg.WriteTimeout)
			n, err := d.q.OutboxExtendLease(ectx, db.OutboxExtendLeaseParams{ID: j.id, LeaseVersion: j.leaseVersion, LeaseOwner: j.leaseOwner, Lease: d.cfg.Lease})
			ecancel()
			if err != nil {
				d.log.Warn("heartbeat failed; will retry", slog.Int64("outbox_id", j.id), slog.Any("error", err))
				continue
			}
			if n == 0 {
				close(lostCh)
				cancel(ErrLeaseLost)
				return
			}
			d.metrics.heartbeats.Add(1)
		}
	}()
	return func() { close(done) }, func() bool {
		select {
		case <-lostCh:
			return true
		default:
			return false
		}
	}
}

// retryDBValue runs a fenced write that returns a value, retrying transient
// database errors with backoff until it succeeds or ctx ends. Each attempt
// has its own WriteTimeout, so a connection that stopped answering costs one
// timeout, not the whole shutdown. A data error (SQLSTATE class 22) is never
// retried: the same statement fails the same way, and retrying it would
// wedge the writer (and everything behind it). It is logged and returned.
func retryDBValue[T any](ctx context.Context, d *Dispatcher, op string, f func(ctx context.Context) (T, error)) (T, error) {
	failures := 0
	for {
		actx, cancel := context.WithTimeout(ctx, d.cfg.WriteTimeout)
		v, err := f(actx)
		cancel()
		if err == nil || errors.Is(err, pgx.ErrNoRows) {
			return v, err
		}
		if isDataError(err) {
			d.metrics.dbErrors.Add(1)
			d.log.ErrorContext(ctx, "the database refused a fenced write (data error); not retrying it",
				slog.String("op", op), slog.String("sqlstate", sqlState(err)), slog.Any("error", err))
			return v, err
		}
		if ctx.Err() != nil {
			d.log.ErrorContext(ctx, "giving up a fenced write at shutdown; the lease will expire and the message be re-delivered",
				slog.String("op", op), slog.Any("error", err))
			return v, err
		}
		d.dbError(ctx, op, err, &failures)
	}
}
