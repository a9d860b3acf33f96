// Package cli implements the pgoutbox command. Main runs one invocation
// in-process (the cmd/pgoutbox binary only wires signals and os streams), so
// every command is testable end to end.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"time"

	"github.com/pgoutbox/pgoutbox/internal/buildinfo"
	"github.com/pgoutbox/pgoutbox/internal/redact"
)

// Exit codes.
const (
	ExitOK          = 0   // success
	ExitFailure     = 1   // runtime error (database, publisher, bad data)
	ExitUsage       = 2   // unknown command, bad flag or bad flag value
	ExitInterrupted = 130 // purge interrupted by SIGINT/SIGTERM (128 + SIGINT)
)

// Main runs the pgoutbox command with args (without the program name) and
// returns the process exit code. ctx ending (SIGINT/SIGTERM in the binary)
// asks long-running commands to stop gracefully.
func Main(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer, env func(string) string) int {
	return run(ctx, args, options{stdin: stdin, stdout: stdout, stderr: stderr, getenv: env})
}

// options are Main's inputs plus hooks that only tests set.
type options struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	getenv         func(string) string

	// metricsListening, when set, receives the address the metrics server
	// bound (tests pass --metrics-addr 127.0.0.1:0).
	metricsListening func(net.Addr)
	// stdinTerminal and stdoutTerminal override terminal detection.
	stdinTerminal, stdoutTerminal *bool
	// now overrides the clock of stats rendering.
	now func() time.Time
}

// app is one invocation.
type app struct {
	options
	secrets *redact.Scrubber // passwords and tokens seen in this invocation
	dbUser  string           // the role the command connects as (for grant hints)
	stderr  io.Writer        // options.stderr behind the scrubber
	table   string           // --table of the command (default outbox)
	schema  string           // --schema of the command (default none)

	resolvedSchema, resolvedTable string // the outbox table as the database resolved it (checkSchema)
}

func run(ctx context.Context, args []string, o options) int {
	if o.stdin == nil {
		o.stdin = strings.NewReader("")
	}
	if o.stdout == nil {
		o.stdout = io.Discard
	}
	if o.stderr == nil {
		o.stderr = io.Discard
	}
	if o.getenv == nil {
		o.getenv = func(string) string { return "" }
	}
	if o.now == nil {
		o.now = time.Now
	}
	s := &redact.Scrubber{}
	a := &app{options: o, secrets: s, stderr: s.Writer(o.stderr)}
	return a.exit(a.dispatch(ctx, args))
}

// command is one (sub)command.
type command struct {
	name    string // "dead retry"
	summary string
	run     func(a *app, ctx context.Context, args []string) error
}

func commands() []command {
	return []command{
		{"migrate up", "apply every pending schema migration", (*app).migrateUp},
		{"migrate down", "roll back the latest migration (or down to --to VERSION)", (*app).migrateDown},
		{"migrate status", "show the schema version and each migration's state", (*app).migrateStatus},
		{"run", "run the relay: claim, publish, finalize (the dispatcher daemon)", (*app).runRelay},
		{"stats", "show queue depth, oldest age, blocked aggregates, ordered commit waits", (*app).stats},
		{"dead list", "list dead messages (keyset-paged)", (*app).deadList},
		{"dead retry", "redrive dead messages (back to pending, attempts reset)", (*app).deadRetry},
		{"dead skip", "resolve dead messages without delivering them (dead -> skipped)", (*app).deadSkip},
		{"dead show", "show one message and its attempt history", (*app).deadShow},
		{"redeliver", "deliver delivered messages again (same ids, same idempotency keys)", (*app).redeliver},
		{"purge", "delete done messages older than a retention period (dead and skipped with --status)", (*app).purge},
		{"repair", "repair rows restored or replicated from another server (txids, sequencing, sequences)", (*app).repair},
		{"init", "write the migrations and queries for your own table name into your sqlc project", (*app).initCmd},
		{"enqueue", "insert one event (for tests and manual replays)", (*app).enqueue},
		{"inbox migrate", "create or upgrade the inbox tables in the consumer's database", (*app).inboxMigrate},
		{"inbox init", "write the inbox's migrations and queries for your own table name into your sqlc project", (*app).inboxInit},
		{"verify", "compare what a consumer received with the outbox: missing, duplicated, out of order", (*app).verify},
		{"ui", "serve the web console (overview, messages, dead letters, blocked aggregates)", (*app).ui},
		{"version", "print the version, commit and Go version of this build", (*app).version},
	}
}

