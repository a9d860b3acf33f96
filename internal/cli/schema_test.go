package cli

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// Two outboxes with the default name, public.outbox and billing.outbox, in
// one database: every command given --schema billing acts on billing.outbox
// alone, and `migrate up --schema billing` creates billing.outbox (not a
// second public.outbox).
func TestCommands_SameTableNameInTwoSchemas(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := newDB(t) // public.outbox, migrated
	env := d.env()
	billing := func(args ...string) []string { return append(args, "--schema", "billing") }

	r := call(t, invocation{env: env}, billing("migrate", "up")...)
	wantCode(t, r, ExitOK)
	var tables []string
	if err := d.pool.QueryRow(ctx, `SELECT array_agg(c.oid::regclass::text ORDER BY c.oid::regclass::text) FROM pg_class c
		WHERE c.relname IN ('outbox', 'pgoutbox_migrations') AND c.relkind = 'r'`).Scan(&tables); err != nil {
		t.Fatal(err)
	}
	if strings.Join(tables, " ") != "billing.outbox billing.pgoutbox_migrations outbox pgoutbox_migrations" {
		t.Fatalf("tables after migrate up --schema billing: %v", tables)
	}
	r = call(t, invocation{env: env}, billing("migrate", "status")...)
	wantCode(t, r, ExitOK)
	mustContain(t, r, "stdout", "up to date")

	d.exec(t, `INSERT INTO public.outbox (aggregate_type, aggregate_id, event_type, payload) VALUES ('t', 'p', 'E', '{"who":"public"}')`)
	r = call(t, invocation{env: env}, billing("enqueue", "--aggregate-type", "t", "--aggregate-id", "b", "--event-type", "E", "--payload", `{"who":"billing"}`)...)
	wantCode(t, r, ExitOK)
	// A dead message in each; the commands on billing see only billing's.
	d.exec(t, `INSERT INTO public.outbox (aggregate_type, aggregate_id, event_type, payload, status, last_error) VALUES ('t', 'p', 'PublicDead', '{}', 'dead', 'x')`)
	d.exec(t, `INSERT INTO billing.outbox (aggregate_type, aggregate_id, event_type, payload, status, last_error) VALUES ('t', 'b', 'BillingDead', '{}', 'dead', 'x')`)

	r = call(t, invocation{env: env}, billing("stats", "--json")...)
	wantCode(t, r, ExitOK)
	mustContain(t, r, "stdout", `"pending":1`)
	mustContain(t, r, "stdout", `"dead":1`)
	r = call(t, invocation{env: env}, billing("dead", "list")...)
	wantCode(t, r, ExitOK)
	mustContain(t, r, "stdout", "BillingDead")
	if strings.Contains(r.stdout, "PublicDead") {
		t.Errorf("dead list --schema billing lists public's dead message:\n%s", r)
	}
	r = call(t, invocation{env: env}, billing("dead", "skip", "--all-matching", "--yes", "--reason", "test")...)
	wantCode(t, r, ExitOK)
	mustContain(t, r, "stdout", "skipped 1 of 1")
	if n := d.count(t, "status = 'dead'"); n != 1 {
		t.Errorf("public.outbox has %d dead messages after skipping billing's, want 1", n)
	}

	b := start(t, invocation{env: env}, billing("run", "--publisher", "stdout", "--poll-interval", "50ms")...)
	eventually(t, 30*time.Second, "billing's message to be done", func() bool {
		var n int
		_ = d.pool.QueryRow(ctx, `SELECT count(*) FROM billing.outbox WHERE status = 'done' AND payload->>'who' = 'billing'`).Scan(&n)
		return n == 1
	})
	res := b.stop(t)
	wantCode(t, res, ExitOK)
	if strings.Contains(res.stdout, `"who":"public"`) || !strings.Contains(res.stdout, `"who":"billing"`) {
		t.Errorf("run --schema billing published:\n%s", res.stdout)
	}
	if n := d.count(t, "status = 'pending'"); n != 1 {
		t.Errorf("public.outbox has %d pending messages, want its 1 untouched", n)
	}
	mustContain(t, res, "stderr", "billing.outbox")

	d.exec(t, "UPDATE billing.outbox SET done_at = now() - interval '1 hour' WHERE status = 'done'")
	d.exec(t, "UPDATE public.outbox SET status = 'done', done_at = now() - interval '1 hour' WHERE status = 'pending'")
	r = call(t, invocation{env: env}, billing("purge", "--older-than", "1m")...)
	wantCode(t, r, ExitOK)
	mustContain(t, r, "stdout", "deleted 1 done messages") // billing's skipped message is kept
	if n := d.count(t, "true"); n != 2 {
		t.Errorf("public.outbox has %d rows after purging billing, want 2", n)
	}
	d.exec(t, "UPDATE public.outbox SET status = 'pending', done_at = NULL WHERE status = 'done'")

	ui := start(t, invocation{env: env}, billing("ui", "--addr", "127.0.0.1:0", "--read-only")...)
	resp, err := http.Get(ui.metricsURL(t) + "/dead")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if strings.Contains(string(body), "PublicDead") {
		t.Errorf("ui --schema billing shows public's dead message")
	}
	wantCode(t, ui.stop(t), ExitOK)
}
