package sqlrename

import (
	"strings"
	"testing"
)

func TestRename_WholeIdentifiersOnly(t *testing.T) {
	t.Parallel()
	r, err := New("billing_outbox", "")
	if err != nil {
		t.Fatal(err)
	}
	in := `-- OutboxClaim reads outbox through outbox_pending; the outbox prose stays.
-- name: OutboxClaim :many
SELECT o.id, outboxes, my_outbox, outbox_x, OUTBOX.id, "outbox", 'outbox', 'outbox is a word', 'outbox_pending',
       Outboxy, OutboxClaimer, outbox2, x_outbox_y, @outbox_id::bigint,
       'outbox.notified_at', 'public.outbox', 'outbox.x y', 'myoutbox.wake'
  FROM outbox AS o /* outbox_leased OutboxReap /* nested outbox_dead */ */
 WHERE $1 = 1 AND 1e5 > 0;
CREATE FUNCTION outbox_notify() RETURNS trigger LANGUAGE plpgsql AS $body$
BEGIN PERFORM pg_notify('outbox', ''); UPDATE outbox SET x = 1; END;
$body$;`
	want := `-- BillingOutboxClaim reads outbox through billing_outbox_pending; the outbox prose stays.
-- name: BillingOutboxClaim :many
SELECT o.id, outboxes, my_outbox, billing_outbox_x, billing_outbox.id, "billing_outbox", 'billing_outbox', 'outbox is a word', 'billing_outbox_pending',
       Outboxy, BillingOutboxClaimer, outbox2, x_outbox_y, @billing_outbox_id::bigint,
       'billing_outbox.notified_at', 'public.billing_outbox', 'outbox.x y', 'myoutbox.wake'
  FROM billing_outbox AS o /* billing_outbox_leased BillingOutboxReap /* nested billing_outbox_dead */ */
 WHERE $1 = 1 AND 1e5 > 0;
CREATE FUNCTION billing_outbox_notify() RETURNS trigger LANGUAGE plpgsql AS $body$
BEGIN PERFORM pg_notify('billing_outbox', ''); UPDATE billing_outbox SET x = 1; END;
$body$;`
	got, produced := r.SQL(in)
	if got != want {
		t.Errorf("rename:\n got: %s\nwant: %s", got, want)
	}
	if len(produced) == 0 {
		t.Error("no produced identifiers reported")
	}
	if left := Leftovers(got, "billing_outbox", "BillingOutbox"); len(left) != 0 {
		t.Errorf("leftovers after rename: %v", left)
	}
	// The checker itself finds what a rename missed.
	if left := Leftovers(in, "billing_outbox", "BillingOutbox"); len(left) < 8 {
		t.Errorf("leftovers of the original found only %v", left)
	}
}

