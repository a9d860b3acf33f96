package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestEnqueue_PayloadFromFlagStdinAndValidation(t *testing.T) {
	t.Parallel()
	d := newDB(t)

	id := enqueueCLI(t, d, "--payload", `{"a":1}`, "--header", "tenant=acme", "--header", "trace=x=y", "--ordered",
		"--available-at", "2030-01-02T15:04:05Z")
	var payload, headers string
	var ordered bool
	var availableAt time.Time
	err := d.pool.QueryRow(context.Background(), "SELECT payload::text, headers::text, ordered, available_at FROM outbox WHERE id = $1", id).
		Scan(&payload, &headers, &ordered, &availableAt)
	if err != nil {
		t.Fatal(err)
	}
	if payload != `{"a": 1}` || headers != `{"trace": "x=y", "tenant": "acme"}` || !ordered || !availableAt.Equal(time.Date(2030, 1, 2, 15, 4, 5, 0, time.UTC)) {
		t.Errorf("row: payload %s headers %s ordered %v available_at %s", payload, headers, ordered, availableAt)
	}

	for _, args := range [][]string{{"--payload", "-"}, {}} {
		r := call(t, invocation{env: d.env(), stdin: "  {\"from\": \"stdin\"}\n"},
			append([]string{"enqueue", "--aggregate-type", "order", "--aggregate-id", "o-2", "--event-type", "E"}, args...)...)
		wantCode(t, r, ExitOK)
		sid, _ := strconv.ParseInt(strings.TrimSpace(r.stdout), 10, 64)
		if err := d.pool.QueryRow(context.Background(), "SELECT payload::text FROM outbox WHERE id = $1", sid).Scan(&payload); err != nil || payload != `{"from": "stdin"}` {
			t.Errorf("stdin payload: %q %v\n%s", payload, err, r)
		}
	}

	before := d.count(t, "true")
	for _, tc := range []struct {
		stdin string
		args  []string
		want  string
	}{
		{"", []string{"--payload", `{"a":`}, "pgoutbox: enqueue: --payload is not valid JSON: unexpected end of JSON input (at byte 5); nothing was written"},
		{"", []string{"--payload", `{"a" 1}`}, "pgoutbox: enqueue: --payload is not valid JSON: invalid character '1' after object key (at byte 6); nothing was written"},
		{"not json", nil, "pgoutbox: enqueue: the payload read from stdin is not valid JSON"},
		{"", nil, "pgoutbox: enqueue: the payload read from stdin is empty: give a JSON document"},
		{"", []string{"--payload", `{"a":1} {"b":2}`}, "is not valid JSON"},
		{"", []string{"--payload", `"\u0000"`}, "pgoutbox: enqueue: Payload contains \\u0000, which PostgreSQL jsonb cannot store; nothing was written"},
	} {
		r := call(t, invocation{env: d.env(), stdin: tc.stdin},
			append([]string{"enqueue", "--aggregate-type", "order", "--aggregate-id", "o-3", "--event-type", "E"}, tc.args...)...)
		wantCode(t, r, ExitFailure)
		mustContain(t, r, "stderr", tc.want)
	}
	if after := d.count(t, "true"); after != before {
		t.Errorf("invalid payloads wrote %d rows", after-before)
	}
}

