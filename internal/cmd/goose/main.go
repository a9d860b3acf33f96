// Command goose is goose's Provider behind the command-line flags of goose's
// own command, for the tests that run the docs (internal/doctest,
// internal/adopttest): `goose [-dir DIR] [-table TABLE] postgres DSN up |
// status | version | down`. goose's own command is not pinned in this module
// because it pulls every database driver; the migrations are applied by the
// same library code either way (sequential versions, the version table
// named by -table, out-of-order versions refused).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "goose run:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	f := flag.NewFlagSet("goose", flag.ContinueOnError)
	dir := f.String("dir", ".", "directory with migration files")
	table := f.String("table", "goose_db_version", "migrations table name")
	allowMissing := f.Bool("allow-missing", false, "applies missing (out-of-order) migrations")
	if err := f.Parse(args); err != nil {
		return err
	}
	if f.NArg() < 3 {
		return fmt.Errorf("usage: goose [-dir DIR] [-table TABLE] postgres DSN up|status|version|down")
	}
	driver, dsn, command := f.Arg(0), f.Arg(1), f.Arg(2)
	if driver != "postgres" && driver != "pgx" {
		return fmt.Errorf("driver %q: this build has postgres only", driver)
	}
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return err
	}
	db := stdlib.OpenDB(*cfg)
	defer db.Close()
	opts := []goose.ProviderOption{goose.WithDisableGlobalRegistry(true), goose.WithTableName(*table)}
	if *allowMissing {
		opts = append(opts, goose.WithAllowOutofOrder(true))
	}
	p, err := goose.NewProvider(goose.DialectPostgres, db, os.DirFS(*dir), opts...)
	if err != nil {
		return err
	}
	defer p.Close()
	ctx := context.Background()
	switch command {
	case "up":
		res, err := p.Up(ctx)
		for _, r := range res {
			if r.Error == nil {
				fmt.Printf("OK   %s (%s)\n", filepath.Base(r.Source.Path), r.Duration.Round(time.Millisecond))
			}
		}
		if err != nil {
			return err
		}
		v, err := p.GetDBVersion(ctx)
		if err != nil {
			return err
		}
		if len(res) == 0 {
			fmt.Printf("goose: no migrations to run. current version: %d\n", v)
		} else {
			fmt.Printf("goose: successfully migrated database to version: %d\n", v)
		}
	case "down":
		r, err := p.Down(ctx)
		if err != nil {
			return err
		}
		fmt.Printf("OK   %s (%s)\n", filepath.Base(r.Source.Path), r.Duration.Round(time.Millisecond))
	case "status":
		st, err := p.Status(ctx)
		if err != nil {
			return err
		}
		fmt.Println("    Applied At                  Migration")
		fmt.Println("    =======================================")
		for _, s := range st {
			at := "Pending"
			if s.State == goose.StateApplied {
				at = s.AppliedAt.UTC().Format(time.ANSIC)
			}
			fmt.Printf("    %-24s -- %s\n", at, filepath.Base(s.Source.Path))
		}
	case "version":
		v, err := p.GetDBVersion(ctx)
		if err != nil {
			return err
		}
		fmt.Printf("goose: version %d\n", v)
	default:
		return fmt.Errorf("command %q: this build has up, down, status and version", command)
	}
	return nil
}
