package cli

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/pgoutbox/fleet"
	"github.com/pgoutbox/pgoutbox/internal/redact"
)

// fleetFlags are the multi-database forms of --database-url: the flag
// repeated, and discovery (--discover-databases with a pattern or a query).
type fleetFlags struct {
	urls                     []string
	discover, pattern, query *string
	every                    *time.Duration // re-read interval (run, ui); nil for one-shot commands
}

// urlsValue is --database-url: repeatable; the last value is also the
// single URL of the one-database form.
type urlsValue struct {
	last *string
	all  *[]string
}

func (v *urlsValue) String() string {
	if v == nil || v.last == nil {
		return ""
	}
	return *v.last
}

func (v *urlsValue) typeName() string { return "url" }

func (v *urlsValue) Set(s string) error {
	*v.all = append(*v.all, s)
	*v.last = s
	return nil
}

// databaseURLs is databaseURL for the commands that also work on many
// databases at once: --database-url may be repeated, and
// --discover-databases finds databases on a server (re-read every
// --discover-interval when periodic).
func (f *flags) databaseURLs(periodic bool) *string {
	s := new(string)
	ff := &fleetFlags{}
	f.Var(&urlsValue{last: s, all: &ff.urls}, "database-url",
		"PostgreSQL URL or keyword/value DSN (default: $DATABASE_URL); repeat it to work on several databases at once")
	f.hidden["database-url"] = true
	ff.discover = f.String("discover-databases", "", "a server URL whose databases are worked on, those named by --discover-pattern or listed by --discover-query (with or without --database-url)")
	f.hidden["discover-databases"] = true
	ff.pattern = f.String("discover-pattern", "", "with --discover-databases: the databases whose name matches this SQL LIKE pattern, such as tenant_%")
	ff.query = f.String("discover-query", "", "with --discover-databases: a query run there whose first column is a database name or a connection URL on each row")
	if periodic {
		ff.every = f.duration("discover-interval", fleet.DiscoverIntervalDefault, "with --discover-databases: how often the databases are looked up again (created ones are picked up, dropped ones let go)")
	}
	f.tableFlags()
	f.fleet = ff
	return s
}

// isFleet reports whether the command works on several databases: more
// than one --database-url, or discovery.
func (f *flags) isFleet() bool {
	ff := f.fleet
	return ff != nil && (len(ff.urls) > 1 || *ff.discover != "" || *ff.pattern != "" || *ff.query != "")
}

// fleetSpec checks the multi-database flags and returns the databases named
// by --database-url and the discovery function, if any.
func (a *app) fleetSpec(f *flags) ([]fleet.Database, func(context.Context) ([]fleet.Database, error), error) {
	ff := f.fleet
	for _, u := range ff.urls {
		a.secrets.Add(redact.Secrets(u, false)...)
	}
	dbs, err := fleet.Databases(ff.urls...)
	if err != nil {
		return nil, nil, f.usageError("%s", strings.TrimPrefix(err.Error(), fleet.ErrInvalidConfig.Error()+": "))
	}
	var discover func(context.Context) ([]fleet.Database, error)
	switch {
	case *ff.discover == "" && (*ff.pattern != "" || *ff.query != ""):
		return nil, nil, f.usageError("--discover-pattern and --discover-query need --discover-databases (the server to look on)")
	case *ff.discover != "" && (*ff.pattern == "") == (*ff.query == ""):
		return nil, nil, f.usageError("--discover-databases needs --discover-pattern or --discover-query (one of them)")
	case *ff.pattern != "":
		discover = fleet.ListDatabases(*ff.discover, *ff.pattern)
	case *ff.query != "":
		discover = fleet.QueryDatabases(*ff.discover, *ff.query)
	}
	if *ff.discover != "" {
		a.secrets.Add(redact.Secrets(*ff.discover, false)...)
	}
	if ff.every != nil {
		if err := f.checkPositive("discover-interval", *ff.every); err != nil {
			return nil, nil, err
		}
	}
	return dbs, discover, nil
}

// fleetDatabases is fleetSpec with discovery run once (the one-shot
// commands): the databases named and those found, sorted by name.
func (a *app) fleetDatabases(ctx context.Context, f *flags) ([]fleet.Database, error) {
	dbs, discover, err := a.fleetSpec(f)
	if err != nil {
		return nil, err
	}
	if discover != nil {
		found, err := discover(ctx)
		if err != nil {
			return nil, failf("%s", a.secrets.Scrub(err.Error()))
		}
		named := map[string]bool{}
		for _, d := range dbs {
			named[d.Name] = true
		}
		for _, d := range found {
			if !named[d.Name] {
				dbs = append(dbs, d)
			}
		}
	}
	if len(dbs) == 0 {
		return nil, failf("no database found (check --discover-pattern / --discover-query)")
	}
	sortDatabases(dbs)
	return dbs, nil
}

func sortDatabases(dbs []fleet.Database) {
	for i := 1; i < len(dbs); i++ {
		for j := i; j > 0 && dbs[j].Name < dbs[j-1].Name; j-- {
			dbs[j], dbs[j-1] = dbs[j-1], dbs[j]
		}
	}
}

// fleetPool opens a small pool on one database of the fleet and checks its
// schema, as every one-database command does.
func (a *app) fleetPool(ctx context.Context, f *flags, d fleet.Database) (*pgxpool.Pool, error) {
	db, err := a.resolveDatabase(f, d.URL)
	if err != nil {
		return nil, err
	}
	db.cfg.MaxConns = 2
	db.source = "the URL of " + d.Name
	pool, err := a.connect(ctx, db)
	if err != nil {
		return nil, err
	}
	if err := a.checkSchema(ctx, pool); err != nil {
		pool.Close()
		return nil, err
	}
	return pool, nil
}

// fleetParallel is how many databases the one-shot commands work on at
// once.
const fleetParallel = 8

// eachDatabase calls fn for every database, parallel at a time, and
// returns fn's errors by position. fn gets an app of its own (a copy of a:
// connecting records the role of the connection in it, for grant hints).
func (a *app) eachDatabase(ctx context.Context, dbs []fleet.Database, parallel int, fn func(ctx context.Context, da *app, i int, d fleet.Database) error) []error {
	errs := make([]error, len(dbs))
	sem := make(chan struct{}, parallel)
	var wg sync.WaitGroup
	for i, d := range dbs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			da := *a
			errs[i] = fn(ctx, &da, i, d)
		}()
	}
	wg.Wait()
	return errs
}

// errText is an error's message for a summary line.
func (a *app) errText(err error) string {
	return message(a.secrets.Scrub(compactErr(err.Error())))
}
