package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"path"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/pgoutbox/db/opsdb"
	"github.com/pgoutbox/pgoutbox/fleet"
	"github.com/pgoutbox/pgoutbox/migrations"
)

// The one-shot commands over several databases: each database in turn (or
// fleetParallel at once), a line or a row per database, a total, and exit 1
// when a database could not be worked on (the others are still done).

// fleetFailed is the exit of a command that could not work on some
// databases.
func fleetFailed(what string, failed, total int) error {
	if failed == 0 {
		return nil
	}
	return failf("%s: %d of %d databases failed (see above)", what, failed, total)
}

// fleetStatsReport is stats --json over several databases.
type fleetStatsReport struct {
	At        time.Time               `json:"at"`
	Databases map[string]*statsReport `json:"databases"`
	Errors    map[string]string       `json:"errors"`
	Total     fleetStatsTotal         `json:"total"`
}

// fleetStatsTotal adds the databases' figures up (the oldest age is the
// largest).
type fleetStatsTotal struct {
	Databases         int              `json:"databases"`
	Failed            int              `json:"failed"`
	ByStatus          map[string]int64 `json:"by_status"`
	OldestAgeSeconds  float64          `json:"oldest_undelivered_age_seconds"`
	ExpiredLeases     int64            `json:"expired_leases"`
	Dead              int64            `json:"dead"`
	BlockedAggregates int              `json:"blocked_aggregates"`
	WaitingCommits    int64            `json:"waiting_commits"`
}

func (a *app) statsFleet(ctx context.Context, f *flags, asJSON bool, watch, stalledAfter time.Duration, maxBlocked int32) error {
	dbs, err := a.fleetDatabases(ctx, f)
	if err != nil {
		return err
	}
	var mu sync.Mutex
	pools := map[string]*pgxpool.Pool{}
	defer func() {
		for _, p := range pools {
			p.Close()
		}
	}()
	clear := watch > 0 && !asJSON && a.stdoutIsTerminal()
	for i := 0; ; i++ {
		rep := fleetStatsReport{At: a.now().UTC(), Databases: map[string]*statsReport{}, Errors: map[string]string{},
			Total: fleetStatsTotal{Databases: len(dbs), ByStatus: map[string]int64{}}}
		errs := a.eachDatabase(ctx, dbs, fleetParallel, func(ctx context.Context, da *app, _ int, d fleet.Database) error {
			mu.Lock()
			p := pools[d.Name]
			mu.Unlock()
			if p == nil {
				var err error
				if p, err = da.fleetPool(ctx, f, d); err != nil {
					return err
				}
				mu.Lock()
				pools[d.Name] = p
				mu.Unlock()
			}
			r, err := da.readStats(ctx, p, stalledAfter, maxBlocked)
			if err != nil {
				return err
			}
			mu.Lock()
			rep.Databases[d.Name] = r
			mu.Unlock()
			return nil
		})
		for j, err := range errs {
			if err != nil {
				rep.Errors[dbs[j].Name] = a.errText(err)
				rep.Total.Failed++
			}
		}
		for _, r := range rep.Databases {
			t := &rep.Total
			for s, n := range r.ByStatus {
				t.ByStatus[s] += n
			}
			t.OldestAgeSeconds = max(t.OldestAgeSeconds, r.OldestAgeSeconds)
			t.ExpiredLeases += r.ExpiredLeases
			t.Dead += r.Dead
			t.BlockedAggregates += len(r.Blocked)
			t.WaitingCommits += r.CommitWaits.Waiting
		}
		if asJSON {
			b, _ := json.Marshal(rep)
			fmt.Fprintf(a.stdout, "%s\n", b)
		} else {
			var buf strings.Builder
			if clear {
				buf.WriteString("\x1b[H\x1b[2J")
			} else if i > 0 {
				fmt.Fprintf(&buf, "\n---------------- %s ----------------\n\n", formatTime(rep.At))
			}
			renderFleetStats(&buf, dbs, &rep)
			_, _ = io.WriteString(a.stdout, buf.String())
		}
		if watch == 0 {
			return fleetFailed("stats", rep.Total.Failed, len(dbs))
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(watch):
		}
	}
}

