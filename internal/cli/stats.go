package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/pgoutbox/db"
	"github.com/pgoutbox/pgoutbox/dispatcher"
)

// statsReport is one reading of the monitoring queries (the --json shape).
type statsReport struct {
	Table               string             `json:"table"`
	At                  time.Time          `json:"at"`
	ByStatus            map[string]int64   `json:"by_status"`
	OldestAgeSeconds    float64            `json:"oldest_undelivered_age_seconds"`
	ExpiredLeases       int64              `json:"expired_leases"`
	Dead                int64              `json:"dead"`
	Attempts            []attemptsRow      `json:"attempts"`
	StalledAfterSeconds float64            `json:"stalled_after_seconds"`
	Blocked             []blockedAggregate `json:"blocked_aggregates"`
	BlockedTruncated    bool               `json:"blocked_aggregates_truncated"`
	CommitWaits         commitWaits        `json:"ordered_commit_waits"`
	Horizon             horizonReport      `json:"horizon"`
	Moved               movedRows          `json:"moved_rows"`
	Relays              []dispatcher.Relay `json:"relays"`
}

// movedRows is OutboxPortability: what rows brought from another server
// (a restore, a logical replication copy, triggers turned off) left for a
// relay, or `pgoutbox repair`, to repair.
type movedRows struct {
	Unsequenced     int64 `json:"unsequenced_ordered"`
	ForeignTxids    int64 `json:"foreign_txids"`
	SequencesBehind int32 `json:"sequences_behind"`
}

// horizonReport is what pins the xmin horizon (OutboxHorizonHolders) and
// the outbox table's dead row versions (OutboxDeadTuples).
type horizonReport struct {
	Holders            []horizonHolder `json:"holders"`
	DeadTuples         int64           `json:"dead_tuples"`
	LiveTuples         int64           `json:"live_tuples"`
	VacuumedSecondsAgo float64         `json:"vacuumed_seconds_ago"`
}

type horizonHolder struct {
	Kind           string     `json:"kind"`
	PID            int32      `json:"pid"`
	Role           string     `json:"role"`
	Name           string     `json:"name"`
	State          string     `json:"state"`
	Since          *time.Time `json:"since"`
	HeldSeconds    float64    `json:"held_seconds"`
	XminAge        int64      `json:"xmin_age"`
	CatalogXminAge int64      `json:"catalog_xmin_age"`
	Query          string     `json:"query"`
}

type attemptsRow struct {
	Attempts int32 `json:"attempts"`
	Count    int64 `json:"count"`
}

type blockedAggregate struct {
	AggregateID      string  `json:"aggregate_id"`
	HeadID           int64   `json:"head_id"`
	HeadStatus       string  `json:"head_status"`
	HeadEventType    string  `json:"head_event_type"`
	HeadAttempts     int32   `json:"head_attempts"`
	HeadLastError    *string `json:"head_last_error"`
	Backlog          int64   `json:"backlog"`
	OldestAgeSeconds float64 `json:"oldest_age_seconds"`
}

// commitWaits is OutboxOrderedCommitWaits: producers whose COMMIT waits for
// another commit of the same aggregate (ordered delivery's only wait).
type commitWaits struct {
	Waiting            int64   `json:"waiting_commits"`
	LongestWaitSeconds float64 `json:"longest_wait_seconds"`
}