func TestRename_TableNameValidation(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"billing_outbox", "outbox", "events", "_private_outbox", "a", "type", "audit_log2"} {
		if err := ValidateTable(ok); err != nil {
			t.Errorf("%q rejected: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "user", "order", "table", "select", "Billing", "billing-outbox", "1outbox", "billing outbox",
		"x;drop table y", "pg_outbox", "_1", "_", strings.Repeat("a", 64), "caf\u00e9"} {
		if err := ValidateTable(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	if CamelCase("billing_outbox") != "BillingOutbox" || CamelCase("_a__b2_c") != "AB2C" {
		t.Error("camelCase")
	}
}

func TestRename_SchemaQualifiesTableAndFunctions(t *testing.T) {
	t.Parallel()
	r, err := New("hr_outbox", "hr")
	if err != nil {
		t.Fatal(err)
	}
	in := `CREATE TABLE outbox (id bigint);
CREATE INDEX outbox_pending ON outbox (id);
CREATE FUNCTION outbox_notify() RETURNS trigger AS $$ BEGIN PERFORM pg_notify(TG_TABLE_NAME, ''); RETURN NULL; END $$ LANGUAGE plpgsql;
CREATE TRIGGER outbox_notify AFTER INSERT ON outbox FOR EACH STATEMENT EXECUTE FUNCTION outbox_notify ();
SELECT outbox.id FROM public.outbox, outbox WHERE current_setting('outbox.wake_queued', true) = 'on';
SELECT pg_notify('outbox', '');`
	want := `CREATE TABLE hr.hr_outbox (id bigint);
CREATE INDEX hr_outbox_pending ON hr.hr_outbox (id);
CREATE FUNCTION hr.hr_outbox_notify() RETURNS trigger AS $$ BEGIN PERFORM pg_notify(TG_TABLE_NAME, ''); RETURN NULL; END $$ LANGUAGE plpgsql;
CREATE TRIGGER hr_outbox_notify AFTER INSERT ON hr.hr_outbox FOR EACH STATEMENT EXECUTE FUNCTION hr.hr_outbox_notify ();
SELECT hr_outbox.id FROM public.hr_outbox, hr.hr_outbox WHERE current_setting('hr_outbox.wake_queued', true) = 'on';
SELECT pg_notify('hr_outbox', '');`
	if got, _ := r.SQL(in); got != want {
		t.Errorf("rename:\n got: %s\nwant: %s", got, want)
	}
	for _, bad := range []string{"pg_catalog", "information_schema", "Hr", "select", "a.b"} {
		if _, err := New("x", bad); err == nil {
			t.Errorf("schema %q accepted", bad)
		}
	}
}

// Names PostgreSQL looks up through the search_path take the schema too:
// sequences, an index being dropped, the table of OWNED BY, and string
// literals that name an object ('x'::regclass, nextval('x')). Channels and
// setting names stay plain text. (Migration 00004 failed to apply in a
// schema outside the search_path without these.)
func TestRename_SchemaQualifiesNamesFoundThroughTheSearchPath(t *testing.T) {
	t.Parallel()
	r, err := New("hr_outbox", "hr")
	if err != nil {
		t.Fatal(err)
	}
	in := `CREATE SEQUENCE outbox_seq AS bigint;
ALTER SEQUENCE outbox_seq OWNED BY outbox.seq;
DROP SEQUENCE IF EXISTS outbox_seq;
DROP INDEX outbox_ordered_head;
DROP INDEX IF EXISTS outbox_dead;
DROP INDEX CONCURRENTLY IF EXISTS outbox_leased;
CREATE INDEX outbox_ordered_head ON outbox (aggregate_id, seq);
SELECT setval('outbox_seq', 1, false), nextval( 'outbox_seq'), to_regclass('outbox');
SELECT 'outbox_commit_order'::regproc, 'outbox'::regclass, set_config('outbox.seq_from', '', true);
SELECT pg_notify('outbox', ''), 'outbox';`
	want := `CREATE SEQUENCE hr.hr_outbox_seq AS bigint;
ALTER SEQUENCE hr.hr_outbox_seq OWNED BY hr.hr_outbox.seq;
DROP SEQUENCE IF EXISTS hr.hr_outbox_seq;
DROP INDEX hr.hr_outbox_ordered_head;
DROP INDEX IF EXISTS hr.hr_outbox_dead;
DROP INDEX CONCURRENTLY IF EXISTS hr.hr_outbox_leased;
CREATE INDEX hr_outbox_ordered_head ON hr.hr_outbox (aggregate_id, seq);
SELECT setval('hr.hr_outbox_seq', 1, false), nextval( 'hr.hr_outbox_seq'), to_regclass('hr.hr_outbox');
SELECT 'hr.hr_outbox_commit_order'::regproc, 'hr.hr_outbox'::regclass, set_config('hr_outbox.seq_from', '', true);
SELECT pg_notify('hr_outbox', ''), 'hr_outbox';`
	if got, _ := r.SQL(in); got != want {
		t.Errorf("rename:\n got: %s\nwant: %s", got, want)
	}
	// Without a schema nothing is qualified.
	r2, _ := New("hr_outbox", "")
	if got, _ := r2.SQL("SELECT nextval('outbox_seq'); DROP INDEX outbox_dead;"); got != "SELECT nextval('hr_outbox_seq'); DROP INDEX hr_outbox_dead;" {
		t.Errorf("rename without schema: %s", got)
	}
}

// The default table name in a schema is qualified like any other name:
// `--schema billing` with the table outbox acts on billing.outbox, never on
// the outbox the search_path finds first.
func TestRename_SchemaQualifiesTheDefaultTableName(t *testing.T) {
	t.Parallel()
	r, err := New("outbox", "billing")
	if err != nil {
		t.Fatal(err)
	}
	if r.Identity() {
		t.Fatal("outbox in schema billing reported as the identity rename")
	}
	in := `CREATE TABLE outbox (id bigint);
CREATE INDEX outbox_pending ON outbox (id);
CREATE SEQUENCE outbox_seq AS bigint;
UPDATE outbox SET seq = nextval('outbox_seq') WHERE outbox.id = 1;
SELECT outbox_resolve_heads(1), 'outbox'::regclass, current_setting('outbox.seq_from', true), pg_notify('outbox', '');`
	want := `CREATE TABLE billing.outbox (id bigint);
CREATE INDEX outbox_pending ON billing.outbox (id);
CREATE SEQUENCE billing.outbox_seq AS bigint;
UPDATE billing.outbox SET seq = nextval('billing.outbox_seq') WHERE outbox.id = 1;
SELECT billing.outbox_resolve_heads(1), 'billing.outbox'::regclass, current_setting('outbox.seq_from', true), pg_notify('outbox', '');`
	if got, _ := r.SQL(in); got != want {
		t.Errorf("rename:\n got: %s\nwant: %s", got, want)
	}
}

func TestRename_SchemaQualifiesTheTablesBesideTheOutbox(t *testing.T) {
	t.Parallel()
	r, err := New("hr_outbox", "hr")
	if err != nil {
		t.Fatal(err)
	}
	in := `CREATE TABLE outbox_attempts (message_id bigint, PRIMARY KEY (message_id));
INSERT INTO outbox_attempts AS h (message_id) SELECT o.id FROM outbox AS o
ON CONFLICT (message_id) DO UPDATE SET message_id = excluded.message_id;
SELECT outbox_attempts.message_id FROM outbox_attempts;
DROP TABLE outbox_attempts;`
	want := `CREATE TABLE hr.hr_outbox_attempts (message_id bigint, PRIMARY KEY (message_id));
INSERT INTO hr.hr_outbox_attempts AS h (message_id) SELECT o.id FROM hr.hr_outbox AS o
ON CONFLICT (message_id) DO UPDATE SET message_id = excluded.message_id;
SELECT hr_outbox_attempts.message_id FROM hr.hr_outbox_attempts;
DROP TABLE hr.hr_outbox_attempts;`
	if got, _ := r.SQL(in); got != want {
		t.Errorf("rename:\n got: %s\nwant: %s", got, want)
	}
}
