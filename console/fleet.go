package console

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/pgoutbox/db/consoledb"
	"github.com/pgoutbox/pgoutbox/internal/redact"
)

// Fleet is the console over many databases: an overview of every database
// at Prefix + "/" (depth, oldest undelivered, dead, blocked aggregates and
// throughput of each, sorted by what needs attention first, with totals),
// and each database's own console (every page of Console) under
// Prefix + "/db/NAME/".
//
// The overview never waits on 200 databases: a look at it starts a
// reading of every database in the background when the figures are older
// than Refresh, and shows the figures read so far. While the page is open
// (it reloads itself every Refresh) they are therefore at most about twice
// Refresh old; nothing is read while nobody looks, and the first look after
// a minute without any waits at most fleetFirstWait for the new reading.
// So its server time stays that of rendering one table, whatever the number
// of databases (BENCHMARKS.md measures it with 200).
type Fleet struct {
	cfg     Config
	log     *slog.Logger
	secrets *redact.Scrubber

	mu      sync.Mutex
	dbs     map[string]*fleetDB
	looked  time.Time     // the overview's last request
	reading chan struct{} // closed when the reading in progress ends; nil: none
}

// fleetDB is one database of the fleet console.
type fleetDB struct {
	name    string
	pool    *pgxpool.Pool
	console *Console
	row     fleetRow
}

// fleetRow is one database's line of the overview.
type fleetRow struct {
	Name, Path       string // Path: its console, Prefix + "/db/" + escaped name
	Read             bool   // figures read at least once
	At               time.Time
	Err              string
	Pending          count
	Processing       count
	Dead             count
	Blocked          count
	OldestAgeSeconds float64
	PerSecond        float64 // delivered per second over the last 5 full minutes (exact count / 300 s)
}

// attention orders rows by what needs an operator first: unreadable, then
// blocked aggregates, dead messages, the oldest undelivered message, depth.
func attention(a, b *fleetRow) int {
	if (a.Err != "") != (b.Err != "") {
		if a.Err != "" {
			return -1
		}
		return 1
	}
	return cmp.Or(
		cmp.Compare(b.Blocked.N, a.Blocked.N),
		cmp.Compare(b.Dead.N, a.Dead.N),
		cmp.Compare(b.OldestAgeSeconds, a.OldestAgeSeconds),
		cmp.Compare(b.Pending.N+b.Processing.N, a.Pending.N+a.Processing.N),
		strings.Compare(a.Name, b.Name),
	)
}

// fleetFirstWait is how long the overview waits for a reading it started
// (the first look, or one after a minute without any).
const fleetFirstWait = 150 * time.Millisecond

// fleetParallel bounds the databases read at once.
const fleetParallel = 16

// NewFleet returns the console over many databases; Set gives it the
// databases. cfg is every database's console configuration (Prefix is the
// fleet's).
func NewFleet(cfg Config) (*Fleet, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	f := &Fleet{cfg: cfg, log: cfg.Logger, secrets: &redact.Scrubber{}, dbs: map[string]*fleetDB{}}
	f.secrets.Add(cfg.Token, cfg.BasicPassword)
	return f, nil
}

// Set makes pools (by database name) the fleet's databases: new ones are
// added, missing ones removed (their pools are the caller's to close), and
// a name whose pool changed starts over.
func (f *Fleet) Set(pools map[string]*pgxpool.Pool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for name, d := range f.dbs {
		if pools[name] != d.pool {
			delete(f.dbs, name)
		}
	}
	for name, pool := range pools {
		if _, ok := f.dbs[name]; ok {
			continue
		}
		if !urlSafeName(name) {
			f.log.Warn("console: database left out: its name does not fit in a URL path", slog.String("database", name))
			continue
		}
		cfg := f.cfg
		cfg.Prefix = f.cfg.Prefix + "/db/" + name
		cfg.Home = f.cfg.Prefix + "/"
		c, err := New(pool, cfg)
		if err != nil {
			return fmt.Errorf("console for %s: %w", name, err)
		}
		f.secrets.Add(pool.Config().ConnConfig.Password)
		f.dbs[name] = &fleetDB{name: name, pool: pool, console: c,
			row: fleetRow{Name: name, Path: f.cfg.Prefix + "/db/" + pathEscape(name) + "/"}}
	}
	return nil
}

