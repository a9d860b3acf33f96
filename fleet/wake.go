package fleet

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgoutbox/pgoutbox/db/fleetdb"
	"github.com/pgoutbox/pgoutbox/dispatcher"
)

// schedule polls d on the adaptive schedule of WakePoll and WakeStats: a
// claim round now, then PollMin after a round that claimed something (or a
// kick from the stats probe), doubling after each round that claimed
// nothing, up to PollMax. It returns a function that stops it.
func (m *member) schedule(ctx context.Context, d *dispatcher.Dispatcher) func() {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	cfg := m.f.cfg
	go func() {
		defer close(done)
		interval := cfg.PollMin
		t := time.NewTimer(0)
		defer t.Stop()
		claimed := d.Stats().Claimed
		for {
			select {
			case <-t.C:
				if c := d.Stats().Claimed; c != claimed {
					claimed, interval = c, cfg.PollMin
				} else {
					interval = min(2*interval, cfg.PollMax)
				}
			case <-m.kick:
				interval = cfg.PollMin
				if !t.Stop() {
					select {
					case <-t.C:
					default:
					}
				}
			case <-ctx.Done():
				return
			}
			d.Wake()
			m.f.polls.Add(1)
			t.Reset(interval)
		}
	}()
	return func() { cancel(); <-done }
}

// kickMember asks m's schedule to poll now and start over from PollMin.
func (m *member) kickMember() {
	select {
	case m.kick <- struct{}{}:
	default:
	}
}

// probeServers runs WakeStats: one goroutine per PostgreSQL server
// (host:port) among the running databases, each holding one connection to
// one of them and reading every database's inserted-rows counter every
// ProbeInterval. Databases whose counter moved are kicked.
func (f *Fleet) probeServers(ctx context.Context) {
	var (
		mu      sync.Mutex
		probing = map[string]context.CancelFunc{}
		wg      sync.WaitGroup
	)
	defer func() {
		mu.Lock()
		for _, c := range probing {
			c()
		}
		mu.Unlock()
		wg.Wait()
	}()
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		for server := range f.servers() {
			mu.Lock()
			if _, ok := probing[server]; !ok {
				pctx, cancel := context.WithCancel(ctx)
				probing[server] = cancel
				wg.Add(1)
				go func() {
					defer wg.Done()
					f.probe(pctx, server)
					mu.Lock()
					delete(probing, server)
					mu.Unlock()
				}()
			}
			mu.Unlock()
		}
		select {
		case <-t.C:
		case <-ctx.Done():
			return
		}
	}
}

// servers are the servers of the running databases.
func (f *Fleet) servers() map[string]struct{} {
	out := map[string]struct{}{}
	for _, m := range f.membersNow() {
		m.mu.Lock()
		if m.state == StateRunning && m.server != "" {
			out[m.server] = struct{}{}
		}
		m.mu.Unlock()
	}
	return out
}

// probe reads pg_stat_database on server until ctx ends or no running
// database is left on it.
func (f *Fleet) probe(ctx context.Context, server string) {
	seen := map[string]int64{}
	var conn *pgx.Conn
	defer func() {
		if conn != nil {
			conn.Close(context.WithoutCancel(ctx))
		}
	}()
	t := time.NewTicker(f.cfg.ProbeInterval)
	defer t.Stop()
	for ctx.Err() == nil {
		byName := map[string][]*member{}
		var any *member
		for _, m := range f.membersNow() {
			m.mu.Lock()
			if m.server == server && m.state == StateRunning {
				byName[m.dbname] = append(byName[m.dbname], m)
				any = m
			}
			m.mu.Unlock()
		}
		if any == nil {
			return
		}
		if conn == nil || conn.IsClosed() {
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			c, err := pgx.Connect(cctx, any.db.URL)
			cancel()
			if err != nil {
				f.log.Debug("stats probe: cannot connect; polling meanwhile", slog.String("server", server), slog.Any("error", err))
			} else {
				conn = c
			}
		}
		if conn != nil {
			qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			counts, err := fleetdb.New(conn).FleetInsertCounts(qctx)
			for _, c := range counts {
				// A database seen for the first time is polled too: what
				// was written before the probe began is not in the counter's
				// moves.
				if old, ok := seen[c.Datname]; !ok || old != c.TupInserted {
					for _, m := range byName[c.Datname] {
						m.kickMember()
						f.probeWakes.Add(1)
					}
				}
				seen[c.Datname] = c.TupInserted
			}
			cancel()
			f.probes.Add(1)
			if err != nil && ctx.Err() == nil {
				f.log.Debug("stats probe failed; reconnecting", slog.String("server", server), slog.Any("error", err))
				conn.Close(context.WithoutCancel(ctx))
				conn = nil
			}
		}
		select {
		case <-t.C:
		case <-ctx.Done():
		}
	}
}
