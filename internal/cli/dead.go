package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/pgoutbox/db/opsdb"
)

// deadFilter is the --event-type / --aggregate-type / --aggregate-id filter
// shared by list and --all-matching.
type deadFilter struct {
	eventType, aggregateType, aggregateID *string
}

func (f *flags) deadFilter() *deadFilter {
	return &deadFilter{
		eventType:     f.String("event-type", "", "only messages of this event type"),
		aggregateType: f.String("aggregate-type", "", "only messages of this aggregate type"),
		aggregateID:   f.String("aggregate-id", "", "only messages of this aggregate id"),
	}
}

func (d *deadFilter) any() bool {
	return *d.eventType != "" || *d.aggregateType != "" || *d.aggregateID != ""
}

func (d *deadFilter) params(afterID int64, limit int32) opsdb.OutboxListDeadParams {
	p := opsdb.OutboxListDeadParams{AfterID: afterID, Limit: limit}
	if *d.eventType != "" {
		p.EventType = d.eventType
	}
	if *d.aggregateType != "" {
		p.AggregateType = d.aggregateType
	}
	if *d.aggregateID != "" {
		p.AggregateID = d.aggregateID
	}
	return p
}

// deadJSON is one dead message in --json output.
type deadJSON struct {
	ID            int64     `json:"id"`
	EventType     string    `json:"event_type"`
	AggregateType string    `json:"aggregate_type"`
	AggregateID   string    `json:"aggregate_id"`
	Attempts      int32     `json:"attempts"`
	CreatedAt     time.Time `json:"created_at"`
	Ordered       bool      `json:"ordered"`
	LastError     *string   `json:"last_error"`
}

func (a *app) deadList(ctx context.Context, args []string) error {
	f := newFlags("dead list", "pgoutbox dead list [flags]",
		"Lists dead messages by id, oldest first, one page at a time (keyset paging: pass the\n"+
			"last id shown as --after-id for the next page). last_error is truncated in the table;\n"+
			"--json prints it whole.",
		"  pgoutbox dead list\n"+
			"  pgoutbox dead list --event-type OrderPaid --limit 100\n"+
			"  pgoutbox dead list --after-id 4711\n"+
			"  pgoutbox dead list --aggregate-type order --json | jq '.messages[].id'")
	dbURL := f.databaseURLs(false)
	afterID := f.int64("after-id", 0, "show messages with an id greater than this (the last id of the previous page)")
	limit := f.int64("limit", 50, "messages per page (1-1000)")
	asJSON := f.Bool("json", false, `print {"messages": [...], "next_after_id": N|null}`)
	filter := f.deadFilter()
	if _, err := a.parse(f, args, 0); err != nil {
		return err
	}
	if err := f.checkRange("after-id", *afterID, 0, 1<<62); err != nil {
		return err
	}
	if err := f.checkRange("limit", *limit, 1, 1000); err != nil {
		return err
	}
	if f.isFleet() {
		return a.deadListFleet(ctx, f, filter, *afterID, *limit, *asJSON) // fleet_ops.go
	}
	pool, _, err := a.open(ctx, f, *dbURL)
	if err != nil {
		return err
	}
	defer pool.Close()
	rows, err := a.ops(pool).OutboxListDead(ctx, filter.params(*afterID, int32(*limit)))
	if err != nil {
		return a.dbError("dead list", err)
	}
	var next *int64
	if len(rows) == int(*limit) {
		last := rows[len(rows)-1].ID
		next = &last
	}
	if *asJSON {
		out := struct {
			Messages    []deadJSON `json:"messages"`
			NextAfterID *int64     `json:"next_after_id"`
		}{Messages: []deadJSON{}, NextAfterID: next}
		for _, r := range rows {
			out.Messages = append(out.Messages, deadJSON{ID: r.ID, EventType: r.EventType, AggregateType: r.AggregateType,
				AggregateID: r.AggregateID, Attempts: r.Attempts, CreatedAt: r.CreatedAt.UTC(), Ordered: r.Ordered, LastError: r.LastError})
		}
		b, _ := json.Marshal(out)
		fmt.Fprintf(a.stdout, "%s\n", b)
		return nil
	}
	if len(rows) == 0 {
		switch {
		case *afterID > 0:
			fmt.Fprintf(a.stdout, "no dead messages after id %d\n", *afterID)
		case filter.any():
			fmt.Fprintln(a.stdout, "no dead messages match")
		default:
			fmt.Fprintln(a.stdout, "no dead messages")
		}
		return nil
	}
	if err := renderDeadRows(a.stdout, rows); err != nil {
		return err
	}
	if next != nil {
		fmt.Fprintf(a.stdout, "\n%d shown; next page: pgoutbox dead list --after-id %d%s\n", len(rows), *next, a.filterArgs(f, filter, *limit))
	}
	return nil
}