func renderFleetStats(w io.Writer, dbs []fleet.Database, r *fleetStatsReport) {
	fmt.Fprintf(w, "%d databases at %s\n\n", len(dbs), formatTime(r.At))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "DATABASE\tPENDING\tPROCESSING\tDONE\tDEAD\tOLDEST\tEXPIRED\tBLOCKED\t")
	row := func(name string, by map[string]int64, oldest float64, expired int64, blocked int) {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%s\t%d\t%d\t\n", cell(name, 40), by["pending"], by["processing"], by["done"], by["dead"],
			oldestAge(oldest), expired, blocked)
	}
	for _, d := range dbs {
		if s := r.Databases[d.Name]; s != nil {
			row(d.Name, s.ByStatus, s.OldestAgeSeconds, s.ExpiredLeases, len(s.Blocked))
		}
	}
	t := r.Total
	row("TOTAL", t.ByStatus, t.OldestAgeSeconds, t.ExpiredLeases, t.BlockedAggregates)
	_ = tw.Flush()
	if len(r.Errors) > 0 {
		fmt.Fprintf(w, "\nnot read (%d)\n", len(r.Errors))
		for _, d := range dbs {
			if e, ok := r.Errors[d.Name]; ok {
				fmt.Fprintf(w, "  %s: %s\n", cell(d.Name, 40), e)
			}
		}
	}
}

// deadListFleet is dead list over several databases: a page of each.
func (a *app) deadListFleet(ctx context.Context, f *flags, filter *deadFilter, afterID, limit int64, asJSON bool) error {
	dbs, err := a.fleetDatabases(ctx, f)
	if err != nil {
		return err
	}
	pages := make([][]*opsdb.OutboxListDeadRow, len(dbs))
	errs := a.eachDatabase(ctx, dbs, fleetParallel, func(ctx context.Context, da *app, i int, d fleet.Database) error {
		p, err := da.fleetPool(ctx, f, d)
		if err != nil {
			return err
		}
		defer p.Close()
		pages[i], err = da.ops(p).OutboxListDead(ctx, filter.params(afterID, int32(limit)))
		return err
	})
	failed := 0
	type page struct {
		Messages    []deadJSON `json:"messages"`
		NextAfterID *int64     `json:"next_after_id"`
	}
	out := struct {
		Databases map[string]page   `json:"databases"`
		Errors    map[string]string `json:"errors"`
	}{Databases: map[string]page{}, Errors: map[string]string{}}
	shown := 0
	for i, d := range dbs {
		if errs[i] != nil {
			failed++
			out.Errors[d.Name] = a.errText(errs[i])
			if !asJSON {
				fmt.Fprintf(a.stdout, "%s: not read: %s\n", cell(d.Name, 40), out.Errors[d.Name])
			}
			continue
		}
		rows := pages[i]
		var next *int64
		if len(rows) == int(limit) {
			last := rows[len(rows)-1].ID
			next = &last
		}
		pg := page{Messages: []deadJSON{}, NextAfterID: next}
		for _, r := range rows {
			pg.Messages = append(pg.Messages, deadJSON{ID: r.ID, EventType: r.EventType, AggregateType: r.AggregateType,
				AggregateID: r.AggregateID, Attempts: r.Attempts, CreatedAt: r.CreatedAt.UTC(), Ordered: r.Ordered, LastError: r.LastError})
		}
		out.Databases[d.Name] = pg
		if asJSON || len(rows) == 0 {
			continue
		}
		shown += len(rows)
		fmt.Fprintf(a.stdout, "== %s ==\n", cell(d.Name, 60))
		_ = renderDeadRows(a.stdout, rows) // dead.go
		if next != nil {
			fmt.Fprintf(a.stdout, "(more: --after-id %d with this database's --database-url)\n", *next)
		}
		fmt.Fprintln(a.stdout)
	}
	if asJSON {
		b, _ := json.Marshal(out)
		fmt.Fprintf(a.stdout, "%s\n", b)
	} else if shown == 0 && failed == 0 {
		fmt.Fprintf(a.stdout, "no dead messages in %d databases\n", len(dbs))
	}
	return fleetFailed("dead list", failed, len(dbs))
}

