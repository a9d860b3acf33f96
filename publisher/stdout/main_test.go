package stdout

import (
	"testing"

	"github.com/pgoutbox/pgoutbox/internal/pgtest"
)

// TestMain provides PostgreSQL for the test that runs a traced dispatcher
// (trace_test.go); the other tests do not use it.
func TestMain(m *testing.M) { pgtest.Main(m) }
