package stdout

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/pgoutbox/pgoutbox/dispatcher"
	"github.com/pgoutbox/pgoutbox/publisher/cloudevents"
)

func testMessage(id int64) dispatcher.Message {
	return dispatcher.Message{
		ID:            dispatcher.IDString(id),
		OutboxID:      id,
		AggregateType: "order",
		AggregateID:   "o-1",
		EventType:     "OrderPaid",
		Payload:       json.RawMessage(`{"order_id":"o-1","amount":1250}`),
		Headers:       map[string]string{"tenant": "acme"},
		Attempt:       2,
		CreatedAt:     time.Date(2026, 11, 29, 19, 0, 0, 123000000, time.FixedZone("JST", 9*3600)),
	}
}

func newPublisher(t *testing.T, cfg Config) *Publisher {
	t.Helper()
	p, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return p
}

func TestPublish_WritesOneJSONLinePerMessage(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	p := newPublisher(t, Config{Writer: &buf})

	for id := int64(1); id <= 2; id++ {
		if err := p.Publish(context.Background(), testMessage(id)); err != nil {
			t.Fatalf("Publish: %v", err)
		}
	}

	lines := bytes.Split(bytes.TrimSuffix(buf.Bytes(), []byte("\n")), []byte("\n"))
	if len(lines) != 2 {
		t.Fatalf("got %d lines, want 2:\n%s", len(lines), buf.String())
	}
	var got map[string]any
	if err := json.Unmarshal(lines[0], &got); err != nil {
		t.Fatalf("line 1 is not JSON: %v\n%s", err, lines[0])
	}
	want := map[string]any{
		"id":              "1",
		"idempotency_key": cloudevents.IdempotencyKey(cloudevents.DefaultSource, "1"),
		"aggregate_type":  "order",
		"aggregate_id":    "o-1",
		"event_type":      "OrderPaid",
		"payload":         map[string]any{"order_id": "o-1", "amount": float64(1250)},
		"headers":         map[string]any{"tenant": "acme"},
		"attempt":         float64(2),
		"created_at":      "2026-11-29T10:00:00.123Z",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("line 1 (-want +got):\n%s", diff)
	}
	if !bytes.Contains(lines[0], []byte(`"payload":{"order_id":"o-1","amount":1250}`)) {
		t.Errorf("payload is not embedded as raw JSON: %s", lines[0])
	}
	if !bytes.Contains(lines[1], []byte(`"id":"2"`)) {
		t.Errorf("line 2 = %s, want id 2", lines[1])
	}
}

func TestPublish_AddsCloudEventsAttributesWhenConfigured(t *testing.T) {
	t.Parallel()
	var with, without bytes.Buffer
	pWith := newPublisher(t, Config{Writer: &with, CloudEvents: true, Source: "urn:shop"})
	pWithout := newPublisher(t, Config{Writer: &without})
	msg := testMessage(42)

	if err := pWith.Publish(context.Background(), msg); err != nil {
		t.Fatal(err)
	}
	if err := pWithout.Publish(context.Background(), msg); err != nil {
		t.Fatal(err)
	}

	var got struct {
		CE map[string]string `json:"ce"`
	}
	if err := json.Unmarshal(with.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"specversion": "1.0", "id": "42", "type": "OrderPaid", "source": "urn:shop",
		"subject": "o-1", "time": "2026-11-29T10:00:00.123Z", "datacontenttype": "application/json",
	}
	if diff := cmp.Diff(want, got.CE); diff != "" {
		t.Errorf("ce (-want +got):\n%s", diff)
	}
	if bytes.Contains(without.Bytes(), []byte(`"ce"`)) {
		t.Errorf("line without CloudEvents has a ce field: %s", without.Bytes())
	}
}

func TestPublish_NilHeadersAndEmptyPayloadStillProduceValidJSON(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	p := newPublisher(t, Config{Writer: &buf})
	msg := testMessage(1)
	msg.Headers, msg.Payload = nil, nil

	if err := p.Publish(context.Background(), msg); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	var got map[string]any
	if err := json.Unmarshal(buf.Bytes(), &got); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, buf.Bytes())
	}
	if diff := cmp.Diff(map[string]any{}, got["headers"]); diff != "" {
		t.Errorf("headers (-want +got):\n%s", diff)
	}
	if got["payload"] != nil {
		t.Errorf("payload = %v, want null", got["payload"])
	}
}

