package dispatcher_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/pgoutbox/dispatcher"
)

const helperEnv = "PGOUTBOX_TEST_HELPER"

// runHelperProcess is a relay process for crash tests: it dispatches from
// PGOUTBOX_TEST_URL and dies (os.Exit) whenever it meets the poison id.
func runHelperProcess() int {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	pool, err := pgxpool.New(ctx, os.Getenv("PGOUTBOX_TEST_URL"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	poison, _ := strconv.ParseInt(os.Getenv("PGOUTBOX_TEST_POISON"), 10, 64)
	pub := dispatcher.PublisherFunc(func(ctx context.Context, m dispatcher.Message) error {
		if m.OutboxID == poison {
			os.Exit(3) // the poison kills whichever relay holds it
		}
		return nil
	})
	d, err := dispatcher.New(pool, pub, dispatcher.Config{
		Batch: 50, Concurrency: 1, MaxAttempts: 3,
		Lease: 300 * time.Millisecond, PublishTimeout: 100 * time.Millisecond,
		PollInterval: 20 * time.Millisecond, ReapInterval: 10 * time.Millisecond, ReapGrace: 10 * time.Millisecond,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	// Exit cleanly once nothing is left to do.
	go func() {
		for ctx.Err() == nil {
			var left int
			_ = pool.QueryRow(ctx, `SELECT count(*) FROM outbox WHERE status IN ('pending', 'processing')`).Scan(&left)
			if left == 0 {
				cancel()
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()
	_ = d.Run(ctx)
	return 0
}

// One poison message in a batch of 50 and a relay process that dies each
// time it meets it: only the poison message ends dead; its batch-mates lose
// at most the attempt of the first crash and are delivered.
func TestPoisonMessage_DiesAloneAndSparesItsBatchMates(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := b.enqueue(t, 50, "a", false)
	poison := ids[0] // first in line: the first crash takes the whole batch down
	crashes := 0
	for run := 0; run < 30; run++ {
		if b.count(t, "status IN ('pending', 'processing')") == 0 {
			break
		}
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), helperEnv+"=1", "PGOUTBOX_TEST_URL="+b.url,
			"PGOUTBOX_TEST_POISON="+strconv.FormatInt(poison, 10))
		out, err := cmd.CombinedOutput()
		if ee, ok := err.(*exec.ExitError); ok && ee.ExitCode() == 3 {
			crashes++
			// The crashed relay's leases run out (database clock).
			waitFor(t, 30*time.Second, "the crashed relay's leases to expire", func() bool {
				return b.count(t, "status = 'processing' AND lease_until >= now()") == 0
			})
			continue
		}
		if err != nil {
			t.Fatalf("relay process: %v\n%s", err, out)
		}
	}
	if crashes != 3 {
		t.Errorf("relay crashed %d times, want 3 (once per poison attempt)", crashes)
	}
	if s := b.state(t, poison); s.Status != "dead" || s.Attempts != 3 {
		t.Fatalf("poison = %+v, want dead at attempts 3", s)
	}
	if n := b.count(t, "status = 'done'"); n != 49 {
		t.Fatalf("done = %d, want all 49 healthy messages", n)
	}
	if n := b.count(t, "status = 'done' AND attempts > 2"); n != 0 {
		t.Fatalf("%d healthy messages spent more than 2 attempts", n)
	}
}