// deadActFleet is dead retry and dead skip --all-matching over several
// databases: every match of every database is listed first, confirmed once,
// then changed database by database in batches.
func (a *app) deadActFleet(ctx context.Context, f *flags, filter *deadFilter, yes bool, batch int, reason *string, verb, done string,
	act func(context.Context, *opsdb.Queries, int64, *string) (int64, error)) error {
	dbs, err := a.fleetDatabases(ctx, f)
	if err != nil {
		return err
	}
	ids := make([][]int64, len(dbs))
	pools := make([]*pgxpool.Pool, len(dbs))
	defer func() {
		for _, p := range pools {
			if p != nil {
				p.Close()
			}
		}
	}()
	errs := a.eachDatabase(ctx, dbs, fleetParallel, func(ctx context.Context, da *app, i int, d fleet.Database) error {
		p, err := da.fleetPool(ctx, f, d)
		if err != nil {
			return err
		}
		pools[i] = p
		ops := da.ops(p)
		for after := int64(0); ; {
			page, err := ops.OutboxListDead(ctx, filter.params(after, 1000))
			if err != nil {
				return err
			}
			for _, r := range page {
				ids[i] = append(ids[i], r.ID)
			}
			if len(page) < 1000 {
				return nil
			}
			after = page[len(page)-1].ID
		}
	})
	total, failed := 0, 0
	for i, d := range dbs {
		if errs[i] != nil {
			failed++
			fmt.Fprintf(a.stdout, "%s: not read: %s\n", cell(d.Name, 40), a.errText(errs[i]))
		}
		total += len(ids[i])
	}
	if total == 0 {
		fmt.Fprintf(a.stdout, "no dead messages%s in %d databases; nothing to do\n", map[bool]string{true: " match", false: ""}[filter.any()], len(dbs)-failed)
		return fleetFailed("dead "+verb, failed, len(dbs))
	}
	if !yes {
		if err := a.confirm(f, fmt.Sprintf("%s %d dead message%s in %d databases", verb, total, plural(total), len(dbs)-failed)); err != nil {
			return err
		}
	}
	changed := 0
	for i, d := range dbs {
		if errs[i] != nil || len(ids[i]) == 0 {
			continue
		}
		n := 0
		for start := 0; start < len(ids[i]) && ctx.Err() == nil; start += batch {
			c, _, err := a.deadBatch(ctx, pools[i], ids[i][start:min(start+batch, len(ids[i]))], verb, reason, act)
			if err != nil {
				failed++
				fmt.Fprintf(a.stdout, "%s: %s %d, then: %s\n", cell(d.Name, 40), done, n, a.errText(err))
				break
			}
			n += len(c)
		}
		changed += n
		fmt.Fprintf(a.stdout, "%s: %s %d of %d\n", cell(d.Name, 40), done, n, len(ids[i]))
	}
	fmt.Fprintf(a.stdout, "%s %d of %d dead message%s in %d databases\n", done, changed, total, plural(total), len(dbs))
	if ctx.Err() != nil {
		return failf("dead %s: interrupted after %d of %d", verb, changed, total)
	}
	return fleetFailed("dead "+verb, failed, len(dbs))
}

