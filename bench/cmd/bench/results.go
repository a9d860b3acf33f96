package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"runtime"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// results collects every figure of one run; writeReport renders it.
type results struct {
	Started  time.Time
	Duration time.Duration
	Full     bool
	Rounds   int

	// Machine and server.
	CPUModel  string
	NumCPU    int
	MemTotal  string
	Kernel    string
	GoVersion string
	PGVersion string
	Settings  []setting // every setting not at its built-in default

	// Item 1.
	DrainN        int
	DrainOutbox   []float64 // msg/s per round
	DrainRiver    []float64
	OutboxConfig  string
	RiverConfig   string
	DrainVerified string

	// Item 1, the defaults rows (defaults.go), in the same rotation.
	DrainZero   []float64 // dispatcher.Config{} in process
	DrainRelay  []float64 // one `pgoutbox run`, no tuning flags
	DrainRelay4 []float64 // four `pgoutbox run` processes sharing the backlog
	ZeroConfig  string
	RelayConfig string
	Idle        *idleResult
	Crash       *crashResult
	// CPU time per message of the process(es) that drained, per round: this
	// process for DrainZero, the relays (startup included) for the others.
	DrainZeroCPU, DrainRelayCPU, DrainRelay4CPU []time.Duration

	// Item "databases" (databases.go): one relay over 200 databases.
	Databases *databasesResult
	// Item "failures" (failures.go): what a failing receiver costs.
	Failures *failuresResult

	// Item "fleet" (fleet.go): a burst committed onto running relays.
	FleetN                    int
	FleetOne, FleetFour       []float64 // msg/s per round
	FleetOneCPU, FleetFourCPU []time.Duration

	// Throughput sweeps (charts).
	SweepN           int
	SweepBatch       []point // x = Batch
	SweepConcurrency []point // x = Concurrency
	SweepDispatchers []point // x = dispatchers in one process

	// Item 2.
	Sustained            []sustainedStep
	LatencyAt1000        *sustainedStep
	ProducerCeiling      []producerCeiling
	LatencyAt1000Batched *sustainedStep
	MaxSustained         float64
	SustainedNotes       string

	// Item 3.
	ClaimCost []claimCost

	// Item 4.
	OrderedN          int
	OrderedRate       float64
	OrderedAggregates int
	HotN              int
	HotRate           float64
	OrderedVerified   string
	OrderedConfig     string
	// Item 4b.
	Producers       []producerCase
	ProducerClients int
	ProducerSeconds float64

	// Item 5.
	CeilingRows      int
	CeilingRate      float64
	CeilingClients   int
	CeilingBatch     int
	CeilingDetail    string
	CeilingRounds    []float64 // interleaved with the drain rounds, CeilingClients clients
	CeilingRoundRows int

	// Item 6.
	RSSN        int
	RSSPeakKiB  int64
	RSSRate     float64
	RSSGoDetail string

	// Item 7 (tracing.go).
	TracingN int
	Tracing  []tracingCase
	// Item "horizon" (horizon.go) and the opt-in soak and retention
	// measurements (horizon_soak.go).
	Horizon   []*horizonRun
	Soak      *soakResult
	Retention []retentionResult
	// Carried holds the opt-in sections (8, 9) of the BENCHMARKS.md being
	// replaced, by section number, for the items this run did not run.
	Carried map[string]string
}

type setting struct{ Name, Value, Source string }

type point struct {
	X    float64
	Rate float64
}

type sustainedStep struct {
	Offered   float64 // msg/s asked of the producers
	Achieved  float64 // msg/s committed by the producers
	Delivered float64 // msg/s published
	PerTx     int     // messages per business transaction
	P50, P90  time.Duration
	P99, Max  time.Duration
	Backlog   int64 // undelivered at the end of the step
	Kept      bool  // dispatcher kept up (see sustained.go)
	Samples   []time.Duration
	Producers int
	Duration  time.Duration
	Committed int
	Published int
}

// producerCeiling is item 2b: unpaced one-event producer transactions under
// one wake-up variant.
type producerCeiling struct {
	Variant       string
	Producers     int
	Duration      time.Duration
	Transactions  int64
	Notifications int64
	TxPerSec      float64
	NotifyPerSec  float64
}

type claimCost struct {
	Retained int
	P50, P99 time.Duration
	Mean     time.Duration
	Iter     int
	Plan     string
}

func (r *results) settingsLine() string {
	var parts []string
	for _, s := range r.Settings {
		parts = append(parts, s.Name+"="+s.Value)
	}
	return strings.Join(parts, ", ")
}

func describeMachine(ctx context.Context, pool *pgxpool.Pool, r *results) error {
	r.NumCPU = runtime.NumCPU()
	r.GoVersion = runtime.Version()
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		s := bufio.NewScanner(f)
		for s.Scan() {
			if k, v, ok := strings.Cut(s.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				r.CPUModel = strings.TrimSpace(v)
				break
			}
		}
		f.Close()
	}
	if f, err := os.Open("/proc/meminfo"); err == nil {
		s := bufio.NewScanner(f)
		for s.Scan() {
			if k, v, ok := strings.Cut(s.Text(), ":"); ok && k == "MemTotal" {
				var kb int64
				fmt.Sscanf(strings.TrimSpace(v), "%d", &kb)
				r.MemTotal = fmt.Sprintf("%.1f GiB", float64(kb)/(1<<20))
			}
		}
		f.Close()
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		r.Kernel = strings.TrimSpace(string(b))
	}
	if err := pool.QueryRow(ctx, "SELECT version()").Scan(&r.PGVersion); err != nil {
		return err
	}
	if i := strings.Index(r.PGVersion, " on "); i > 0 {
		r.PGVersion = r.PGVersion[:i]
	}
	rows, err := pool.Query(ctx, `
		SELECT name, current_setting(name), source
		  FROM pg_settings
		 WHERE source NOT IN ('default', 'override', 'client', 'session')
		 ORDER BY name`)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var s setting
		if err := rows.Scan(&s.Name, &s.Value, &s.Source); err != nil {
			return err
		}
		r.Settings = append(r.Settings, s)
	}
	if err := rows.Err(); err != nil {
		return err
	}
	// The durability settings, stated explicitly whatever their source.
	for _, name := range []string{"fsync", "synchronous_commit", "full_page_writes", "wal_sync_method"} {
		var v string
		if err := pool.QueryRow(ctx, "SELECT current_setting($1)", name).Scan(&v); err != nil {
			return err
		}
		found := false
		for _, s := range r.Settings {
			found = found || s.Name == name
		}
		if !found {
			r.Settings = append(r.Settings, setting{name, v, "default (stated)"})
		}
	}
	return nil
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted)-1) * p)
	return sorted[i]
}
