// Package queries_test exercises the SQL contract in queries/ through the
// generated db package on real PostgreSQL: one test per row of the seed's
// test table (section 7), plus the guarantees this project adds.
package queries_test

import (
	"testing"

	"github.com/pgoutbox/pgoutbox/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }
