package console_test

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/pgoutbox/pgoutbox/console"
	"github.com/pgoutbox/pgoutbox/db"
	"github.com/pgoutbox/pgoutbox/db/opsdb"
	"github.com/pgoutbox/pgoutbox/internal/pgtest"
)

var barRe = regexp.MustCompile(`<rect[^>]*data-t="([^"]+)"[^>]*data-v="([^"]+)"`)

// The overview's deliveries come from the counters of migration 00018, not
// from a count of the done rows; pgoutbox's statements keep them equal to
// the table through every way they make a row enter or leave 'done': claims
// and fenced finalizes by four relays at once (each its own connection), a
// batch of mixed outcomes, a redelivery, a purge; a skipped message and a
// DELETE rolled back change nothing; changes by hand (done_at moved to
// other minutes, rows loaded done, TRUNCATE) are recounted by the rebuild.
// After each step, every charted minute's counter equals the count of its
// done rows, and the page's figures (the hour's deliveries, each past
// minute's bar) equal the table.
func TestConsole_DeliveredCountersEqualTheTable(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := t.Context()
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := pool.Exec(ctx, sql, args...); err != nil {
			t.Fatalf("%v\n%s", err, sql)
		}
	}
	count := func(sql string, args ...any) int64 {
		t.Helper()
		var n int64
		if err := pool.QueryRow(ctx, sql, args...).Scan(&n); err != nil {
			t.Fatalf("%v\n%s", err, sql)
		}
		return n
	}
	exec(`INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
	      SELECT 'order', 'o-' || g, 'OrderPaid', '{}' FROM generate_series(1, 2000) AS g`)
	s := serveOn(t, pool, console.Config{})
	c := newClient(t, s.URL)

	check := func(step string) {
		t.Helper()
		// Every minute of the last two hours: counters = done rows.
		var bad []string
		rows, err := pool.Query(ctx, `
SELECT m.minute,
       (SELECT coalesce(sum(c.delivered), 0) FROM outbox_delivered AS c WHERE c.minute = m.minute)::bigint,
       (SELECT count(*) FROM outbox AS o WHERE o.status = 'done' AND o.done_at >= m.minute AND o.done_at < m.minute + interval '1 minute')
  FROM (SELECT date_trunc('minute', now()) - make_interval(mins => n) AS minute FROM generate_series(0, 119) AS n) AS m`)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var minute time.Time
			var counted, table int64
			if err := rows.Scan(&minute, &counted, &table); err != nil {
				t.Fatal(err)
			}
			if counted != table {
				bad = append(bad, fmt.Sprintf("%s: counters %d, table %d", minute.Format(time.TimeOnly), counted, table))
			}
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		if len(bad) > 0 {
			t.Errorf("%s: the counters differ from the table: %v", step, bad)
		}
		// The page: the hour's deliveries and each past minute's bar.
		charted := count(`SELECT count(*) FROM outbox WHERE status = 'done' AND done_at >= date_trunc('minute', now()) - interval '59 minutes'`)
		_, body := c.get(t, "/")
		if got := between(body, `id="delivered">`, "<"); got != formatNum(charted) {
			t.Errorf("%s: delivered in the charted hour %q, the table has %d", step, got, charted)
		}
		var current time.Time
		if err := pool.QueryRow(ctx, `SELECT date_trunc('minute', now())`).Scan(&current); err != nil {
			t.Fatal(err)
		}
		seen := int64(0)
		for _, b := range barRe.FindAllStringSubmatch(body, -1) {
			minute, err := time.Parse(time.RFC3339, b[1])
			if err != nil {
				t.Fatal(err)
			}
			n := count(`SELECT count(*) FROM outbox WHERE status = 'done' AND done_at >= $1 AND done_at < $1 + interval '1 minute'`, minute)
			seen += n
			v, _ := strconv.ParseFloat(b[2], 64)
			if !minute.Before(current) {
				continue // the current minute: over the part gone by
			}
			if fmt.Sprintf("%.6f", v) != fmt.Sprintf("%.6f", float64(n)/60) {
				t.Errorf("%s: bar %s = %g msg/s, the table has %d deliveries in that minute", step, b[1], v, n)
			}
		}
		if seen != charted {
			t.Errorf("%s: the bars cover %d deliveries, the charted hour has %d", step, seen, charted)
		}
	}

	// Four relays claim and finalize at once, each on its own connection,
	// through the dispatcher's statements.
	var wg sync.WaitGroup
	for r := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			conn, err := pool.Acquire(ctx)
			if err != nil {
				t.Error(err)
				return
			}
			defer conn.Release()
			q := db.New(conn)
			owner := fmt.Sprintf("relay-%d/run.1", r)
			for {
				claimed, err := claimFromStart(ctx, q, owner, 37)
				if err != nil {
					t.Error(err)
					return
				}
				if len(claimed) == 0 {
					return
				}
				arg := db.OutboxMarkDoneManyParams{UnorderedOnly: true}
				for _, m := range claimed {
					arg.Ids = append(arg.Ids, m.ID)
					arg.LeaseVersions = append(arg.LeaseVersions, m.LeaseVersion)
					arg.LeaseOwners = append(arg.LeaseOwners, owner)
				}
				if _, err := q.OutboxMarkDoneMany(ctx, arg); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if n := count(`SELECT count(*) FROM outbox WHERE status = 'done'`); n != 2000 {
		t.Fatalf("the relays left %d done rows, want 2000", n)
	}
	if n := count(`SELECT count(DISTINCT backend) FROM outbox_delivered`); n < 2 {
		t.Errorf("the relays' counters are in %d rows, want one per connection", n)
	}
	check("after four relays")

	// The relay's statement for mixed outcomes counts only the rows it made
	// done.
	exec(`INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
	      SELECT 'order', 'm-' || g, 'OrderPaid', '{}' FROM generate_series(1, 30) AS g`)
	claimed, err := claimFromStart(ctx, db.New(pool), "mixed/run.1", 30)
	if err != nil || len(claimed) != 30 {
		t.Fatalf("claimed %d of 30 (%v)", len(claimed), err)
	}
	mixed := db.OutboxFinalizeManyParams{UnorderedOnly: true, MaxDeferAge: time.Hour}
	for i, m := range claimed {
		outcome := []string{"done", "retry", "defer", "dead", "release"}[i%5]
		mixed.Ids = append(mixed.Ids, m.ID)
		mixed.LeaseVersions = append(mixed.LeaseVersions, m.LeaseVersion)
		mixed.LeaseOwners = append(mixed.LeaseOwners, "mixed/run.1")
		mixed.Outcomes = append(mixed.Outcomes, outcome)
		mixed.DelaysUs = append(mixed.DelaysUs, 60_000_000)
		mixed.Errors = append(mixed.Errors, "")
		mixed.History = append(mixed.History, "")
		mixed.Answers = append(mixed.Answers, "")
	}
	if r, err := db.New(pool).OutboxFinalizeMany(ctx, mixed); err != nil || len(r.Ids) != 30 {
		t.Fatalf("OutboxFinalizeMany wrote %v (%v), want 30 rows", r, err)
	}
	if n := count(`SELECT count(*) FROM outbox WHERE status = 'done'`); n != 2006 {
		t.Fatalf("%d done rows after the mixed batch, want 2006", n)
	}
	check("after a batch of mixed outcomes")

	// Deliveries spread over the hour: done_at moved back by 0-70 minutes
	// (some past the charted hour), a row at a time and in one statement.
	// Changes by hand are not counted: the rebuild recounts them.
	exec(`UPDATE outbox SET done_at = done_at - (id % 71) * interval '1 minute' WHERE id % 3 = 0`)
	for id := int64(1); id <= 20; id++ {
		exec(`UPDATE outbox SET done_at = done_at - interval '7 minutes' WHERE id = $1`, id)
	}
	exec(`SELECT outbox_delivered_rebuild()`)
	check("after done_at moved by hand and a rebuild")

	q := opsdb.New(pool)
	redeliver := []int64{4, 5, 6, 300, 301, 1999}
	if _, err := q.OutboxRedeliverDone(ctx, opsdb.OutboxRedeliverDoneParams{Ids: redeliver, Actor: "test"}); err != nil {
		t.Fatal(err)
	}
	check("after a redelivery")

	if _, err := q.OutboxPurgeDone(ctx, opsdb.OutboxPurgeDoneParams{OlderThan: 30 * time.Minute, Limit: 1000}); err != nil {
		t.Fatal(err)
	}
	check("after a purge")

	// A dead message skipped (never delivered), and a DELETE rolled back.
	exec(`UPDATE outbox SET status = 'dead' WHERE id = 4`)
	exec(`UPDATE outbox SET status = 'skipped', done_at = now() WHERE id = 4`)
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `DELETE FROM outbox WHERE status = 'done' AND id % 2 = 0`); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	check("after a skip and a rolled-back delete")

	// Rows inserted done bypass the counters until they are rebuilt.
	exec(`INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload, status, done_at, attempts)
	      SELECT 'order', 'r-' || g, 'OrderPaid', '{}', 'done', now() - g * interval '1 second', 1 FROM generate_series(1, 50) AS g`)
	exec(`SELECT outbox_delivered_rebuild()`)
	check("after a load and a rebuild")

	exec(`TRUNCATE outbox`)
	exec(`SELECT outbox_delivered_rebuild()`)
	if n := count(`SELECT count(*) FROM outbox_delivered`); n != 0 {
		t.Errorf("after TRUNCATE outbox and a rebuild: %d counter rows, want none", n)
	}
}

// claimFromStart is the relay's claim of pending rows (OutboxClaimWindow)
// from a cursor that has handed out nothing yet: the window from the empty
// snapshot to now.
func claimFromStart(ctx context.Context, q *db.Queries, owner string, batch int) ([]*db.OutboxClaimWindowRow, error) {
	snap, err := q.OutboxClaimSnapshot(ctx)
	if err != nil {
		return nil, err
	}
	return q.OutboxClaimWindow(ctx, db.OutboxClaimWindowParams{
		Snapshot: "1:1:", Upper: snap.Snapshot, Batch: int32(batch), Owner: owner, Lease: time.Minute})
}
