package dispatcher_test

// A backlog round (tuning log, entry 18): the claims inside one window reuse
// the snapshot that opened it, and the claimer claims again while a
// finalize is being written, within the documented bound of what is in
// flight.

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgoutbox/pgoutbox/dispatcher"
)

// statements counts the statements of each name a pool's connections
// start, and holds every statement of the name hold until release is
// called.
type statements struct {
	mu      sync.Mutex
	started map[string]int
	hold    string
	held    chan struct{} // closed by release
	once    sync.Once
}

func newStatements(hold string) *statements {
	return &statements{started: map[string]int{}, hold: hold, held: make(chan struct{})}
}

func statementName(sql string) string {
	name, ok := strings.CutPrefix(sql, "-- name: ")
	if !ok {
		return ""
	}
	name, _, _ = strings.Cut(name, " ")
	return name
}

func (s *statements) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	name := statementName(data.SQL)
	s.mu.Lock()
	s.started[name]++
	s.mu.Unlock()
	if name != "" && name == s.hold {
		select {
		case <-s.held:
		case <-ctx.Done():
		}
	}
	return ctx
}

func (s *statements) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (s *statements) count(name string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.started[name]
}

func (s *statements) release() { s.once.Do(func() { close(s.held) }) }

// A backlog of 3,000 in one transaction, claimed 200 at a time: one window,
// fifteen full claims and the short one that closes it. Only the claim that
// opens a window reads a snapshot (OutboxClaimSnapshot); the others reuse
// it, one round trip a claim instead of two. Every message is delivered
// once.
func TestBacklog_ClaimsInsideAWindowReuseItsSnapshot(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := b.enqueue(t, 3000, "a", false)
	stmts := newStatements("")
	pool := tracedPool(t, b, 4, stmts)
	rec := newRecorder(nil)
	// The recovery lane reads snapshots of its own (recovery_cursor.go): at
	// its first pass only, here.
	runOn(t, pool, rec, fast(dispatcher.Config{Claim: dispatcher.ClaimUnorderedOnly, Batch: 200, BatchMin: 200, ReapInterval: time.Hour}))
	waitFor(t, 30*time.Second, "the backlog done", func() bool {
		return b.count(t, "status = 'done'") == len(ids)
	})
	for _, id := range ids {
		if n := rec.count(id); n != 1 {
			t.Fatalf("message %d published %d times, want once", id, n)
		}
	}
	claims, snapshots := stmts.count("OutboxClaimWindow"), stmts.count("OutboxClaimSnapshot")
	t.Logf("%d window claims, %d snapshots", claims, snapshots)
	if claims < 16 {
		t.Fatalf("%d window claims for 3,000 messages at 200 a claim, want at least 16", claims)
	}
	// The idle rounds after the backlog each open a window (and take a
	// snapshot) of their own; the backlog's sixteen claims took one, the
	// recovery lane one a pass: its first, and on a busy machine a second
	// when the first ran out of its timeout and was retried. Claims that did
	// not reuse the window's snapshot would take sixteen.
	if idle := claims - 16; snapshots > 3+idle {
		t.Fatalf("%d snapshots for %d window claims (%d after the backlog): the claims inside the window did not reuse its snapshot", snapshots, claims, idle)
	}
}

// The claimer may claim one claim more while a finalize is being written,
// never more, and never more than two claims of messages not yet published
// (what a crash leaves waiting for their leases). The finalize is held, so
// nothing in flight is ever freed: what the dispatcher holds then is its
// bound.
func TestBacklog_InFlightWhileAFinalizeIsWritten(t *testing.T) {
	t.Parallel()
	const batch = 100
	for _, tc := range []struct {
		name       string
		publish    bool // the publisher returns at once; else it waits for the end of the test
		inFlight   int  // in flight once the claimer waits
		published  int  // of which published
		finalizing bool // a finalize was started (and is held)
	}{
		{name: "published, finalize held", publish: true, inFlight: 3 * batch, published: 3 * batch, finalizing: true},
		{name: "publishes held", publish: false, inFlight: 2 * batch, published: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			ids := b.enqueue(t, 10*batch, "a", false)
			stmts := newStatements("OutboxMarkDoneMany")
			pool := tracedPool(t, b, 4, stmts)
			gate := make(chan struct{})
			rec := newRecorder(func(ctx context.Context, m dispatcher.Message) error {
				if tc.publish {
					return nil
				}
				select {
				case <-gate:
					return nil
				case <-ctx.Done():
					return ctx.Err()
				}
			})
			d := runOn(t, pool, rec, fast(dispatcher.Config{
				Claim: dispatcher.ClaimUnorderedOnly, Batch: batch, BatchMin: batch,
				Concurrency: 4, FinalizeBatch: batch, Lease: time.Minute, PublishTimeout: 30 * time.Second,
				// The held finalize must hold a whole claim: with the 2ms
				// default, a busy machine (-race, CI) had published only part
				// of the first claim when the timer fired, the held finalize
				// held that part, and the claimer rightly waited with less
				// than three claims in flight (2 failures in 8 runs with the
				// two cores kept busy).
				FinalizeDelay: time.Minute,
			}))
			waitFor(t, 10*time.Second, "the claimer to fill what it may hold", func() bool {
				return d.Stats().InFlight >= int64(tc.inFlight)
			})
			time.Sleep(300 * time.Millisecond) // a claimer that would take more has had the time to
			if got := d.Stats().InFlight; got != int64(tc.inFlight) {
				t.Fatalf("in flight %d, want %d", got, tc.inFlight)
			}
			if got := rec.published(); got != tc.published {
				t.Fatalf("published %d, want %d", got, tc.published)
			}
			if got := stmts.count("OutboxMarkDoneMany") > 0; got != tc.finalizing {
				t.Fatalf("finalize started: %v, want %v", got, tc.finalizing)
			}
			close(gate)
			stmts.release()
			waitFor(t, 30*time.Second, "every message done", func() bool {
				return b.count(t, "status = 'done'") == len(ids)
			})
			for _, id := range ids {
				if n := rec.count(id); n != 1 {
					t.Fatalf("message %d published %d times, want once", id, n)
				}
			}
		})
	}
}