func TestStats_TableAndJSON(t *testing.T) {
	t.Parallel()
	d := newDB(t)
	d.enqueue(t, 3, "OrderPaid", "o-1", false)
	done := d.enqueue(t, 2, "OrderPaid", "o-2", false)
	d.exec(t, "UPDATE outbox SET status = 'done', done_at = now() WHERE id = ANY($1)", done)
	// An ordered aggregate blocked by a dead head, with two messages behind it.
	blocked := d.enqueue(t, 3, "OrderShipped", "agg-blocked", true)
	d.kill(t, blocked[0])
	d.exec(t, "UPDATE outbox SET created_at = now() - interval '2 hours' WHERE id = ANY($1)", blocked)
	// Retries piling up, and an expired lease.
	d.exec(t, "UPDATE outbox SET attempts = 3 WHERE id = $1", blocked[1])
	extra := d.enqueue(t, 1, "OrderPaid", "o-9", false)[0]
	d.exec(t, "UPDATE outbox SET status = 'processing', attempts = 1, lease_owner = 'w', lease_until = now() - interval '1 minute' WHERE id = $1", extra)

	r := call(t, invocation{env: d.env()}, "stats")
	wantCode(t, r, ExitOK)
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`(?m)^STATUS\s+COUNT$`),
		regexp.MustCompile(`(?m)^pending\s+5$`),
		regexp.MustCompile(`(?m)^processing\s+1$`),
		regexp.MustCompile(`(?m)^done\s+2$`),
		regexp.MustCompile(`(?m)^dead\s+1$`),
		regexp.MustCompile(`(?m)^oldest undelivered:\s+2h0[0-1]m$`),
		regexp.MustCompile(`(?m)^expired leases:\s+1$`),
		regexp.MustCompile(`(?m)^dead:\s+1$`),
		regexp.MustCompile(`(?m)^attempts of undelivered messages\n  ATTEMPTS\s+COUNT\n  0\s+4\n  1\s+1\n  3\s+1$`),
		regexp.MustCompile(`(?m)^blocked ordered aggregates \(dead head, or undelivered for more than 5m0s\)$`),
		regexp.MustCompile(`(?m)^  AGGREGATE\s+HEAD ID\s+HEAD STATUS\s+HEAD EVENT\s+ATTEMPTS\s+BACKLOG\s+OLDEST AGE\s+LAST ERROR$`),
		regexp.MustCompile(fmt.Sprintf(`(?m)^  agg-blocked\s+%d\s+dead\s+OrderShipped\s+12\s+3\s+2h0[0-1]m\s+permanent: webhook: status 400: bad request$`, blocked[0])),
		// Per table and database: parallel tests' commits never show up here.
		regexp.MustCompile(`(?m)^ordered commit waits \(producers waiting for a commit of the same aggregate\)\n  waiting commits:\s+0\n  longest wait:\s+0s$`),
	} {
		if !want.MatchString(r.stdout) {
			t.Errorf("stats output does not match %s\n%s", want, r)
		}
	}

	r = call(t, invocation{env: d.env()}, "stats", "--json", "--stalled-after", "3h")
	wantCode(t, r, ExitOK)
	var rep statsReport
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatalf("--json output is not one JSON object: %v\n%s", err, r)
	}
	if strings.Count(strings.TrimSpace(r.stdout), "\n") != 0 {
		t.Errorf("--json printed more than one line\n%s", r)
	}
	if rep.ByStatus["pending"] != 5 || rep.ByStatus["done"] != 2 || rep.Dead != 1 || rep.ExpiredLeases != 1 ||
		rep.OldestAgeSeconds < 7190 || rep.StalledAfterSeconds != 3*3600 || len(rep.Attempts) != 3 {
		t.Errorf("unexpected report %+v", rep)
	}
	// A dead head counts as blocked whatever --stalled-after says.
	if len(rep.Blocked) != 1 || rep.Blocked[0].HeadID != blocked[0] || rep.Blocked[0].Backlog != 3 || rep.Blocked[0].HeadStatus != "dead" {
		t.Errorf("blocked aggregates %+v", rep.Blocked)
	}
	for _, key := range []string{`"ordered_commit_waits":{"waiting_commits":0,"longest_wait_seconds":0}`, `"blocked_aggregates":[{"aggregate_id":"agg-blocked"`} {
		mustContain(t, r, "stdout", key)
	}
}

func TestStats_EmptyQueue(t *testing.T) {
	t.Parallel()
	d := newDB(t)
	r := call(t, invocation{env: d.env()}, "stats")
	wantCode(t, r, ExitOK)
	for _, want := range []string{"oldest undelivered:  none\n", "  none undelivered", "blocked ordered aggregates (dead head, or undelivered for more than 5m0s)\n  none\n"} {
		mustContain(t, r, "stdout", want)
	}
}

