package dispatcher_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/pgoutbox/dispatcher"
)

func TestNew_ValidatesConfigNamingTheField(t *testing.T) {
	t.Parallel()
	pool, err := pgxpool.New(context.Background(), "postgres://127.0.0.1:1/x") // lazy: never dialled
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	pub := dispatcher.PublisherFunc(func(context.Context, dispatcher.Message) error { return nil })
	cases := []struct {
		cfg  dispatcher.Config
		want string
	}{
		{dispatcher.Config{Batch: -1}, "Batch"},
		{dispatcher.Config{Lease: -time.Second}, "Lease"},
		{dispatcher.Config{MaxAttempts: -3}, "MaxAttempts"},
		{dispatcher.Config{Concurrency: -1}, "Concurrency"},
		{dispatcher.Config{Lease: time.Second, PublishTimeout: 2 * time.Second}, "PublishTimeout"},
		{dispatcher.Config{Lease: time.Second, PublishTimeout: time.Second}, "PublishTimeout"},
		{dispatcher.Config{Lease: time.Second, HeartbeatInterval: 600 * time.Millisecond}, "HeartbeatInterval"},
		{dispatcher.Config{HeartbeatInterval: -time.Second}, "HeartbeatInterval"},
		{dispatcher.Config{BackoffBase: 10 * time.Second, BackoffCap: time.Second}, "BackoffBase"},
		{dispatcher.Config{PollInterval: -time.Second}, "PollInterval"},
		{dispatcher.Config{WakeWindow: 5 * time.Millisecond}, "WakeWindow"},
		{dispatcher.Config{Channel: "outbox; DROP TABLE outbox"}, "Channel"},
		{dispatcher.Config{UnclassifiedErrors: 9}, "UnclassifiedErrors"},
		{dispatcher.Config{Claim: 7}, "Claim"},
		{dispatcher.Config{BreakerProbe: time.Minute, BreakerProbeMax: time.Second}, "BreakerProbe"},
		{dispatcher.Config{BreakerProbe: -time.Second}, "BreakerProbe"},
	}
	for _, c := range cases {
		_, err := dispatcher.New(pool, pub, c.cfg)
		if !errors.Is(err, dispatcher.ErrInvalidConfig) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: err = %v, want ErrInvalidConfig naming %s", c.cfg, err, c.want)
		}
	}
	if _, err := dispatcher.New(pool, pub, dispatcher.Config{}); err != nil {
		t.Fatalf("zero Config must be valid: %v", err)
	}
	if _, err := dispatcher.New(pool, nil, dispatcher.Config{}); !errors.Is(err, dispatcher.ErrInvalidConfig) {
		t.Fatalf("nil publisher: %v", err)
	}
	// Heartbeat allows a publish timeout beyond the lease.
	if _, err := dispatcher.New(pool, pub, dispatcher.Config{Lease: time.Second, PublishTimeout: 5 * time.Second, HeartbeatInterval: 300 * time.Millisecond}); err != nil {
		t.Fatalf("heartbeat config: %v", err)
	}
}

func TestFullJitter_StaysWithinCeiling(t *testing.T) {
	t.Parallel()
	for attempt := 0; attempt < 80; attempt++ {
		ceiling := 300 * time.Second
		if attempt < 9 {
			ceiling = time.Second << attempt
		}
		for i := 0; i < 50; i++ {
			d := dispatcher.FullJitter(attempt, time.Second, 300*time.Second)
			if d < 0 || d > ceiling {
				t.Fatalf("attempt %d: %s outside [0, %s]", attempt, d, ceiling)
			}
		}
	}
}