// urlSafeName reports whether a database name can be a path of the
// console's routes: letters, digits and _ . : @ - /, no empty segment.
func urlSafeName(name string) bool {
	if name == "" || strings.HasPrefix(name, "/") || strings.HasSuffix(name, "/") || strings.Contains(name, "//") {
		return false
	}
	for _, r := range name {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', strings.ContainsRune("_.:@-/", r):
		default:
			return false
		}
	}
	return true
}

// pathEscape escapes a database name for a link, keeping the slashes of a
// host:port/database name readable (the router matches names, not
// segments).
func pathEscape(name string) string {
	parts := strings.Split(name, "/")
	for i, p := range parts {
		parts[i] = url.PathEscape(p)
	}
	return strings.Join(parts, "/")
}

// ServeHTTP serves the overview, and each database's console under /db/.
func (f *Fleet) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p := f.cfg.Prefix
	rest, ok := strings.CutPrefix(r.URL.Path, p+"/db/")
	if ok {
		if d := f.route(rest); d != nil {
			d.console.ServeHTTP(w, r)
			return
		}
	}
	// The fleet's own pages: the same headers, hosts and authentication as
	// every database's console (a console without a database decides).
	if !(&Console{cfg: f.cfg}).admit(w, r) {
		return
	}
	switch {
	case r.Method == http.MethodGet && r.URL.Path == p+"/":
		f.overview(w, r)
	case r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, p+"/static/"):
		http.StripPrefix(p+"/static/", staticFiles).ServeHTTP(w, r)
	case r.Method == http.MethodGet && p != "" && r.URL.Path == p:
		http.Redirect(w, r, p+"/", http.StatusMovedPermanently)
	default:
		http.NotFound(w, r)
	}
}

// route finds the database whose name starts the path (longest first: a
// name may hold slashes).
func (f *Fleet) route(rest string) *fleetDB {
	f.mu.Lock()
	defer f.mu.Unlock()
	var best *fleetDB
	for name, d := range f.dbs {
		if (rest == name || strings.HasPrefix(rest, name+"/")) && (best == nil || len(name) > len(best.name)) {
			best = d
		}
	}
	return best
}

// fleetOverview is the overview page.
type fleetOverview struct {
	Rows                             []*fleetRow
	Databases, Unread, Failed        int
	Pending, Processing, Dead, Block int64
	Capped                           bool
	OldestAgeSeconds                 float64
	PerSecond                        float64
	ReadAt                           time.Time // the oldest reading shown
}

func (f *Fleet) overview(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	if done := f.look(); done != nil {
		select {
		case <-done:
		case <-time.After(fleetFirstWait):
		}
	}
	f.mu.Lock()
	o := fleetOverview{Databases: len(f.dbs)}
	for _, d := range f.dbs {
		row := d.row
		o.Rows = append(o.Rows, &row)
	}
	f.mu.Unlock()
	for _, row := range o.Rows {
		switch {
		case !row.Read:
			o.Unread++
			continue
		case row.Err != "":
			o.Failed++
			continue
		}
		o.Pending += row.Pending.N
		o.Processing += row.Processing.N
		o.Dead += row.Dead.N
		o.Block += row.Blocked.N
		o.Capped = o.Capped || row.Pending.Capped || row.Processing.Capped || row.Dead.Capped || row.Blocked.Capped
		o.OldestAgeSeconds = max(o.OldestAgeSeconds, row.OldestAgeSeconds)
		o.PerSecond += row.PerSecond
		if o.ReadAt.IsZero() || row.At.Before(o.ReadAt) {
			o.ReadAt = row.At
		}
	}
	slices.SortFunc(o.Rows, attention)
	v := view{Title: "Databases", Nav: "fleet", Base: f.cfg.Prefix, ReadOnly: f.cfg.ReadOnly, Fleet: true,
		Where: fmt.Sprintf("%d databases", o.Databases), Refresh: int(f.cfg.Refresh / time.Second), Data: o}
	(&Console{cfg: f.cfg, log: f.log}).write(w, start, http.StatusOK, "fleet", v)
}

