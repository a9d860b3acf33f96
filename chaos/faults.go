package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/pgoutbox/pgoutbox/internal/tcpproxy"
)

// plannedFault is one entry of the seeded schedule.
type plannedFault struct {
	At    time.Duration // offset from the start of the fault window
	Kind  string        // kill, pause, terminate, pgrestart, poison, blackhole, bomb, outage
	Slot  int           // relay index (0-based); -1 = every relay (terminate)
	Dur   time.Duration // pause length, or restart delay after a kill
	Index int           // poison number
}

// schedule draws the faults of a run from seed: relay faults at exponential
// intervals (mean every), PostgreSQL restarts and poison events spread over
// the window.
func schedule(seed uint64, o options) []plannedFault {
	rng := rand.New(rand.NewPCG(seed, 7))
	var out []plannedFault
	t := 5 * time.Second
	for {
		t += time.Duration(rng.ExpFloat64() * float64(o.faultEvery))
		if t >= o.duration-2*time.Second {
			break
		}
		f := plannedFault{At: t, Slot: rng.IntN(o.relays)}
		switch v := rng.IntN(100); {
		case v < 35:
			f.Kind = "kill"
			f.Dur = time.Duration(100+rng.IntN(1400)) * time.Millisecond
		case v < 60:
			f.Kind = "pause"
			f.Dur = o.lease + time.Duration(rng.Float64()*1.5*float64(o.lease)) + o.lease/5
		default:
			f.Kind = "terminate"
			if rng.IntN(100) < 30 {
				f.Slot = -1
			}
		}
		out = append(out, f)
	}
	for i := 0; i < o.pgRestarts; i++ {
		at := time.Duration((float64(i) + 0.5) / float64(o.pgRestarts) * float64(o.duration))
		out = append(out, plannedFault{At: at + time.Duration(rng.IntN(3000))*time.Millisecond, Kind: "pgrestart"})
	}
	for i := 0; i < o.poison; i++ {
		at := time.Duration((float64(i) + 0.3) / float64(o.poison) * float64(o.duration))
		out = append(out, plannedFault{At: at, Kind: "poison", Index: i})
	}
	// Hostile networks: the relays' open connections to PostgreSQL freeze
	// (one blackhole per minute of faults, at least one). Hostile input: one
	// number bomb inserted by plain SQL, early, so that it meets live
	// traffic.
	for i, n := 0, max(1, int(o.duration/time.Minute)); i < n; i++ {
		at := time.Duration((float64(i) + 0.6) / float64(n) * float64(o.duration))
		out = append(out, plannedFault{At: at, Kind: "blackhole", Slot: -1})
	}
	out = append(out, plannedFault{At: o.duration / 5, Kind: "bomb", Slot: -1})
	if o.failover {
		out = append(out, plannedFault{At: o.duration * 2 / 5, Kind: "failover", Slot: -1})
	}
	out = withOutage(out, o)
	slices.SortStableFunc(out, func(a, b plannedFault) int { return int(a.At - b.At) })
	return out
}

// injector carries out the schedule.
type injector struct {
	e     *env
	fleet *fleet
	prod  *producers
	proxy *tcpproxy.Proxy
	// standbyProxy is the relays' way to the standby (failover runs).
	standbyProxy *tcpproxy.Proxy
	// receiverProxy is the relays' way to the receiver (the outage).
	receiverProxy *tcpproxy.Proxy
	outage        *outageFigures // set when the outage ran
	log           func(format string, args ...any)
	failover      *failoverFigures // set when the failover fault ran

	mu      sync.Mutex
	lastEnd time.Time
	pgMu    sync.Mutex
}

func (in *injector) ended(t time.Time) {
	in.mu.Lock()
	if t.After(in.lastEnd) {
		in.lastEnd = t
	}
	in.mu.Unlock()
}

