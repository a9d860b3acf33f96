package cli

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// A receiver that answers 503 costs no attempt: the relay logs at the
// default level that the breaker opened and, once the receiver is back,
// that it closed; every message is then delivered on its first counted
// attempt.
func TestRun_ReceiverUnavailableBurnsNoAttemptsAndTheBreakerSaysSo(t *testing.T) {
	t.Parallel()
	d := newDB(t)
	var status atomic.Int64
	status.Store(http.StatusServiceUnavailable)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(int(status.Load())) }))
	t.Cleanup(srv.Close)
	ids := d.enqueue(t, 20, "OrderPaid", "o-1", false)
	b := start(t, invocation{env: d.env()}, "run", "--publisher", "http", "--http-url", srv.URL+"/hook", "--poll-interval", "50ms",
		"--breaker-threshold", "3", "--breaker-probe", "20ms", "--breaker-probe-max", "50ms", "--max-attempts", "2")
	eventually(t, 30*time.Second, "the breaker open and the failures logged", func() bool {
		out := b.stderr.String()
		return strings.Contains(out, `level=WARN msg="the destination is unavailable: breaker open`) &&
			strings.Contains(out, `level=WARN msg="delivery failed: the destination is unavailable; attempt refunded"`) &&
			strings.Contains(out, "publisher=http event_type=OrderPaid")
	})
	if n := d.count(t, "status = 'dead' OR (status = 'pending' AND attempts > 0)"); n != 0 {
		t.Fatalf("%d messages dead or with an attempt spent while the receiver was down\n%s", n, b.stderr.String())
	}
	status.Store(http.StatusNoContent)
	eventually(t, 30*time.Second, "every message delivered", func() bool { return d.count(t, "status = 'done'") == len(ids) })
	r := b.stop(t)
	wantCode(t, r, ExitOK)
	mustContain(t, r, "stderr", "breaker closed")
	if n := d.count(t, "attempts <> 1"); n != 0 {
		t.Errorf("%d messages took more than their one counted attempt", n)
	}
}

// A publisher's error names the flag that fixes it, not the library's
// Config field: a subject no stream listens on says --nats-subject, in the
// message's last_error and in the log at the default level.
func TestRun_PublisherErrorsNameTheFlag(t *testing.T) {
	t.Parallel()
	d := newDB(t)
	id := d.enqueue(t, 1, "OrderPaid", "o-1", false)[0]
	suffix := make([]byte, 6)
	_, _ = rand.Read(suffix)
	subject := "pgoutbox.clitest.nostream." + hex.EncodeToString(suffix) + ".{{.EventType}}"
	b := start(t, invocation{env: d.env()}, "run", "--publisher", "nats", "--nats-subject", subject, "--poll-interval", "50ms")
	var lastError string
	eventually(t, 30*time.Second, "the failure recorded", func() bool {
		var e *string
		if err := d.pool.QueryRow(t.Context(), "SELECT last_error FROM outbox WHERE id = $1", id).Scan(&e); err != nil {
			t.Fatal(err)
		}
		if e != nil {
			lastError = *e
		}
		return e != nil
	})
	r := b.stop(t)
	wantCode(t, r, ExitOK)
	for where, text := range map[string]string{"last_error": lastError, "stderr": r.stderr} {
		if !strings.Contains(text, "fix --nats-subject") || strings.Contains(text, "Config.") {
			t.Errorf("%s: want the flag --nats-subject named, no Config field:\n%s", where, text)
		}
	}
	mustContain(t, r, "stderr", `level=WARN msg="delivery failed: the destination is unavailable; attempt refunded"`)
	mustContain(t, r, "stderr", fmt.Sprintf("publisher=nats event_type=OrderPaid outbox_id=%d", id))
}
