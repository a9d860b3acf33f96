// Command chaos is pgoutbox's fault-injection suite. It starts a throwaway
// PostgreSQL cluster, migrates it with the pgoutbox binary, creates the
// least-privilege roles of docs/roles.sql, and runs several
// `pgoutbox run --publisher http` processes (as the relay role) against an
// HTTP receiver that records every arrival, while producers (as the producer
// role) enqueue events in business transactions — ordered aggregates,
// unordered events, rolled-back transactions and savepoints. On a seeded
// schedule it SIGKILLs relays (restarted), freezes them longer than the lease
// (SIGSTOP/SIGCONT), terminates their database connections, restarts
// PostgreSQL in immediate mode, and the receiver answers slowly, 5xx, 429,
// 4xx and "not yet" (425) for some events, and SIGKILLs whichever relay
// delivers the poison event; with -outage the receiver refuses every
// connection for a while in the middle of the run (outage.go). At the end
// it checks the invariants over the full history (see check.go), prints the
// figures, and can write them to RELIABILITY.md. It exits 1 when an
// invariant fails, 2 when the run itself could not be carried out.
//
//	go run ./chaos -seed 1 -duration 2m -events 50000 -relays 4
//	go run ./chaos -seed 42 -duration 32m -events 200000 -relays 4 -out RELIABILITY.md -section long
//	go run ./chaos -failover -seed 1 -duration 90s -events 30000 -relays 4
//	go run ./chaos -seed 1 -duration 2m -outage 3m -events 50000 -relays 4
//
// With -datamove it runs the data-moves scenario instead (datamove.go): the
// outbox is dumped and restored into a second cluster, then moved to a third
// by a logical replication cutover, under live producers and relays; every
// committed event must be delivered, ordered ones in commit order.
//
//	go run ./chaos -datamove -seed 1 -duration 45s -relays 3
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

type options struct {
	seed           uint64
	duration       time.Duration // faults are injected for this long
	events         int
	relays         int
	producers      int
	lease          time.Duration
	publishTimeout time.Duration
	batch          int
	concurrency    int
	maxAttempts    int
	faultEvery     time.Duration
	pgRestarts     int
	poison         int
	drainTimeout   time.Duration
	out            string
	section        string
	bin            string
	keep           bool
	failover       bool // a synchronous standby, promoted mid-run (failover.go)
	pgbouncer      bool
	datamove       bool // the data-moves scenario (datamove.go)
	fleet          int  // databases of the fleet variant (fleetrun.go); 0 = one database
	args           []string

	outage time.Duration // the receiver down mid-run (outage.go)
}

