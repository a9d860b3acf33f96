package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/pgoutbox/pgoutbox/dispatcher"
)

// The two systems of the horizon item.

// horizonPublisher records the first publish of every event; the sequence
// number travels in the payload ({"seq":N}) so that aggregate_id stays free
// for ordered aggregates.
type horizonPublisher struct{ rec *horizonRecorder }

func (p horizonPublisher) Publish(_ context.Context, m dispatcher.Message) error {
	if seq, ok := payloadSeq(m.Payload); ok {
		p.rec.delivered(seq)
	}
	return nil
}

// payloadSeq reads N from a payload {"seq": N} (jsonb may add spaces).
func payloadSeq(b []byte) (int, bool) {
	i := strings.Index(string(b), `"seq"`)
	if i < 0 {
		return 0, false
	}
	n, digits := 0, 0
	for _, c := range b[i+5:] {
		switch {
		case c >= '0' && c <= '9':
			n = n*10 + int(c-'0')
			digits++
		case digits > 0:
			return n, true
		}
	}
	return n, digits > 0
}

// horizonOutboxConfig is the relay under test: the zero Config, as
// `pgoutbox run` with default flags uses it (every default applied by New).
func horizonOutboxConfig() dispatcher.Config {
	return dispatcher.Config{Logger: quietLogger()}
}

// outboxHorizonSystem is pgoutbox with the zero Config, or with tuned the
// drain configuration (outboxSetup).
func outboxHorizonSystem(ctx context.Context, e *env, ordered, tuned bool) (horizonSystem, error) {
	sys := horizonSystem{table: "outbox", url: e.outboxURL}
	cfg := horizonOutboxConfig()
	dpoolCfg, err := pgxpool.ParseConfig(e.outboxURL)
	if err != nil {
		return sys, err
	}
	sys.settings = fmt.Sprintf("one dispatcher in process, the zero dispatcher.Config (every default: Batch %d, Concurrency %d, FinalizeBatch %d, FinalizeDelay %s, PollInterval %s, LISTEN on, Claim %s), pgxpool's default pool (MaxConns %d) as `pgoutbox run` opens it",
		dispatcher.BatchDefault, dispatcher.ConcurrencyDefault, dispatcher.FinalizeBatchDefault, dispatcher.FinalizeDelayDefault,
		dispatcher.PollIntervalDefault, cfg.Claim, dpoolCfg.MaxConns)
	if ordered {
		sys.settings += fmt.Sprintf("; events enqueued with Ordered: true, aggregate_id = seq mod %d", horizonAggregates)
	}
	if tuned {
		ds := outboxSetup()
		cfg = ds.cfg
		cfg.Logger = quietLogger()
		dpoolCfg.MaxConns = ds.poolConns
		sys.settings = "one dispatcher in process, the drain configuration of section 1 (" + ds.String() + ")"
	}
	var ppool *pgxpool.Pool
	sys.start = func(ctx context.Context, rec *horizonRecorder) (func(), error) {
		if err := resetOutbox(ctx, e.outbox); err != nil {
			return nil, err
		}
		if _, err := e.outbox.Exec(ctx, "CHECKPOINT"); err != nil {
			return nil, err
		}
		dpool, err := pgxpool.NewWithConfig(ctx, dpoolCfg)
		if err != nil {
			return nil, err
		}
		if ppool, err = newPool(ctx, e.outboxURL, horizonProducers); err != nil {
			dpool.Close()
			return nil, err
		}
		d, err := dispatcher.New(dpool, horizonPublisher{rec}, cfg)
		if err != nil {
			dpool.Close()
			ppool.Close()
			return nil, err
		}
		runCtx, cancel := context.WithCancel(ctx)
		var wg sync.WaitGroup
		wg.Add(1)
		go func() { defer wg.Done(); _ = d.Run(runCtx) }()
		time.Sleep(300 * time.Millisecond) // LISTEN established (as in sustained.go)
		return func() {
			cancel()
			wg.Wait()
			dpool.Close()
			ppool.Close()
		}, nil
	}
	events := sync.Pool{New: func() any { s := make([]dispatcher.Event, 0, horizonPerTx); return &s }}
	sys.produce = func(ctx context.Context, seqs []int) error {
		evp := events.Get().(*[]dispatcher.Event)
		defer events.Put(evp)
		ev := (*evp)[:0]
		for _, s := range seqs {
			agg := "o" + strconv.Itoa(s)
			if ordered {
				agg = "a" + strconv.Itoa(s%horizonAggregates)
			}
			ev = append(ev, dispatcher.Event{AggregateType: "order", AggregateID: agg, EventType: "OrderPlaced",
				Payload: json.RawMessage(`{"seq":` + strconv.Itoa(s) + `}`), Ordered: ordered})
		}
		*evp = ev
		return pgx.BeginFunc(ctx, ppool, func(tx pgx.Tx) error {
			_, err := dispatcher.EnqueueMany(ctx, tx, ev)
			return err
		})
	}
	return sys, nil
}

