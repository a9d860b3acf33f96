// Package fleet runs one relay over many databases: a dispatcher per
// database (package dispatcher stays one database), one shared publisher,
// and one limit on publishes in flight divided in turn among the databases
// that have messages waiting. Databases come from a list, from a discovery
// function re-read periodically, or both; a database that cannot be served
// (unreachable, dropped, read-only, not migrated, failing every claim) is
// reported in Status and checked again after a backoff, and costs the
// others nothing. Several relays may serve the same databases: each
// database's claims, leases and fenced writes keep them apart, as they do
// for single relays. See docs/fleet.md.
//
//	dbs, _ := fleet.Databases(urlA, urlB)
//	f, err := fleet.New(pub, dbs, fleet.Config{
//		Discover: fleet.ListDatabases(serverURL, "tenant_%"),
//	})
//	err = f.Run(ctx)
package fleet

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pgoutbox/pgoutbox/dispatcher"
)

// Fleet serves many databases through one publisher.
type Fleet struct {
	cfg    Config
	pub    dispatcher.Publisher
	static []Database
	limit  *fairLimit
	log    *slog.Logger

	mu      sync.Mutex
	members map[string]*member
	running bool
	runCtx  context.Context
	wg      sync.WaitGroup

	polls, probes, probeWakes atomic.Int64
	discoveries               atomic.Int64
	discoverErr               atomic.Pointer[string]
}

// New returns a fleet serving dbs (and whatever Config.Discover finds)
// through pub. Nothing is contacted before Run.
func New(pub dispatcher.Publisher, dbs []Database, cfg Config) (*Fleet, error) {
	if pub == nil {
		return nil, fmt.Errorf("%w: publisher is nil", ErrInvalidConfig)
	}
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	for _, d := range dbs {
		if d.Name == "" || d.URL == "" {
			return nil, fmt.Errorf("%w: a database needs a Name and a URL", ErrInvalidConfig)
		}
		if seen[d.Name] {
			return nil, fmt.Errorf("%w: database %s given twice", ErrInvalidConfig, d.Name)
		}
		seen[d.Name] = true
	}
	return &Fleet{cfg: cfg, pub: pub, static: slices.Clone(dbs), limit: newFairLimit(cfg.Concurrency),
		log: cfg.Logger, members: map[string]*member{}}, nil
}

// Run serves the databases until ctx ends, then stops every dispatcher
// gracefully (each hands back what it has not started) and returns nil.
func (f *Fleet) Run(ctx context.Context) error {
	f.mu.Lock()
	if f.running {
		f.mu.Unlock()
		return fmt.Errorf("fleet: Run called twice")
	}
	f.running, f.runCtx = true, ctx
	f.mu.Unlock()
	f.log.Debug("fleet starting", slog.Int("databases", len(f.static)), slog.String("wake", f.cfg.Wake.String()),
		slog.Int("concurrency", f.cfg.Concurrency))
	f.apply(nil)
	var side sync.WaitGroup
	if f.cfg.Discover != nil {
		side.Add(1)
		go func() { defer side.Done(); f.discoverLoop(ctx) }()
	}
	if f.cfg.Wake == WakeStats {
		side.Add(1)
		go func() { defer side.Done(); f.probeServers(ctx) }()
	}
	<-ctx.Done()
	side.Wait()
	f.mu.Lock()
	for _, m := range f.members {
		m.cancel()
	}
	f.mu.Unlock()
	f.wg.Wait()
	return nil
}

// discoverLoop re-reads Config.Discover every DiscoverInterval.
func (f *Fleet) discoverLoop(ctx context.Context) {
	for {
		found, err := f.cfg.Discover(ctx)
		f.discoveries.Add(1)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			msg := err.Error()
			f.discoverErr.Store(&msg)
			f.log.Warn("discovering databases failed; keeping the current set", slog.Any("error", err))
		} else {
			f.discoverErr.Store(nil)
			f.apply(found)
		}
		select {
		case <-time.After(f.cfg.DiscoverInterval):
		case <-ctx.Done():
			return
		}
	}
}

