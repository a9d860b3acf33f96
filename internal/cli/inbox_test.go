package cli

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/pgoutbox/pgoutbox/inbox"
	inboxmigrations "github.com/pgoutbox/pgoutbox/inbox/migrations"
	"github.com/pgoutbox/pgoutbox/internal/pgtest"
	"github.com/pgoutbox/pgoutbox/migrations"
)

// processSome runs a few events through an Inbox on the given tables: every
// query of the inbox works there.
func processSome(t *testing.T, url, table, schema string) {
	t.Helper()
	pool := pgtest.Pool(t, url)
	ib, err := inbox.New(inbox.Config{DB: pool, Table: table, Schema: schema, Logger: slog.New(slog.DiscardHandler),
		Handler: func(context.Context, pgx.Tx, inbox.Delivery) error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, step := range []struct {
		m    inbox.Message
		want inbox.Outcome
	}{
		{inbox.Message{Source: "s", ID: "2", Subject: "a", Position: inbox.Position{Seq: 20, Prev: 10}}, inbox.Parked},
		{inbox.Message{Source: "s", ID: "1", Subject: "a", Position: inbox.Position{Seq: 10}}, inbox.Processed},
		{inbox.Message{Source: "s", ID: "1", Subject: "a", Position: inbox.Position{Seq: 10}}, inbox.Duplicate},
		{inbox.Message{Source: "s", ID: "3"}, inbox.Processed},
	} {
		if got, err := ib.Process(ctx, step.m); err != nil || got != step.want {
			t.Fatalf("Process(%s) = %v, %v; want %v", step.m.ID, got, err, step.want)
		}
	}
	if err := ib.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := ib.Purge(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestInboxMigrate_CreatesTheTablesInTheirOwnVersionTable(t *testing.T) {
	t.Parallel()
	url := pgtest.NewURL(t)
	r := call(t, invocation{}, "inbox", "migrate", "--database-url", url, "--table", "billing_inbox", "--schema", "billing")
	wantCode(t, r, ExitOK)
	mustContain(t, r, "stdout", "applied  00001_inbox.sql")
	mustContain(t, r, "stdout", "inbox tables at version 1 (billing.billing_inbox_migrations)")
	r = call(t, invocation{}, "inbox", "migrate", "--database-url", url, "--table", "billing_inbox", "--schema", "billing")
	wantCode(t, r, ExitOK)
	mustContain(t, r, "stdout", "already up to date: version 1")
	processSome(t, url, "billing_inbox", "billing")

	r = call(t, invocation{}, "inbox", "migrate", "--database-url", url, "--table", "Bad")
	wantCode(t, r, ExitUsage)
	mustContain(t, r, "stderr", `invalid --table "Bad"`)
}

// The copy init writes applies with goose under the printed version table
// and works with inbox.Config{Table, Schema}; a second init refuses, and
// --upgrade has nothing new to copy.
func TestInboxInit_CopyMigratesAndProcesses(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	args := []string{"inbox", "init", "--table", "billing_inbox", "--schema", "billing", "--dir", dir, "--sqlc-root", dir}
	r := call(t, invocation{}, args...)
	wantCode(t, r, ExitOK)
	mustContain(t, r, "stdout", "# sqlc entry for the billing.billing_inbox inbox, written by pgoutbox inbox init.\n")
	mustContain(t, r, "stdout", "    schema: migrations\n    queries: queries\n")
	mustContain(t, r, "stderr", "goose -dir "+filepath.Join(dir, "migrations")+" -table billing.billing_inbox_migrations")
	mig, err := os.ReadFile(filepath.Join(dir, "migrations", "00001_billing_inbox.sql"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(mig), "-- pgoutbox-inbox-migration: 00001_inbox.sql\n-- Copied by `pgoutbox inbox init --table billing_inbox --schema billing`") ||
		!strings.Contains(string(mig), "CREATE TABLE billing.billing_inbox_gaps (") {
		t.Fatalf("migration copy:\n%s", mig)
	}
	q, err := os.ReadFile(filepath.Join(dir, "queries", "record.sql"))
	if err != nil || !strings.Contains(string(q), "-- name: BillingInboxRecord :one") || !strings.Contains(string(q), "INSERT INTO billing.billing_inbox AS i") {
		t.Fatalf("query copy (%v):\n%s", err, q)
	}

	url := pgtest.NewURL(t)
	pool := pgtest.Pool(t, url)
	if _, err := pool.Exec(context.Background(), "CREATE SCHEMA billing"); err != nil {
		t.Fatal(err)
	}
	m, err := migrations.NewWith(stdlib.OpenDBFromPool(pool), os.DirFS(filepath.Join(dir, "migrations")), inboxmigrations.VersionTableFor("billing_inbox", "billing"))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if _, err := m.Up(context.Background()); err != nil {
		t.Fatal(err)
	}
	processSome(t, url, "billing_inbox", "billing")

	r = call(t, invocation{}, args...)
	wantCode(t, r, ExitFailure)
	mustContain(t, r, "stderr", "already holds inbox migrations: 00001_billing_inbox.sql (00001_inbox.sql)")
	r = call(t, invocation{}, append(args, "--upgrade")...)
	wantCode(t, r, ExitOK)
	mustContain(t, r, "stderr", "upgrade: 0 new inbox migration(s), ")

	// Beside an outbox copy in one goose folder: numbered after it, and
	// each init still recognizes its own copies.
	shared := t.TempDir()
	wantCode(t, call(t, invocation{}, "init", "--table", "billing_outbox", "--dir", shared, "--sqlc-root", shared), ExitOK)
	r = call(t, invocation{}, "inbox", "init", "--table", "billing_inbox", "--dir", filepath.Join(shared, "inbox"),
		"--migrations-dir", filepath.Join(shared, "migrations"), "--sqlc-root", shared)
	wantCode(t, r, ExitOK)
	want := filepath.Join(shared, "migrations", fmt.Sprintf("%05d", migrations.Latest()+1)+"_billing_inbox.sql")
	if _, err := os.Stat(want); err != nil {
		t.Fatalf("inbox migration not numbered after the outbox's: %v\n%s", err, r)
	}
	r = call(t, invocation{}, "init", "--table", "billing_outbox", "--dir", shared, "--sqlc-root", shared, "--upgrade")
	wantCode(t, r, ExitOK)
	mustContain(t, r, "stderr", "upgrade: 0 new migration(s)")
}
