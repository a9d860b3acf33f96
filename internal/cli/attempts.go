package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/user"
	"slices"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgoutbox/pgoutbox/db/consoledb"
	"github.com/pgoutbox/pgoutbox/db/opsdb"
)

// historyJSON is one attempt-history entry in --json output.
type historyJSON struct {
	N       int32     `json:"n"`
	At      time.Time `json:"at"`
	Kind    string    `json:"kind"`
	Attempt int32     `json:"attempt"`
	Actor   *string   `json:"actor"`
	Error   *string   `json:"error"`
	Answer  *string   `json:"answer"`
}

// showJSON is `dead show --json`.
type showJSON struct {
	ID            int64         `json:"id"`
	EventType     string        `json:"event_type"`
	AggregateType string        `json:"aggregate_type"`
	AggregateID   string        `json:"aggregate_id"`
	Ordered       bool          `json:"ordered"`
	Status        string        `json:"status"`
	Attempts      int32         `json:"attempts"`
	Claims        int64         `json:"claims"`
	CreatedAt     time.Time     `json:"created_at"`
	AvailableAt   time.Time     `json:"available_at"`
	DoneAt        *time.Time    `json:"done_at"`
	LeaseOwner    *string       `json:"lease_owner"`
	LastError     *string       `json:"last_error"`
	History       []historyJSON `json:"history"`
}

func (a *app) deadShow(ctx context.Context, args []string) error {
	f := newFlags("dead show", "pgoutbox dead show [flags] ID",
		"Shows one message (dead or not) and its attempt history, newest first: each failed\n"+
			"publish of its last 20 claims (when, the relay's claim, the attempt, the error, what\n"+
			"the receiver answered) and its last 5 redeliveries. Claims are numbered over the\n"+
			"message's whole life: a `dead retry` resets attempts to 0 but not the history or the\n"+
			"claim count. The payload is not printed (it may hold personal data); the console's\n"+
			"message page shows it.",
		"  pgoutbox dead show 4711\n"+
			"  pgoutbox dead show 4711 --json | jq '.history[0].answer'")
	dbURL := f.databaseURLs(false)
	asJSON := f.Bool("json", false, "print the message and its history as one JSON object")
	positional, err := a.parse(f, args, 1)
	if err != nil {
		return err
	}
	if len(positional) == 0 {
		return f.usageError("no id given: pass the id of a message (e.g. from `pgoutbox dead list`)")
	}
	id, err := strconv.ParseInt(positional[0], 10, 64)
	if err != nil || id <= 0 {
		return f.usageError("invalid id %q: ids are positive integers (e.g. 4711, from `pgoutbox dead list`)", positional[0])
	}
	if f.isFleet() {
		return f.usageError("ids are per database: give the one --database-url the id belongs to")
	}
	pool, _, err := a.open(ctx, f, *dbURL)
	if err != nil {
		return err
	}
	defer pool.Close()
	m, err := consoledb.New(a.dbtx(pool)).OutboxConsoleMessage(ctx, id)
	if errors.Is(err, pgx.ErrNoRows) {
		return failf("dead show: no message %d (never existed, or purged)", id)
	}
	if err != nil {
		return a.dbError("dead show", err)
	}
	h, err := a.ops(pool).OutboxAttemptHistory(ctx, id)
	if err != nil {
		return a.dbError("dead show: history", err)
	}
	if *asJSON {
		out := showJSON{ID: m.ID, EventType: m.EventType, AggregateType: m.AggregateType, AggregateID: m.AggregateID,
			Ordered: m.Ordered, Status: m.Status, Attempts: m.Attempts, Claims: m.LeaseVersion, CreatedAt: m.CreatedAt.UTC(),
			AvailableAt: m.AvailableAt.UTC(), DoneAt: m.DoneAt, LeaseOwner: m.LeaseOwner, LastError: m.LastError, History: []historyJSON{}}
		for _, e := range h {
			out.History = append(out.History, historyJSON{N: e.N, At: e.At.UTC(), Kind: e.Kind, Attempt: e.Attempt, Actor: e.Actor, Error: e.Error, Answer: e.Answer})
		}
		b, _ := json.Marshal(out)
		fmt.Fprintf(a.stdout, "%s\n", b)
		return nil
	}
	w := a.stdout
	agg := m.AggregateType + "/" + m.AggregateID
	if m.Ordered {
		agg += " (ordered)"
	}
	fmt.Fprintf(w, "message %d  %s  %s\n", m.ID, cell(m.EventType, 80), cell(agg, 120))
	fmt.Fprintf(w, "status:     %s, attempts %d (claims in all: %d)\n", m.Status, m.Attempts, m.LeaseVersion)
	fmt.Fprintf(w, "created:    %s\n", formatTime(m.CreatedAt))
	if m.DoneAt != nil {
		fmt.Fprintf(w, "done:       %s\n", formatTime(*m.DoneAt))
	}
	if m.Status == "pending" {
		fmt.Fprintf(w, "available:  %s\n", formatTime(m.AvailableAt))
	}
	if m.LeaseOwner != nil {
		fmt.Fprintf(w, "claimed by: %s\n", cell(*m.LeaseOwner, 120))
	}
	if m.LastError != nil {
		fmt.Fprintf(w, "last error: %s\n", textCell(*m.LastError, 500))
	}
	fmt.Fprintln(w)
	if len(h) == 0 {
		fmt.Fprintln(w, "no attempt history: no publish of this message has failed")
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "CLAIM\tAT\tWHAT\tATTEMPT\tRELAY / BY\tERROR\tRECEIVER ANSWERED")
	for _, e := range h {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%s\t%s\t%s\n", e.N, formatTime(e.At), e.Kind, e.Attempt,
			cell(deref(e.Actor), 60), textCell(deref(e.Error), 80), textCell(deref(e.Answer), 80))
	}
	return tw.Flush()
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// cliActor names who runs a command that changes messages, for the attempt
// history: the operating-system user and the database role.
func (a *app) cliActor() string {
	name := os.Getenv("USER")
	if u, err := user.Current(); err == nil && u.Username != "" {
		name = u.Username
	}
	if name == "" {
		name = "unknown user"
	}
	host, _ := os.Hostname()
	if host != "" {
		name += "@" + host
	}
	s := "cli " + name
	if a.dbUser != "" {
		s += " (database role " + a.dbUser + ")"
	}
	return s
}

