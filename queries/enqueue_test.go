package queries_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/pgoutbox/pgoutbox/db"
)

// Absent headers are stored as {}: nil (NULL) and an empty json.RawMessage
// (zero bytes) both used to fail, the first on the column's NOT NULL, the
// second as invalid json input (issue 13, item 6).
func TestEnqueueStoresEmptyObjectForAbsentHeaders(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	for _, tc := range []struct {
		name    string
		headers []byte
		want    string
	}{
		{"nil", nil, `{}`},
		{"empty RawMessage", json.RawMessage{}, `{}`},
		{"object", []byte(`{"k": "v"}`), `{"k": "v"}`},
	} {
		id, err := b.q.OutboxEnqueue(ctx, db.OutboxEnqueueParams{
			AggregateType: "order", AggregateID: "a", EventType: "E",
			Payload: []byte(`{}`), Headers: tc.headers,
		})
		if err != nil {
			t.Fatalf("%s headers: %v", tc.name, err)
		}
		var got string
		if err := b.pool.QueryRow(ctx, "SELECT headers::text FROM outbox WHERE id = $1", id).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got != tc.want {
			t.Errorf("%s headers stored as %s, want %s", tc.name, got, tc.want)
		}
	}
}

// Invalid headers are still refused (the bytea route does not weaken the
// jsonb input check).
func TestEnqueueRejectsInvalidHeaders(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, err := b.q.OutboxEnqueue(context.Background(), db.OutboxEnqueueParams{
		AggregateType: "order", AggregateID: "a", EventType: "E",
		Payload: []byte(`{}`), Headers: []byte(`{not json`),
	})
	if err == nil {
		t.Fatal("invalid headers accepted")
	}
}
