package console_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pgoutbox/pgoutbox/console"
	"github.com/pgoutbox/pgoutbox/dispatcher"
	"github.com/pgoutbox/pgoutbox/internal/pgtest"
	"github.com/pgoutbox/pgoutbox/internal/testlog"
	"github.com/pgoutbox/pgoutbox/publisher/webhook"
)

// failingReceiver answers POSTs with its answers in turn (the last one from
// then on) and keeps the Webhook-Id of each 2xx.
type failingReceiver struct {
	mu        sync.Mutex
	answers   [][2]any // status, body
	delivered []string
}

func (r *failingReceiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	r.mu.Lock()
	a := r.answers[0]
	if len(r.answers) > 1 {
		r.answers = r.answers[1:]
	}
	status := a[0].(int)
	if status/100 == 2 {
		r.delivered = append(r.delivered, req.Header.Get(webhook.HeaderID))
	}
	r.mu.Unlock()
	w.WriteHeader(status)
	_, _ = w.Write([]byte(a[1].(string)))
}

func (r *failingReceiver) set(answers ...[2]any) {
	r.mu.Lock()
	r.answers = answers
	r.mu.Unlock()
}

func (r *failingReceiver) deliveries() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.delivered...)
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// The message page shows a message's attempts as a timeline, written by a
// real relay against a receiver that answers 500, then 422: each failed
// attempt's time, the relay's claim, the error and what the receiver
// answered, newest first. A retry of the dead message keeps the timeline;
// "Deliver again" on the delivered message (through the confirmation, with
// the CSRF token) delivers it once more under the same idempotency key and
// adds an entry naming who asked.
func TestBrowser_AttemptTimelineFromARealRelay_AndDeliverAgain(t *testing.T) {
	u := pgtest.NewURL(t)
	pool := pgtest.Pool(t, u)
	rcv := &failingReceiver{answers: [][2]any{
		{http.StatusInternalServerError, "boom: receiver database locked"},
		{http.StatusUnprocessableEntity, `{"error":"amount must be positive"}`},
	}}
	hook := httptest.NewServer(rcv)
	t.Cleanup(hook.Close)
	pub, err := webhook.New(webhook.Config{URL: hook.URL + "/hook"})
	if err != nil {
		t.Fatal(err)
	}
	d, err := dispatcher.New(pool, pub, dispatcher.Config{Logger: testlog.New(t), Owner: "relay-a",
		PollInterval: 20 * time.Millisecond, BackoffBase: 20 * time.Millisecond, MaxAttempts: 5})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	go func() { stopped <- d.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-stopped })

	var id int64
	if err := pool.QueryRow(ctx, `INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
		VALUES ('order', 'o-42', 'OrderPaid', '{"order_id":42,"amount":-5}') RETURNING id`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	status := func() string {
		var st string
		if err := pool.QueryRow(ctx, `SELECT status FROM outbox WHERE id = $1`, id).Scan(&st); err != nil {
			t.Fatal(err)
		}
		return st
	}
	waitFor(t, "the message dead", func() bool { return status() == "dead" })

	s := serveOn(t, pool, console.Config{})
	b := browser(t)
	page := s.URL + "/messages/" + strconv.FormatInt(id, 10)
	navigate(t, b, page, "#timeline")
	if n := eval(t, b, `document.querySelectorAll('#timeline li').length`); n != 2 {
		t.Fatalf("timeline has %d entries, want 2:\n%s", n, text(t, b, "main"))
	}
	first, second := text(t, b, "#timeline li:nth-child(1)"), text(t, b, "#timeline li:nth-child(2)")
	mustContain(t, "newest entry", first, "dead", "attempt 2 by relay-a/", `receiver answered: HTTP 422 Unprocessable Entity: {"error":"amount must be positive"}`, "webhook: receiver answered 422")
	mustContain(t, "oldest entry", second, "retry", "attempt 1 by relay-a/", "receiver answered: HTTP 500 Internal Server Error: boom: receiver database locked")
	mustContain(t, "summary", text(t, b, "#history-summary"), "last 20 claims (2 in all)")
	mustContain(t, "claims", first+second, "claim 2", "claim 1")
	screenshot(t, b, "message-attempts")

	// Retry the dead message: delivered now, the timeline kept.
	rcv.set([2]any{http.StatusNoContent, ""})
	click(t, b, "#retry", "#confirm")
	click(t, b, "#confirm", "#result")
	waitFor(t, "the message delivered", func() bool { return status() == "done" })
	navigate(t, b, page, "#timeline")
	if n := eval(t, b, `document.querySelectorAll('#timeline li').length`); n != 2 {
		t.Errorf("timeline after the retry has %d entries, want 2 (kept)", n)
	}

	// Deliver it again: same id, same idempotency key, recorded.
	click(t, b, "#redeliver", "#confirm")
	mustContain(t, "confirmation", text(t, b, "#summary"), "Deliver again 1 selected message", "same idempotency key")
	click(t, b, "#confirm", "#result")
	mustContain(t, "result", text(t, b, "#result"), "Redelivered 1 message of 1 selected")
	waitFor(t, "the second delivery", func() bool { return len(rcv.deliveries()) == 2 })
	if got := rcv.deliveries(); got[0] != got[1] || !strings.HasSuffix(got[0], "-"+strconv.FormatInt(id, 10)) {
		t.Errorf("Webhook-Id of the two deliveries: %q, want the same key (ending in -%d) twice", got, id)
	}
	waitFor(t, "the message done again", func() bool { return status() == "done" })
	navigate(t, b, page, "#timeline")
	mustContain(t, "newest entry", text(t, b, "#timeline li:nth-child(1)"), "redeliver", "by console from 127.0.0.1:")
	mustContain(t, "action log", s.log.String(), "console: action", "action=redeliver", "changed=1", fmt.Sprintf("changed_ids=[%d]", id))
	if strings.Contains(text(t, b, "main"), "not delivered") {
		t.Error("result reports the message as not delivered")
	}
}
