package cli

import (
	"fmt"
	"strings"
	"testing"

	"github.com/pgoutbox/pgoutbox/migrations"
)

func TestHelp_EveryCommandPrintsUsageWithExamples(t *testing.T) {
	t.Parallel()
	for _, c := range commands() {
		for _, flag := range []string{"--help", "-h"} {
			args := append(strings.Fields(c.name), flag)
			r := call(t, invocation{}, args...)
			wantCode(t, r, ExitOK)
			mustContain(t, r, "stdout", "Usage: pgoutbox "+c.name)
			mustContain(t, r, "stdout", "Examples:")
			if r.stderr != "" {
				t.Errorf("%v: stderr not empty: %q", args, r.stderr)
			}
		}
	}
	for _, args := range [][]string{{"--help"}, {"-h"}, {"help"}} {
		r := call(t, invocation{}, args...)
		wantCode(t, r, ExitOK)
		for _, c := range commands() {
			mustContain(t, r, "stdout", c.name)
		}
	}
	r := call(t, invocation{}, "help", "dead", "retry")
	wantCode(t, r, ExitOK)
	mustContain(t, r, "stdout", "Usage: pgoutbox dead retry")
	r = call(t, invocation{}, "dead", "--help")
	wantCode(t, r, ExitOK)
	mustContain(t, r, "stdout", "dead skip")
}

func TestUsage_UnknownCommandOrMissingSubcommandExits2(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "no command given"},
		{[]string{"frobnicate"}, `unknown command "frobnicate"`},
		{[]string{"stat"}, `unknown command "stat" (did you mean "stats"?)`},
		{[]string{"migrate"}, "migrate: missing command"},
		{[]string{"migrate", "sideways"}, `migrate: unknown command "sideways"`},
		{[]string{"dead", "resurrect"}, `dead: unknown command "resurrect"`},
	} {
		r := call(t, invocation{}, tc.args...)
		wantCode(t, r, ExitUsage)
		mustContain(t, r, "stderr", tc.want)
		mustContain(t, r, "stderr", "pgoutbox")
		if r.stdout != "" {
			t.Errorf("%v: stdout not empty: %q", tc.args, r.stdout)
		}
	}
}

