// Command pgoutbox operates a pgoutbox transactional outbox: schema
// migrations, the relay daemon (run), monitoring (stats), dead-message
// handling, retention (purge), copying the SQL under another table name
// (init) and enqueueing test events. See docs/cli.md.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/pgoutbox/pgoutbox/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	// The first signal asks for a graceful stop; restoring the default
	// handling then lets a second one end the process at once.
	go func() {
		<-ctx.Done()
		stop()
	}()
	code := cli.Main(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr, os.Getenv)
	stop()
	os.Exit(code)
}