// purgeFleet is purge over several databases, one after the other.
func (a *app) purgeFleet(ctx context.Context, f *flags, olderThan time.Duration, batch int32) error {
	dbs, err := a.fleetDatabases(ctx, f)
	if err != nil {
		return err
	}
	age := formatFlagDuration(olderThan)
	var total int64
	failed := 0
	for _, d := range dbs {
		if ctx.Err() != nil {
			fmt.Fprintf(a.stdout, "deleted %d done messages older than %s (interrupted)\n", total, age)
			return &exitError{code: ExitInterrupted}
		}
		p, err := a.fleetPool(ctx, f, d)
		if err != nil {
			failed++
			fmt.Fprintf(a.stdout, "%s: not purged: %s\n", cell(d.Name, 40), a.errText(err))
			continue
		}
		var n int64
		ops := a.ops(p)
		for ctx.Err() == nil {
			k, err := ops.OutboxPurgeDone(context.WithoutCancel(ctx), opsdb.OutboxPurgeDoneParams{OlderThan: olderThan, Limit: batch})
			if err != nil {
				failed++
				fmt.Fprintf(a.stdout, "%s: deleted %d, then: %s\n", cell(d.Name, 40), n, a.errText(err))
				break
			}
			if n += k; k == 0 {
				fmt.Fprintf(a.stdout, "%s: deleted %d\n", cell(d.Name, 40), n)
				break
			}
		}
		p.Close()
		total += n
	}
	fmt.Fprintf(a.stdout, "deleted %d done messages older than %s in %d databases\n", total, age, len(dbs))
	return fleetFailed("purge", failed, len(dbs))
}

// migrateFleet is migrate up and migrate status over several databases:
// a row per database and a summary.
func (a *app) migrateFleet(ctx context.Context, f *flags, up bool) error {
	dbs, err := a.fleetDatabases(ctx, f)
	if err != nil {
		return err
	}
	type result struct {
		version, applied, pending int64
		files                     []string
	}
	res := make([]result, len(dbs))
	parallel := fleetParallel
	if up {
		parallel = 4 // DDL: gentler on a shared server
	}
	errs := a.eachDatabase(ctx, dbs, parallel, func(ctx context.Context, da *app, i int, d fleet.Database) error {
		m, pool, closeDB, err := da.migratorPool(ctx, f, d.URL)
		if err != nil {
			return err
		}
		defer closeDB()
		r := &res[i]
		if up {
			if err := da.refuseSecondOutbox(ctx, pool, m.VersionTable()); err != nil {
				return err
			}
			applied, err := m.Up(ctx)
			for _, x := range applied {
				if x.Error == nil {
					r.applied++
					r.files = append(r.files, path.Base(x.Source.Path))
				}
			}
			if err != nil {
				return err
			}
		}
		if r.version, err = m.Version(ctx); err != nil {
			return err
		}
		// Files newer than the database, not versions: the numbering may
		// have gaps.
		names, _ := fs.Glob(migrations.FS(), "*.sql")
		for _, n := range names {
			if versionOf(n) > r.version {
				r.pending++
			}
		}
		return nil
	})
	tw := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "DATABASE\tVERSION\tRESULT")
	failed, changed, behind := 0, 0, 0
	for i, d := range dbs {
		r := res[i]
		switch {
		case errs[i] != nil:
			failed++
			fmt.Fprintf(tw, "%s\t-\tfailed: %s\n", cell(d.Name, 40), a.errText(errs[i]))
		case up && r.applied > 0:
			changed++
			fmt.Fprintf(tw, "%s\t%d\tapplied %s\n", cell(d.Name, 40), r.version, strings.Join(r.files, ", "))
		case r.pending > 0:
			behind++
			fmt.Fprintf(tw, "%s\t%d\t%d pending\n", cell(d.Name, 40), r.version, r.pending)
		default:
			fmt.Fprintf(tw, "%s\t%d\tup to date\n", cell(d.Name, 40), r.version)
		}
	}
	_ = tw.Flush()
	if up {
		fmt.Fprintf(a.stdout, "\n%d databases: %d migrated, %d already up to date, %d failed (this build: version %d)\n",
			len(dbs), changed, len(dbs)-changed-failed, failed, migrations.Latest())
		return fleetFailed("migrate up", failed, len(dbs))
	}
	fmt.Fprintf(a.stdout, "\n%d databases: %d up to date, %d with pending migrations (run `pgoutbox migrate up`), %d not read (this build: version %d)\n",
		len(dbs), len(dbs)-behind-failed, behind, failed, migrations.Latest())
	return fleetFailed("migrate status", failed, len(dbs))
}