// apply makes the served set the static databases plus found: new ones
// start, those no longer listed stop. A discovered database named like a
// static one is the static one.
func (f *Fleet) apply(found []Database) {
	want := map[string]Database{}
	for _, d := range found {
		want[d.Name] = d
	}
	for _, d := range f.static {
		want[d.Name] = d
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.runCtx.Err() != nil {
		return
	}
	for name, m := range f.members {
		if d, ok := want[name]; !ok || d.URL != m.db.URL {
			f.log.Info("database no longer served", slog.String("database", name))
			m.cancel()
			delete(f.members, name)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(want)) {
		if _, ok := f.members[name]; ok {
			continue
		}
		d := want[name]
		ctx, cancel := context.WithCancel(f.runCtx)
		errs := newLastError(f.log.Handler())
		m := &member{f: f, db: d, log: slog.New(errs).With(slog.String("database", d.Name)), errs: errs,
			share: f.limit.share(), kick: make(chan struct{}, 1), cancel: cancel, done: make(chan struct{}),
			state: StateStarting, since: time.Now()}
		if f.cfg.Source != nil {
			m.source = f.cfg.Source(d)
		}
		f.members[name] = m
		f.wg.Add(1)
		go func() { defer f.wg.Done(); m.run(ctx) }()
	}
}

// membersNow are the databases served now.
func (f *Fleet) membersNow() []*member {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Collect(maps.Values(f.members))
}

// Status is one database's standing in the fleet.
type Status struct {
	Name      string
	Source    string // CloudEvents source of its messages ("" until first started)
	State     State
	Reason    string    // why it is failing (kept after recovery: the last failure)
	Since     time.Time // when it entered State
	Failures  int       // consecutive failed attempts to serve it
	NextRetry time.Time // when failing: the next check
	Restarts  int       // dispatchers started before the current one
	InUse     int       // slots of the fleet's Concurrency it holds now
	Stats     dispatcher.Stats
}

// Status returns every served database's status, sorted by name.
func (f *Fleet) Status() []Status {
	ms := f.membersNow()
	out := make([]Status, 0, len(ms))
	for _, m := range ms {
		m.mu.Lock()
		s := Status{Name: m.db.Name, Source: m.source, State: m.state, Reason: m.reason, Since: m.since,
			Failures: m.failures, Restarts: m.restarts, Stats: m.past}
		if m.state == StateFailing {
			s.NextRetry = m.nextRetry
		}
		d := m.disp
		m.mu.Unlock()
		if d != nil {
			s.Stats = addStats(s.Stats, d.Stats())
			s.Source = d.Source()
		}
		s.InUse = m.share.inUse()
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b Status) int {
		switch {
		case a.Name < b.Name:
			return -1
		case a.Name > b.Name:
			return 1
		}
		return 0
	})
	return out
}

// Stats are the fleet's own counters.
type Stats struct {
	Databases   int   // served now
	Running     int   // of those, with a running dispatcher
	Failing     int   // of those, in backoff
	Polls       int64 // claim rounds the poll schedule asked for (WakePoll, WakeStats)
	Probes      int64 // pg_stat_database reads (WakeStats)
	ProbeWakes  int64 // databases the probe found written to
	Discoveries int64 // calls of Config.Discover
	DiscoverErr string
	Total       dispatcher.Stats // every database's counters added up (gauges: summed)
}

// Stats returns the fleet's counters and the sum of its databases'.
func (f *Fleet) Stats() Stats {
	st := f.Status()
	s := Stats{Databases: len(st), Polls: f.polls.Load(), Probes: f.probes.Load(), ProbeWakes: f.probeWakes.Load(),
		Discoveries: f.discoveries.Load()}
	if e := f.discoverErr.Load(); e != nil {
		s.DiscoverErr = *e
	}
	for _, d := range st {
		switch d.State {
		case StateRunning:
			s.Running++
		case StateFailing:
			s.Failing++
		}
		s.Total = addStats(s.Total, d.Stats)
	}
	return s
}

// addStats adds b's counters to a's (BreakerOpen: open at either). Queue
// gauges are added up too (depths and counts; the oldest age is the larger).
func addStats(a, b dispatcher.Stats) dispatcher.Stats {
	a.Claimed += b.Claimed
	a.Recovered += b.Recovered
	a.Published += b.Published
	a.Retried += b.Retried
	a.Deferred += b.Deferred
	a.Dead += b.Dead
	a.LeaseLost += b.LeaseLost
	a.Released += b.Released
	a.NearExpiry += b.NearExpiry
	a.Panics += b.Panics
	a.Unclassified += b.Unclassified
	a.Reaped += b.Reaped
	a.Heartbeats += b.Heartbeats
	a.Notifications += b.Notifications
	a.WakePolls += b.WakePolls
	a.IdleWaits += b.IdleWaits
	a.RoomWaits += b.RoomWaits
	a.Listens += b.Listens
	a.DBErrors += b.DBErrors
	a.Flushes += b.Flushes
	a.Isolations += b.Isolations
	a.Unreadable += b.Unreadable
	a.Requeued += b.Requeued
	a.Repaired += b.Repaired
	a.LockWaits += b.LockWaits
	a.Unavailable += b.Unavailable
	a.BreakerOpens += b.BreakerOpens
	a.Probes += b.Probes
	a.BreakerOpen = a.BreakerOpen || b.BreakerOpen // open at some database
	a.InFlight += b.InFlight
	a.ClaimSize += b.ClaimSize
	if !b.Queue.At.IsZero() {
		q := &a.Queue
		q.ByStatus = maps.Clone(q.ByStatus) // a's map may be another Stats' too
		if q.ByStatus == nil {
			q.ByStatus = map[string]int64{}
		}
		for k, v := range b.Queue.ByStatus {
			q.ByStatus[k] += v
		}
		q.OldestAgeSeconds = max(q.OldestAgeSeconds, b.Queue.OldestAgeSeconds)
		q.ExpiredLeases += b.Queue.ExpiredLeases
		q.BlockedAggregates += b.Queue.BlockedAggregates
		if b.Queue.At.After(q.At) {
			q.At = b.Queue.At
		}
	}
	return a
}
