package cli

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// answeringReceiver answers each POST with the next of its answers (the last
// one from then on) and records the idempotency key of every 2xx.
type answeringReceiver struct {
	mu        sync.Mutex
	answers   []hookAnswer
	delivered []string // Webhook-Id of each 2xx
	requests  atomic.Int64
}

type hookAnswer struct {
	status int
	body   string
}

func newAnsweringReceiver(t *testing.T, answers ...hookAnswer) (*answeringReceiver, *httptest.Server) {
	h := &answeringReceiver{answers: answers}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.requests.Add(1)
		h.mu.Lock()
		a := h.answers[0]
		if len(h.answers) > 1 {
			h.answers = h.answers[1:]
		}
		if a.status/100 == 2 {
			h.delivered = append(h.delivered, r.Header.Get("Webhook-Id"))
		}
		h.mu.Unlock()
		w.WriteHeader(a.status)
		_, _ = w.Write([]byte(a.body))
	}))
	t.Cleanup(srv.Close)
	return h, srv
}

func (h *answeringReceiver) setAnswers(a ...hookAnswer) {
	h.mu.Lock()
	h.answers = a
	h.mu.Unlock()
}

func (h *answeringReceiver) deliveries() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.delivered...)
}

// A real relay against a receiver that answers 500, then 422: `dead show`
// lists both failed attempts with the relay's claim, the error and what the
// receiver answered; `dead retry` keeps the history; `redeliver` delivers
// the delivered message again under the same idempotency key and records
// who asked.
func TestDeadShow_AttemptHistoryOfARealRelay_RetryKeepsIt_RedeliverSameKey(t *testing.T) {
	t.Parallel()
	d := newDB(t)
	rcv, srv := newAnsweringReceiver(t,
		hookAnswer{http.StatusInternalServerError, "boom: database of the receiver is locked"},
		hookAnswer{http.StatusUnprocessableEntity, `{"error":"amount must be positive"}`})
	id := d.enqueue(t, 1, "OrderPaid", "o-1", false)[0]
	b := start(t, invocation{env: d.env()}, "run", "--publisher", "http", "--http-url", srv.URL+"/hook", "--poll-interval", "50ms",
		"--owner", "relay-a", "--max-attempts", "5")
	eventually(t, 60*time.Second, "the message dead", func() bool { return d.status(t, id) == "dead" })

	r := call(t, invocation{env: d.env()}, "dead", "show", fmt.Sprint(id))
	wantCode(t, r, ExitOK)
	mustContain(t, r, "stdout", "status:     dead, attempts 2 (claims in all: 2)")
	mustContain(t, r, "stdout", "RECEIVER ANSWERED")
	mustContain(t, r, "stdout", `HTTP 422 Unprocessable Entity: {"error":"amount must be positive"}`)
	mustContain(t, r, "stdout", "HTTP 500 Internal Server Error: boom: database of the receiver is locked")
	mustContain(t, r, "stdout", "relay-a/")
	lines := strings.Split(r.stdout, "\n")
	var rows []string
	for _, l := range lines {
		if strings.HasPrefix(l, "1 ") || strings.HasPrefix(l, "2 ") {
			rows = append(rows, l)
		}
	}
	if len(rows) != 2 || !strings.Contains(rows[0], " dead ") || !strings.Contains(rows[1], " retry ") {
		t.Fatalf("history rows, newest first: want 2 dead, 1 retry:\n%s", r.stdout)
	}

	// JSON: the same entries, whole.
	r = call(t, invocation{env: d.env()}, "dead", "show", fmt.Sprint(id), "--json")
	wantCode(t, r, ExitOK)
	var shown showJSON
	if err := json.Unmarshal([]byte(r.stdout), &shown); err != nil {
		t.Fatalf("%v: %s", err, r.stdout)
	}
	if len(shown.History) != 2 || shown.History[0].Kind != "dead" || shown.History[0].Attempt != 2 ||
		!strings.HasPrefix(*shown.History[0].Actor, "relay-a/") || !strings.Contains(*shown.History[0].Error, "422") ||
		shown.History[1].Kind != "retry" || shown.History[1].Attempt != 1 {
		t.Fatalf("history: %s", r.stdout)
	}

	// A redrive resets attempts, not the history.
	rcv.setAnswers(hookAnswer{http.StatusNoContent, ""})
	r = call(t, invocation{env: d.env()}, "dead", "retry", fmt.Sprint(id))
	wantCode(t, r, ExitOK)
	eventually(t, 30*time.Second, "the message delivered", func() bool { return d.status(t, id) == "done" })
	r = call(t, invocation{env: d.env()}, "dead", "show", fmt.Sprint(id))
	wantCode(t, r, ExitOK)
	mustContain(t, r, "stdout", "status:     done, attempts 1 (claims in all: 3)")

	// Delivered again on request: same id, same idempotency key, recorded.
	r = call(t, invocation{env: d.env()}, "redeliver", fmt.Sprint(id))
	wantCode(t, r, ExitFailure)
	mustContain(t, r, "stderr", "refusing to redeliver 1 message without confirmation: stdin is not a terminal; pass --yes to confirm")
	r = call(t, invocation{env: d.env()}, "redeliver", fmt.Sprint(id), "--yes")
	wantCode(t, r, ExitOK)
	mustContain(t, r, "stdout", fmt.Sprintf("redelivered 1 of 1 message: %d (same ids, so the same idempotency keys; recorded as by cli ", id))
	eventually(t, 30*time.Second, "the message delivered again", func() bool { return len(rcv.deliveries()) == 2 })
	if got := rcv.deliveries(); got[0] != got[1] || got[0] == "" {
		t.Errorf("idempotency keys of the two deliveries: %q, want the same", got)
	}
	eventually(t, 30*time.Second, "the message done again", func() bool { return d.status(t, id) == "done" })
	r = call(t, invocation{env: d.env()}, "dead", "show", fmt.Sprint(id))
	wantCode(t, r, ExitOK)
	mustContain(t, r, "stdout", "(claims in all: 4)")
	if n := strings.Count(r.stdout, "\n3 "); n != 1 || !strings.Contains(r.stdout, " redeliver ") {
		t.Errorf("want the redelivery recorded as claim 3's entry:\n%s", r.stdout)
	}
	b.stop(t)
}