func (a *app) stats(ctx context.Context, args []string) error {
	f := newFlags("stats", "pgoutbox stats [flags]",
		"Shows the monitoring queries as tables: messages by status, the age of the oldest\n"+
			"undelivered message, expired leases, the attempts distribution of undelivered\n"+
			"messages, the dead count, ordered aggregates that are blocked (dead head, or\n"+
			"undelivered for longer than --stalled-after), and ordered commit waits (producers\n"+
			"whose COMMIT waits for another commit of the same aggregate).\n"+
			"Read-only; all figures come from one snapshot.",
		"  pgoutbox stats\n"+
			"  pgoutbox stats --json | jq .oldest_undelivered_age_seconds\n"+
			"  pgoutbox stats --watch 2s\n"+
			"  pgoutbox stats --stalled-after 1m --max-blocked 100")
	dbURL := f.databaseURLs(false)
	asJSON := f.Bool("json", false, "print one JSON object (one per refresh with --watch)")
	watch := f.duration("watch", 0, "refresh every interval until interrupted (e.g. 2s; 0 = once)")
	stalledAfter := f.durationDays("stalled-after", 5*time.Minute, "an ordered aggregate whose oldest undelivered message is older than this counts as blocked")
	maxBlocked := f.int64("max-blocked", 20, "most blocked aggregates to show")
	if _, err := a.parse(f, args, 0); err != nil {
		return err
	}
	if f.visited("watch") {
		if err := f.checkPositive("watch", *watch); err != nil {
			return err
		}
	}
	if err := f.checkPositive("stalled-after", *stalledAfter); err != nil {
		return err
	}
	if err := f.checkRange("max-blocked", *maxBlocked, 1, 10000); err != nil {
		return err
	}
	if f.isFleet() {
		return a.statsFleet(ctx, f, *asJSON, *watch, *stalledAfter, int32(*maxBlocked)) // fleet_ops.go
	}
	pool, _, err := a.open(ctx, f, *dbURL)
	if err != nil {
		return err
	}
	defer pool.Close()

	clear := *watch > 0 && !*asJSON && a.stdoutIsTerminal()
	for i := 0; ; i++ {
		rep, err := a.readStats(ctx, pool, *stalledAfter, int32(*maxBlocked))
		if err != nil {
			if ctx.Err() != nil && *watch > 0 {
				return nil
			}
			if *watch == 0 || i == 0 {
				return a.dbError("stats", err)
			}
			fmt.Fprintf(a.stderr, "pgoutbox: stats: %s (retrying in %s)\n", message(a.secrets.Scrub(err.Error())), *watch)
		} else {
			switch {
			case *asJSON:
				b, _ := json.Marshal(rep)
				fmt.Fprintf(a.stdout, "%s\n", b)
			default:
				var buf strings.Builder
				if clear {
					buf.WriteString("\x1b[H\x1b[2J") // cursor home, clear screen
				} else if i > 0 {
					fmt.Fprintf(&buf, "\n---------------- %s ----------------\n\n", formatTime(rep.At))
				}
				renderStats(&buf, rep)
				_, _ = io.WriteString(a.stdout, buf.String())
			}
		}
		if *watch == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(*watch):
		}
	}
}

