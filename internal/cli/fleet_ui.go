package cli

import (
	"context"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/pgoutbox/console"
	"github.com/pgoutbox/pgoutbox/fleet"
)

// uiFleet is the console over several databases: the fleet overview, each
// database's console under /db/NAME/, and with discovery the set looked up
// again every --discover-interval. A database that cannot be reached or is
// not migrated shows its error in the overview; stop closes the pools.
func (a *app) uiFleet(ctx context.Context, f *flags, cfg console.Config, log *slog.Logger) (http.Handler, func(), error) {
	static, discover, err := a.fleetSpec(f)
	if err != nil {
		return nil, nil, err
	}
	fc, err := console.NewFleet(cfg)
	if err != nil {
		return nil, nil, failf("%v", err)
	}
	var mu sync.Mutex
	pools := map[string]*pgxpool.Pool{}
	urls := map[string]string{}
	apply := func(found []fleet.Database) error {
		want := map[string]string{}
		for _, d := range append(found, static...) {
			want[d.Name] = d.URL
		}
		mu.Lock()
		defer mu.Unlock()
		for name, p := range pools {
			if want[name] != urls[name] {
				p.Close()
				delete(pools, name)
			}
		}
		for name, u := range want {
			if pools[name] != nil {
				continue
			}
			d, err := a.resolveDatabase(f, u)
			if err != nil {
				return err
			}
			d.cfg.MaxConns, d.cfg.MaxConnIdleTime = 2, time.Minute
			p, err := pgxpool.NewWithConfig(ctx, d.cfg) // connects when first read
			if err != nil {
				return failf("database %s: %s", name, a.secrets.Scrub(err.Error()))
			}
			pools[name], urls[name] = p, u
		}
		set := make(map[string]*pgxpool.Pool, len(pools))
		for n, p := range pools {
			set[n] = p
		}
		return fc.Set(set)
	}
	var found []fleet.Database
	if discover != nil {
		if found, err = discover(ctx); err != nil {
			return nil, nil, failf("%s", a.secrets.Scrub(err.Error()))
		}
	}
	if err := apply(found); err != nil {
		return nil, nil, err
	}
	dctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	if discover != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-dctx.Done():
					return
				case <-time.After(*f.fleet.every):
				}
				found, err := discover(dctx)
				if err == nil {
					err = apply(found)
				}
				if err != nil && dctx.Err() == nil {
					log.Warn("discovering databases failed; keeping the current set", slog.String("error", a.secrets.Scrub(err.Error())))
				}
			}
		}()
	}
	return fc, func() {
		cancel()
		wg.Wait()
		mu.Lock()
		defer mu.Unlock()
		for _, p := range pools {
			p.Close()
		}
	}, nil
}
