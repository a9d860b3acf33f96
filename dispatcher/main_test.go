package dispatcher_test

import (
	"os"
	"testing"

	"github.com/pgoutbox/pgoutbox/internal/pgtest"
)

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) != "" {
		os.Exit(runHelperProcess())
	}
	pgtest.Main(m)
}
