package cli

import (
	"context"
	"strings"
	"testing"
)

// Rows as a logical replication copy leaves them (ordered rows applied with
// the triggers off, sequences not copied): stats names them, repair
// repairs them, and a second repair finds nothing.
func TestRepair_ReportsAndRepairsRowsFromAnotherServer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := newDB(t)
	d.enqueue(t, 2, "E", "a", true)
	conn, err := d.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, sql := range []string{
		"SET session_replication_role = replica",
		`INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload, ordered) VALUES ('t', 'b', 'E', '{}', true), ('t', 'b', 'E', '{}', true)`,
		"RESET session_replication_role",
		"SELECT setval(pg_get_serial_sequence('outbox', 'id'), 1), setval('outbox_seq', 1)",
	} {
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	conn.Release()

	r := call(t, invocation{env: d.env()}, "stats")
	wantCode(t, r, ExitOK)
	mustContain(t, r, "stdout", "2 ordered rows inserted with triggers off are not sequenced")
	mustContain(t, r, "stdout", "2 sequences are behind the rows")
	r = call(t, invocation{env: d.env()}, "stats", "--json")
	wantCode(t, r, ExitOK)
	mustContain(t, r, "stdout", `"moved_rows":{"unsequenced_ordered":2,"foreign_txids":0,"sequences_behind":2}`)

	r = call(t, invocation{env: d.env()}, "repair")
	wantCode(t, r, ExitOK)
	mustContain(t, r, "stdout", "2 ordered messages sequenced (inserted with triggers off)")
	mustContain(t, r, "stdout", "2 sequences moved past the rows")
	if n := d.count(t, "ordered AND seq IS NULL"); n != 0 {
		t.Errorf("%d ordered rows unsequenced after repair", n)
	}
	if n := d.count(t, "ordered AND head AND aggregate_id = 'b'"); n != 1 {
		t.Errorf("aggregate b has %d heads after repair, want 1", n)
	}
	d.enqueue(t, 1, "E", "a", true) // no id collision
	r = call(t, invocation{env: d.env()}, "repair")
	wantCode(t, r, ExitOK)
	mustContain(t, r, "stdout", "nothing to repair")
	r = call(t, invocation{env: d.env()}, "stats")
	wantCode(t, r, ExitOK)
	if strings.Contains(r.stdout, "rows from another server") {
		t.Errorf("stats still reports rows from another server after repair:\n%s", r)
	}
}