func TestStats_WatchRefreshesUntilInterrupted(t *testing.T) {
	t.Parallel()
	d := newDB(t)
	// Not a terminal: a separator between refreshes, no ANSI codes.
	b := start(t, invocation{env: d.env()}, "stats", "--watch", "50ms")
	eventually(t, 30*time.Second, "three refreshes", func() bool { return strings.Count(b.stdout.String(), "STATUS") >= 3 })
	r := b.stop(t)
	wantCode(t, r, ExitOK)
	if strings.Contains(r.stdout, "\x1b[") {
		t.Errorf("ANSI codes written to a non-terminal")
	}
	if !strings.Contains(r.stdout, "\n---------------- ") {
		t.Errorf("no separator between refreshes\n%s", r)
	}

	// A terminal: the screen is cleared before each refresh.
	yes := true
	b = start(t, invocation{env: d.env(), terminal: &yes}, "stats", "--watch", "50ms")
	eventually(t, 30*time.Second, "two refreshes", func() bool { return strings.Count(b.stdout.String(), "STATUS") >= 2 })
	r = b.stop(t)
	wantCode(t, r, ExitOK)
	if !strings.HasPrefix(r.stdout, "\x1b[H\x1b[2J") || strings.Contains(r.stdout, "----------------") {
		t.Errorf("want a clear-screen before each refresh and no separator\n%q", r.stdout)
	}

	// --json --watch: one JSON object per line.
	b = start(t, invocation{env: d.env()}, "stats", "--watch", "50ms", "--json")
	eventually(t, 30*time.Second, "two refreshes", func() bool { return strings.Count(b.stdout.String(), "\n") >= 2 })
	r = b.stop(t)
	for _, line := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		if !json.Valid([]byte(line)) {
			t.Errorf("not a JSON line: %q", line)
		}
	}
}