// look records a look at the overview and starts a reading when the
// figures are older than Refresh (and none runs). It returns the channel
// of a reading to wait for when nothing was read for a minute, else nil.
func (f *Fleet) look() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	cold := time.Since(f.looked) > time.Minute
	f.looked = time.Now()
	if f.reading != nil {
		if cold {
			return f.reading
		}
		return nil
	}
	stale := false
	for _, d := range f.dbs {
		if !d.row.Read || time.Since(d.row.At) >= f.cfg.Refresh {
			stale = true
			break
		}
	}
	if !stale {
		return nil
	}
	done := make(chan struct{})
	f.reading = done
	go f.read(done)
	if cold {
		return done
	}
	return nil
}

// read reads every database's figures, fleetParallel at a time.
func (f *Fleet) read(done chan struct{}) {
	defer func() {
		f.mu.Lock()
		f.reading = nil
		f.mu.Unlock()
		close(done)
	}()
	f.mu.Lock()
	dbs := make([]*fleetDB, 0, len(f.dbs))
	for _, d := range f.dbs {
		dbs = append(dbs, d)
	}
	f.mu.Unlock()
	sem := make(chan struct{}, fleetParallel)
	var wg sync.WaitGroup
	for _, d := range dbs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			row := f.readOne(d)
			f.mu.Lock()
			d.row = row
			f.mu.Unlock()
		}()
	}
	wg.Wait()
}

// readOne reads one database's line: three bounded statements of the
// console's own (queries/console/console.sql).
func (f *Fleet) readOne(d *fleetDB) fleetRow {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	row := fleetRow{Name: d.name, Path: d.row.Path, Read: true}
	q := d.console.cq
	cp := f.cfg.CountCap
	counts, err := q.OutboxConsoleStatusCounts(ctx, consoledb.OutboxConsoleStatusCountsParams{Cap: int32(cp), LowestIds: 1000})
	var blocked int64
	var minutes []*consoledb.OutboxConsoleDeliveredPerMinuteRow
	if err == nil {
		blocked, err = q.OutboxConsoleBlockedCount(ctx, consoledb.OutboxConsoleBlockedCountParams{StalledAfter: f.cfg.StalledAfter, Cap: int32(cp)})
	}
	if err == nil {
		minutes, err = d.console.deliveredPerMinute(ctx, consoledb.OutboxConsoleDeliveredPerMinuteParams{
			Minutes: fleetRateMinutes + 1, LatencySample: 1})
	}
	row.At = time.Now()
	if err != nil {
		row.Err = f.secrets.Scrub(strings.Join(strings.Fields(err.Error()), " "))
		return row
	}
	row.Pending, row.Processing, row.Dead = capped(counts.Pending, cp), capped(counts.Processing, cp), capped(counts.Dead, cp)
	row.Blocked = capped(blocked, cp)
	row.OldestAgeSeconds = counts.OldestAgeSeconds
	row.PerSecond = recentRate(minutes, fleetRateMinutes)
	return row
}

// fleetRateMinutes is the window of the overview's throughput.
const fleetRateMinutes = 5

// recentRate is the delivery rate over the last n full minutes of rows
// (per second): their exact count over their length, the same figures as
// the database's own overview bars.
func recentRate(minutes []*consoledb.OutboxConsoleDeliveredPerMinuteRow, n int) float64 {
	if len(minutes) < 2 {
		return 0
	}
	full := minutes[:len(minutes)-1] // the last row is the current, partial minute
	full = full[max(len(full)-n, 0):]
	var sum int64
	for _, m := range full {
		sum += m.Delivered
	}
	return float64(sum) / float64(len(full)*60)
}

// Databases returns the names of the fleet's databases, sorted.
func (f *Fleet) Databases() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	names := make([]string, 0, len(f.dbs))
	for n := range f.dbs {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}
