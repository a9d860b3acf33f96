package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgoutbox/pgoutbox/dispatcher"
)

// idleResult is the idle item: one event at a time into an empty table,
// delivered by one `pgoutbox run --publisher stdout` with no tuning flag.
type idleResult struct {
	Interval  time.Duration
	Duration  time.Duration
	Sent      int
	Delivered int
	P50, P90  time.Duration
	P99, Max  time.Duration
	Samples   []time.Duration
	Command   string
	CPU       time.Duration // the relay's CPU time per event over the measured minute
	Load      string        // the load average at the end
}

const (
	idleInterval = 50 * time.Millisecond
	idleDuration = time.Minute
)

// runIdle is the idle item: a relay process with every default waits on an
// empty table; one producer commits a one-event transaction every 50 ms for
// a minute. Latency: from the producer's COMMIT returning to the relay's
// stdout line for that message being read by this process (one monotonic
// clock; the pipe adds microseconds).
func runIdle(ctx context.Context, e *env) error {
	if err := resetOutbox(ctx, e.outbox); err != nil {
		return err
	}
	if err := settle(ctx, e.outbox, "outbox"); err != nil {
		return err
	}
	p, err := startRelay(e.outboxURL, "stdout")
	if err != nil {
		return err
	}
	defer p.stop() //nolint:errcheck

	var (
		mu        sync.Mutex
		committed = map[string]time.Time{}
		arrived   = map[string]time.Time{}
		got       = make(chan string, 1024)
	)
	go func() {
		s := bufio.NewScanner(p.stdout)
		s.Buffer(make([]byte, 1<<20), 1<<20)
		for s.Scan() {
			at := time.Now()
			var l struct {
				ID string `json:"id"`
			}
			if json.Unmarshal(s.Bytes(), &l) != nil {
				continue
			}
			mu.Lock()
			arrived[l.ID] = at
			mu.Unlock()
			select {
			case got <- l.ID:
			default:
			}
		}
		close(got)
	}()
	send := func() (string, error) {
		var id int64
		err := pgx.BeginFunc(ctx, e.outbox, func(tx pgx.Tx) error {
			var err error
			id, err = dispatcher.Enqueue(ctx, tx, dispatcher.Event{AggregateType: "bench", AggregateID: "idle",
				EventType: "benchmark", Payload: json.RawMessage(`{"idle":true}`)})
			return err
		})
		if err != nil {
			return "", err
		}
		s := dispatcher.IDString(id)
		mu.Lock()
		committed[s] = time.Now()
		mu.Unlock()
		return s, nil
	}
	// Warm-up: the relay is connected and listening once it has delivered
	// one event (not counted).
	warm, err := send()
	if err != nil {
		return err
	}
	timeout := time.After(time.Minute)
wait:
	for {
		select {
		case id, ok := <-got:
			if !ok {
				return fmt.Errorf("relay stdout closed before the warm-up event: %s", p.stderr.String())
			}
			if id == warm {
				break wait
			}
		case <-timeout:
			return fmt.Errorf("warm-up event not delivered within a minute: %s", p.stderr.String())
		}
	}
	mu.Lock()
	delete(committed, warm)
	mu.Unlock()

	r := &idleResult{Interval: idleInterval, Duration: idleDuration,
		Command: "pgoutbox run --publisher stdout --metrics-addr 127.0.0.1:PORT --log-level warn"}
	cpu0, err := p.cpu()
	if err != nil {
		return err
	}
	tick := time.NewTicker(idleInterval)
	defer tick.Stop()
	end := time.Now().Add(idleDuration)
	for time.Now().Before(end) {
		if _, err := send(); err != nil {
			return err
		}
		r.Sent++
		<-tick.C
	}
	// Wait for the last ones (bounded), then stop the relay.
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		mu.Lock()
		n := 0
		for id := range committed {
			if _, ok := arrived[id]; ok {
				n++
			}
		}
		mu.Unlock()
		if n == r.Sent {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	cpu1, err := p.cpu()
	if err != nil {
		return err
	}
	r.CPU, r.Load = (cpu1-cpu0)/time.Duration(max(r.Sent, 1)), loadAverage()
	mu.Lock()
	for id, c := range committed {
		a, ok := arrived[id]
		if !ok {
			continue
		}
		r.Delivered++
		r.Samples = append(r.Samples, max(a.Sub(c), 0))
	}
	mu.Unlock()
	slices.Sort(r.Samples)
	r.P50, r.P90 = percentile(r.Samples, 0.50), percentile(r.Samples, 0.90)
	r.P99, r.Max = percentile(r.Samples, 0.99), percentile(r.Samples, 1)
	e.res.Idle = r
	logf("idle: %d / %d delivered, p50 %s p90 %s p99 %s max %s; relay CPU %s per event; load average %s",
		r.Delivered, r.Sent, r.P50, r.P90, r.P99, r.Max, r.CPU.Round(time.Microsecond), r.Load)
	if r.Delivered != r.Sent {
		return fmt.Errorf("idle: %d of %d events delivered", r.Delivered, r.Sent)
	}
	return nil
}
