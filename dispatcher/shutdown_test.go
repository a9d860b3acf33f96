package dispatcher_test

import (
	"context"
	"testing"
	"time"

	"github.com/pgoutbox/pgoutbox/dispatcher"
	"github.com/pgoutbox/pgoutbox/internal/pgtest"
)

// A publisher that ignores its context cannot hold Run forever: after the
// shutdown timeout the publish is cancelled, and after another it is
// abandoned; its message stays processing for lease recovery.
func TestShutdown_ReturnsEvenIfAPublisherIgnoresItsContext(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.enqueue(t, 1, "a", false)[0]
	stuck := make(chan struct{})
	t.Cleanup(func() { close(stuck) })
	entered := make(chan struct{}, 1)
	pub := dispatcher.PublisherFunc(func(ctx context.Context, m dispatcher.Message) error {
		entered <- struct{}{}
		<-stuck // ignores ctx
		return nil
	})
	d, err := dispatcher.New(pgtest.Pool(t, b.url), pub, fast(dispatcher.Config{ShutdownTimeout: 200 * time.Millisecond, Logger: quietLogger(t)}))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	<-entered
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return")
	}
	if s := b.state(t, id); s.Status != "processing" {
		t.Fatalf("abandoned message = %+v, want processing (recovered after its lease)", s)
	}
}
