package cli

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/pgoutbox/pgoutbox/db/opsdb"
)

const verifyAbout = `Compares what a consumer received with the outbox, and reports per aggregate what
was delivered, missing, duplicated and out of commit order: for operators after an
incident, and for test runs. Give exactly one receiver:
  --inbox-url URL       the inbox tables of package inbox in the consumer's database
                        (--inbox-table, --inbox-schema for tables from pgoutbox inbox init)
  --nats-url URL        a JetStream stream (--stream), read from its first message
  --kafka-brokers LIST  a Kafka topic (--topic), read from the start of every partition

Only events of one outbox count: those whose CloudEvents source is --ce-source
(default: the source pgoutbox run uses for --database-url, --table and --schema).
Outbox rows are compared by id:
  delivered     done in the outbox and received (in an inbox: processed)
  missing       done in the outbox but not received (in an inbox: not processed,
                including events refused as late after a gap was declared)
  duplicated    received more than once (an inbox processed them once; a stream or
                topic holds several copies)
  out of order  an ordered event received (in an inbox: processed) after a later
                event of its aggregate in commit order
Rows not done yet (pending, processing, dead) and rows skipped by an operator are
not expected; received events the outbox does not hold (purged, or another
outbox's) are counted as unknown. An inbox also reports events still parked and
the gaps it declared.

Exit status 1 when anything is missing or out of order (or an inbox still has
parked events), 0 otherwise.`

// verifyRow is one outbox row, as OutboxVerifyRows returns it.
type verifyRow = opsdb.OutboxVerifyRowsRow

// receipt is what a receiver holds of one event (by CloudEvents id).
type receipt struct {
	aggregate string
	copies    int    // times received
	status    string // inbox: processed, parked, late; stream and topic: received
	prior     *int64 // inbox: the aggregate's position processed before it
	hasSeq    bool   // inbox: the event carried a position
	order     int    // stream and topic: read order of the first copy
}

// verifyGap is a gap an inbox declared.
type verifyGap struct {
	AggregateID string `json:"aggregate_id"`
	After       int64  `json:"after"`
	Before      int64  `json:"before"`
	Missing     int64  `json:"missing"`
	Reason      string `json:"reason"`
}

// received is what one receiver holds of the outbox's source.
type received struct {
	kind     string // inbox, stream, topic
	name     string // for the report
	byID     map[string]*receipt
	gaps     []verifyGap
	unknowns int // set by compare: ids the outbox does not hold
}

// aggregateReport is the per-aggregate line of the report.
type aggregateReport struct {
	AggregateID string      `json:"aggregate_id"`
	Delivered   int         `json:"delivered"`
	Missing     []int64     `json:"missing,omitempty"`
	Late        []int64     `json:"late,omitempty"`
	Duplicated  []int64     `json:"duplicated,omitempty"`
	OutOfOrder  []int64     `json:"out_of_order,omitempty"`
	Parked      []int64     `json:"parked,omitempty"`
	Gaps        []verifyGap `json:"gaps,omitempty"`
}

func (r *aggregateReport) problem() bool {
	return len(r.Missing)+len(r.Duplicated)+len(r.OutOfOrder)+len(r.Parked)+len(r.Gaps) > 0
}

// verifyReport is the whole report (--json prints it).
type verifyReport struct {
	Source   string `json:"source"`
	Receiver string `json:"receiver"`
	Outbox   struct {
		Rows        int `json:"rows"`
		Done        int `json:"done"`
		Skipped     int `json:"skipped"`
		Undelivered int `json:"undelivered"`
	} `json:"outbox"`
	Delivered    int `json:"delivered"`
	Missing      int `json:"missing"`
	Late         int `json:"late"`
	Duplicated   int `json:"duplicated"`
	OutOfOrder   int `json:"out_of_order"`
	Parked       int `json:"parked"`
	Gaps         int `json:"gaps"`
	Unknown      int `json:"unknown"`
	OrderChecked int `json:"order_checked"` // ordered events whose order could be checked
	// Aggregates lists the aggregates with a problem (every one with --all).
	Aggregates []*aggregateReport `json:"aggregates"`
}

func (r *verifyReport) ok() bool { return r.Missing == 0 && r.OutOfOrder == 0 && r.Parked == 0 }