func (a *app) redeliver(ctx context.Context, args []string) error {
	f := newFlags("redeliver", "pgoutbox redeliver [flags] ID...",
		"Delivers delivered (done) messages again: back to pending, available now, attempts 0,\n"+
			"then NOTIFY wakes the relays. For a consumer that lost its copy. The message keeps\n"+
			"its id, so its idempotency key (Idempotency-Key, the CloudEvents id) is the one the\n"+
			"consumer saw before: a consumer that kept its copy deduplicates it.\n\n"+
			"Ordered messages are refused: their aggregate has moved on (later events may be\n"+
			"delivered already), and sending one again would deliver it after them. Messages\n"+
			"that are not done (pending, dead, skipped) are reported and left alone; so are ids\n"+
			"that do not exist (purged). Any such id exits 1.\n\n"+
			"Each redelivery is recorded in the message's attempt history (`pgoutbox dead show\n"+
			"ID`): when, and who (the operating-system user and the database role). Asks\n"+
			"\"redeliver N messages? [y/N]\" on a terminal; needs --yes otherwise.",
		"  pgoutbox redeliver 4711\n"+
			"  pgoutbox redeliver 4711 4712 --yes")
	dbURL := f.databaseURLs(false)
	yes := f.Bool("yes", false, "do not ask for confirmation")
	positional, err := a.parse(f, args, -1)
	if err != nil {
		return err
	}
	if len(positional) == 0 {
		return f.usageError("no ids given: pass the ids of delivered messages (see `pgoutbox dead show ID` or the console)")
	}
	if len(positional) > 10000 {
		return f.usageError("%d ids given; at most 10000 at once", len(positional))
	}
	var ids []int64
	seen := map[int64]bool{}
	for _, s := range positional {
		id, err := strconv.ParseInt(s, 10, 64)
		if err != nil || id <= 0 {
			return f.usageError("invalid id %q: ids are positive integers (e.g. 4711)", s)
		}
		if !seen[id] {
			seen[id] = true
			ids = append(ids, id)
		}
	}
	if f.isFleet() {
		return f.usageError("ids are per database: give the one --database-url the ids belong to")
	}
	pool, _, err := a.open(ctx, f, *dbURL)
	if err != nil {
		return err
	}
	defer pool.Close()
	if !*yes {
		if err := a.confirm(f, fmt.Sprintf("redeliver %d message%s", len(ids), plural(len(ids)))); err != nil {
			return err
		}
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		return a.dbError("redeliver", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // no-op after Commit
	q := a.queries(tx)
	actor := a.cliActor()
	rows, err := a.ops(tx).OutboxRedeliverDone(ctx, opsdb.OutboxRedeliverDoneParams{Ids: ids, Actor: actor})
	if err != nil {
		return a.dbError("redeliver", err)
	}
	var done, ordered, missing []int64
	other := map[string][]int64{}
	for _, r := range rows {
		switch r.Result {
		case "redelivered":
			done = append(done, r.ID)
		case "ordered":
			ordered = append(ordered, r.ID)
		case "missing":
			missing = append(missing, r.ID)
		default:
			other[r.Result] = append(other[r.Result], r.ID)
		}
	}
	if len(done) > 0 {
		if err := q.OutboxNotify(ctx); err != nil {
			return a.dbError("redeliver: notify", err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return a.dbError("redeliver: commit", err)
	}
	fmt.Fprintf(a.stdout, "redelivered %d of %d message%s", len(done), len(ids), plural(len(ids)))
	if len(done) > 0 {
		fmt.Fprintf(a.stdout, ": %s (same ids, so the same idempotency keys; recorded as by %s)", idList(done, 20), actor)
	}
	fmt.Fprintln(a.stdout)
	if len(ordered) > 0 {
		fmt.Fprintf(a.stdout, "refused, ordered (redelivering would deliver it after later events of its aggregate; unchanged): %s\n", idList(ordered, 50))
	}
	for _, st := range sortedKeys(other) {
		fmt.Fprintf(a.stdout, "not delivered, %s (only done messages are redelivered; unchanged): %s\n", st, idList(other[st], 50))
	}
	if len(missing) > 0 {
		fmt.Fprintf(a.stdout, "no such message (never existed, or purged): %s\n", idList(missing, 50))
	}
	if len(done) < len(ids) {
		return &exitError{code: ExitFailure}
	}
	return nil
}

func sortedKeys(m map[string][]int64) []string {
	return slices.Sorted(maps.Keys(m))
}
