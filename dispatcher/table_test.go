package dispatcher_test

import (
	"context"
	"errors"
	"io/fs"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"

	"github.com/pgoutbox/pgoutbox/db/opsdb"
	"github.com/pgoutbox/pgoutbox/dispatcher"
	"github.com/pgoutbox/pgoutbox/internal/sqlrename"
	"github.com/pgoutbox/pgoutbox/migrations"
)

// migrateRenamed applies pgoutbox's migrations renamed to table in schema
// (what `pgoutbox init --table --schema` copies) with goose.
func migrateRenamed(t *testing.T, b *bundle, table, schema string) {
	t.Helper()
	ctx := context.Background()
	r, err := sqlrename.New(table, schema)
	if err != nil {
		t.Fatal(err)
	}
	files := fstest.MapFS{}
	names, _ := fs.Glob(migrations.FS(), "*.sql")
	for _, n := range names {
		src, _ := fs.ReadFile(migrations.FS(), n)
		out, _ := r.SQL(string(src))
		files[n] = &fstest.MapFile{Data: []byte(out)}
	}
	if schema != "" {
		if _, err := b.pool.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+schema); err != nil {
			t.Fatal(err)
		}
	}
	sqlDB := stdlib.OpenDBFromPool(b.pool)
	t.Cleanup(func() { _ = sqlDB.Close() })
	p, err := goose.NewProvider(goose.DialectPostgres, sqlDB, files,
		goose.WithTableName(r.Qualified()+"_versions"), goose.WithDisableGlobalRegistry(true))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Up(ctx); err != nil {
		t.Fatalf("goose up renamed migrations: %v", err)
	}
}

// A table created by `init --table hr_outbox --schema hr` is delivered from
// by a dispatcher with Config.Table and Config.Schema, NOTIFY included, and
// the plain outbox next to it is left alone (issue 13, item 9).
func TestDispatcher_RenamedTableInSchemaDelivers(t *testing.T) {
	t.Parallel()
	b := setup(t)
	migrateRenamed(t, b, "hr_outbox", "hr")
	ctx := context.Background()

	plain := b.enqueue(t, 1, "plain", false) // in public.outbox: must stay pending
	tx, err := b.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	q, err := dispatcher.TableDBTX(tx, "hr_outbox", "hr")
	if err != nil {
		t.Fatal(err)
	}
	id, err := dispatcher.Enqueue(ctx, q, dispatcher.Event{AggregateType: "employee", AggregateID: "e1", EventType: "Hired", Payload: []byte(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}

	got := make(chan dispatcher.Message, 1)
	pub := newRecorder(func(_ context.Context, m dispatcher.Message) error {
		select {
		case got <- m:
		default:
		}
		return nil
	})
	// A poll interval far beyond the test: the NOTIFY on channel hr_outbox
	// is what wakes the dispatcher for the second event.
	_, stop := b.start(t, pub, fast(dispatcher.Config{Table: "hr_outbox", Schema: "hr", PollInterval: time.Hour}))
	defer stop()
	if m := <-got; m.OutboxID != id || m.EventType != "Hired" {
		t.Fatalf("published %+v, want id %d", m, id)
	}
	waitFor(t, 30*time.Second, "the renamed row done", func() bool {
		var s string
		_ = b.pool.QueryRow(ctx, "SELECT status FROM hr.hr_outbox WHERE id = $1", id).Scan(&s)
		return s == "done"
	})
	if s := b.state(t, plain[0]); s.Status != "pending" {
		t.Errorf("public.outbox row is %s: the dispatcher for hr.hr_outbox touched it", s.Status)
	}

	// Rows read through the db package with TableDBTX come from hr.hr_outbox.
	pq, _ := dispatcher.TableDBTX(b.pool, "hr_outbox", "hr")
	counts, err := opsdb.New(pq).OutboxCountByStatus(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(counts) != 1 || counts[0].Status != "done" {
		t.Errorf("hr.hr_outbox counts: %+v", counts)
	}
}

// A missing table fails Run at once, naming the table, the schema and the
// search_path (issue 13, item 9: it used to log "relation does not exist"
// every second), and says where a table of that name is.
func TestDispatcher_RunFailsAtStartWithoutTheTable(t *testing.T) {
	t.Parallel()
	b := setup(t)
	migrateRenamed(t, b, "hr_outbox", "hr")
	for _, tc := range []struct {
		cfg  dispatcher.Config
		want []string
	}{
		{dispatcher.Config{Table: "payroll_outbox"}, []string{"table payroll_outbox not found on the search_path (\"$user\", public): apply the pgoutbox migrations"}},
		{dispatcher.Config{Table: "hr_outbox"}, []string{"table hr_outbox not found on the search_path (\"$user\", public), but hr.hr_outbox exists: set the schema"}},
		{dispatcher.Config{Table: "outbox", Schema: "hr"}, []string{"table outbox not found in schema hr, but public.outbox exists: set the schema"}},
	} {
		d, err := dispatcher.New(b.pool, newRecorder(nil), fast(tc.cfg))
		if err != nil {
			t.Fatal(err)
		}
		err = d.Run(context.Background())
		if !errors.Is(err, dispatcher.ErrOutboxTable) {
			t.Fatalf("%+v: Run returned %v, want ErrOutboxTable", tc.cfg, err)
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%+v: error %q lacks %q", tc.cfg, err, w)
			}
		}
	}
}

// Missing columns (an older copy) are refused too.
func TestDispatcher_RunFailsAtStartOnAnIncompleteTable(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	if _, err := b.pool.Exec(ctx, "CREATE TABLE half_outbox (id bigint)"); err != nil {
		t.Fatal(err)
	}
	d, _ := dispatcher.New(b.pool, newRecorder(nil), fast(dispatcher.Config{Table: "half_outbox"}))
	err := d.Run(ctx)
	if !errors.Is(err, dispatcher.ErrOutboxTable) || !strings.Contains(err.Error(), "lacks the columns aggregate_type") {
		t.Errorf("Run: %v", err)
	}
}

// Without the attempt history table (migration 00011 not applied), every
// failure's write would fail: Run refuses to start and says what to apply.
func TestDispatcher_RunFailsAtStartWithoutTheAttemptHistory(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	if _, err := b.pool.Exec(ctx, "DROP TABLE outbox_attempts"); err != nil {
		t.Fatal(err)
	}
	d, _ := dispatcher.New(b.pool, newRecorder(nil), fast(dispatcher.Config{}))
	if err := d.Run(ctx); !errors.Is(err, dispatcher.ErrOutboxTable) || !strings.Contains(err.Error(), "has no attempt history table outbox_attempts beside it (migration 00011)") {
		t.Errorf("Run: %v", err)
	}
}

func TestConfig_TableAndSchemaValidated(t *testing.T) {
	t.Parallel()
	for _, c := range []dispatcher.Config{{Table: "user"}, {Table: "a;b"}, {Schema: "pg_catalog"}, {Schema: "Hr"}} {
		err := c.Validate()
		if !errors.Is(err, dispatcher.ErrInvalidConfig) {
			t.Errorf("%+v accepted", c)
		}
	}
	if err := (dispatcher.Config{Table: "hr_outbox", Schema: "hr"}).Validate(); err != nil {
		t.Error(err)
	}
}
