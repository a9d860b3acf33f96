package dispatcher_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/pgoutbox/pgoutbox/dispatcher"
)

// Delivery failures are logged at WARN, which the default level shows,
// with the message's id, attempt, error and next try; a receiver failing
// every message yields a line per event type, not one per failure.
func TestFailures_LoggedAtWarnPerEventTypeNotPerMessage(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	tx, err := b.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 100 {
		et := []string{"OrderPaid", "OrderShipped"}[i%2]
		if _, err := dispatcher.Enqueue(ctx, tx, dispatcher.Event{AggregateType: "order", AggregateID: "a", EventType: et, Payload: []byte(`{}`)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	rc := newReceiver(t, http.StatusInternalServerError)
	d, _ := b.start(t, rc.publisher(t), fast(dispatcher.Config{MaxAttempts: 1 << 20,
		Logger: slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))}))
	waitFor(t, 60*time.Second, "500 failures", func() bool { return d.Stats().Retried >= 500 })
	lines := map[string]int{}
	for line := range strings.SplitSeq(logs.String(), "\n") {
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) != nil || rec["msg"] != "delivery failed; retrying" {
			continue
		}
		et, _ := rec["event_type"].(string)
		lines[et]++
		if rec["level"] != "WARN" || rec["outbox_id"] == nil || rec["attempt"] == nil || rec["next_try_in"] == nil ||
			rec["publisher"] != "http" || !strings.Contains(rec["error"].(string), "500 Internal Server Error") {
			t.Errorf("failure line %s: want WARN with publisher, outbox_id, attempt, error and next_try_in", line)
		}
	}
	// The test runs for less than a few intervals: a line or a few per
	// event type, against hundreds of failures each.
	for _, et := range []string{"OrderPaid", "OrderShipped"} {
		if lines[et] < 1 || lines[et] > 10 {
			t.Errorf("%d failure lines for %s after %d failures, want a few", lines[et], et, d.Stats().Retried)
		}
	}
}
