package dispatcher_test

import (
	"context"
	"fmt"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgoutbox/pgoutbox/dispatcher"
)

// A DBA's settings for the relay's role in its database, ones that broke
// the recovery lane (REPEATABLE READ: deciding heads refused to run, and the
// lane stopped there every pass) or could cut its statements and
// transactions short: the relay sets what it needs on its own sessions. An
// ordered event of a REPEATABLE READ producer (decided by the relay, as
// every ordered event is), an unordered event and an expired lease are all
// delivered.
func TestSession_RoleSettingsOfTheDatabaseDoNotBreakTheRelay(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	role := fmt.Sprintf("relay_%d", time.Now().UnixNano())
	var dbName string
	if err := b.pool.QueryRow(ctx, "SELECT current_database()").Scan(&dbName); err != nil {
		t.Fatal(err)
	}
	for _, sql := range []string{
		"CREATE ROLE " + role + " LOGIN SUPERUSER",
		"ALTER ROLE " + role + " IN DATABASE " + dbName + " SET default_transaction_isolation = 'repeatable read'",
		"ALTER ROLE " + role + " IN DATABASE " + dbName + " SET statement_timeout = '150ms'",
		"ALTER ROLE " + role + " IN DATABASE " + dbName + " SET lock_timeout = '10ms'",
		"ALTER ROLE " + role + " IN DATABASE " + dbName + " SET idle_in_transaction_session_timeout = '5ms'",
	} {
		if _, err := b.pool.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	t.Cleanup(func() {
		_, _ = b.pool.Exec(context.Background(), "ALTER ROLE "+role+" IN DATABASE "+dbName+" RESET ALL")
		_, _ = b.pool.Exec(context.Background(), "DROP ROLE IF EXISTS "+role)
	})

	// A REPEATABLE READ producer: its ordered event's head is left for the
	// relay to decide, which needs READ COMMITTED.
	var ordered int64
	err := pgx.BeginTxFunc(ctx, b.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead}, func(tx pgx.Tx) error {
		var err error
		ordered, err = dispatcher.Enqueue(ctx, tx, dispatcher.Event{AggregateType: "a", AggregateID: "x", EventType: "E", Payload: []byte(`{}`), Ordered: true})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if n := b.count(t, "id = $1 AND seq IS NULL", ordered); n != 1 {
		t.Fatal("the REPEATABLE READ producer's event was decided at COMMIT")
	}
	unordered := b.enqueue(t, 1, "y", false)[0]
	var expired int64
	if err := b.pool.QueryRow(ctx, `INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload, status, lease_owner, lease_until, lease_version, attempts)
		VALUES ('a', 'z', 'E', '{}', 'processing', 'gone', now() - interval '1 minute', 1, 1) RETURNING id`).Scan(&expired); err != nil {
		t.Fatal(err)
	}

	u, err := url.Parse(b.url)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User(role)
	relay := &bundle{url: u.String(), pool: b.pool}
	rec := newRecorder(nil)
	relay.start(t, rec, fast(dispatcher.Config{}))
	waitFor(t, 30*time.Second, "the ordered, unordered and expired-lease events delivered", func() bool {
		return rec.count(ordered) == 1 && rec.count(unordered) == 1 && rec.count(expired) == 1
	})
}