// redeliver refuses what it cannot deliver again, and says why: an
// ordered message (its aggregate moved on), one not delivered, a missing
// id; each exits 1 and changes nothing.
func TestRedeliver_RefusesOrderedUndeliveredAndMissing(t *testing.T) {
	t.Parallel()
	d := newDB(t)
	done := d.enqueue(t, 1, "OrderPaid", "o-1", false)[0]
	ordered := d.enqueue(t, 1, "OrderPaid", "o-2", true)[0]
	pending := d.enqueue(t, 1, "OrderPaid", "o-3", false)[0]
	dead := d.enqueue(t, 1, "OrderPaid", "o-4", false)[0]
	d.exec(t, "UPDATE outbox SET status = 'done', done_at = now() WHERE id = ANY($1)", []int64{done, ordered})
	d.kill(t, dead)

	r := call(t, invocation{env: d.env()}, "redeliver", "--yes", fmt.Sprint(ordered), fmt.Sprint(pending), fmt.Sprint(dead), "999999")
	wantCode(t, r, ExitFailure)
	mustContain(t, r, "stdout", "redelivered 0 of 4 messages\n")
	mustContain(t, r, "stdout", fmt.Sprintf("refused, ordered (redelivering would deliver it after later events of its aggregate; unchanged): %d\n", ordered))
	mustContain(t, r, "stdout", fmt.Sprintf("not delivered, dead (only done messages are redelivered; unchanged): %d\n", dead))
	mustContain(t, r, "stdout", fmt.Sprintf("not delivered, pending (only done messages are redelivered; unchanged): %d\n", pending))
	mustContain(t, r, "stdout", "no such message (never existed, or purged): 999999\n")
	if st := d.status(t, ordered); st != "done" {
		t.Errorf("ordered message: %s, want done", st)
	}

	r = call(t, invocation{env: d.env()}, "redeliver", "--yes", fmt.Sprint(done))
	wantCode(t, r, ExitOK)
	if st := d.status(t, done); st != "pending" {
		t.Errorf("redelivered message: %s, want pending", st)
	}

	r = call(t, invocation{env: d.env()}, "redeliver")
	wantCode(t, r, ExitUsage)
	mustContain(t, r, "stderr", "no ids given")
	r = call(t, invocation{env: d.env()}, "redeliver", "x1")
	wantCode(t, r, ExitUsage)
	mustContain(t, r, "stderr", `invalid id "x1"`)
}