// renderDeadRows writes dead messages as a table.
func renderDeadRows(w io.Writer, rows []*opsdb.OutboxListDeadRow) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tEVENT TYPE\tAGGREGATE\tATTEMPTS\tCREATED AT\tLAST ERROR")
	for _, r := range rows {
		lastErr := ""
		if r.LastError != nil {
			lastErr = textCell(*r.LastError, 72)
		}
		agg := r.AggregateType + "/" + r.AggregateID
		if r.Ordered {
			agg += " (ordered)"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%s\t%s\n", r.ID, cell(r.EventType, 40), cell(agg, 50),
			r.Attempts, formatTime(r.CreatedAt), lastErr)
	}
	return tw.Flush()
}

// filterArgs repeats the filters for the "next page" hint.
func (a *app) filterArgs(f *flags, d *deadFilter, limit int64) string {
	s := ""
	if f.visited("limit") {
		s += " --limit " + strconv.FormatInt(limit, 10)
	}
	for _, p := range []struct{ name, v string }{{"event-type", *d.eventType}, {"aggregate-type", *d.aggregateType}, {"aggregate-id", *d.aggregateID}} {
		if p.v != "" {
			s += " --" + p.name + " " + strconv.Quote(p.v)
		}
	}
	return s
}

func (a *app) deadRetry(ctx context.Context, args []string) error {
	f := newFlags("dead retry", "pgoutbox dead retry [flags] ID... | --all-matching [filters]",
		"Redrives dead messages: back to pending with attempts reset and available now\n"+
			"(last_error keeps the history), then NOTIFY wakes the dispatchers. Either name the\n"+
			"ids, or pass --all-matching with the same filters as `dead list` to act on every\n"+
			"matching dead message (asks \"retry N dead messages? [y/N]\" on a terminal; needs --yes\n"+
			"otherwise). Ids that are not dead (no such id, or already redriven) are reported\n"+
			"and left unchanged; naming such an id explicitly exits 1.",
		"  pgoutbox dead retry 4711 4712\n"+
			"  pgoutbox dead retry --all-matching --event-type OrderPaid\n"+
			"  pgoutbox dead retry --all-matching --yes          # every dead message, no prompt")
	return a.deadAct(ctx, f, args, "retry", "retried", func(ctx context.Context, q *opsdb.Queries, id int64, _ *string) (int64, error) {
		return q.OutboxRedriveDead(ctx, id)
	})
}

func (a *app) deadSkip(ctx context.Context, args []string) error {
	f := newFlags("dead skip", "pgoutbox dead skip --reason TEXT [flags] ID... | --all-matching [filters]",
		"Resolves dead messages without delivering them: dead -> skipped, which unblocks an\n"+
			"ordered aggregate as delivery does but is never counted as delivered. last_error\n"+
			"keeps why it died, prefixed with \"skipped: <reason>\".\n"+
			"--reason is required. Ids and --all-matching work as in `dead retry`.",
		"  pgoutbox dead skip 4711 --reason 'customer deleted, nothing to notify'\n"+
			"  pgoutbox dead skip --all-matching --aggregate-id o-1 --reason 'replayed by hand' --yes")
	return a.deadAct(ctx, f, args, "skip", "skipped", func(ctx context.Context, q *opsdb.Queries, id int64, reason *string) (int64, error) {
		return q.OutboxSkipDead(ctx, opsdb.OutboxSkipDeadParams{ID: id, Reason: reason})
	})
}