// compare builds the report of rows (the outbox, in id order) against rcv.
func compare(rows []verifyRow, rcv *received, all bool) *verifyReport {
	rep := &verifyReport{Receiver: rcv.kind + " " + rcv.name}
	aggs := map[string]*aggregateReport{}
	agg := func(id string) *aggregateReport {
		a := aggs[id]
		if a == nil {
			a = &aggregateReport{AggregateID: id}
			aggs[id] = a
		}
		return a
	}
	type ordered struct {
		seq   int64
		id    int64
		order int
	}
	sequences := map[string][]ordered{} // per aggregate, ordered events received
	seen := make(map[string]bool, len(rows))
	for _, row := range rows {
		rep.Outbox.Rows++
		key := strconv.FormatInt(row.ID, 10)
		seen[key] = true
		r := rcv.byID[key]
		switch {
		case row.Skipped:
			rep.Outbox.Skipped++
		case row.Status != "done":
			rep.Outbox.Undelivered++
		default:
			rep.Outbox.Done++
		}
		if r == nil {
			if row.Status == "done" && !row.Skipped {
				rep.Missing++
				a := agg(row.AggregateID)
				a.Missing = append(a.Missing, row.ID)
			}
			continue
		}
		a := agg(row.AggregateID)
		if r.copies > 1 {
			rep.Duplicated++
			a.Duplicated = append(a.Duplicated, row.ID)
		}
		switch r.status {
		case "parked": // counted below, with those the outbox does not hold
			continue
		case "late":
			rep.Late++
			if row.Status == "done" && !row.Skipped {
				rep.Missing++
				a.Missing = append(a.Missing, row.ID)
				a.Late = append(a.Late, row.ID)
			}
			continue
		}
		rep.Delivered++
		a.Delivered++
		if !row.Ordered || row.Seq == 0 {
			continue
		}
		switch rcv.kind {
		case "inbox":
			if !r.hasSeq {
				continue // no position received: order unknown
			}
			rep.OrderChecked++
			if r.prior != nil && *r.prior >= row.Seq {
				rep.OutOfOrder++
				a.OutOfOrder = append(a.OutOfOrder, row.ID)
			}
		default:
			rep.OrderChecked++
			sequences[row.AggregateID] = append(sequences[row.AggregateID], ordered{seq: row.Seq, id: row.ID, order: r.order})
		}
	}
	// Streams and topics: an aggregate's events, in read order, must follow
	// commit order.
	for aggID, evs := range sequences {
		slices.SortFunc(evs, func(x, y ordered) int { return cmp.Compare(x.order, y.order) })
		var highest int64
		for _, e := range evs {
			if e.seq < highest {
				rep.OutOfOrder++
				a := agg(aggID)
				a.OutOfOrder = append(a.OutOfOrder, e.id)
			}
			highest = max(highest, e.seq)
		}
	}
	for id, r := range rcv.byID {
		if !seen[id] {
			rep.Unknown++
		}
		if r.status == "parked" {
			rep.Parked++
			a := agg(r.aggregate)
			n, _ := strconv.ParseInt(id, 10, 64)
			a.Parked = append(a.Parked, n)
		}
	}
	for _, g := range rcv.gaps {
		rep.Gaps++
		a := agg(g.AggregateID)
		a.Gaps = append(a.Gaps, g)
	}
	for _, a := range aggs {
		if all || a.problem() {
			slices.Sort(a.OutOfOrder)
			slices.Sort(a.Parked)
			rep.Aggregates = append(rep.Aggregates, a)
		}
	}
	slices.SortFunc(rep.Aggregates, func(x, y *aggregateReport) int { return strings.Compare(x.AggregateID, y.AggregateID) })
	return rep
}

// print writes the report as a table.
func (r *verifyReport) print(w io.Writer, list int) {
	fmt.Fprintf(w, "outbox %s: %d rows (%d done, %d skipped, %d not delivered yet)\n", r.Source, r.Outbox.Rows, r.Outbox.Done, r.Outbox.Skipped, r.Outbox.Undelivered)
	fmt.Fprintf(w, "receiver: %s\n\n", r.Receiver)
	if len(r.Aggregates) > 0 {
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "AGGREGATE\tDELIVERED\tMISSING\tDUPLICATED\tOUT OF ORDER\tPARKED\tGAPS")
		for i, a := range r.Aggregates {
			if i == list {
				fmt.Fprintf(tw, "... %d more (--list, --json)\t\t\t\t\t\t\n", len(r.Aggregates)-list)
				break
			}
			fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%d\n", a.AggregateID, a.Delivered, ids(a.Missing), ids(a.Duplicated), ids(a.OutOfOrder), ids(a.Parked), len(a.Gaps))
		}
		_ = tw.Flush()
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "delivered %d, missing %d", r.Delivered, r.Missing)
	if r.Late > 0 {
		fmt.Fprintf(w, " (%d late)", r.Late)
	}
	fmt.Fprintf(w, ", duplicated %d, out of commit order %d (of %d ordered events checked)", r.Duplicated, r.OutOfOrder, r.OrderChecked)
	if r.Receiver != "" && strings.HasPrefix(r.Receiver, "inbox") {
		fmt.Fprintf(w, ", parked %d, gaps %d", r.Parked, r.Gaps)
	}
	fmt.Fprintf(w, ", unknown %d\n", r.Unknown)
}

