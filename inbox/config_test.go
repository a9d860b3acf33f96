package inbox_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgoutbox/pgoutbox/inbox"
	inboxmigrations "github.com/pgoutbox/pgoutbox/inbox/migrations"
	"github.com/pgoutbox/pgoutbox/internal/pgtest"
)

func TestNew_RejectsConfigNamingTheField(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	h := func(context.Context, pgx.Tx, inbox.Delivery) error { return nil }
	for _, tc := range []struct {
		cfg  inbox.Config
		want string
	}{
		{inbox.Config{Handler: h}, "Config.DB: required"},
		{inbox.Config{DB: pool}, "Config.Handler: required"},
		{inbox.Config{DB: pool, Handler: h, Gaps: 7}, "Config.Gaps"},
		{inbox.Config{DB: pool, Handler: h, MaxParkedAge: -time.Second}, "Config.MaxParkedAge"},
		{inbox.Config{DB: pool, Handler: h, MaxParked: -1}, "Config.MaxParked"},
		{inbox.Config{DB: pool, Handler: h, Retention: time.Minute}, "Config.Retention: 1m0s must be at least MaxParkedAge (5m0s)"},
		{inbox.Config{DB: pool, Handler: h, PurgeBatch: 200000}, "Config.PurgeBatch"},
		{inbox.Config{DB: pool, Handler: h, Table: "Bad-Name"}, "Config.Table"},
		{inbox.Config{DB: pool, Handler: h, Schema: "pg_catalog"}, "Config.Schema"},
	} {
		_, err := inbox.New(tc.cfg)
		if !errors.Is(err, inbox.ErrInvalidConfig) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%+v) = %v, want ErrInvalidConfig naming %q", tc.cfg, err, tc.want)
		}
	}
}

// Bad input gets a clear error and nothing is written.
func TestProcess_InvalidMessageIsRejectedAndWritesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	for _, tc := range []struct {
		m    inbox.Message
		want string
	}{
		{inbox.Message{ID: "1"}, "no source"},
		{inbox.Message{Source: src}, "no id"},
		{inbox.Message{Source: src, ID: "1", Position: inbox.Position{Seq: 5}}, "without a subject"},
		{inbox.Message{Source: src, ID: "1", Subject: "a", Position: inbox.Position{Seq: 5, Prev: 5}}, "is not before"},
		{inbox.Message{Source: src, ID: "1", Subject: "a", Position: inbox.Position{Prev: 5}}, "without a position of its own"},
		{inbox.Message{Source: src, ID: "1", Subject: "a", Position: inbox.Position{Seq: -1}}, "negative"},
		{inbox.Message{Source: src, ID: "1", Subject: "a", Position: inbox.Position{Seq: 9, Prev: 5, Skipped: true, Sent: 5}}, "not before the skipped predecessor"},
		{inbox.Message{Source: src, ID: "1", Subject: "a", Position: inbox.Position{Seq: 9, Skipped: true}}, "no predecessor position"},
	} {
		_, err := b.ib.Process(context.Background(), tc.m)
		if !errors.Is(err, inbox.ErrInvalidMessage) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Process(%+v) = %v, want ErrInvalidMessage with %q", tc.m, err, tc.want)
		}
	}
	if n := queryInt(t, b.pool, `SELECT (SELECT count(*) FROM inbox) + (SELECT count(*) FROM inbox_aggregates) + (SELECT count(*) FROM effects)`); n != 0 {
		t.Fatalf("%d rows written for invalid messages", n)
	}
	if s := b.ib.Stats(); s.Invalid != 8 {
		t.Fatalf("stats %+v", s)
	}
}