// run executes plan relative to start and returns when every fault has
// ended (pauses included).
func (in *injector) run(ctx context.Context, start time.Time, plan []plannedFault) {
	var wg sync.WaitGroup
	for _, f := range plan {
		select {
		case <-ctx.Done():
			wg.Wait()
			return
		case <-time.After(time.Until(start.Add(f.At))):
		}
		name := ""
		if f.Slot >= 0 && f.Slot < len(in.fleet.slots) {
			name = in.fleet.slots[f.Slot].name
		}
		switch f.Kind {
		case "kill":
			if in.fleet.kill(name, "kill", f.Dur) {
				in.ended(time.Now())
			}
		case "pause":
			wg.Add(1)
			go func() {
				defer wg.Done()
				if in.fleet.pause(name, f.Dur) {
					in.ended(time.Now())
				}
			}()
		case "terminate":
			pattern, who := name+".%", name
			if f.Slot < 0 {
				pattern, who = "relay-%", ""
			}
			s := time.Now()
			var n int
			err := in.e.admin.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
				WHERE usename = $1 AND application_name LIKE $2`, relayUser, pattern).Scan(&n)
			if err == nil {
				in.fleet.record(Fault{Kind: "terminate", Relay: who, Start: s, End: time.Now()})
				in.ended(time.Now())
			}
		case "outage":
			wg.Add(1)
			go func() {
				defer wg.Done()
				in.receiverDown(ctx, f.Dur)
			}()
		case "pgrestart":
			wg.Add(1)
			go func() {
				defer wg.Done()
				in.pgMu.Lock()
				defer in.pgMu.Unlock()
				s := time.Now()
				in.log("! PostgreSQL restart (pg_ctl stop -m immediate, start)")
				rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
				err := in.e.cluster.Restart(rctx, "immediate")
				cancel()
				if err != nil {
					in.log("! PostgreSQL restart failed: %v", err)
					return
				}
				in.fleet.record(Fault{Kind: "pgrestart", Start: s, End: time.Now()})
				in.ended(time.Now())
				in.log("! PostgreSQL back after %s", time.Since(s).Round(time.Millisecond))
			}()
		case "failover":
			// Under pgMu, as a restart: one server change at a time.
			in.pgMu.Lock()
			s := time.Now()
			in.log("! failover: primary stopped (pg_ctl stop -m immediate), promoting the standby (pg_ctl promote)")
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
			down, promotedIn, err := failover(fctx, in.e)
			cancel()
			if err != nil {
				in.pgMu.Unlock()
				in.log("! failover failed: %v", err)
				continue
			}
			in.fleet.record(Fault{Kind: "failover", Start: s, End: time.Now()})
			in.ended(time.Now())
			in.mu.Lock()
			in.failover = &failoverFigures{at: f.At, down: down, promotedIn: promotedIn}
			in.mu.Unlock()
			in.pgMu.Unlock()
			in.log("! standby promoted %s after the primary was down", promotedIn.Round(time.Millisecond))
		case "poison":
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := in.prod.enqueuePoison(ctx, f.Index); err != nil {
					in.log("! %v", err)
				} else {
					in.log("! poison event %d enqueued", f.Index)
				}
			}()
		case "blackhole":
			s := time.Now()
			n := in.proxy.Conns()
			in.proxy.Blackhole()
			if in.standbyProxy != nil {
				n += in.standbyProxy.Conns()
				in.standbyProxy.Blackhole()
			}
			in.fleet.record(Fault{Kind: "blackhole", Start: s, End: s})
			in.ended(s)
			in.log("! blackhole: %d open relay connections frozen (new ones still work)", n)
		case "bomb":
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := in.insertBomb(ctx); err != nil {
					in.log("! %v", err)
				} else {
					in.log("! number bomb inserted by plain SQL")
				}
			}()
		default:
			panic(fmt.Sprintf("unknown fault %q", f.Kind))
		}
	}
	wg.Wait()
}

// insertBomb writes, by plain SQL (as any other language could, bypassing
// Enqueue's validation), an 81 KB payload of numbers like 1e131071: jsonb
// stores it in a few KB, but its text form exceeds 1 GB, so no query can
// return it (54000). The relays must send it to dead through the isolation
// path, with its SQLSTATE in last_error, and keep everything else flowing.
func (in *injector) insertBomb(ctx context.Context) error {
	n := 81 * 1024 / len("1e131071,")
	payload := "[" + strings.TrimSuffix(strings.Repeat("1e131071,", n), ",") + "]"
	tag := "bomb-1"
	_, err := in.e.admin.Exec(ctx, `INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload, headers)
		VALUES ('order', 'bomb', 'Bomb', $1::jsonb, jsonb_build_object('x-chaos-tx', $2::text, 'x-chaos-fate', $3::text))`,
		payload, tag, FateBomb)
	if err != nil {
		return fmt.Errorf("number bomb: %w", err)
	}
	in.prod.mu.Lock()
	in.prod.txs[tag] = 1
	in.prod.mu.Unlock()
	return nil
}
