package sqlrename

import (
	"slices"
	"testing"
)

func TestTables_RenamesTheFamilyAndQualifiesOnlyItsTables(t *testing.T) {
	t.Parallel()
	r, err := NewTables("inbox", InboxTables, "billing_inbox", "billing")
	if err != nil {
		t.Fatal(err)
	}
	src := `-- InboxRecord records an event in the inbox (inbox_parked serves it).
-- name: InboxRecord :one
CREATE TABLE inbox (id text, CONSTRAINT inbox_parked_content CHECK (status <> 'parked'));
CREATE INDEX inbox_parked ON inbox (source, seq) WHERE status = 'parked';
INSERT INTO inbox AS i (source) SELECT g.source FROM inbox_gaps AS g JOIN inbox_aggregates a ON inbox.id = a.id;
SELECT 'inbox_gaps'::regclass, inboxes, my_inbox, "inbox_gaps";
DROP TABLE inbox_gaps;`
	got, produced := r.SQL(src)
	want := `-- BillingInboxRecord records an event in the inbox (billing_inbox_parked serves it).
-- name: BillingInboxRecord :one
CREATE TABLE billing.billing_inbox (id text, CONSTRAINT billing_inbox_parked_content CHECK (status <> 'parked'));
CREATE INDEX billing_inbox_parked ON billing.billing_inbox (source, seq) WHERE status = 'parked';
INSERT INTO billing.billing_inbox AS i (source) SELECT g.source FROM billing.billing_inbox_gaps AS g JOIN billing.billing_inbox_aggregates a ON billing_inbox.id = a.id;
SELECT 'billing.billing_inbox_gaps'::regclass, inboxes, my_inbox, "billing_inbox_gaps";
DROP TABLE billing.billing_inbox_gaps;`
	if got != want {
		t.Fatalf("got\n%s\nwant\n%s", got, want)
	}
	if !slices.Contains(produced, "billing_inbox_parked_content") {
		t.Fatalf("produced %v", produced)
	}
	if left := r.Leftovers(got); len(left) != 0 {
		t.Fatalf("leftovers %v", left)
	}
	if left := r.Leftovers(src); !slices.Contains(left, "inbox_parked") || !slices.Contains(left, "InboxRecord") || slices.Contains(left, "inboxes") {
		t.Fatalf("leftovers of the source %v", left)
	}
	same, _ := NewTables("inbox", InboxTables, "inbox", "")
	if !same.Identity() {
		t.Fatal("inbox without a schema is the identity")
	}
	if _, err := NewTables("inbox", InboxTables, "select", ""); err == nil {
		t.Fatal("a reserved word was accepted")
	}
}