// Tables renamed and in a schema, as `pgoutbox inbox init` copies them:
// every query of the inbox runs on them (process, park, release, gaps,
// sweep, purge), and nothing touches a table of the default name.
func TestInbox_RenamedTablesInASchema(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	m, err := inboxmigrations.FromPoolFor(ctx, pool, "billing_inbox", "billing")
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if _, err := m.Up(ctx); err != nil {
		t.Fatal(err)
	}
	if err := inboxmigrations.Check(ctx, pool, inboxmigrations.VersionTableFor("billing_inbox", "billing")); err != nil {
		t.Fatal(err)
	}
	var tables []string
	rows, _ := pool.Query(ctx, `SELECT relname::text FROM pg_class WHERE relnamespace = 'billing'::regnamespace AND relkind IN ('r', 'i') ORDER BY 1`)
	tables, err = pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"billing_inbox", "billing_inbox_aggregates", "billing_inbox_aggregates_pkey", "billing_inbox_finished",
		"billing_inbox_gaps", "billing_inbox_gaps_detected", "billing_inbox_gaps_pkey", "billing_inbox_migrations",
		"billing_inbox_migrations_pkey", "billing_inbox_parked", "billing_inbox_pkey"}
	if !slices.Equal(tables, want) {
		t.Fatalf("relations in schema billing:\n%v\nwant\n%v", tables, want)
	}
	var effects []string
	ib, err := inbox.New(inbox.Config{DB: pool, Table: "billing_inbox", Schema: "billing", Retention: time.Hour, MaxParkedAge: time.Minute,
		Handler: func(_ context.Context, _ pgx.Tx, d inbox.Delivery) error {
			effects = append(effects, d.ID)
			return nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	for _, step := range []struct {
		m    inbox.Message
		want inbox.Outcome
	}{
		{unordered(1), inbox.Processed},
		{unordered(1), inbox.Duplicate},
		{ordered("a", 2, 5, 0), inbox.Processed},
		{ordered("a", 4, 12, 9), inbox.Parked},
		{ordered("a", 3, 9, 5), inbox.Processed},
		{ordered("a", 6, 20, 15), inbox.Parked},
	} {
		if got, err := ib.Process(ctx, step.m); err != nil || got != step.want {
			t.Fatalf("Process(%s) = %v, %v, want %v", step.m.ID, got, err, step.want)
		}
	}
	if _, err := pool.Exec(ctx, `UPDATE billing.billing_inbox SET received_at = received_at - interval '1 day', processed_at = processed_at - interval '1 day'`); err != nil {
		t.Fatal(err)
	}
	if err := ib.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	if got, err := ib.Process(ctx, ordered("a", 5, 15, 12)); err != nil || got != inbox.Late {
		t.Fatalf("late event: %v, %v", got, err)
	}
	if _, err := pool.Exec(ctx, `UPDATE billing.billing_inbox_gaps SET detected_at = detected_at - interval '1 day'`); err != nil {
		t.Fatal(err)
	}
	// 1 to 4 finished before the aging; 6 (released by the sweep) and 5
	// (late) after it.
	if n, err := ib.Purge(ctx); err != nil || n != 5 {
		t.Fatalf("Purge = %d, %v; want 4 records and 1 gap", n, err)
	}
	if !slices.Equal(effects, []string{"1", "2", "3", "4", "6"}) {
		t.Fatalf("effects %v", effects)
	}
	if ok := queryInt(t, pool, `SELECT count(*) FROM pg_class WHERE relname LIKE 'inbox%'`); ok != 0 {
		t.Fatal("a table of the default name was created")
	}
}

// Prepare fills in what the transport did not carry (here the position)
// before the message is recorded; its error leaves nothing recorded.
func TestProcess_PrepareFillsInThePosition(t *testing.T) {
	t.Parallel()
	positions := map[string]inbox.Position{"1": {Seq: 10}, "2": {Seq: 20, Prev: 10}}
	b := setup(t, func(c *inbox.Config) {
		c.Prepare = func(_ context.Context, m *inbox.Message) error {
			p, ok := positions[m.ID]
			if !ok {
				return errors.New("unknown event")
			}
			m.Position = p
			return nil
		}
	})
	b.wantOutcome(t, inbox.Message{Source: src, ID: "2", Subject: "a"}, inbox.Parked)
	b.wantOutcome(t, inbox.Message{Source: src, ID: "1", Subject: "a"}, inbox.Processed)
	if _, err := b.ib.Process(context.Background(), inbox.Message{Source: src, ID: "3", Subject: "a"}); err == nil || !strings.Contains(err.Error(), "unknown event") {
		t.Fatalf("Process = %v, want Prepare's error", err)
	}
	if got := b.effects(t); !slices.Equal(got, []string{"1", "2"}) {
		t.Fatalf("effects %v", got)
	}
	if n := queryInt(t, b.pool, `SELECT count(*) FROM inbox WHERE id = '3'`); n != 0 {
		t.Fatal("a message Prepare refused was recorded")
	}
}