func (a *app) dispatch(ctx context.Context, args []string) error {
	if len(args) == 0 {
		a.topUsage(a.stderr)
		return &exitError{code: ExitUsage, msg: "no command given"}
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		if len(args) > 1 && args[0] == "help" {
			// "pgoutbox help dead retry" = "pgoutbox dead retry --help"
			return a.dispatch(ctx, append(append([]string{}, args[1:]...), "--help"))
		}
		a.topUsage(a.stdout)
		return nil
	case "--version", "-version":
		return a.version(ctx, args[1:])
	}
	var group []command
	for _, c := range commands() {
		first, rest, _ := strings.Cut(c.name, " ")
		if first != args[0] {
			continue
		}
		if rest == "" {
			return c.run(a, ctx, args[1:])
		}
		group = append(group, c)
	}
	if len(group) == 0 {
		msg := fmt.Sprintf("unknown command %q", args[0])
		if best := closest(args[0], topCommands()); best != "" {
			msg += fmt.Sprintf(" (did you mean %q?)", best)
		}
		return &exitError{code: ExitUsage, msg: msg + "\nSee 'pgoutbox --help'."}
	}
	if len(args) > 1 {
		for _, c := range group {
			if _, sub, _ := strings.Cut(c.name, " "); sub == args[1] {
				return c.run(a, ctx, args[2:])
			}
		}
	}
	w := a.stderr
	if len(args) > 1 && isHelp(args[1]) {
		w = a.stdout
	}
	fmt.Fprintf(w, "Usage: pgoutbox %s <command> [flags]\n\nCommands:\n", args[0])
	for _, c := range group {
		fmt.Fprintf(w, "  %-16s %s\n", c.name, c.summary)
	}
	fmt.Fprintf(w, "\nRun 'pgoutbox %s <command> --help' for a command's flags and examples.\n", args[0])
	if w == a.stdout {
		return nil
	}
	if len(args) == 1 {
		return &exitError{code: ExitUsage, msg: fmt.Sprintf("%s: missing command", args[0])}
	}
	return &exitError{code: ExitUsage, msg: fmt.Sprintf("%s: unknown command %q", args[0], args[1])}
}

// topCommands are the first words of the commands: run, dead, migrate, ...
func topCommands() []string {
	var names []string
	for _, c := range commands() {
		first, _, _ := strings.Cut(c.name, " ")
		if len(names) == 0 || names[len(names)-1] != first {
			names = append(names, first)
		}
	}
	return names
}

func isHelp(s string) bool {
	return s == "-h" || s == "--help" || s == "-help" || s == "help"
}

func (a *app) topUsage(w io.Writer) {
	fmt.Fprint(w, `pgoutbox operates a PostgreSQL transactional outbox.

Usage: pgoutbox <command> [flags]

Commands:
`)
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-16s %s\n", c.name, c.summary)
	}
	fmt.Fprint(w, `
Every command that touches the database reads DATABASE_URL, or --database-url.
Run 'pgoutbox <command> --help' for its flags and examples (docs/cli.md has all).

Exit codes: 0 ok, 1 runtime error, 2 usage error (130: purge interrupted).
`)
	fmt.Fprintf(w, "\nBuild: %s\n", buildinfo.Read())
}

// exitError carries an exit code and the message printed for it.
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }

// errHelp means usage was printed on request: exit 0.
var errHelp = errors.New("help shown")

// failf is a runtime error (exit 1).
func failf(format string, args ...any) error {
	return &exitError{code: ExitFailure, msg: fmt.Sprintf(format, args...)}
}

func (a *app) exit(err error) int {
	if err == nil || errors.Is(err, errHelp) {
		return ExitOK
	}
	var e *exitError
	if !errors.As(err, &e) {
		e = &exitError{code: ExitFailure, msg: err.Error()}
	}
	if e.msg != "" {
		fmt.Fprintf(a.stderr, "pgoutbox: %s\n", message(e.msg))
	}
	return e.code
}

// isTerminal reports whether f is a character device (a terminal).
func isTerminal(x any) bool {
	f, ok := x.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	if err != nil {
		return false
	}
	return st.Mode()&os.ModeCharDevice != 0
}

func (a *app) stdinIsTerminal() bool {
	if a.stdinTerminal != nil {
		return *a.stdinTerminal
	}
	return isTerminal(a.stdin)
}

func (a *app) stdoutIsTerminal() bool {
	if a.stdoutTerminal != nil {
		return *a.stdoutTerminal
	}
	return isTerminal(a.stdout)
}
