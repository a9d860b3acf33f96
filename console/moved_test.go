package console_test

import (
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
