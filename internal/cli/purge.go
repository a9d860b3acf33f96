package cli

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/pgoutbox/pgoutbox/db/opsdb"
)

// purgeStatuses are the statuses `purge --status` accepts: the outcomes a
// message keeps for good. done is purged by done_at; dead and skipped (the
// messages that never reached anyone) only when named, by when they died.
var purgeStatuses = []string{"done", "dead", "skipped"}

func (a *app) purge(ctx context.Context, args []string) error {
	f := newFlags("purge", "pgoutbox purge --older-than DURATION [--status done,dead,skipped] [flags]",
		"Deletes finished messages older than --older-than (database clock), at most --batch\n"+
			"rows per statement, each its own short transaction, until none is left, with their\n"+
			"attempt history. A progress line (total deleted so far) goes to stderr after each batch.\n\n"+
			"--status says which: done (the default: delivered messages, by done_at), dead and\n"+
			"skipped (never delivered: kept until you name them, whatever the age of the done\n"+
			"ones; by done_at, else the time of their last attempt, else created_at). Pending\n"+
			"and processing messages are never deleted.\n\n"+
			"Safe to interrupt: on SIGINT/SIGTERM the batch in progress completes, the total is\n"+
			"reported, and purge exits 130; run it again to continue.",
		"  pgoutbox purge --older-than 7d\n"+
			"  pgoutbox purge --older-than 36h --batch 5000\n"+
			"  pgoutbox purge --older-than 1d12h\n"+
			"  pgoutbox purge --older-than 90d --status dead,skipped")
	dbURL := f.databaseURLs(false)
	olderThan := f.durationDays("older-than", 0, "delete messages older than this: a Go duration, or days such as 7d (required)")
	batch := f.int64("batch", 1000, "rows deleted per statement (1-100000)")
	statusFlag := f.String("status", "done", "comma-separated statuses to purge: done, dead, skipped")
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
	var statuses []string
	for s := range strings.SplitSeq(*statusFlag, ",") {
		s = strings.TrimSpace(s)
		if !slices.Contains(purgeStatuses, s) {
			return f.usageError("invalid --status %q: give one or more of done, dead, skipped, comma-separated (pending and processing messages are never purged)", s)
		}
		if !slices.Contains(statuses, s) {
			statuses = append(statuses, s)
		}
	}
	purgeDone := slices.Contains(statuses, "done")
	resolved := slices.DeleteFunc(slices.Clone(statuses), func(s string) bool { return s == "done" })
	if f.isFleet() {
		if len(resolved) > 0 {
			return f.usageError("--status %s: purging dead or skipped messages works on one database at a time; give one --database-url", strings.Join(resolved, ","))
		}
		return a.purgeFleet(ctx, f, *olderThan, int32(*batch)) // fleet_ops.go
	}
	pool, _, err := a.open(ctx, f, *dbURL)
	if err != nil {
		return err
	}
	defer pool.Close()
	age := formatFlagDuration(*olderThan)
	what := strings.Join(statuses, " and ")
	var total int64
	report := func(suffix string) {
		fmt.Fprintf(a.stdout, "deleted %d %s messages older than %s%s\n", total, what, age, suffix)
	}
	// The batch in flight is not cancelled by an interrupt: it is one
	// short statement, and stopping after it keeps the total exact.
	step := func(next func() (int64, error)) (bool, error) {
		if ctx.Err() != nil {
			fmt.Fprintf(a.stderr, "purge: interrupted: deleted %d %s messages older than %s before stopping; run the same command again to continue\n", total, what, age)
			report(" (interrupted)")
			return false, &exitError{code: ExitInterrupted}
		}
		n, err := next()
		if err != nil {
			if total > 0 {
				report(" before the error")
			}
			return false, a.dbError("purge", err)
		}
		total += n
		if n == 0 {
			return false, nil
		}
		fmt.Fprintf(a.stderr, "purge: deleted %d (total %d)\n", n, total)
		return true, nil
	}
	ops := a.ops(pool)
	if purgeDone {
		for {
			more, err := step(func() (int64, error) {
				return ops.OutboxPurgeDone(context.WithoutCancel(ctx), opsdb.OutboxPurgeDoneParams{OlderThan: *olderThan, Limit: int32(*batch)})
			})
			if err != nil {
				return err
			}
			if !more {
				break
			}
		}
	}
	if len(resolved) > 0 {
		after := int64(0)
		for {
			more, err := step(func() (int64, error) {
				ids, err := ops.OutboxPurgeResolved(context.WithoutCancel(ctx), opsdb.OutboxPurgeResolvedParams{
					Statuses: resolved, AfterID: after, OlderThan: *olderThan, Limit: int32(*batch)})
				if len(ids) > 0 {
					after = ids[len(ids)-1]
				}
				return int64(len(ids)), err
			})
			if err != nil {
				return err
			}
			if !more {
				break
			}
		}
	}
	report("")
	return nil
}