// ids formats a list of ids, the first few of them.
func ids(list []int64) string {
	if len(list) == 0 {
		return "0"
	}
	const show = 5
	parts := make([]string, 0, show)
	for i, id := range list {
		if i == show {
			parts = append(parts, "...")
			break
		}
		parts = append(parts, strconv.FormatInt(id, 10))
	}
	return fmt.Sprintf("%d (%s)", len(list), strings.Join(parts, " "))
}

func (a *app) verify(ctx context.Context, args []string) error {
	f := newFlags("verify", "pgoutbox verify (--inbox-url URL | --nats-url URL --stream NAME | --kafka-brokers LIST --topic NAME) [flags]", verifyAbout,
		"  pgoutbox verify --inbox-url postgres://billing@db/billing\n"+
			"  pgoutbox verify --nats-url nats://127.0.0.1:4222 --stream ORDERS --ce-source urn:shop:outbox\n"+
			"  pgoutbox verify --kafka-brokers 127.0.0.1:9092 --topic orders --json | jq .missing")
	dbURL := f.databaseURL()
	source := f.String("ce-source", "", "the outbox's CloudEvents source (default: as pgoutbox run derives it from --database-url, --table and --schema)")
	inboxURL := f.String("inbox-url", "", "the consumer's database holding the inbox tables")
	inboxTable := f.String("inbox-table", "inbox", "the inbox table (one created by pgoutbox inbox init --table NAME)")
	inboxSchema := f.String("inbox-schema", "", "the schema of --inbox-table (default: none, resolved through the search_path)")
	natsURL := f.String("nats-url", "", "the NATS server of the JetStream stream")
	stream := f.String("stream", "", "the JetStream stream to read (with --nats-url)")
	kafkaBrokers := f.String("kafka-brokers", "", "comma-separated Kafka seed brokers")
	topic := f.String("topic", "", "the Kafka topic to read (with --kafka-brokers)")
	asJSON := f.Bool("json", false, "print the report as JSON")
	all := f.Bool("all", false, "list every aggregate, not only those with a problem")
	list := f.int64("list", 20, "aggregates listed in the table (1-100000)")
	if _, err := a.parse(f, args, 0); err != nil {
		return err
	}
	receivers := 0
	for _, set := range []bool{*inboxURL != "", *natsURL != "", *kafkaBrokers != ""} {
		if set {
			receivers++
		}
	}
	switch {
	case receivers != 1:
		return f.usageError("give exactly one receiver: --inbox-url, --nats-url (with --stream) or --kafka-brokers (with --topic)")
	case *natsURL != "" && *stream == "":
		return f.usageError("--nats-url needs --stream (the JetStream stream to read)")
	case *kafkaBrokers != "" && *topic == "":
		return f.usageError("--kafka-brokers needs --topic (the Kafka topic to read)")
	}
	if err := f.checkRange("list", *list, 1, 100000); err != nil {
		return err
	}
	pool, d, err := a.open(ctx, f, *dbURL)
	if err != nil {
		return err
	}
	defer pool.Close()
	src := *source
	if src == "" {
		src = a.defaultSource(d)
	}
	var rcv *received
	switch {
	case *inboxURL != "":
		rcv, err = a.readInbox(ctx, *inboxURL, *inboxTable, *inboxSchema, src)
	case *natsURL != "":
		rcv, err = a.readStream(ctx, *natsURL, *stream, src)
	default:
		rcv, err = a.readTopic(ctx, strings.Split(*kafkaBrokers, ","), *topic, src)
	}
	if err != nil {
		return err
	}
	var rows []verifyRow
	ops := a.ops(pool)
	for after := int64(0); ; {
		page, err := ops.OutboxVerifyRows(ctx, opsdb.OutboxVerifyRowsParams{AfterID: after, Limit: 10000})
		if err != nil {
			return a.dbError("verify: read the outbox", err)
		}
		for _, r := range page {
			rows = append(rows, *r)
		}
		if len(page) < 10000 {
			break
		}
		after = page[len(page)-1].ID
	}
	rep := compare(rows, rcv, *all)
	rep.Source = src
	if *asJSON {
		enc := json.NewEncoder(a.stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return err
		}
	} else {
		rep.print(a.stdout, int(*list))
	}
	if !rep.ok() {
		return &exitError{code: ExitFailure, msg: fmt.Sprintf("verify: %d missing, %d out of commit order, %d parked", rep.Missing, rep.OutOfOrder, rep.Parked)}
	}
	return nil
}
