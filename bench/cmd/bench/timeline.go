package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// statementTimeline records when each statement of the bench's pools began
// and ended (-timeline, with -try): how much of a drain ran zero, one, two
// or more statements at once shows whether the claimer or the finalizer
// waited (tuning log, entry 18). nil unless -timeline is given.
var statementTimeline *timeline

type timelineEvent struct {
	name       string
	conn       *pgx.Conn
	start, end time.Time
	rows       int64
}

type timeline struct {
	every bool // print every statement too
	mu    sync.Mutex
	evs   []timelineEvent
	open  map[*pgx.Conn]timelineEvent
}

func newTimeline(level int) *timeline {
	return &timeline{every: level > 1, open: map[*pgx.Conn]timelineEvent{}}
}

// statementLabel is the sqlc name of a statement ("-- name: X ..."), else
// its first characters.
func statementLabel(sql string) string {
	if name, ok := strings.CutPrefix(sql, "-- name: "); ok {
		name, _, _ = strings.Cut(name, " ")
		return name
	}
	return sql[:min(len(sql), 24)]
}

func (t *timeline) TraceQueryStart(ctx context.Context, c *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	t.mu.Lock()
	t.open[c] = timelineEvent{name: statementLabel(d.SQL), conn: c, start: time.Now()}
	t.mu.Unlock()
	return ctx
}

func (t *timeline) TraceQueryEnd(_ context.Context, c *pgx.Conn, d pgx.TraceQueryEndData) {
	t.mu.Lock()
	e := t.open[c]
	e.end, e.rows = time.Now(), d.CommandTag.RowsAffected()
	t.evs = append(t.evs, e)
	t.mu.Unlock()
}

// reset forgets what was recorded (the enqueue before a drain).
func (t *timeline) reset() {
	if t == nil {
		return
	}
	t.mu.Lock()
	t.evs = nil
	t.mu.Unlock()
}

// report prints what was recorded since reset.
func (t *timeline) report() {
	if t == nil {
		return
	}
	t.mu.Lock()
	evs := t.evs
	t.evs = nil
	t.mu.Unlock()
	if len(evs) == 0 {
		return
	}
	slices.SortFunc(evs, func(a, b timelineEvent) int { return a.start.Compare(b.start) })
	type edge struct {
		at    time.Time
		delta int
	}
	edges := make([]edge, 0, 2*len(evs))
	type total struct {
		calls int
		took  time.Duration
	}
	byName := map[string]*total{}
	var names []string
	for _, e := range evs {
		edges = append(edges, edge{e.start, 1}, edge{e.end, -1})
		if byName[e.name] == nil {
			byName[e.name] = &total{}
			names = append(names, e.name)
		}
		byName[e.name].calls++
		byName[e.name].took += e.end.Sub(e.start)
	}
	slices.SortFunc(edges, func(a, b edge) int { return a.at.Compare(b.at) })
	var running int
	var share [4]time.Duration // 0, 1, 2, 3 or more statements at once
	for i := 0; i < len(edges)-1; i++ {
		running += edges[i].delta
		share[min(running, 3)] += edges[i+1].at.Sub(edges[i].at)
	}
	t0 := evs[0].start
	span := edges[len(edges)-1].at.Sub(t0)
	pct := func(d time.Duration) float64 { return 100 * float64(d) / float64(span) }
	fmt.Fprintf(os.Stderr, "timeline: %s; statements at once: 0 %.0f%%, 1 %.0f%%, 2 %.0f%%, 3+ %.0f%%\n",
		span.Round(time.Millisecond), pct(share[0]), pct(share[1]), pct(share[2]), pct(share[3]))
	for _, n := range names {
		s := byName[n]
		fmt.Fprintf(os.Stderr, "  %-28s %5d calls, %s in all, %s each\n", n, s.calls, s.took.Round(time.Millisecond), (s.took / time.Duration(s.calls)).Round(10*time.Microsecond))
	}
	if t.every {
		for _, e := range evs {
			fmt.Fprintf(os.Stderr, "  %9.2f %9.2f ms  conn %p  %s (%d rows)\n",
				float64(e.start.Sub(t0).Microseconds())/1000, float64(e.end.Sub(t0).Microseconds())/1000, e.conn, e.name, e.rows)
		}
	}
}
