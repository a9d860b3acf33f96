// Package testlog gives tests a slog.Logger that writes to the test's output
// and goes quiet when the test ends. Client libraries (nats.go, amqp091)
// call their callbacks on their own goroutines, sometimes after Close has
// returned; a write to a finished test's output is a data race, so every
// write after the test's cleanup is dropped instead.
package testlog

import (
	"io"
	"log/slog"
	"sync"
	"testing"
)

// New returns a debug-level text logger for t.
func New(t testing.TB) *slog.Logger {
	w := &writer{out: t.Output()}
	t.Cleanup(w.close)
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type writer struct {
	mu     sync.Mutex
	out    io.Writer
	closed bool
}

func (w *writer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return len(p), nil
	}
	return w.out.Write(p)
}

func (w *writer) close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.closed = true
}