// deadAct is retry and skip: resolve the target ids (named, or every match
// of the filters, listed with keyset paging before anything changes), ask
// for confirmation, then act in bounded batches, each its own transaction.
func (a *app) deadAct(ctx context.Context, f *flags, args []string, verb, done string,
	act func(context.Context, *opsdb.Queries, int64, *string) (int64, error)) error {
	dbURL := f.databaseURLs(false)
	all := f.Bool("all-matching", false, "act on every dead message matching the filters (all dead messages without filters)")
	yes := f.Bool("yes", false, "do not ask for confirmation (--all-matching)")
	batch := f.int64("batch", 500, "messages changed per transaction")
	var reason *string
	if verb == "skip" {
		reason = f.String("reason", "", "why the messages are skipped, kept in last_error (required)")
	}
	filter := f.deadFilter()
	positional, err := a.parse(f, args, -1)
	if err != nil {
		return err
	}
	if reason != nil && *reason == "" {
		return f.usageError("--reason is required: say why these messages are not delivered (kept in last_error)")
	}
	if err := f.checkRange("batch", *batch, 1, 10000); err != nil {
		return err
	}
	var ids []int64
	switch {
	case *all && len(positional) > 0:
		return f.usageError("give either ids or --all-matching, not both")
	case !*all && len(positional) == 0:
		return f.usageError("no ids given: pass the ids of dead messages (see `pgoutbox dead list`), or --all-matching")
	case !*all && filter.any():
		return f.usageError("--event-type, --aggregate-type and --aggregate-id select messages for --all-matching; with explicit ids, leave them out")
	}
	seen := map[int64]bool{}
	for _, s := range positional {
		id, err := strconv.ParseInt(s, 10, 64)
		if err != nil || id <= 0 {
			return f.usageError("invalid id %q: ids are positive integers (e.g. 4711, from `pgoutbox dead list`)", s)
		}
		if !seen[id] {
			seen[id] = true
			ids = append(ids, id)
		}
	}

	if f.isFleet() {
		if !*all {
			return f.usageError("ids are per database: with several databases use --all-matching, or give the one --database-url the ids belong to")
		}
		return a.deadActFleet(ctx, f, filter, *yes, int(*batch), reason, verb, done, act) // fleet_ops.go
	}
	pool, _, err := a.open(ctx, f, *dbURL)
	if err != nil {
		return err
	}
	defer pool.Close()

	if *all {
		ops := a.ops(pool)
		for after := int64(0); ; {
			page, err := ops.OutboxListDead(ctx, filter.params(after, 1000))
			if err != nil {
				return a.dbError("dead "+verb, err)
			}
			for _, r := range page {
				ids = append(ids, r.ID)
			}
			if len(page) < 1000 {
				break
			}
			after = page[len(page)-1].ID
		}
		if len(ids) == 0 {
			if filter.any() {
				fmt.Fprintln(a.stdout, "no dead messages match; nothing to do")
			} else {
				fmt.Fprintln(a.stdout, "no dead messages; nothing to do")
			}
			return nil
		}
		if !*yes {
			question := fmt.Sprintf("%s %d dead message%s", verb, len(ids), plural(len(ids)))
			if err := a.confirm(f, question); err != nil {
				return err
			}
		}
	}

	var changed, notDead []int64
	var r *string
	if reason != nil {
		r = reason
	}
	for start := 0; start < len(ids); start += int(*batch) {
		if err := ctx.Err(); err != nil {
			break
		}
		chunk := ids[start:min(start+int(*batch), len(ids))]
		c, nd, err := a.deadBatch(ctx, pool, chunk, verb, r, act)
		if err != nil {
			if len(changed) > 0 {
				fmt.Fprintf(a.stdout, "%s %d before the error\n", done, len(changed))
			}
			return err
		}
		changed = append(changed, c...)
		notDead = append(notDead, nd...)
		if len(ids) > int(*batch) {
			fmt.Fprintf(a.stderr, "%s %d of %d\n", done, len(changed)+len(notDead), len(ids))
		}
	}
	interrupted := len(changed)+len(notDead) < len(ids)
	fmt.Fprintf(a.stdout, "%s %d of %d dead message%s", done, len(changed), len(ids), plural(len(ids)))
	if len(changed) > 0 && len(changed) <= 20 {
		fmt.Fprintf(a.stdout, ": %s", idList(changed, 20))
	}
	fmt.Fprintln(a.stdout)
	if len(notDead) > 0 {
		fmt.Fprintf(a.stdout, "not dead (no such id, or no longer dead; unchanged): %s\n", idList(notDead, 50))
	}
	if interrupted {
		return failf("dead %s: interrupted after %d of %d; nothing else changed", verb, len(changed)+len(notDead), len(ids))
	}
	if len(notDead) > 0 && !*all {
		return &exitError{code: ExitFailure}
	}
	return nil
}

// deadBatch acts on ids in one transaction; for retry it also NOTIFYs
// (delivered at COMMIT) so idle dispatchers pick the messages up at once.
func (a *app) deadBatch(ctx context.Context, pool *pgxpool.Pool, ids []int64, verb string, reason *string,
	act func(context.Context, *opsdb.Queries, int64, *string) (int64, error)) (changed, notDead []int64, err error) {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return nil, nil, a.dbError("dead "+verb, err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // no-op after Commit
	q, ops := a.queries(tx), a.ops(tx)
	if verb == "skip" {
		// Skipping a dead head hands its aggregate on, under the
		// aggregate's lock: take every lock of the batch first, in the
		// order producers' COMMITs take them, never one by one in id order.
		if _, err := ops.OutboxLockAggregatesOfIds(ctx, ids); err != nil {
			return nil, nil, a.dbError("dead skip: lock the aggregates", err)
		}
	}
	for _, id := range ids {
		n, err := act(ctx, ops, id, reason)
		if err != nil {
			return nil, nil, a.dbError(fmt.Sprintf("dead %s %d", verb, id), err)
		}
		if n == 1 {
			changed = append(changed, id)
		} else {
			notDead = append(notDead, id)
		}
	}
	if verb == "retry" && len(changed) > 0 {
		if err := q.OutboxNotify(ctx); err != nil {
			return nil, nil, a.dbError("dead retry: notify", err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, nil, a.dbError("dead "+verb+": commit", err)
	}
	return changed, notDead, nil
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}