// trickleWriter writes one byte at a time and yields in between, so that
// unsynchronized concurrent writes would interleave. It is not itself safe
// for concurrent use: the race detector reports a Publisher that does not
// serialize its writes.
type trickleWriter struct{ buf []byte }

func (w *trickleWriter) Write(p []byte) (int, error) {
	for _, c := range p {
		w.buf = append(w.buf, c)
		runtime.Gosched()
	}
	return len(p), nil
}

func TestPublish_ConcurrentPublishesWriteWholeLines(t *testing.T) {
	t.Parallel()
	w := &trickleWriter{}
	p := newPublisher(t, Config{Writer: w, CloudEvents: true})
	const goroutines, perGoroutine = 16, 25
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range perGoroutine {
				id := int64(g*perGoroutine + i + 1)
				if err := p.Publish(context.Background(), testMessage(id)); err != nil {
					t.Errorf("Publish %d: %v", id, err)
				}
			}
		})
	}
	wg.Wait()

	seen := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(w.buf))
	for sc.Scan() {
		var l struct {
			ID string `json:"id"`
		}
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("line is not whole JSON: %v\n%s", err, sc.Bytes())
		}
		if seen[l.ID] {
			t.Fatalf("id %s written twice", l.ID)
		}
		seen[l.ID] = true
	}
	if len(seen) != goroutines*perGoroutine {
		t.Fatalf("got %d distinct lines, want %d", len(seen), goroutines*perGoroutine)
	}
	for id := 1; id <= goroutines*perGoroutine; id++ {
		if !seen[strconv.Itoa(id)] {
			t.Fatalf("id %d missing", id)
		}
	}
}

type failingWriter struct {
	n   int
	err error
}

func (w failingWriter) Write(p []byte) (int, error) { return min(w.n, len(p)), w.err }

func TestPublish_WriteFailuresAreUnavailable(t *testing.T) {
	t.Parallel()
	for name, w := range map[string]failingWriter{
		"write error": {n: 0, err: os.ErrClosed},
		"short write": {n: 3, err: nil},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			p := newPublisher(t, Config{Writer: w})
			err := p.Publish(context.Background(), testMessage(1))
			var ue *dispatcher.UnavailableError
			if !errors.As(err, &ue) {
				t.Fatalf("err = %v, want UnavailableError", err)
			}
		})
	}
}

func TestPublish_CanceledContextIsUnavailableAndWritesNothing(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	p := newPublisher(t, Config{Writer: &buf})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()

	err := p.Publish(ctx, testMessage(1))

	var ue *dispatcher.UnavailableError
	if !errors.As(err, &ue) || !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want UnavailableError wrapping context.Canceled", err)
	}
	if buf.Len() != 0 {
		t.Fatalf("wrote %q, want nothing", buf.String())
	}
}

func TestPublish_InvalidJSONPayloadIsPermanent(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	p := newPublisher(t, Config{Writer: &buf})
	msg := testMessage(1)
	msg.Payload = json.RawMessage(`{"unterminated":`)

	err := p.Publish(context.Background(), msg)

	var perm *dispatcher.PermanentError
	if !errors.As(err, &perm) {
		t.Fatalf("err = %v, want PermanentError", err)
	}
	if buf.Len() != 0 {
		t.Fatalf("wrote %q, want nothing", buf.String())
	}
}

func TestNew_DefaultsToStdout(t *testing.T) {
	t.Parallel()
	p := newPublisher(t, Config{})
	if p.cfg.Writer != os.Stdout {
		t.Fatalf("Writer = %v, want os.Stdout", p.cfg.Writer)
	}
}

func TestDiscard_DropsEveryMessageAndReturnsNil(t *testing.T) {
	t.Parallel()
	var p dispatcher.Publisher = Discard{}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, c := range []context.Context{context.Background(), ctx} {
		if err := p.Publish(c, testMessage(1)); err != nil {
			t.Fatalf("Discard.Publish = %v, want nil", err)
		}
	}
}
