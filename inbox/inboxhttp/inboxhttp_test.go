package inboxhttp_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/pgoutbox/db/opsdb"
	"github.com/pgoutbox/pgoutbox/dispatcher"
	"github.com/pgoutbox/pgoutbox/inbox"
	"github.com/pgoutbox/pgoutbox/inbox/inboxhttp"
	"github.com/pgoutbox/pgoutbox/internal/inboxtest"
	"github.com/pgoutbox/pgoutbox/internal/pgtest"
	"github.com/pgoutbox/pgoutbox/internal/testlog"
	"github.com/pgoutbox/pgoutbox/publisher/webhook"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

func newHandler(t *testing.T, ib *inbox.Inbox) *inboxhttp.Handler {
	t.Helper()
	h, err := inboxhttp.New(inboxhttp.Config{Inbox: ib, Secret: secret, Logger: testlog.New(t)})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func newPublisher(t *testing.T, url string) *webhook.Publisher {
	t.Helper()
	p, err := webhook.New(webhook.Config{URL: url, Secret: secret})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// The webhook publisher's requests verify and carry the position: an
// early event is parked, its predecessor processes both, a repeat is a
// duplicate; every answer is 2xx, so the outbox counts each delivered.
func TestHandler_PublisherRequestsProcessedOnceInOrder(t *testing.T) {
	t.Parallel()
	pool := inboxtest.NewPool(t)
	ib := inboxtest.NewInbox(t, inbox.Config{DB: pool, Handler: inboxtest.Effect})
	srv := httptest.NewServer(newHandler(t, ib))
	defer srv.Close()
	p := newPublisher(t, srv.URL)
	msgs := inboxtest.Chain("o-1", 1, 3)
	for _, m := range []dispatcher.Message{msgs[0], msgs[2], msgs[1], msgs[2], msgs[0]} {
		if err := p.Publish(context.Background(), m); err != nil {
			t.Fatalf("Publish %s: %v", m.ID, err)
		}
	}
	inboxtest.CheckOnceInOrder(t, pool, msgs)
	if s := ib.Stats(); s.Parked != 1 || s.Released != 1 || s.Duplicates != 2 {
		t.Fatalf("stats %+v", s)
	}
}

func TestHandler_RejectsWhatItCannotTrust(t *testing.T) {
	t.Parallel()
	pool := inboxtest.NewPool(t)
	boom := errors.New("downstream unavailable")
	ib := inboxtest.NewInbox(t, inbox.Config{DB: pool, Handler: func(ctx context.Context, tx pgx.Tx, d inbox.Delivery) error {
		if d.ID == "13" {
			return boom
		}
		return inboxtest.Effect(ctx, tx, d)
	}})
	h := newHandler(t, ib)
	// Capture what the publisher sends, to replay it altered.
	var mu sync.Mutex
	var sent []*http.Request
	var bodies [][]byte
	capture := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b := new(bytes.Buffer)
		_, _ = b.ReadFrom(r.Body)
		mu.Lock()
		sent, bodies = append(sent, r.Clone(context.Background())), append(bodies, b.Bytes())
		mu.Unlock()
	}))
	defer capture.Close()
	p := newPublisher(t, capture.URL)
	for _, m := range append(inboxtest.Unordered(11, 1), inboxtest.Unordered(13, 1)...) {
		if err := p.Publish(context.Background(), m); err != nil {
			t.Fatal(err)
		}
	}
	serve := func(method string, header http.Header, body []byte) int {
		r := httptest.NewRequest(method, "/", bytes.NewReader(body))
		r.Header = header.Clone()
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code
	}
	good := sent[0].Header
	tampered := good.Clone()
	tampered.Set("Ce-Type", "Refunded")
	badID := good.Clone()
	badID.Set("Ce-Pgoutboxseq", "x") // not signed, but not a position either
	for _, tc := range []struct {
		name   string
		method string
		header http.Header
		body   []byte
		want   int
	}{
		{"get", http.MethodGet, good, bodies[0], http.StatusMethodNotAllowed},
		{"body altered", http.MethodPost, good, []byte(`{"n":999}`), http.StatusUnauthorized},
		{"ce-type altered", http.MethodPost, tampered, bodies[0], http.StatusUnauthorized},
		{"unsigned", http.MethodPost, http.Header{"Ce-Id": {"11"}, "Ce-Source": {"s"}}, bodies[0], http.StatusUnauthorized},
		{"too large", http.MethodPost, good, bytes.Repeat([]byte(" "), inboxhttp.MaxBodyDefault+1), http.StatusRequestEntityTooLarge},
		{"position unreadable", http.MethodPost, badID, bodies[0], http.StatusBadRequest},
		{"handler fails", http.MethodPost, sent[1].Header, bodies[1], http.StatusInternalServerError},
		{"good", http.MethodPost, good, bodies[0], http.StatusOK},
		{"good again", http.MethodPost, good, bodies[0], http.StatusOK},
	} {
		if got := serve(tc.method, tc.header, tc.body); got != tc.want {
			t.Errorf("%s: status %d, want %d", tc.name, got, tc.want)
		}
	}
	if got := inboxtest.Effects(t, pool); len(got) != 1 || got[0] != "11" {
		t.Fatalf("effects %v", got)
	}
	if _, err := inboxhttp.New(inboxhttp.Config{Inbox: ib}); err == nil || !strings.Contains(err.Error(), "Config.Secret is required") {
		t.Fatalf("New without a secret: %v", err)
	}
	if _, err := inboxhttp.New(inboxhttp.Config{Inbox: ib, Secret: "whsec_!!"}); err == nil || !strings.Contains(err.Error(), "Config.Secret") {
		t.Fatalf("New with a malformed secret: %v", err)
	}
}

