package cli

import (
	"context"
	"fmt"

	"github.com/pgoutbox/pgoutbox/db"
)

func (a *app) purge(ctx context.Context, args []string) error {
	f := newFlags("purge", "pgoutbox purge --older-than DURATION [flags]",
		"Deletes done messages whose done_at is older than --older-than (database clock), at\n"+
			"most --batch rows per statement, each its own short transaction, until none is left.\n"+
			"A progress line (total deleted so far) goes to stderr after each batch.\n"+
			"Pending, processing and dead messages are never deleted.\n\n"+
			"Safe to interrupt: on SIGINT/SIGTERM the batch in progress completes, the total is\n"+
			"reported, and purge exits 130; run it again to continue.",
		"  pgoutbox purge --older-than 7d\n"+
			"  pgoutbox purge --older-than 36h --batch 5000\n"+
			"  pgoutbox purge --older-than 1d12h")
	dbURL := f.databaseURLs(false)
	olderThan := f.durationDays("older-than", 0, "delete done messages older than this: a Go duration, or days such as 7d (required)")
	batch := f.int64("batch", 1000, "rows deleted per statement (1-100000)")
	if _, err := a.parse(f, args, 0); err != nil {
		return err
	}
	if !f.visited("older-than") {
		return f.usageError("--older-than is required (for example --older-than 7d or --older-than 36h)")
	}
	if err := f.checkPositive("older-than", *olderThan); err != nil {
		return err
	}
	if err := f.checkRange("batch", *batch, 1, 100000); err != nil {
		return err
	}
	if f.isFleet() {
		return a.purgeFleet(ctx, f, *olderThan, int32(*batch)) // fleet_ops.go
	}
	pool, _, err := a.open(ctx, f, *dbURL)
	if err != nil {
		return err
	}
	defer pool.Close()
	q := a.queries(pool)
	age := formatFlagDuration(*olderThan)
	var total int64
	for {
		if ctx.Err() != nil {
			fmt.Fprintf(a.stderr, "purge: interrupted: deleted %d done messages older than %s before stopping; run the same command again to continue\n", total, age)
			fmt.Fprintf(a.stdout, "deleted %d done messages older than %s (interrupted)\n", total, age)
			return &exitError{code: ExitInterrupted}
		}
		// The batch in flight is not cancelled by an interrupt: it is one
		// short statement, and stopping after it keeps the total exact.
		n, err := q.OutboxPurgeDone(context.WithoutCancel(ctx), db.OutboxPurgeDoneParams{OlderThan: *olderThan, Limit: int32(*batch)})
		if err != nil {
			if total > 0 {
				fmt.Fprintf(a.stdout, "deleted %d done messages older than %s before the error\n", total, age)
			}
			return a.dbError("purge", err)
		}
		total += n
		if n == 0 {
			break
		}
		fmt.Fprintf(a.stderr, "purge: deleted %d (total %d)\n", n, total)
	}
	fmt.Fprintf(a.stdout, "deleted %d done messages older than %s\n", total, age)
	return nil
}
