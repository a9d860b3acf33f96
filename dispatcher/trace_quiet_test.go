package dispatcher_test

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/pgoutbox/pgoutbox/dispatcher"
	"github.com/pgoutbox/pgoutbox/internal/pgtest"
)

// lateSDKEnv, set to a database URL, makes the test binary run the child half
// of TestTrace_AnSDKInstalledAfterNewTracesTheNextClaims.
const lateSDKEnv = "PGOUTBOX_TEST_LATE_SDK_URL"

// An application that installs its SDK after the dispatcher started
// (otel.SetTracerProvider: the global provider, which Config's zero
// TracerProvider stands for, starts delegating to it) gets publish spans from
// the next claim on; before, the dispatcher starts none. The global provider
// is process-wide, and delegates for good once set, so the test runs in a
// process of its own: the test binary again, for this test only.
func TestTrace_AnSDKInstalledAfterNewTracesTheNextClaims(t *testing.T) {
	t.Parallel()
	if url := os.Getenv(lateSDKEnv); url != "" {
		lateSDKChild(t, url)
		return
	}
	b := setup(t)
	name := "TestTrace_AnSDKInstalledAfterNewTracesTheNextClaims"
	cmd := exec.Command(os.Args[0], "-test.run=^"+name+"$", "-test.v", "-test.timeout=2m")
	// TEST_DATABASE_URL: the child uses this server instead of starting one.
	cmd.Env = append(os.Environ(), lateSDKEnv+"="+b.url, "TEST_DATABASE_URL="+pgtest.AdminURL(t))
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: "+name) {
		t.Fatalf("child process: %v\n%s", err, out)
	}
}

func lateSDKChild(t *testing.T, url string) {
	b := &bundle{url: url, pool: pgtest.Pool(t, url)}
	tr := newTraced(t) // the producer's spans now, the global SDK later
	_, producer := b.enqueueTraced(t, tr)
	var log seenLog
	d, _ := b.start(t, log.publisher(nil), fast(dispatcher.Config{})) // no TracerProvider: the global one, no SDK yet
	waitFor(t, 30*time.Second, "the first publish", func() bool { return d.Stats().Published == 1 })
	if n := len(tr.ended("send OrderPaid")); n != 0 {
		t.Fatalf("%d publish spans before an SDK is installed, want none", n)
	}
	first := log.all()[0]
	if first.sc.TraceID() != producer.TraceID() || first.sc.SpanID() != producer.SpanID() {
		t.Errorf("without an SDK: Publish ctx span context %s/%s, want the stored %s/%s",
			first.sc.TraceID(), first.sc.SpanID(), producer.TraceID(), producer.SpanID())
	}

	otel.SetTracerProvider(tr.tp)
	id, producer2 := b.enqueueTraced(t, tr)
	waitFor(t, 30*time.Second, "the publish span of the second message", func() bool { return len(tr.ended("send OrderPaid")) == 1 })
	s := tr.ended("send OrderPaid")[0]
	wantAttr(t, s, "messaging.message.id", dispatcher.IDString(id))
	if links := s.Links(); len(links) != 1 || links[0].SpanContext.SpanID() != producer2.SpanID() {
		t.Errorf("links %v, want one to the producer span %s", links, producer2.SpanID())
	}
	waitFor(t, 30*time.Second, "the second publish", func() bool { return len(log.all()) == 2 })
	second := log.all()[1]
	if second.sc.SpanID() != s.SpanContext().SpanID() {
		t.Errorf("Publish ran in span %s, want the publish span %s", second.sc.SpanID(), s.SpanContext().SpanID())
	}
	if want := "00-" + s.SpanContext().TraceID().String() + "-" + s.SpanContext().SpanID().String() + "-01"; second.msg.Headers["traceparent"] != want {
		t.Errorf("Headers[traceparent] = %q, want the publish span %q", second.msg.Headers["traceparent"], want)
	}
}

// Without an SDK, a propagator other than the default extracts the stored
// context as with a span: the publish context carries the stored span
// context and baggage.
func TestTrace_WithoutAnSDKACompositePropagatorPutsTheStoredBaggageInThePublishContext(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tr := newTraced(t)
	prop := propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})
	ctx, span := tr.producerSpan(context.Background())
	member, _ := baggage.NewMember("tenant", "acme")
	bag, _ := baggage.New(member)
	_, err := dispatcher.NewProducer(dispatcher.ProducerConfig{Propagator: prop}).
		Enqueue(baggage.ContextWithBaggage(ctx, bag), b.pool, orderEvent(nil))
	span.End()
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu      sync.Mutex
		sc      trace.SpanContext
		tenant  string
		publish bool
	)
	pub := dispatcher.PublisherFunc(func(ctx context.Context, m dispatcher.Message) error {
		mu.Lock()
		defer mu.Unlock()
		sc, tenant, publish = trace.SpanContextFromContext(ctx), baggage.FromContext(ctx).Member("tenant").Value(), true
		return nil
	})
	// A provider without an SDK that is not the global one.
	d, _ := b.start(t, pub, fast(dispatcher.Config{Propagator: prop, TracerProvider: noop.NewTracerProvider()}))
	waitFor(t, 30*time.Second, "the publish", func() bool { return d.Stats().Published == 1 })
	mu.Lock()
	defer mu.Unlock()
	if !publish || sc.SpanID() != span.SpanContext().SpanID() || tenant != "acme" {
		t.Errorf("Publish ctx: span %s, baggage tenant %q; want the stored span %s and tenant acme", sc.SpanID(), tenant, span.SpanContext().SpanID())
	}
}
