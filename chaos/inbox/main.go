// Command inbox is pgoutbox's fault-injection suite for the consumer's half:
// consumers that use package inbox through each broker while everything
// around them fails. It starts a throwaway PostgreSQL cluster with two
// databases (the producers' outbox, the consumers' own), one outbox table
// per broker (outbox_nats, outbox_amqp, outbox_kafka), and for each broker
// relay processes (`pgoutbox run`) publishing to it and consumer processes
// (this binary, `inbox consume`) receiving through the inbox adapters
// (inboxnats, inboxamqp, inboxkafka) into inbox tables of their own
// (nats_inbox, ...), whose handler writes one side-effect row per event.
// Producers commit events, ordered and unordered, into the three outboxes
// in the same transactions. On a seeded schedule it SIGKILLs relays and
// consumers (restarted) and cuts broker connections (NATS and RabbitMQ
// through a TCP proxy; the in-process Kafka, kfake, by closing every
// connection it accepted). Then it lets everything drain and checks, per
// broker: 0 duplicate side effects, 0 order violations seen by the
// consumer, 0 missing, with the side-effect rows and with
// `pgoutbox verify` (the inbox table, and the stream or topic). It exits 1
// when an invariant fails, 2 when the run itself could not be carried out.
//
// Relays do not send the position of ordered events yet (the outbox's seq
// stamped at COMMIT, docs/inbox.md): until they do, the consumers read it
// from the outbox (inbox.Config.Prepare); when a message carries one, it
// must equal the outbox's, or the run fails.
//
//	go run ./chaos/inbox -seed 1 -duration 2m -events 3000
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"
)

type options struct {
	seed         uint64
	duration     time.Duration
	events       int
	relays       int
	consumers    int
	faultEvery   time.Duration
	drainTimeout time.Duration
	bin          string
	keep         bool
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "consume" {
		os.Exit(consumeMain(os.Args[2:]))
	}
	var o options
	flag.Uint64Var(&o.seed, "seed", 1, "seed of the fault schedule and the event mix")
	flag.DurationVar(&o.duration, "duration", 2*time.Minute, "how long faults are injected (producers write until 5s before the end)")
	flag.IntVar(&o.events, "events", 3000, "producer transactions; each writes one event into every broker's outbox")
	flag.IntVar(&o.relays, "relays", 2, "relay processes per broker")
	flag.IntVar(&o.consumers, "consumers", 2, "consumer processes per broker")
	flag.DurationVar(&o.faultEvery, "fault-every", 2*time.Second, "mean time between faults (relay kill, consumer kill, connection cut)")
	flag.DurationVar(&o.drainTimeout, "drain-timeout", 3*time.Minute, "how long to wait for every event to be processed after the faults")
	flag.StringVar(&o.bin, "bin", "", "a pgoutbox binary to run (default: go build ./cmd/pgoutbox)")
	flag.BoolVar(&o.keep, "keep", false, "keep the temp directory (process logs) even when every invariant holds")
	flag.Parse()
	if err := o.validate(); err != nil {
		fmt.Fprintln(os.Stderr, "chaos-inbox:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ok, err := run(ctx, o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos-inbox:", err)
		os.Exit(2)
	}
	if !ok {
		fmt.Fprintln(os.Stderr, "chaos-inbox: INVARIANTS VIOLATED")
		os.Exit(1)
	}
}

func (o options) validate() error {
	switch {
	case o.duration < 10*time.Second:
		return errors.New("-duration must be at least 10s")
	case o.events < 1 || o.relays < 1 || o.consumers < 1:
		return errors.New("-events, -relays and -consumers must be at least 1")
	case o.faultEvery <= 0 || o.drainTimeout <= 0:
		return errors.New("-fault-every and -drain-timeout must be positive")
	}
	return nil
}