// outbox returns a fresh outbox database holding n unordered events.
func outbox(t *testing.T, n int) *pgxpool.Pool {
	t.Helper()
	pool := pgtest.NewPool(t)
	for i := range n {
		if _, err := dispatcher.Enqueue(context.Background(), pool, dispatcher.Event{AggregateType: "order", AggregateID: "o-1",
			EventType: "OrderPaid", Payload: json.RawMessage(fmt.Sprintf(`{"i":%d}`, i))}); err != nil {
			t.Fatal(err)
		}
	}
	return pool
}

// runDispatcher runs a dispatcher over pool with publisher p until the test
// ends.
func runDispatcher(t *testing.T, pool *pgxpool.Pool, p dispatcher.Publisher) *dispatcher.Dispatcher {
	t.Helper()
	d, err := dispatcher.New(pool, p, dispatcher.Config{Logger: testlog.New(t), Lease: time.Second, PublishTimeout: 500 * time.Millisecond,
		ReapInterval: 50 * time.Millisecond, PollInterval: 20 * time.Millisecond, BackoffBase: 10 * time.Millisecond, BackoffCap: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	inboxtest.Go(t, d.Run)
	return d
}

// Duplicates from a takeover: relay A publishes event 1 and then hangs
// before it can record the delivery; its lease expires and relay B
// publishes the event again. The consumer processes it once.
func TestHandler_DuplicateFromALeaseTakeoverIsProcessedOnce(t *testing.T) {
	t.Parallel()
	consumerDB := inboxtest.NewPool(t)
	ib := inboxtest.NewInbox(t, inbox.Config{DB: consumerDB, Handler: inboxtest.Effect})
	srv := httptest.NewServer(newHandler(t, ib))
	defer srv.Close()
	p := newPublisher(t, srv.URL)
	outboxDB := outbox(t, 1)

	published, unblock := make(chan struct{}), make(chan struct{})
	var once sync.Once
	hang := dispatcher.PublisherFunc(func(ctx context.Context, m dispatcher.Message) error {
		if err := p.Publish(ctx, m); err != nil {
			return err
		}
		once.Do(func() { close(published) })
		<-unblock // hangs past its lease, whatever its context says
		return nil
	})
	defer close(unblock)
	runDispatcher(t, outboxDB, hang)
	<-published
	b := runDispatcher(t, outboxDB, p)
	deadline := time.Now().Add(time.Minute)
	for b.Stats().Published < 1 {
		if time.Now().After(deadline) {
			t.Fatalf("relay B did not take the event over: %+v", b.Stats())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got := inboxtest.Effects(t, consumerDB); len(got) != 1 {
		t.Fatalf("effects %v, want the event once", got)
	}
	// Relay A's own recovery lane may take the event over too (another
	// duplicate): at least two deliveries, one side effect.
	if n := inboxtest.Count(t, consumerDB, `SELECT deliveries FROM inbox`); n < 2 {
		t.Fatalf("deliveries %d, want the takeover's duplicate too", n)
	}
	if b.Stats().Recovered != 1 {
		t.Fatalf("relay B stats %+v: want the event recovered from the expired lease", b.Stats())
	}
}

// A crash between the handler and the ack: the consumer commits, and the
// connection drops before the relay hears 200. The relay retries; the
// inbox answers 200 for the duplicate, and the event is processed once.
func TestHandler_CrashBetweenCommitAndAnswerIsRetriedAsADuplicate(t *testing.T) {
	t.Parallel()
	consumerDB := inboxtest.NewPool(t)
	ib := inboxtest.NewInbox(t, inbox.Config{DB: consumerDB, Handler: inboxtest.Effect})
	h := newHandler(t, ib)
	var mu sync.Mutex
	seen := map[string]bool{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		// The first answer of success is dropped. (On a loaded machine a
		// delivery may end before the consumer committed: the relay's
		// publish timed out, and the handler answered 500 to the closed
		// request. The relay retries it as any other.)
		mu.Lock()
		first := rec.Code == http.StatusOK && !seen[r.Header.Get(webhook.HeaderID)]
		if rec.Code == http.StatusOK {
			seen[r.Header.Get(webhook.HeaderID)] = true
		}
		mu.Unlock()
		if first {
			panic(http.ErrAbortHandler) // the connection drops: no answer
		}
		w.WriteHeader(rec.Code)
		_, _ = w.Write(rec.Body.Bytes())
	}))
	defer srv.Close()
	outboxDB := outbox(t, 3)
	d := runDispatcher(t, outboxDB, newPublisher(t, srv.URL))
	deadline := time.Now().Add(time.Minute)
	for d.Stats().Published < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("stats %+v", d.Stats())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got := inboxtest.Effects(t, consumerDB); len(got) != 3 {
		t.Fatalf("effects %v, want each event once", got)
	}
	if s := ib.Stats(); s.Processed != 3 || s.Duplicates != 3 {
		t.Fatalf("inbox stats %+v", s)
	}
}

// orderedOutbox returns a fresh outbox database holding n ordered events of
// each aggregate, enqueued alternately, and their ids per aggregate in
// commit order.
func orderedOutbox(t *testing.T, n int, aggs ...string) (*pgxpool.Pool, map[string][]string) {
	t.Helper()
	pool := pgtest.NewPool(t)
	ids := map[string][]string{}
	for i := range n {
		for _, agg := range aggs {
			id, err := dispatcher.Enqueue(context.Background(), pool, dispatcher.Event{AggregateType: "order", AggregateID: agg,
				EventType: "OrderChanged", Payload: json.RawMessage(fmt.Sprintf(`{"i":%d}`, i)), Ordered: true})
			if err != nil {
				t.Fatal(err)
			}
			ids[agg] = append(ids[agg], dispatcher.IDString(id))
		}
	}
	return pool, ids
}

// effectsOf returns, per aggregate, the ids of the side effects in the order
// they committed, and the positions and gap reasons they were handled with.
func effectsOf(t *testing.T, pool *pgxpool.Pool) (ids map[string][]string, seqs map[string][]int64, gaps map[string][]string) {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT aggregate_id, id, seq, gap FROM effects ORDER BY n`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	ids, seqs, gaps = map[string][]string{}, map[string][]int64{}, map[string][]string{}
	for rows.Next() {
		var agg, id, gap string
		var seq int64
		if err := rows.Scan(&agg, &id, &seq, &gap); err != nil {
			t.Fatal(err)
		}
		ids[agg], seqs[agg], gaps[agg] = append(ids[agg], id), append(seqs[agg], seq), append(gaps[agg], gap)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return ids, seqs, gaps
}

// outboxSeqs returns the seq the outbox stamped on each id.
func outboxSeqs(t *testing.T, pool *pgxpool.Pool, ids []string) []int64 {
	t.Helper()
	out := make([]int64, len(ids))
	for i, id := range ids {
		if err := pool.QueryRow(context.Background(), `SELECT seq FROM outbox WHERE id = $1::bigint`, id).Scan(&out[i]); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// A real relay publishing ordered events through the webhook: each carries
// the position the outbox stamped at COMMIT, and the inbox takes every one
// as next in order, with nothing parked and no gap.
func TestHandler_RelayPositionsAreAcceptedInOrder(t *testing.T) {
	t.Parallel()
	consumerDB := inboxtest.NewPool(t)
	ib := inboxtest.NewInbox(t, inbox.Config{DB: consumerDB, Handler: inboxtest.Effect})
	srv := httptest.NewServer(newHandler(t, ib))
	defer srv.Close()
	const n = 20
	outboxDB, want := orderedOutbox(t, n, "o-1", "o-2")
	d := runDispatcher(t, outboxDB, newPublisher(t, srv.URL))
	inboxtest.WaitCount(t, consumerDB, 2*n, time.Minute, `SELECT count(*) FROM effects`)
	ids, seqs, gaps := effectsOf(t, consumerDB)
	for agg, w := range want {
		if diff := cmp.Diff(w, ids[agg]); diff != "" {
			t.Fatalf("%s: processed (-want +got):\n%s", agg, diff)
		}
		if diff := cmp.Diff(outboxSeqs(t, outboxDB, w), seqs[agg]); diff != "" {
			t.Fatalf("%s: positions handled (-outbox +got):\n%s", agg, diff)
		}
		if diff := cmp.Diff(make([]string, n), gaps[agg]); diff != "" {
			t.Fatalf("%s: gaps (-want +got):\n%s", agg, diff)
		}
	}
	// The effects are visible at their COMMIT, counted just after.
	if s := inboxtest.WaitStats(t, ib, time.Minute, "every event counted", func(s inbox.Stats) bool { return s.Processed >= 2*n }); s.Processed != 2*n || s.Parked != 0 || s.Gaps != 0 || s.Invalid != 0 {
		t.Fatalf("inbox stats %+v, want every event next in order", s)
	}
	if s := d.Stats(); s.Published < 2*n {
		t.Fatalf("relay stats %+v", s)
	}
}

// A skipped predecessor: the relay sends event 2 to dead (its publish
// fails permanently) and an operator skips it; event 3 arrives naming 2
// as skipped and 1 as the last delivered, and the inbox processes it at
// once with a gap of reason skipped, instead of waiting for 2.
func TestHandler_SkippedPredecessorArrivesAsAGap(t *testing.T) {
	t.Parallel()
	consumerDB := inboxtest.NewPool(t)
	ib := inboxtest.NewInbox(t, inbox.Config{DB: consumerDB, Handler: inboxtest.Effect})
	srv := httptest.NewServer(newHandler(t, ib))
	defer srv.Close()
	outboxDB, all := orderedOutbox(t, 3, "o-1")
	ids := all["o-1"]
	p := newPublisher(t, srv.URL)
	sent := make(chan dispatcher.Message, 10)
	failing := dispatcher.PublisherFunc(func(ctx context.Context, m dispatcher.Message) error {
		if m.ID == ids[1] {
			return dispatcher.Permanent(errors.New("the receiver rejects it"))
		}
		sent <- m
		return p.Publish(ctx, m)
	})
	runDispatcher(t, outboxDB, failing)
	inboxtest.WaitCount(t, outboxDB, 1, time.Minute, `SELECT count(*) FROM outbox WHERE id = $1::bigint AND status = 'dead'`, ids[1])
	if n, err := opsdb.New(outboxDB).OutboxSkipDead(context.Background(), opsdb.OutboxSkipDeadParams{ID: mustID(t, ids[1])}); err != nil || n != 1 {
		t.Fatalf("skip: %d %v", n, err)
	}
	inboxtest.WaitCount(t, consumerDB, 2, time.Minute, `SELECT count(*) FROM effects`)
	s := outboxSeqs(t, outboxDB, ids)
	<-sent
	third := <-sent
	if want := (dispatcher.Position{Seq: s[2], Prev: s[1], Skipped: true, Sent: s[0]}); third.Position != want {
		t.Fatalf("event 3 sent with %+v, want %+v", third.Position, want)
	}
	got, seqs, gaps := effectsOf(t, consumerDB)
	if diff := cmp.Diff([]string{ids[0], ids[2]}, got["o-1"]); diff != "" {
		t.Fatalf("processed (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]int64{s[0], s[2]}, seqs["o-1"]); diff != "" {
		t.Fatalf("positions (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"", string(inbox.GapSkipped)}, gaps["o-1"]); diff != "" {
		t.Fatalf("gaps (-want +got):\n%s", diff)
	}
	// Event 3's effect is visible at its COMMIT, its gap counted just after.
	if st := inboxtest.WaitStats(t, ib, time.Minute, "the gap counted", func(s inbox.Stats) bool { return s.Gaps >= 1 }); st.Parked != 0 || st.Gaps != 1 {
		t.Fatalf("inbox stats %+v, want one gap and nothing parked", st)
	}
}

func mustID(t *testing.T, s string) int64 {
	t.Helper()
	id, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return id
}
