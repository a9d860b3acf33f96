package console_test

import (
	"html"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/pgoutbox/pgoutbox/console"
)

// Ordered messages inserted with the table's triggers off are never
// delivered until sequenced: the overview says so and what repairs them.
func TestConsole_OverviewNamesRowsFromAnotherServer(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	s := f.serve(t, console.Config{})
	c := newClient(t, s.URL)
	if _, body := c.get(t, "/"); strings.Contains(body, `id="moved"`) {
		t.Fatal("the overview reports rows from another server on a plain outbox")
	}
	conn, err := f.pool.Acquire(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	for _, sql := range []string{"SET session_replication_role = replica",
		`INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload, ordered) SELECT 'cart', 'c-9', 'E', '{}', true FROM generate_series(1, 12)`,
		"RESET session_replication_role"} {
		if _, err := conn.Exec(t.Context(), sql); err != nil {
			t.Fatal(err)
		}
	}
	_, body := c.get(t, "/")
	if got := between(body, `id="moved">`, "</p>"); !strings.Contains(got, "12 ordered messages inserted with triggers off are not sequenced") ||
		!strings.Contains(got, "pgoutbox repair") {
		t.Errorf("overview: %q", got)
	}
}

var hiddenRe = regexp.MustCompile(`<input type="hidden" name="([^"]+)" value="([^"]*)">`)

// "Skip all matching" changes exactly the dead messages the confirmation
// listed. A message that was retrying when the operator confirmed, and died
// before Apply, is left dead, even with an id below the ones confirmed.
func TestConsole_SkipAllMatchingActsOnTheConfirmedSetOnly(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	s := f.serve(t, console.Config{})
	c := newClient(t, s.URL)
	ctx := t.Context()
	var retrying, laterDead int64
	if err := f.pool.QueryRow(ctx, `INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload, status, attempts, available_at)
		VALUES ('order', 'o-r', 'OrderShipped', '{}', 'pending', 3, now() + interval '1 minute') RETURNING id`).Scan(&retrying); err != nil {
		t.Fatal(err)
	}
	if err := f.pool.QueryRow(ctx, `INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload, status, attempts)
		VALUES ('order', 'o-d', 'OrderShipped', '{}', 'dead', 12) RETURNING id`).Scan(&laterDead); err != nil {
		t.Fatal(err)
	}
	c.get(t, "/dead?event_type=OrderShipped")
	status, body := c.post(t, "/confirm", url.Values{"csrf": {c.token}, "action": {"skip"}, "scope": {"filter"}, "event_type": {"OrderShipped"}})
	if status != http.StatusOK {
		t.Fatalf("confirm: %d\n%s", status, body)
	}
	if got := between(body, `id="count">`, "<"); got != strconv.Itoa(len(f.shipped)+1) {
		t.Errorf("confirmation count %q, want %d", got, len(f.shipped)+1)
	}
	form := url.Values{"reason": {"replayed by hand"}}
	for _, m := range hiddenRe.FindAllStringSubmatch(body, -1) {
		form.Add(m[1], html.UnescapeString(m[2]))
	}
	// The retrying message dies between the confirmation and Apply.
	if _, err := f.pool.Exec(ctx, "UPDATE outbox SET status = 'dead', attempts = 12 WHERE id = $1", retrying); err != nil {
		t.Fatal(err)
	}
	status, body = c.post(t, "/apply", form)
	if status != http.StatusOK {
		t.Fatalf("apply: %d\n%s", status, body)
	}
	if st, _ := f.status(t, retrying); st != "dead" {
		t.Errorf("the message that died after the confirmation is %s, want dead (never shown, never confirmed)", st)
	}
	for _, id := range append(f.shipped, laterDead) {
		if st, _ := f.status(t, id); st != "skipped" {
			t.Errorf("confirmed message %d is %s, want skipped", id, st)
		}
	}
}