// readStats runs the monitoring queries in one read-only repeatable-read
// transaction, so the figures agree with each other.
func (a *app) readStats(ctx context.Context, pool *pgxpool.Pool, stalledAfter time.Duration, maxBlocked int32) (*statsReport, error) {
	qctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	tx, err := pool.BeginTx(qctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return nil, err
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // read-only
	q, ops := a.queries(tx), a.ops(tx)
	rep := &statsReport{Table: a.tableName(), At: a.now().UTC(), ByStatus: map[string]int64{}, StalledAfterSeconds: stalledAfter.Seconds(),
		Attempts: []attemptsRow{}, Blocked: []blockedAggregate{}}
	for _, s := range statusOrder {
		rep.ByStatus[s] = 0
	}
	counts, err := ops.OutboxCountByStatus(qctx)
	if err != nil {
		return nil, err
	}
	for _, c := range counts {
		rep.ByStatus[c.Status] = c.Count
	}
	rep.Dead = rep.ByStatus["dead"]
	if rep.OldestAgeSeconds, err = q.OutboxOldestPendingAge(qctx); err != nil {
		return nil, err
	}
	if rep.ExpiredLeases, err = q.OutboxExpiredLeases(qctx); err != nil {
		return nil, err
	}
	hist, err := ops.OutboxAttemptsHistogram(qctx)
	if err != nil {
		return nil, err
	}
	for _, h := range hist {
		rep.Attempts = append(rep.Attempts, attemptsRow{Attempts: h.Attempts, Count: h.Count})
	}
	blocked, err := q.OutboxBlockedAggregates(qctx, db.OutboxBlockedAggregatesParams{StalledAfter: stalledAfter, MaxRows: maxBlocked + 1})
	if err != nil {
		return nil, err
	}
	if len(blocked) > int(maxBlocked) {
		blocked, rep.BlockedTruncated = blocked[:maxBlocked], true
	}
	for _, b := range blocked {
		rep.Blocked = append(rep.Blocked, blockedAggregate{
			AggregateID: b.AggregateID, HeadID: b.HeadID, HeadStatus: b.HeadStatus, HeadEventType: b.HeadEventType,
			HeadAttempts: b.HeadAttempts, HeadLastError: b.HeadLastError, Backlog: b.Backlog, OldestAgeSeconds: b.OldestAgeSeconds,
		})
	}
	cw, err := ops.OutboxOrderedCommitWaits(qctx)
	if err != nil {
		return nil, err
	}
	rep.CommitWaits = commitWaits{Waiting: cw.WaitingCommits, LongestWaitSeconds: cw.LongestWaitSeconds}
	h, err := dispatcher.ReadHorizon(qctx, q, 5)
	if err != nil {
		return nil, err
	}
	rep.Horizon = horizonReport{Holders: []horizonHolder{}, DeadTuples: h.DeadTuples, LiveTuples: h.LiveTuples, VacuumedSecondsAgo: h.VacuumedSecondsAgo}
	for _, x := range h.Holders {
		rep.Horizon.Holders = append(rep.Horizon.Holders, horizonHolder(x))
	}
	mv, err := q.OutboxPortability(qctx, 100000)
	if err != nil {
		return nil, err
	}
	rep.Moved = movedRows{Unsequenced: mv.Unsequenced, ForeignTxids: mv.ForeignTxids, SequencesBehind: mv.SequencesBehind}
	if rep.Relays, err = dispatcher.ReadRelays(qctx, q, 100); err != nil {
		return nil, err
	}
	if rep.Relays == nil {
		rep.Relays = []dispatcher.Relay{}
	}
	return rep, nil
}

// statusOrder is the statuses stats always reports, in this order (0 when
// the table has none); skipped is resolved without delivery, apart from done.
var statusOrder = []string{"pending", "processing", "done", "dead", "skipped"}

func renderStats(w io.Writer, r *statsReport) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "%s at %s\n\n", r.Table, formatTime(r.At))
	fmt.Fprintln(tw, "STATUS\tCOUNT")
	for _, s := range statusOrder {
		fmt.Fprintf(tw, "%s\t%d\n", s, r.ByStatus[s])
	}
	for s, n := range r.ByStatus {
		if !slices.Contains(statusOrder, s) {
			fmt.Fprintf(tw, "%s\t%d\n", cell(s, 40), n)
		}
	}
	fmt.Fprintln(tw)
	fmt.Fprintf(tw, "oldest undelivered:\t%s\n", oldestAge(r.OldestAgeSeconds))
	fmt.Fprintf(tw, "expired leases:\t%d\n", r.ExpiredLeases)
	fmt.Fprintf(tw, "dead:\t%d\n", r.Dead)
	_ = tw.Flush()

	fmt.Fprint(w, "\nattempts of undelivered messages\n")
	if len(r.Attempts) == 0 {
		fmt.Fprint(w, "  none undelivered\n")
	} else {
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "  ATTEMPTS\tCOUNT")
		for _, h := range r.Attempts {
			fmt.Fprintf(tw, "  %d\t%d\n", h.Attempts, h.Count)
		}
		_ = tw.Flush()
	}

	fmt.Fprintf(w, "\nblocked ordered aggregates (dead head, or undelivered for more than %s)\n",
		formatFlagDuration(time.Duration(r.StalledAfterSeconds*float64(time.Second))))
	if len(r.Blocked) == 0 {
		fmt.Fprint(w, "  none\n")
	} else {
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "  AGGREGATE\tHEAD ID\tHEAD STATUS\tHEAD EVENT\tATTEMPTS\tBACKLOG\tOLDEST AGE\tLAST ERROR")
		for _, b := range r.Blocked {
			lastErr := ""
			if b.HeadLastError != nil {
				lastErr = textCell(*b.HeadLastError, 60)
			}
			fmt.Fprintf(tw, "  %s\t%d\t%s\t%s\t%d\t%d\t%s\t%s\n", cell(b.AggregateID, 40), b.HeadID, cell(b.HeadStatus, 12),
				cell(b.HeadEventType, 30), b.HeadAttempts, b.Backlog, humanAge(b.OldestAgeSeconds), lastErr)
		}
		_ = tw.Flush()
		if r.BlockedTruncated {
			fmt.Fprintf(w, "  (more not shown: raise --max-blocked)\n")
		}
	}

	fmt.Fprint(w, "\nordered commit waits (producers waiting for a commit of the same aggregate)\n")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "  waiting commits:\t%d\n", r.CommitWaits.Waiting)
	fmt.Fprintf(tw, "  longest wait:\t%s\n", humanAge(r.CommitWaits.LongestWaitSeconds))
	_ = tw.Flush()

	renderRelays(w, r.Relays)
	renderHorizon(w, r.Horizon)
	if m := r.Moved; m.Unsequenced > 0 || m.ForeignTxids > 0 || m.SequencesBehind > 0 {
		fmt.Fprint(w, "\nrows from another server (a running relay repairs them; or run `pgoutbox repair`)\n")
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		if m.Unsequenced > 0 {
			fmt.Fprintf(tw, "  %d ordered rows inserted with triggers off are not sequenced\t(never delivered until sequenced)\n", m.Unsequenced)
		}
		if m.ForeignTxids > 0 {
			fmt.Fprintf(tw, "  %d pending rows carry a txid this server has not assigned\t(restored or replicated; never claimed until re-stamped)\n", m.ForeignTxids)
		}
		if m.SequencesBehind > 0 {
			fmt.Fprintf(tw, "  %d sequences are behind the rows\t(new inserts collide on id or are ordered before older events)\n", m.SequencesBehind)
		}
		_ = tw.Flush()
	}
}