// dead show: a message without failures says so; a missing id and a
// missing argument are reported.
func TestDeadShow_NoHistoryMissingIDAndUsage(t *testing.T) {
	t.Parallel()
	d := newDB(t)
	id := d.enqueue(t, 1, "OrderPaid", "o-1", false)[0]
	r := call(t, invocation{env: d.env()}, "dead", "show", fmt.Sprint(id))
	wantCode(t, r, ExitOK)
	mustContain(t, r, "stdout", "status:     pending, attempts 0 (claims in all: 0)\n")
	mustContain(t, r, "stdout", "no attempt history: no publish of this message has failed")
	r = call(t, invocation{env: d.env()}, "dead", "show", "999999")
	wantCode(t, r, ExitFailure)
	mustContain(t, r, "stderr", "dead show: no message 999999 (never existed, or purged)")
	r = call(t, invocation{env: d.env()}, "dead", "show")
	wantCode(t, r, ExitUsage)
	mustContain(t, r, "stderr", "no id given")
}

// purge deletes dead and skipped messages only when --status names them,
// by when they died, and their history with them; the default is done only.
func TestPurge_DeadAndSkippedOnlyWhenNamed(t *testing.T) {
	t.Parallel()
	d := newDB(t)
	oldDone := d.enqueue(t, 2, "OrderPaid", "o-1", false)
	oldDead := d.enqueue(t, 3, "OrderPaid", "o-2", false)
	recentDead := d.enqueue(t, 1, "OrderPaid", "o-3", false)
	skipped := d.enqueue(t, 2, "OrderPaid", "o-4", false)
	d.kill(t, skipped...)
	wantCode(t, call(t, invocation{env: d.env()}, "dead", "skip", "--reason", "replayed by hand", fmt.Sprint(skipped[0]), fmt.Sprint(skipped[1])), ExitOK)
	// One was skipped long ago (done_at: when), one just now.
	d.exec(t, "UPDATE outbox SET done_at = now() - interval '9 days' WHERE id = $1", skipped[0])
	d.exec(t, "UPDATE outbox SET status = 'done', done_at = now() - interval '8 days' WHERE id = ANY($1)", oldDone)
	d.kill(t, append(oldDead, recentDead...)...)
	d.exec(t, "UPDATE outbox SET created_at = now() - interval '30 days' WHERE id = ANY($1)", append(oldDead, recentDead...))
	// recentDead died yesterday: its history says so, whatever its age.
	d.exec(t, "INSERT INTO outbox_attempts (message_id, slot, n, at, kind, attempt) VALUES ($1, 0, 1, now() - interval '1 day', 'dead', 1), ($2, 0, 1, now() - interval '20 days', 'dead', 1)",
		recentDead[0], oldDead[0])

	r := call(t, invocation{env: d.env()}, "purge", "--older-than", "7d")
	wantCode(t, r, ExitOK)
	mustContain(t, r, "stdout", "deleted 2 done messages older than 7d\n")
	if n := d.count(t, "status IN ('dead', 'skipped')"); n != 6 {
		t.Fatalf("%d dead or skipped left after the default purge, want 6", n)
	}

	r = call(t, invocation{env: d.env()}, "purge", "--older-than", "7d", "--status", "dead,skipped", "--batch", "2")
	wantCode(t, r, ExitOK)
	mustContain(t, r, "stderr", "purge: deleted 2 (total 2)\npurge: deleted 2 (total 4)\n")
	mustContain(t, r, "stdout", "deleted 4 dead and skipped messages older than 7d\n")
	if n := d.count(t, "true"); n != 2 {
		t.Errorf("%d rows left, want 2 (the message that died yesterday, the one skipped just now)", n)
	}
	if st := d.status(t, skipped[1]); st != "skipped" {
		t.Errorf("the recent skip: %s, want skipped (kept)", st)
	}
	var h int
	if err := d.pool.QueryRow(t.Context(), "SELECT count(*) FROM outbox_attempts WHERE message_id <> $1", recentDead[0]).Scan(&h); err != nil || h != 0 {
		t.Errorf("history of purged messages: %d rows (%v), want 0", h, err)
	}

	r = call(t, invocation{env: d.env()}, "purge", "--older-than", "7d", "--status", "dead,pending")
	wantCode(t, r, ExitUsage)
	mustContain(t, r, "stderr", `invalid --status "pending"`)
}
