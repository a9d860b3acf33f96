package inboxtest

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/pgoutbox/dispatcher"
)

// Source is the CloudEvents source of the events Chain builds.
const Source = "urn:pgoutbox:test"

// Chain returns n ordered events of aggregate agg as the dispatcher hands
// them to a publisher: ids firstID, firstID+1, ...; positions 10 apart
// (positions of one aggregate are not consecutive), each naming the
// previous one.
func Chain(agg string, firstID int64, n int) []dispatcher.Message {
	msgs := make([]dispatcher.Message, n)
	var prev int64
	for i := range msgs {
		id := firstID + int64(i)
		seq := id * 10
		msgs[i] = dispatcher.Message{ID: dispatcher.IDString(id), OutboxID: id, Source: Source,
			AggregateType: "order", AggregateID: agg, EventType: "OrderChanged",
			Payload: []byte(fmt.Sprintf(`{"n":%d}`, id)), Headers: map[string]string{"tenant": "t1"},
			Attempt: 1, CreatedAt: time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC), Ordered: true,
			Position: dispatcher.Position{Seq: seq, Prev: prev}}
		prev = seq
	}
	return msgs
}

// CheckOnceInOrder fails t unless effects holds every message of msgs
// exactly once and nothing else, and the events of each aggregate in
// position order.
func CheckOnceInOrder(t testing.TB, pool *pgxpool.Pool, msgs []dispatcher.Message) {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT id, aggregate_id, seq FROM effects ORDER BY n`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	want := map[string]dispatcher.Message{}
	for _, m := range msgs {
		want[m.ID] = m
	}
	seen := map[string]int{}
	last := map[string]int64{}
	for rows.Next() {
		var id, agg string
		var seq int64
		if err := rows.Scan(&id, &agg, &seq); err != nil {
			t.Fatal(err)
		}
		seen[id]++
		if seen[id] > 1 {
			t.Errorf("event %s processed %d times", id, seen[id])
		}
		m, ok := want[id]
		if !ok {
			t.Errorf("event %s processed but never sent", id)
			continue
		}
		if m.Position.Seq != 0 {
			if seq <= last[agg] {
				t.Errorf("aggregate %s: event %s (position %d) processed after position %d", agg, id, seq, last[agg])
			}
			last[agg] = seq
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	for id := range want {
		if seen[id] == 0 {
			t.Errorf("event %s never processed", id)
		}
	}
}

// WaitCount waits until the count query returns at least n, failing after
// timeout.
func WaitCount(t testing.TB, pool *pgxpool.Pool, n int64, timeout time.Duration, sql string, args ...any) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		got := Count(t, pool, sql, args...)
		if got >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %s: %s = %d, want %d", timeout, sql, got, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Unordered returns n unordered events with ids from firstID.
func Unordered(firstID int64, n int) []dispatcher.Message {
	msgs := make([]dispatcher.Message, n)
	for i := range msgs {
		id := firstID + int64(i)
		msgs[i] = dispatcher.Message{ID: dispatcher.IDString(id), OutboxID: id, Source: Source,
			AggregateType: "order", AggregateID: "u-" + strconv.FormatInt(id, 10), EventType: "OrderNoted",
			Payload: []byte(`{}`), Headers: map[string]string{}, Attempt: 1,
			CreatedAt: time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)}
	}
	return msgs
}

// Publish publishes msgs with p, in order, failing t on the first error.
func Publish(t testing.TB, p dispatcher.Publisher, msgs []dispatcher.Message) {
	t.Helper()
	for _, m := range msgs {
		if err := p.Publish(context.Background(), m); err != nil {
			t.Fatalf("publish %s: %v", m.ID, err)
		}
	}
}