func main() {
	var o options
	flag.Uint64Var(&o.seed, "seed", 1, "seed of the fault schedule, the event mix and the receiver's answers")
	flag.DurationVar(&o.duration, "duration", 2*time.Minute, "how long faults are injected (producers write until 5s before the end)")
	flag.IntVar(&o.events, "events", 50000, "events to commit (at least)")
	flag.IntVar(&o.relays, "relays", 4, "relay processes (pgoutbox run)")
	flag.IntVar(&o.producers, "producers", 4, "producer goroutines (each its own transactions)")
	flag.DurationVar(&o.lease, "lease", 2*time.Second, "relay --lease")
	flag.DurationVar(&o.publishTimeout, "publish-timeout", time.Second, "relay --publish-timeout (shorter than the lease)")
	flag.IntVar(&o.batch, "batch", 50, "relay --batch")
	flag.IntVar(&o.concurrency, "concurrency", 16, "relay --concurrency")
	flag.IntVar(&o.maxAttempts, "max-attempts", 6, "relay --max-attempts")
	flag.DurationVar(&o.faultEvery, "fault-every", 3*time.Second, "mean time between relay faults (kill, pause, terminate)")
	flag.IntVar(&o.pgRestarts, "pg-restarts", 0, "PostgreSQL immediate restarts (0 = one per 10 minutes of faults, at least one)")
	flag.IntVar(&o.poison, "poison", 0, "poison events (0 = one per 10 minutes of faults, at least one)")
	flag.DurationVar(&o.drainTimeout, "drain-timeout", 3*time.Minute, "how long to wait for the queue to drain after the faults")
	flag.StringVar(&o.out, "out", "", "write the figures into this Markdown file (RELIABILITY.md), replacing the -section part")
	flag.StringVar(&o.section, "section", "short", "which part of -out to replace: short or long")
	flag.StringVar(&o.bin, "bin", "", "a pgoutbox binary to run (default: go build ./cmd/pgoutbox)")
	flag.BoolVar(&o.keep, "keep", false, "keep the temp directory (relay logs) even when every invariant holds")
	flag.BoolVar(&o.failover, "failover", false, "add a synchronous streaming standby; mid-run stop the primary hard and promote the standby "+
		"(everyone connects through a multi-host URL); replaces the PostgreSQL restarts")
	flag.DurationVar(&o.outage, "outage", 0, "take the receiver down (every connection refused) for this long in the middle of the fault window, "+
		"which it lengthens; no relay fault meanwhile (0 = none)")
	flag.BoolVar(&o.pgbouncer, "pgbouncer", false, "route producers and relays through a throwaway PgBouncer in transaction mode (Debian's pgbouncer); relays LISTEN on a direct connection (--listen-url)")
	flag.BoolVar(&o.datamove, "datamove", false, "the data-moves scenario instead of the faults: dump and restore into a second cluster (the source past xid epoch 0), "+
		"then a logical replication cutover to a third, under live producers and relays (-duration is split between the three servers)")
	flag.IntVar(&o.fleet, "fleet", 0, "the fleet variant: this many databases on one server, relays finding them by discovery; "+
		"faults: relay kills, one database's connections terminated, one database dropped and created again (fleetrun.go)")
	flag.Parse()
	o.args = os.Args[1:]
	if err := o.validate(); err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		os.Exit(2)
	}
	if o.pgRestarts == 0 && !o.failover {
		o.pgRestarts = max(1, int(o.duration/(10*time.Minute)))
	}
	if o.failover {
		o.pgRestarts = 0 // restarting the old primary would make two primaries
	}
	if o.poison == 0 {
		o.poison = max(1, int(o.duration/(10*time.Minute)))
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if o.fleet > 0 {
		if o.fleet < 2 {
			fmt.Fprintln(os.Stderr, "chaos:", errFleetOptions)
			os.Exit(2)
		}
		res, err := runFleet(ctx, o)
		if err != nil {
			fmt.Fprintln(os.Stderr, "chaos:", err)
			os.Exit(2)
		}
		if !res.OK() {
			fmt.Fprintln(os.Stderr, "chaos: INVARIANTS VIOLATED")
			os.Exit(1)
		}
		return
	}
	var res interface{ OK() bool }
	var err error
	if o.datamove {
		res, err = runDataMove(ctx, o)
	} else {
		res, err = run(ctx, o)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		os.Exit(2)
	}
	if !res.OK() {
		fmt.Fprintln(os.Stderr, "chaos: INVARIANTS VIOLATED")
		os.Exit(1)
	}
}

func (o options) validate() error {
	switch {
	case o.duration <= 0:
		return errors.New("-duration must be positive")
	case o.events < 1:
		return errors.New("-events must be at least 1")
	case o.relays < 1:
		return errors.New("-relays must be at least 1")
	case o.producers < 1:
		return errors.New("-producers must be at least 1")
	case o.lease <= 0 || o.publishTimeout <= 0 || o.publishTimeout >= o.lease:
		return errors.New("-lease and -publish-timeout must be positive, with -publish-timeout < -lease")
	case o.maxAttempts < 2:
		return errors.New("-max-attempts must be at least 2")
	case o.faultEvery <= 0 || o.drainTimeout <= 0:
		return errors.New("-fault-every and -drain-timeout must be positive")
	case o.outage < 0:
		return errors.New("-outage must not be negative")
	case o.section != "short" && o.section != "long" && o.section != "failover":
		return errors.New("-section must be short, long or failover")
	}
	return nil
}

// moduleRoot finds the directory of pgoutbox's go.mod from the working
// directory upwards.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && strings.Contains(string(b), "module github.com/pgoutbox/pgoutbox\n") {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("run from inside the pgoutbox module (go.mod not found)")
		}
		dir = parent
	}
}
