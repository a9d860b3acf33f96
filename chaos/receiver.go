package main

import (
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/pgoutbox/pgoutbox/publisher/cloudevents"
	"github.com/pgoutbox/pgoutbox/publisher/webhook"
)

// receiver is the downstream HTTP endpoint. Each relay posts to its own path
// (/r/relay-N), so every arrival is attributed to a relay. It answers by the
// event's fate (header x-chaos-fate) and the number of arrivals so far.
type receiver struct {
	secret string
	lease  time.Duration
	fleet  *fleet

	mu         sync.Mutex
	deliveries []Delivery
	arrivals   map[int64]int
	slow       int // answers held longer than the lease
	badSig     int
	poisonKill int
}

func newReceiver(secret string, lease time.Duration, f *fleet) *receiver {
	return &receiver{secret: secret, lease: lease, fleet: f, arrivals: map[int64]int{}}
}

func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	at := time.Now()
	relay := strings.TrimPrefix(req.URL.Path, "/r/")
	body, _ := io.ReadAll(io.LimitReader(req.Body, 1<<20))
	id, err := strconv.ParseInt(req.Header.Get("ce-id"), 10, 64)
	if err != nil {
		http.Error(w, "no ce-id", http.StatusBadRequest)
		return
	}
	if req.Header.Get(webhook.HeaderIdempotencyKey) != cloudevents.IdempotencyKey(req.Header.Get("ce-source"), req.Header.Get("ce-id")) {
		http.Error(w, "Idempotency-Key is not the key of ce-source and ce-id", http.StatusBadRequest)
		return
	}
	fate := req.Header.Get("X-Chaos-Fate")
	tx := req.Header.Get("X-Chaos-Tx")
	d := Delivery{ID: id, Relay: relay, At: at, Tx: tx}

	if webhook.Verify(r.secret, req.Header, body, time.Now(), 0) != nil {
		r.mu.Lock()
		r.badSig++
		d.Status = http.StatusUnauthorized
		r.deliveries = append(r.deliveries, d)
		r.mu.Unlock()
		http.Error(w, "bad signature", http.StatusUnauthorized)
		return
	}

	r.mu.Lock()
	r.arrivals[id]++
	n := r.arrivals[id]
	status, retryAfter, slow := answer(fate, n)
	if fate == FatePoison {
		r.poisonKill++
		d.Status = 0
		r.deliveries = append(r.deliveries, d)
		r.mu.Unlock()
		// The poison message kills whichever relay delivers it, before it
		// can answer or finalize anything.
		r.fleet.kill(relay, "poison-kill", 0)
		panic(http.ErrAbortHandler)
	}
	if slow {
		r.slow++
	}
	d.Status = status
	r.deliveries = append(r.deliveries, d)
	r.mu.Unlock()

	if slow {
		time.Sleep(r.lease + r.lease/4)
	}
	if retryAfter {
		w.Header().Set("Retry-After", "1")
	}
	if status >= 400 && id%2 == 0 {
		// Half of the failures answer like a legacy server: a Latin-1 error
		// page with a NUL in it. The relay keeps the start of the body in
		// last_error, which must be made valid text (never wedge a worker).
		w.Header().Set("Content-Type", "text/html; charset=iso-8859-1")
		w.WriteHeader(status)
		_, _ = w.Write(latin1Body)
		return
	}
	w.WriteHeader(status)
}

// latin1Body is "Requête refusée: réessayez plus tard" in ISO-8859-1, with
// a NUL byte.
var latin1Body = []byte("<html>Requ\xeate refus\xe9e\x00: r\xe9essayez plus tard</html>")

// answer is the receiver's answer to the n-th arrival of an event with fate.
func answer(fate string, n int) (status int, retryAfter, slow bool) {
	switch fate {
	case Fate503:
		if n <= 1 {
			return http.StatusServiceUnavailable, false, false
		}
	case Fate503x2:
		if n <= 2 {
			return http.StatusServiceUnavailable, false, false
		}
	case Fate429:
		if n <= 1 {
			return http.StatusTooManyRequests, true, false
		}
	case FateDefer:
		if n <= 1 {
			return http.StatusTooEarly, true, false
		}
	case FateSlow:
		if n <= 1 {
			// Held past the lease; the relay's publish timeout (shorter
			// than the lease) fires first, so this is a retryable timeout.
			return http.StatusServiceUnavailable, false, true
		}
	case FatePerm:
		return http.StatusUnprocessableEntity, false, false
	case FateExhaust:
		// 500, not 503: a failure of this message (503 says the receiver
		// is unavailable, which costs no attempt while nothing gets through).
		return http.StatusInternalServerError, false, false
	}
	return http.StatusOK, false, false
}

func (r *receiver) snapshot() (ds []Delivery, slow, badSig, poison int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Delivery(nil), r.deliveries...), r.slow, r.badSig, r.poisonKill
}