// renderHorizon writes who holds the oldest snapshots: until they end,
// vacuum cannot remove the row versions every claim and finalize leaves.
func renderHorizon(w io.Writer, h horizonReport) {
	fmt.Fprint(w, "\noldest snapshots (until they end, vacuum cannot remove the outbox's old row versions)\n")
	if len(h.Holders) == 0 {
		fmt.Fprint(w, "  none held\n")
	} else {
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "  HOLDER\tPID\tROLE\tNAME\tSTATE\tHELD FOR\tXMIN AGE\tQUERY")
		for _, x := range h.Holders {
			pid, held, xminAge := "-", "-", fmt.Sprintf("%d tx", x.XminAge)
			if x.PID != 0 {
				pid = fmt.Sprint(x.PID)
			}
			if x.Since != nil {
				held = humanAge(x.HeldSeconds)
			}
			if x.XminAge == 0 && x.CatalogXminAge > 0 {
				xminAge = fmt.Sprintf("catalog only: %d tx", x.CatalogXminAge)
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", x.Kind, pid, cell(x.Role, 20), cell(x.Name, 30),
				cell(x.State, 20), held, xminAge, textCell(x.Query, 50))
		}
		_ = tw.Flush()
	}
	vacuumed := "never vacuumed since the statistics were reset"
	if h.VacuumedSecondsAgo >= 0 {
		vacuumed = "last vacuumed " + humanAge(h.VacuumedSecondsAgo) + " ago"
	}
	fmt.Fprintf(w, "  outbox table: %d dead row versions, %d live (statistics, approximate); %s\n", h.DeadTuples, h.LiveTuples, vacuumed)
}

// renderRelays writes the relays as they record themselves (outbox_relays):
// one line per relay process.
func renderRelays(w io.Writer, relays []dispatcher.Relay) {
	fmt.Fprint(w, "\nrelays (each relay's own record, every few seconds; stopped and silent ones for an hour)\n")
	if len(relays) == 0 {
		fmt.Fprint(w, "  none recorded in the last hour\n")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  OWNER PREFIX\tSTATE\tHOST\tPID\tVERSION\tIN FLIGHT\tLEASES\tLAST CLAIM\tLAST FINALIZE\tHEARTBEAT")
	ago := func(s float64) string {
		if s < 0 {
			return "never"
		}
		return humanAge(s) + " ago"
	}
	for _, r := range relays {
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%d\t%s\t%d\t%d\t%s\t%s\t%s\n", cell(r.OwnerPrefix, 60), r.State, cell(r.Host, 30), r.PID,
			cell(r.Version, 40), r.InFlight, r.Leases, ago(r.LastClaimAgeSeconds), ago(r.LastFinalizeAgeSeconds), ago(r.HeartbeatAgeSeconds))
	}
	_ = tw.Flush()
}
