package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strconv"

	"github.com/jackc/pgx/v5/pgxpool"
)

// verifyReport is what the checks read of `pgoutbox verify --json`.
type verifyReport struct {
	Delivered  int `json:"delivered"`
	Missing    int `json:"missing"`
	Duplicated int `json:"duplicated"`
	OutOfOrder int `json:"out_of_order"`
	Parked     int `json:"parked"`
	Gaps       int `json:"gaps"`
	Checked    int `json:"order_checked"`
}

// result is one broker's figures.
type result struct {
	broker           string
	events           int   // committed events in its outbox
	undelivered      int   // outbox rows not done
	effects          int   // side-effect rows
	duplicateEffects int   // events whose side effect was written more than once
	missingEffects   int   // events without a side effect
	orderViolations  int   // ordered events whose side effect came after a later one of their aggregate
	ordered          int   // ordered events
	redeliveries     int64 // deliveries the inbox recognized as duplicates
	parked           int64 // events that arrived before their predecessor and waited in the inbox
	mismatches       int   // messages whose position differed from the outbox's
	gaps             int
	crashes          int64
	inbox            verifyReport
	inboxErr         string
	stream           *verifyReport
	streamErr        string
}

func (r *result) ok() bool {
	good := r.undelivered == 0 && r.duplicateEffects == 0 && r.missingEffects == 0 && r.orderViolations == 0 &&
		r.mismatches == 0 && r.gaps == 0 && r.inboxErr == "" && r.inbox.Missing == 0 && r.inbox.OutOfOrder == 0 && r.inbox.Parked == 0
	if r.stream != nil {
		good = good && r.streamErr == "" && r.stream.Missing == 0 && r.stream.OutOfOrder == 0
	}
	return good
}

func (r *result) print() {
	verdict := "ok"
	if !r.ok() {
		verdict = "VIOLATED"
	}
	fmt.Printf("%-5s %s: %d events (%d ordered), %d side effects: %d duplicate side effects, %d missing, %d order violations seen by the consumer, %d gaps; %d redeliveries recognized, %d early events parked; %d position mismatches; %d processes exited by themselves\n",
		r.broker, verdict, r.events, r.ordered, r.effects, r.duplicateEffects, r.missingEffects, r.orderViolations, r.gaps, r.redeliveries, r.parked, r.mismatches, r.crashes)
	fmt.Printf("      pgoutbox verify (inbox %s_inbox): delivered %d, missing %d, duplicated %d, out of commit order %d of %d checked, parked %d%s\n",
		r.broker, r.inbox.Delivered, r.inbox.Missing, r.inbox.Duplicated, r.inbox.OutOfOrder, r.inbox.Checked, r.inbox.Parked, errText(r.inboxErr))
	if r.stream != nil || r.streamErr != "" {
		s := r.stream
		if s == nil {
			s = &verifyReport{}
		}
		fmt.Printf("      pgoutbox verify (the %s stream or topic): delivered %d, missing %d, copies beyond the first %d, out of commit order %d of %d checked%s\n",
			r.broker, s.Delivered, s.Missing, s.Duplicated, s.OutOfOrder, s.Checked, errText(r.streamErr))
	}
}

func errText(s string) string {
	if s == "" {
		return ""
	}
	return "; " + s
}

// check compares the broker's outbox with its side effects, and runs
// pgoutbox verify on its inbox (and stream or topic).
func check(ctx context.Context, bin string, outbox, consumer *pgxpool.Pool, outboxURL, consumerURL string, b *broker) (*result, error) {
	r := &result{broker: b.name}
	type row struct {
		agg     string
		ordered bool
		seq     int64
	}
	rows := map[string]row{}
	q, err := outbox.Query(ctx, `SELECT id, aggregate_id, ordered, coalesce(seq, 0), status FROM `+b.outboxTable())
	if err != nil {
		return nil, err
	}
	for q.Next() {
		var id int64
		var rw row
		var status string
		if err := q.Scan(&id, &rw.agg, &rw.ordered, &rw.seq, &status); err != nil {
			return nil, err
		}
		rows[strconv.FormatInt(id, 10)] = rw
		r.events++
		if rw.ordered {
			r.ordered++
		}
		if status != "done" {
			r.undelivered++
		}
	}
	if err := q.Err(); err != nil {
		return nil, err
	}
	seen := map[string]int{}
	last := map[string]int64{}
	q, err = consumer.Query(ctx, `SELECT id FROM `+b.name+`_effects ORDER BY n`)
	if err != nil {
		return nil, err
	}
	for q.Next() {
		var id string
		if err := q.Scan(&id); err != nil {
			return nil, err
		}
		r.effects++
		seen[id]++
		if seen[id] == 2 {
			r.duplicateEffects++
		}
		rw, ok := rows[id]
		if !ok || !rw.ordered || seen[id] > 1 {
			continue
		}
		// Per aggregate, side effects are written in processing order
		// (the inbox serializes an aggregate's events).
		if rw.seq <= last[rw.agg] {
			r.orderViolations++
		}
		last[rw.agg] = rw.seq
	}
	if err := q.Err(); err != nil {
		return nil, err
	}
	for id := range rows {
		if seen[id] == 0 {
			r.missingEffects++
		}
	}
	if err := consumer.QueryRow(ctx, `SELECT coalesce(sum(deliveries - 1), 0), (SELECT count(*) FROM `+b.inboxTable()+`_gaps),
		(SELECT count(*) FROM position_mismatches WHERE broker = $1), (SELECT count(*) FROM `+b.name+`_effects WHERE parked)
		FROM `+b.inboxTable(), b.name).Scan(&r.redeliveries, &r.gaps, &r.mismatches, &r.parked); err != nil {
		return nil, err
	}
	base := []string{"verify", "--database-url", outboxURL, "--table", b.outboxTable(), "--ce-source", b.source(), "--json"}
	r.inboxErr = runVerify(ctx, bin, append(base, "--inbox-url", consumerURL, "--inbox-table", b.inboxTable()), &r.inbox)
	if b.verifyArgs != nil {
		r.stream = &verifyReport{}
		r.streamErr = runVerify(ctx, bin, append(base, b.verifyArgs...), r.stream)
	}
	return r, nil
}

// runVerify runs pgoutbox verify and decodes its report; it returns what
// went wrong, "" when it exited 0.
func runVerify(ctx context.Context, bin string, args []string, into *verifyReport) string {
	out, err := exec.CommandContext(ctx, bin, args...).Output()
	if jerr := json.Unmarshal(out, into); jerr != nil {
		return fmt.Sprintf("pgoutbox verify: %v (%v)", jerr, err)
	}
	if err != nil {
		return "pgoutbox verify exited with " + err.Error()
	}
	return ""
}
