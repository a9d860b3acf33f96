package dispatcher_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pgoutbox/pgoutbox/publisher/webhook"
)

// receiver is a real HTTP receiver whose answer the test sets (an HTTP
// status; 204 delivers).
type receiver struct {
	srv      *httptest.Server
	status   atomic.Int64
	requests atomic.Int64
	answer   func(body []byte) int // when set, decides per request from its body (the payload)
	handle   func(r *http.Request) // when set, sees every request before it is answered
}

func newReceiver(t *testing.T, status int) *receiver {
	t.Helper()
	rc := &receiver{}
	rc.status.Store(int64(status))
	rc.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc.requests.Add(1)
		body, _ := io.ReadAll(r.Body)
		if rc.handle != nil {
			rc.handle(r)
		}
		code := int(rc.status.Load())
		if rc.answer != nil {
			code = rc.answer(body)
		}
		w.WriteHeader(code)
	}))
	t.Cleanup(rc.srv.Close)
	return rc
}

// publisher returns a webhook publisher posting to the receiver.
func (rc *receiver) publisher(t *testing.T) *webhook.Publisher {
	t.Helper()
	p, err := webhook.New(webhook.Config{URL: rc.srv.URL, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}
