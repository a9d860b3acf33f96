package kafka

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// syncBuffer is a bytes.Buffer safe for the client's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestLogger_ReceivesClientWarningsTaggedWithPublisher(t *testing.T) {
	t.Parallel()
	var buf syncBuffer
	logger := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo}))
	c := newCluster(t)
	addrs := c.ListenAddrs()
	c.Close()
	p := newPublisher(t, Config{Brokers: addrs, Topic: testTopic, ProduceTimeout: 300 * time.Millisecond, Logger: logger})

	_ = p.Publish(context.Background(), testMessage(1, "o-1"))

	out := buf.String()
	if !strings.Contains(out, "level=WARN") || !strings.Contains(out, "publisher=kafka") {
		t.Fatalf("log output = %q, want client warnings tagged publisher=kafka", out)
	}
	if strings.Contains(out, "level=DEBUG") || strings.Contains(out, "level=INFO") {
		t.Fatalf("log output has client debug/info lines at an Info logger: %q", out)
	}
}

func TestLogger_MapsLevels(t *testing.T) {
	t.Parallel()
	tests := map[kgo.LogLevel]slog.Level{
		kgo.LogLevelError: slog.LevelError,
		kgo.LogLevelWarn:  slog.LevelWarn,
		kgo.LogLevelInfo:  slog.LevelInfo,
		kgo.LogLevelDebug: slog.LevelDebug,
	}
	for in, want := range tests {
		if got := slogLevel(in); got != want {
			t.Errorf("slogLevel(%v) = %v, want %v", in, got, want)
		}
	}
	debug := slog.New(slog.NewTextHandler(&syncBuffer{}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	if got := (kgoLogger{debug}).Level(); got != kgo.LogLevelDebug {
		t.Errorf("Level at a debug logger = %v, want debug", got)
	}
	if got := (kgoLogger{slog.New(slog.NewTextHandler(&syncBuffer{}, nil))}).Level(); got != kgo.LogLevelWarn {
		t.Errorf("Level at an info logger = %v, want warn", got)
	}
}
