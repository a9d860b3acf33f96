package cli

import (
	"context"
	"fmt"
	"path"
	"text/tabwriter"
	"time"

	"github.com/pressly/goose/v3"

	"github.com/pgoutbox/pgoutbox/migrations"
)

func (a *app) migrateUp(ctx context.Context, args []string) error {
	f := newFlags("migrate up", "pgoutbox migrate up [flags]",
		"Applies every pending migration embedded in this build (goose, version table "+migrations.VersionTable+",\n"+
			"under an advisory lock so concurrent runs do not race). Safe to run on every deploy.",
		"  DATABASE_URL=postgres://app:secret@db:5432/app pgoutbox migrate up\n"+
			"  pgoutbox migrate up --database-url 'host=db user=app dbname=app'")
	dbURL := f.databaseURL()
	if _, err := a.parse(f, args, 0); err != nil {
		return err
	}
	m, closeDB, err := a.migrator(ctx, f, *dbURL)
	if err != nil {
		return err
	}
	defer closeDB()
	res, err := m.Up(ctx)
	for _, r := range res {
		if r.Error == nil {
			fmt.Fprintf(a.stdout, "applied  %s (%s)\n", path.Base(r.Source.Path), r.Duration.Round(time.Millisecond))
		}
	}
	if err != nil {
		return a.dbError("migrate up", err)
	}
	v, err := m.Version(ctx)
	if err != nil {
		return a.dbError("migrate up", err)
	}
	if len(res) == 0 {
		fmt.Fprintf(a.stdout, "already up to date: version %d\n", v)
	} else {
		fmt.Fprintf(a.stdout, "schema at version %d\n", v)
	}
	return nil
}

func (a *app) migrateDown(ctx context.Context, args []string) error {
	f := newFlags("migrate down", "pgoutbox migrate down [flags]",
		"Rolls back the most recent migration, or every migration above --to VERSION.\n"+
			"Rolling back version 1 drops the outbox table and every message in it: that asks\n"+
			"for confirmation on a terminal, and needs --yes otherwise.",
		"  pgoutbox migrate down            # undo the latest migration\n"+
			"  pgoutbox migrate down --to 1     # keep only version 1\n"+
			"  pgoutbox migrate down --to 0 --yes   # drop everything (data included)")
	dbURL := f.databaseURL()
	to := f.int64("to", -1, "roll back every migration above this version (0 = all); default: only the latest")
	yes := f.Bool("yes", false, "do not ask before dropping the outbox table")
	f.hidden["to"] = true
	if _, err := a.parse(f, args, 0); err != nil {
		return err
	}
	if f.visited("to") && (*to < 0 || *to > migrations.Latest()) {
		return f.usageError("--to must be between 0 and %d, got %d", migrations.Latest(), *to)
	}
	m, closeDB, err := a.migrator(ctx, f, *dbURL)
	if err != nil {
		return err
	}
	defer closeDB()
	current, err := m.Version(ctx)
	if err != nil {
		return a.dbError("migrate down", err)
	}
	if current == 0 {
		fmt.Fprintln(a.stdout, "nothing to roll back: no migration is applied")
		return nil
	}
	target := *to
	if target < 0 {
		// The previous applied version, not necessarily current-1.
		st, err := m.Status(ctx)
		if err != nil {
			return a.dbError("migrate down", err)
		}
		target = 0
		for _, s := range st {
			if s.State == goose.StateApplied && s.Source.Version < current {
				target = max(target, s.Source.Version)
			}
		}
	}
	if target >= current {
		fmt.Fprintf(a.stdout, "nothing to roll back: schema at version %d\n", current)
		return nil
	}
	if target < 1 && !*yes {
		if err := a.confirm(f, "roll back to version 0, dropping the outbox table and every message in it"); err != nil {
			return err
		}
	}
	res, err := m.DownTo(ctx, target)
	for _, r := range res {
		if r.Error == nil {
			fmt.Fprintf(a.stdout, "rolled back  %s (%s)\n", path.Base(r.Source.Path), r.Duration.Round(time.Millisecond))
		}
	}
	if err != nil {
		return a.dbError("migrate down", err)
	}
	fmt.Fprintf(a.stdout, "schema at version %d\n", target)
	return nil
}

func (a *app) migrateStatus(ctx context.Context, args []string) error {
	f := newFlags("migrate status", "pgoutbox migrate status [flags]",
		"Shows the database's schema version and, per embedded migration file, whether it is\n"+
			"applied (and when) or pending.",
		"  pgoutbox migrate status")
	dbURL := f.databaseURL()
	if _, err := a.parse(f, args, 0); err != nil {
		return err
	}
	m, closeDB, err := a.migrator(ctx, f, *dbURL)
	if err != nil {
		return err
	}
	defer closeDB()
	st, err := m.Status(ctx)
	if err != nil {
		return a.dbError("migrate status", err)
	}
	v, err := m.Version(ctx)
	if err != nil {
		return a.dbError("migrate status", err)
	}
	pending := 0
	for _, s := range st {
		if s.State != goose.StateApplied {
			pending++
		}
	}
	fmt.Fprintf(a.stdout, "version: %d (this build: %d", v, migrations.Latest())
	if pending > 0 {
		fmt.Fprintf(a.stdout, ", %d pending: run `pgoutbox migrate up`)\n\n", pending)
	} else {
		fmt.Fprint(a.stdout, ", up to date)\n\n")
	}
	tw := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "STATE\tAPPLIED AT\tMIGRATION")
	for _, s := range st {
		at := "-"
		if s.State == goose.StateApplied {
			at = s.AppliedAt.UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", s.State, at, path.Base(s.Source.Path))
	}
	return tw.Flush()
}

// migrator connects and returns a Migrator and a function closing both.
func (a *app) migrator(ctx context.Context, f *flags, dbURL string) (*migrations.Migrator, func(), error) {
	d, err := a.resolveDatabase(f, dbURL)
	if err != nil {
		return nil, nil, err
	}
	pool, err := a.connect(ctx, d)
	if err != nil {
		return nil, nil, err
	}
	m, err := migrations.FromPool(pool)
	if err != nil {
		pool.Close()
		return nil, nil, a.dbError("migrations", err)
	}
	return m, func() { _ = m.Close(); pool.Close() }, nil
}
