package jetstream

import (
	"testing"

	"github.com/pgoutbox/pgoutbox/internal/pgtest"
)

// TestMain provides PostgreSQL for the tests that run dispatchers
// (outboxes_test.go); the other tests do not use it.
func TestMain(m *testing.M) { pgtest.Main(m) }
