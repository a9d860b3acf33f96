package cli

import (
	"context"
	"fmt"

	"github.com/pgoutbox/pgoutbox/internal/buildinfo"
)

// version prints the build information (version, commit, Go version).
func (a *app) version(ctx context.Context, args []string) error {
	f := newFlags("version", "pgoutbox version", "Prints the version, the commit it was built from and the Go version.", "  pgoutbox version")
	if _, err := a.parse(f, args, 0); err != nil {
		return err
	}
	fmt.Fprint(a.stdout, buildinfo.Read().Long())
	return nil
}
