package fleet

import (
	"context"
	"testing"
	"time"
)

// waiting is how many publishes of s wait for a slot.
func waiting(s *share) int {
	s.l.mu.Lock()
	defer s.l.mu.Unlock()
	return len(s.waiting)
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// A database with a hundred publishes waiting does not make one with a
// single publish wait for all of them: the quiet one's turn comes after at
// most one slot release per database ahead of it.
func TestFairLimitTakesDatabasesInTurn(t *testing.T) {
	l := newFairLimit(1)
	busy, quiet := l.share(), l.share()
	ctx := context.Background()
	if err := busy.Acquire(ctx); err != nil {
		t.Fatal(err)
	}
	granted := make(chan *share, 200)
	for range 100 {
		go func() {
			if busy.Acquire(ctx) == nil {
				granted <- busy
			}
		}()
	}
	waitUntil(t, "100 busy publishes waiting", func() bool { return waiting(busy) == 100 })
	go func() {
		if quiet.Acquire(ctx) == nil {
			granted <- quiet
		}
	}()
	waitUntil(t, "the quiet publish waiting", func() bool { return waiting(quiet) == 1 })
	for release := 1; ; release++ {
		busy.Release()
		if g := <-granted; g == quiet {
			if release > 2 {
				t.Errorf("the quiet database got a slot after %d releases, want at most 2", release)
			}
			break
		}
		if release > 100 {
			t.Fatal("the quiet database never got a slot")
		}
	}
	if busy.inUse() != 0 || quiet.inUse() != 1 {
		t.Errorf("in use: busy %d, quiet %d; want 0 and 1", busy.inUse(), quiet.inUse())
	}
}

// A publish that gives up waiting (shutdown) leaves the limit whole.
func TestFairLimitCancelledWaitKeepsTheSlots(t *testing.T) {
	l := newFairLimit(2)
	a, b := l.share(), l.share()
	ctx := context.Background()
	for range 2 {
		if err := a.Acquire(ctx); err != nil {
			t.Fatal(err)
		}
	}
	cctx, cancel := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() { errc <- b.Acquire(cctx) }()
	waitUntil(t, "b waiting", func() bool { return waiting(b) == 1 })
	cancel()
	if err := <-errc; err == nil {
		t.Fatal("a cancelled Acquire returned nil")
	}
	a.Release()
	a.Release()
	for range 2 {
		tctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		if err := b.Acquire(tctx); err != nil {
			t.Fatalf("both slots should be free again: %v", err)
		}
		cancel()
	}
}
