package dispatcher

import (
	"context"
	"testing"
	"time"
)

type ctxKey struct{}

// The worker clock's publish context behaves as context.WithTimeoutCause's
// did, publish after publish.
func TestPublishClock_EachPublishGetsItsOwnTimeout(t *testing.T) {
	const timeout = 50 * time.Millisecond
	parent, cancelParent := context.WithCancel(context.WithValue(context.Background(), ctxKey{}, "v"))
	defer cancelParent()
	c := newPublishClock(parent, timeout)
	defer c.close()

	// A publish that returns in time: deadline, values, no error, and the
	// disarmed timer never reaches it or the next publish.
	start := time.Now()
	ctx := c.start(start, new(publishCtx))
	if d, ok := ctx.Deadline(); !ok || !d.Equal(start.Add(timeout)) {
		t.Fatalf("Deadline() = %v, %v; want %v, true", d, ok, start.Add(timeout))
	}
	if v := ctx.Value(ctxKey{}); v != "v" {
		t.Fatalf("Value = %v, want the parent's", v)
	}
	c.stop()
	time.Sleep(2 * timeout)
	if err := ctx.Err(); err != nil {
		t.Fatalf("a publish that returned in time: Err() = %v after its deadline, want nil", err)
	}

	// A publish that overruns: Done closes at the deadline, Err and Cause
	// are context.DeadlineExceeded, a derived context ends with it.
	ctx = c.start(time.Now(), new(publishCtx))
	child, cancelChild := context.WithCancel(ctx)
	defer cancelChild()
	select {
	case <-ctx.Done():
	case <-time.After(20 * timeout):
		t.Fatal("Done did not close after the publish timeout")
	}
	if err := ctx.Err(); err != context.DeadlineExceeded {
		t.Fatalf("Err() = %v, want context.DeadlineExceeded", err)
	}
	if err := context.Cause(ctx); err != context.DeadlineExceeded {
		t.Fatalf("context.Cause = %v, want context.DeadlineExceeded", err)
	}
	<-child.Done()
	if cause := context.Cause(child); cause != context.DeadlineExceeded {
		t.Fatalf("derived context: cause %v, want context.DeadlineExceeded", cause)
	}
	c.stop()

	// The next publish gets a live context of its own.
	ctx = c.start(time.Now(), new(publishCtx))
	if err := ctx.Err(); err != nil {
		t.Fatalf("the publish after a timeout starts with Err() = %v, want nil", err)
	}
	c.stop()

	// The parent's end reaches the publish as context.Canceled.
	ctx = c.start(time.Now(), new(publishCtx))
	cancelParent()
	<-ctx.Done()
	if err := ctx.Err(); err != context.Canceled {
		t.Fatalf("after the parent's cancel: Err() = %v, want context.Canceled", err)
	}
	c.stop()
}

// A parent deadline earlier than the publish's is the one reported.
func TestPublishClock_ParentDeadlineWins(t *testing.T) {
	parent, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	pd, _ := parent.Deadline()
	c := newPublishClock(parent, time.Hour)
	defer c.close()
	ctx := c.start(time.Now(), new(publishCtx))
	defer c.stop()
	if d, _ := ctx.Deadline(); !d.Equal(pd) {
		t.Fatalf("Deadline() = %v, want the parent's %v", d, pd)
	}
}
