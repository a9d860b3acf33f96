package fleet_test

import (
	"testing"

	"github.com/pgoutbox/pgoutbox/internal/pgtest"
)

// The tests serve up to 50 databases from two fleets at once: up to three
// connections each per fleet, plus the tests' own.
func TestMain(m *testing.M) {
	pgtest.MainWith(m, map[string]string{"max_connections": "1000"})
}
