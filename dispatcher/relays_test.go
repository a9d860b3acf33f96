package dispatcher_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/pgoutbox/pgoutbox/dispatcher"
)

// Each relay records itself in outbox_relays (named after the table, in its
// schema): two dispatchers, two rows keyed by their owner prefixes, with
// what they hold and when they last claimed and finalized; a stopped relay's
// row says so, and the default source names the table schema-qualified
// whether Schema was given or not.
func TestRelays_EachDispatcherWritesItsRowAndMarksItStopped(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	migrateRenamed(t, b, "billing_outbox", "hr")
	pub := dispatcher.PublisherFunc(func(context.Context, dispatcher.Message) error { return nil })
	cfg := fast(dispatcher.Config{Table: "billing_outbox", Schema: "hr", RelayInterval: 50 * time.Millisecond})
	cfg.Owner = "relay-a"
	da, stopA := b.start(t, pub, cfg)
	cfg.Owner = "relay-b"
	db, _ := b.start(t, pub, cfg)

	q, err := dispatcher.TableDBTX(b.pool, "billing_outbox", "hr")
	if err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		if _, err := dispatcher.Enqueue(ctx, q, dispatcher.Event{AggregateType: "a", AggregateID: fmt.Sprint(i), EventType: "E", Payload: []byte(`{}`)}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 30*time.Second, "every message done and both relays' rows with a finalize", func() bool {
		return sqlCount(t, b, "SELECT count(*) FROM hr.billing_outbox WHERE status <> 'done'") == 0 &&
			sqlCount(t, b, "SELECT count(*) FROM hr.billing_outbox_relays WHERE stopped_at IS NULL AND heartbeat_at > now() - interval '10 seconds'") == 2 &&
			sqlCount(t, b, "SELECT count(*) FROM hr.billing_outbox_relays WHERE last_finalize_at IS NOT NULL") >= 1
	})
	for _, d := range []*dispatcher.Dispatcher{da, db} {
		if n := sqlCount(t, b, "SELECT count(*) FROM hr.billing_outbox_relays WHERE owner_prefix = $1 AND owner = $2 AND host <> '' AND pid > 0 AND version <> ''",
			d.OwnerPrefix(), d.Owner()); n != 1 {
			t.Errorf("relay %s: %d rows with its prefix, owner, host, pid and version, want 1", d.OwnerPrefix(), n)
		}
		if want := "/hr.billing_outbox"; len(d.Source()) < len(want) || d.Source()[len(d.Source())-len(want):] != want {
			t.Errorf("source %q, want it to end in %q", d.Source(), want)
		}
	}
	stopA()
	if n := sqlCount(t, b, "SELECT count(*) FROM hr.billing_outbox_relays WHERE owner_prefix = $1 AND stopped_at IS NOT NULL AND in_flight = 0", da.OwnerPrefix()); n != 1 {
		t.Errorf("stopped relay: %d rows marked stopped, want 1", n)
	}
	if n := sqlCount(t, b, "SELECT count(*) FROM hr.billing_outbox_relays WHERE stopped_at IS NULL"); n != 1 {
		t.Errorf("%d relays running, want 1", n)
	}
}

// The default source is the table as the database resolves it: a
// dispatcher without Schema and one with Schema "public" publish under one
// source, ".../public.outbox".
func TestSource_SameWithAndWithoutSchemaPublic(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pub := dispatcher.PublisherFunc(func(context.Context, dispatcher.Message) error { return nil })
	var sources []string
	for _, schema := range []string{"", "public"} {
		d, stop := b.start(t, pub, fast(dispatcher.Config{Schema: schema}))
		waitIdleAndListening(t, d)
		sources = append(sources, d.Source())
		stop()
	}
	if sources[0] != sources[1] || len(sources[0]) < len("/public.outbox") || sources[0][len(sources[0])-len("/public.outbox"):] != "/public.outbox" {
		t.Errorf("sources %q, want one source ending in /public.outbox", sources)
	}
}

func sqlCount(t *testing.T, b *bundle, query string, args ...any) int {
	t.Helper()
	var n int
	if err := b.pool.QueryRow(context.Background(), query, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}