// horizonRiverWorker records the first Work call of every job.
type horizonRiverWorker struct {
	river.WorkerDefaults[benchArgs]
	rec *horizonRecorder
}

func (w *horizonRiverWorker) Work(_ context.Context, j *river.Job[benchArgs]) error {
	w.rec.delivered(j.Args.Num)
	return nil
}

// riverHorizonSystem is River with its benchmark's settings (river.go):
// one working client, and producers inserting through a second, insert-only
// client on their own pool (InsertMany: one transaction per call).
func riverHorizonSystem(ctx context.Context, e *env) (horizonSystem, error) {
	sys := horizonSystem{table: "river_job", url: e.riverURL,
		settings: riverSetupString() + "; producers insert through an insert-only client on their own pool, InsertMany of 20 per transaction"}
	var inserter *river.Client[pgx.Tx]
	sys.start = func(ctx context.Context, rec *horizonRecorder) (func(), error) {
		admin, err := newPool(ctx, e.riverURL, 2)
		if err != nil {
			return nil, err
		}
		defer admin.Close()
		for _, q := range []string{"TRUNCATE river_job", "VACUUM ANALYZE river_job", "CHECKPOINT"} {
			if _, err := admin.Exec(ctx, q); err != nil {
				return nil, err
			}
		}
		wpool, err := newPool(ctx, e.riverURL, riverPoolConns)
		if err != nil {
			return nil, err
		}
		ppool, err := newPool(ctx, e.riverURL, horizonProducers)
		if err != nil {
			wpool.Close()
			return nil, err
		}
		closeAll := func() { wpool.Close(); ppool.Close() }
		workers := river.NewWorkers()
		river.AddWorker(workers, &horizonRiverWorker{rec: rec})
		client, err := river.NewClient(riverpgxv5.New(wpool), &river.Config{
			FetchCooldown:     riverFetchCooldown,
			FetchPollInterval: riverFetchPollInterval,
			Logger:            quietLogger(),
			Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: riverMaxWorkers}},
			Workers:           workers,
		})
		if err != nil {
			closeAll()
			return nil, err
		}
		if inserter, err = river.NewClient(riverpgxv5.New(ppool), &river.Config{Logger: quietLogger()}); err != nil {
			closeAll()
			return nil, err
		}
		if err := client.Start(ctx); err != nil {
			closeAll()
			return nil, err
		}
		return func() {
			stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer cancel()
			_ = client.Stop(stopCtx)
			closeAll()
		}, nil
	}
	sys.produce = func(ctx context.Context, seqs []int) error {
		params := make([]river.InsertManyParams, len(seqs))
		for i, s := range seqs {
			params[i] = river.InsertManyParams{Args: benchArgs{Num: s}}
		}
		_, err := inserter.InsertMany(ctx, params)
		return err
	}
	return sys, nil
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