func TestDead_ListPagesAndFilters(t *testing.T) {
	t.Parallel()
	d := newDB(t)
	paid := d.enqueue(t, 3, "OrderPaid", "o-1", false)
	shipped := d.enqueue(t, 2, "OrderShipped", "o-2", false)
	alive := d.enqueue(t, 1, "OrderPaid", "o-3", false)[0]
	d.kill(t, append(paid, shipped...)...)
	d.exec(t, "UPDATE outbox SET last_error = $2 WHERE id = $1", paid[0], strings.Repeat("very long error ", 20))

	r := call(t, invocation{env: d.env()}, "dead", "list", "--limit", "2")
	wantCode(t, r, ExitOK)
	mustContain(t, r, "stdout", "ID")
	if !regexp.MustCompile(fmt.Sprintf(`(?m)^%d\s+OrderPaid\s+order/o-1\s+12\s+\d{4}-\d\d-\d\d \d\d:\d\d:\d\dZ\s+very long error very long error .*…$`, paid[0])).MatchString(r.stdout) {
		t.Errorf("first row not as expected\n%s", r)
	}
	mustContain(t, r, "stdout", fmt.Sprintf("2 shown; next page: pgoutbox dead list --after-id %d --limit 2", paid[1]))
	if strings.Contains(r.stdout, fmt.Sprintf("\n%d ", paid[2])) {
		t.Errorf("page 1 shows a row of page 2\n%s", r)
	}

	r = call(t, invocation{env: d.env()}, "dead", "list", "--limit", "2", "--after-id", strconv.FormatInt(paid[1], 10))
	wantCode(t, r, ExitOK)
	mustContain(t, r, "stdout", fmt.Sprintf("\n%d ", paid[2]))
	mustContain(t, r, "stdout", fmt.Sprintf("\n%d ", shipped[0]))

	r = call(t, invocation{env: d.env()}, "dead", "list", "--event-type", "OrderShipped", "--json")
	wantCode(t, r, ExitOK)
	var page struct {
		Messages []struct {
			ID        int64   `json:"id"`
			EventType string  `json:"event_type"`
			LastError *string `json:"last_error"`
		} `json:"messages"`
		NextAfterID *int64 `json:"next_after_id"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &page); err != nil {
		t.Fatalf("%v\n%s", err, r)
	}
	if len(page.Messages) != 2 || page.Messages[0].ID != shipped[0] || page.NextAfterID != nil || page.Messages[0].LastError == nil {
		t.Errorf("unexpected page %+v", page)
	}

	r = call(t, invocation{env: d.env()}, "dead", "list", "--aggregate-id", "o-3")
	wantCode(t, r, ExitOK)
	mustContain(t, r, "stdout", "no dead messages match")
	_ = alive
}

func TestDead_RetryAndSkipByID(t *testing.T) {
	t.Parallel()
	d := newDB(t)
	ids := d.enqueue(t, 3, "OrderPaid", "o-1", false)
	alive := d.enqueue(t, 1, "OrderPaid", "o-2", false)[0]
	d.kill(t, ids...)

	// LISTEN on the channel: retry must wake the dispatchers.
	conn, err := d.pool.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(context.Background(), "LISTEN outbox"); err != nil {
		t.Fatal(err)
	}

	r := call(t, invocation{env: d.env()}, "dead", "retry", strconv.FormatInt(ids[0], 10), strconv.FormatInt(ids[1], 10))
	wantCode(t, r, ExitOK)
	mustContain(t, r, "stdout", fmt.Sprintf("retried 2 of 2 dead messages: %d, %d", ids[0], ids[1]))
	var attempts int
	if err := d.pool.QueryRow(context.Background(), "SELECT attempts FROM outbox WHERE id = $1", ids[0]).Scan(&attempts); err != nil || attempts != 0 {
		t.Errorf("attempts after retry = %d (%v), want 0", attempts, err)
	}
	if d.status(t, ids[0]) != "pending" || d.status(t, ids[1]) != "pending" {
		t.Errorf("retried messages are not pending")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if n, err := conn.Conn().WaitForNotification(ctx); err != nil || n.Channel != "outbox" {
		t.Errorf("no NOTIFY on channel outbox after retry: %v", err)
	}

	// Ids that are not dead: reported, unchanged, exit 1.
	r = call(t, invocation{env: d.env()}, "dead", "retry", strconv.FormatInt(ids[0], 10), strconv.FormatInt(alive, 10), "999999", strconv.FormatInt(ids[2], 10))
	wantCode(t, r, ExitFailure)
	mustContain(t, r, "stdout", fmt.Sprintf("retried 1 of 4 dead messages: %d", ids[2]))
	mustContain(t, r, "stdout", fmt.Sprintf("not dead (no such id, or no longer dead; unchanged): %d, %d, 999999", ids[0], alive))

	// Skip.
	d.kill(t, ids[0])
	r = call(t, invocation{env: d.env()}, "dead", "skip", strconv.FormatInt(ids[0], 10), "--reason", "customer deleted")
	wantCode(t, r, ExitOK)
	mustContain(t, r, "stdout", fmt.Sprintf("skipped 1 of 1 dead message: %d", ids[0]))
	var lastErr string
	if err := d.pool.QueryRow(context.Background(), "SELECT last_error FROM outbox WHERE id = $1 AND status = 'skipped'", ids[0]).Scan(&lastErr); err != nil {
		t.Fatalf("skipped message is not skipped: %v", err)
	}
	if lastErr != "skipped: customer deleted | permanent: webhook: status 400: bad request" {
		t.Errorf("last_error = %q", lastErr)
	}
}

func TestDead_AllMatchingNeedsConfirmation(t *testing.T) {
	t.Parallel()
	d := newDB(t)
	paid := d.enqueue(t, 5, "OrderPaid", "o-1", false)
	shipped := d.enqueue(t, 2, "OrderShipped", "o-2", false)
	d.kill(t, append(paid, shipped...)...)

	// Not a terminal, no --yes: refused, nothing changed.
	r := call(t, invocation{env: d.env()}, "dead", "retry", "--all-matching", "--event-type", "OrderPaid")
	wantCode(t, r, ExitFailure)
	mustContain(t, r, "stderr", "pgoutbox: dead retry: refusing to retry 5 dead messages without confirmation: stdin is not a terminal; pass --yes to confirm")
	if n := d.count(t, "status = 'dead'"); n != 7 {
		t.Fatalf("%d dead after the refusal, want 7", n)
	}

	// Standard input a character device that ends at once (/dev/null, as
	// under a job runner), no --yes: refused with the same advice, not read
	// as a "no".
	yes := true
	r = call(t, invocation{env: d.env(), terminal: &yes, stdin: ""}, "dead", "retry", "--all-matching", "--event-type", "OrderPaid")
	wantCode(t, r, ExitFailure)
	mustContain(t, r, "stderr", "pgoutbox: dead retry: refusing to retry 5 dead messages without confirmation: no answer on stdin (it ended); pass --yes to confirm")

	// A terminal, answer no.
	r = call(t, invocation{env: d.env(), terminal: &yes, stdin: "n\n"}, "dead", "retry", "--all-matching", "--event-type", "OrderPaid")
	wantCode(t, r, ExitFailure)
	mustContain(t, r, "stderr", "retry 5 dead messages? [y/N] ")
	mustContain(t, r, "stderr", "not confirmed; nothing changed")
	if n := d.count(t, "status = 'dead'"); n != 7 {
		t.Fatalf("%d dead after no, want 7", n)
	}

	// A terminal, answer yes; small batches.
	r = call(t, invocation{env: d.env(), terminal: &yes, stdin: "y\n"}, "dead", "retry", "--all-matching", "--event-type", "OrderPaid", "--batch", "2")
	wantCode(t, r, ExitOK)
	mustContain(t, r, "stdout", "retried 5 of 5 dead messages")
	mustContain(t, r, "stderr", "retried 2 of 5\nretried 4 of 5\nretried 5 of 5\n")
	if n := d.count(t, "status = 'pending' AND event_type = 'OrderPaid'"); n != 5 {
		t.Errorf("%d OrderPaid pending, want 5", n)
	}

	// --yes: skip every remaining dead message without a prompt.
	r = call(t, invocation{env: d.env()}, "dead", "skip", "--all-matching", "--yes", "--reason", "obsolete")
	wantCode(t, r, ExitOK)
	mustContain(t, r, "stdout", fmt.Sprintf("skipped 2 of 2 dead messages: %d, %d", shipped[0], shipped[1]))
	if n := d.count(t, "status = 'dead'"); n != 0 {
		t.Errorf("%d still dead", n)
	}

	r = call(t, invocation{env: d.env()}, "dead", "retry", "--all-matching")
	wantCode(t, r, ExitOK)
	mustContain(t, r, "stdout", "no dead messages; nothing to do")
}

func TestPurge_DeletesOldDoneInBatchesWithProgress(t *testing.T) {
	t.Parallel()
	d := newDB(t)
	old := d.enqueue(t, 7, "OrderPaid", "o-1", false)
	recent := d.enqueue(t, 2, "OrderPaid", "o-2", false)
	oldDead := d.enqueue(t, 1, "OrderPaid", "o-3", false)
	pending := d.enqueue(t, 1, "OrderPaid", "o-4", false)
	d.exec(t, "UPDATE outbox SET status = 'done', done_at = now() - interval '8 days' WHERE id = ANY($1)", old)
	d.exec(t, "UPDATE outbox SET status = 'done', done_at = now() - interval '6 days' WHERE id = ANY($1)", recent)
	d.kill(t, oldDead...)
	d.exec(t, "UPDATE outbox SET created_at = now() - interval '30 days' WHERE id = ANY($1)", append(oldDead, pending...))

	r := call(t, invocation{env: d.env()}, "purge", "--older-than", "7d", "--batch", "3")
	wantCode(t, r, ExitOK)
	mustContain(t, r, "stderr", "purge: deleted 3 (total 3)\npurge: deleted 3 (total 6)\npurge: deleted 1 (total 7)\n")
	mustContain(t, r, "stdout", "deleted 7 done messages older than 7d\n")
	if n := d.count(t, "true"); n != 4 {
		t.Errorf("%d rows left, want 4 (2 recent done, 1 dead, 1 pending)", n)
	}

	r = call(t, invocation{env: d.env()}, "purge", "--older-than", "36h")
	wantCode(t, r, ExitOK)
	mustContain(t, r, "stdout", "deleted 2 done messages older than 36h0m0s\n")
	if n := d.count(t, "true"); n != 2 {
		t.Errorf("%d rows left, want 2", n)
	}
}

func TestPurge_InterruptedStopsAfterTheBatchAndExits130(t *testing.T) {
	t.Parallel()
	d := newDB(t)
	old := d.enqueue(t, 5, "OrderPaid", "o-1", false)
	d.exec(t, "UPDATE outbox SET status = 'done', done_at = now() - interval '8 days' WHERE id = ANY($1)", old)
	// Interrupt while the first batch runs: it completes, then purge
	// reports the total and exits 130.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout, stderr syncBuffer
	w := &cancelAfter{w: &stderr, match: "purge: deleted 2 (total 2)", cancel: cancel}
	o := invocation{env: d.env()}.options(&stdout, &stderr)
	o.stderr = w
	code := run(ctx, []string{"purge", "--older-than", "7d", "--batch", "2"}, o)
	r := result{code: code, stdout: stdout.String(), stderr: stderr.String()}
	wantCode(t, r, ExitInterrupted)
	mustContain(t, r, "stderr", "purge: interrupted: deleted 2 done messages older than 7d before stopping; run the same command again to continue")
	mustContain(t, r, "stdout", "deleted 2 done messages older than 7d (interrupted)")
	if n := d.count(t, "true"); n != 3 {
		t.Errorf("%d rows left, want 3", n)
	}
}

// cancelAfter cancels a context once a line containing match is written.
type cancelAfter struct {
	w      *syncBuffer
	match  string
	cancel context.CancelFunc
}

func (c *cancelAfter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	if strings.Contains(string(p), c.match) {
		c.cancel()
	}
	return n, err
}