// Bad flags are usage errors (exit 2) reported before anything is contacted:
// the database URL points at a closed port, so reaching it would fail with
// another message.
func TestUsage_BadFlagValuesSayWhichFlagAndWhatIsExpected(t *testing.T) {
	t.Parallel()
	env := map[string]string{"DATABASE_URL": "postgres://u:pw@127.0.0.1:1/db"}
	for _, tc := range []struct {
		name string
		args string
		want string
	}{
		{"batch zero", "run --publisher stdout --batch 0", "--batch must be between 1 and 10000, got 0"},
		{"batch-min above batch", "run --publisher stdout --batch 10 --batch-min 20", "--batch-min must be between 1 and --batch (10), got 20"},
		{"batch-work zero", "run --publisher stdout --batch-work 0s", "--batch-work"},
		{"batch not a number", "run --publisher stdout --batch many", `invalid value "many" for flag --batch: expected a whole number`},
		{"duration without unit", "run --publisher stdout --lease 5", `invalid value "5" for flag --lease: missing unit: expected a Go duration such as 200ms, 3s or 1m`},
		{"negative duration", "run --publisher stdout --lease -1s", "--lease must be a positive duration (such as 200ms, 3s, 1m), got -1s"},
		{"garbage duration", "run --publisher stdout --poll-interval soon", `invalid value "soon" for flag --poll-interval: expected a Go duration`},
		{"publish timeout not below lease", "run --publisher stdout --lease 5s", "--publish-timeout (10s) must be shorter than --lease (5s), or set --heartbeat"},
		{"wake window too short", "run --publisher stdout --wake-window 5ms", "--wake-window must be at least 10ms, got 5ms"},
		{"heartbeat too long", "run --publisher stdout --lease 10s --heartbeat 6s", "--heartbeat (6s) must be at most half of --lease (10s)"},
		{"missing publisher", "run", "--publisher is required: one of http, nats, amqp, kafka, stdout, discard"},
		{"unknown publisher", "run --publisher carrier-pigeon", `unknown --publisher "carrier-pigeon": expected one of http, nats, amqp, kafka, stdout, discard`},
		{"missing http url", "run --publisher http", "--http-url is required with --publisher http"},
		{"flag of another publisher", "run --publisher stdout --http-url http://x", "--http-url: not a flag of --publisher stdout"},
		{"kafka without brokers", "run --publisher kafka --kafka-topic t", "--kafka-brokers is required"},
		{"kafka without topic", "run --publisher kafka --kafka-brokers k:9092", "--kafka-topic or --kafka-topic-template is required"},
		{"bad claim", "run --publisher stdout --claim some", `invalid --claim "some": expected all, ordered or unordered`},
		{"ordered contradicts claim", "run --publisher stdout --ordered --claim unordered", "--ordered means --claim ordered"},
		{"bad unclassified", "run --publisher stdout --unclassified ignore", `invalid --unclassified "ignore"`},
		{"bad log level", "run --publisher stdout --log-level loud", `invalid --log-level "loud"`},
		{"bad metrics addr", "run --publisher stdout --metrics-addr 9090", `invalid --metrics-addr "9090": expected host:port`},
		{"bad defer status", "run --publisher http --http-url http://x --http-defer-status 200", "--http-defer-status must be an HTTP status within 400-599, got 200"},
		{"bad unavailable status", "run --publisher http --http-url http://x --http-unavailable-status 503,200", `invalid --http-unavailable-status "503,200": "200" is not an HTTP status within 400-599`},
		{"negative breaker threshold", "run --publisher stdout --breaker-threshold -1", "--breaker-threshold must be at least 0, got -1"},
		{"breaker probe above its max", "run --publisher stdout --breaker-probe 1m --breaker-probe-max 10s", "--breaker-probe-max (10s) must be at least --breaker-probe (1m0s)"},
		{"unknown flag", "run --publisher stdout --turbo", "unknown flag --turbo\n"},
		{"misspelt flag", "run --publisher stdout --bacth 10", "unknown flag --bacth (did you mean --batch?)"},
		{"misspelt flag, one dash, with value", "run --publisher stdout -bacth=10", "unknown flag -bacth (did you mean --batch?)"},
		{"abbreviated flag", "purge --older 7d", "unknown flag --older (did you mean --older-than?)"},
		{"positional to run", "run --publisher stdout now", `unexpected argument "now"`},
		{"purge without older-than", "purge", "--older-than is required"},
		{"purge duration without unit", "purge --older-than 7", `invalid value "7" for flag --older-than: expected a duration with a unit, such as 36h, 7d or 1d12h`},
		{"purge batch zero", "purge --older-than 7d --batch 0", "--batch must be between 1 and 100000, got 0"},
		{"dead retry no ids", "dead retry", "no ids given"},
		{"dead retry non-numeric id", "dead retry 12 abc", `invalid id "abc": ids are positive integers`},
		{"dead retry negative id", "dead retry -5", `invalid id "-5": ids are positive integers`},
		{"dead retry zero id", "dead retry 0", `invalid id "0": ids are positive integers`},
		{"dead retry ids and all", "dead retry 1 --all-matching", "give either ids or --all-matching, not both"},
		{"dead retry filter without all", "dead retry 1 --event-type X", "with explicit ids, leave them out"},
		{"dead skip without reason", "dead skip 1", "--reason is required"},
		{"dead list limit", "dead list --limit 0", "--limit must be between 1 and 1000, got 0"},
		{"stats watch negative", "stats --watch -1s", "--watch must be a positive duration"},
		{"enqueue missing event type", "enqueue --aggregate-type a --aggregate-id 1 --payload {}", "--event-type is required"},
		{"enqueue bad header", "enqueue --aggregate-type a --aggregate-id 1 --event-type E --payload {} --header novalue", `invalid --header "novalue": expected name=value`},
		{"enqueue bad time", "enqueue --aggregate-type a --aggregate-id 1 --event-type E --payload {} --available-at tomorrow", `invalid --available-at "tomorrow": expected an RFC 3339 time`},
		{"migrate down to", "migrate down --to 99", fmt.Sprintf("--to must be between 0 and %d, got 99", migrations.Latest())},
		{"init without table", "init --dir x", "--table is required"},
		{"init reserved word", "init --table user --dir x", `invalid --table "user": it is a reserved SQL key word`},
		{"init bad characters", "init --table Billing-Outbox --dir x", `invalid --table "Billing-Outbox": use 1-63 characters among lower-case letters, digits and '_'`},
		{"init sql injection", "init --table x;drop_table_y --dir x", `invalid --table "x;drop_table_y"`},
		{"init without dir", "init --table billing_outbox", "--dir is required"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := call(t, invocation{env: env}, strings.Fields(tc.args)...)
			wantCode(t, r, ExitUsage)
			mustContain(t, r, "stderr", tc.want)
			cmd := strings.Join(strings.Fields(tc.args)[:1], "")
			if f := strings.Fields(tc.args); len(f) > 1 && (f[0] == "dead" || f[0] == "migrate") {
				cmd = f[0] + " " + f[1]
			}
			mustContain(t, r, "stderr", "See 'pgoutbox "+cmd+" --help'.")
			// A few lines, not the command's whole help burying the error.
			if n := strings.Count(r.stderr, "\n"); n > 3 {
				t.Errorf("usage error is %d lines, want at most 3:\n%s", n, r.stderr)
			}
			if strings.Contains(r.stderr, "cannot reach PostgreSQL") {
				t.Errorf("the database was contacted before the flags were validated:\n%s", r)
			}
		})
	}
}

func TestUsage_NoDatabaseURL(t *testing.T) {
	t.Parallel()
	for _, args := range []string{"stats", "migrate status", "dead list", "purge --older-than 1d", "run --publisher discard",
		"enqueue --aggregate-type a --aggregate-id 1 --event-type E --payload {}"} {
		r := call(t, invocation{}, strings.Fields(args)...)
		wantCode(t, r, ExitUsage)
		mustContain(t, r, "stderr", "no database: set DATABASE_URL or pass --database-url")
	}
}
