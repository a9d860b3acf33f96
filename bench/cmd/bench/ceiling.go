package main

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/pgoutbox/pgoutbox/queries"
)

// querySQL returns the text of one named query from the SQL contract
// (queries/*.sql, embedded by the main module), without its comments.
func querySQL(name string) string {
	files, _ := fs.Glob(queries.FS, "*.sql")
	for _, f := range files {
		b, _ := fs.ReadFile(queries.FS, f)
		text := string(b)
		i := strings.Index(text, "-- name: "+name+" ")
		if i < 0 {
			continue
		}
		rest := text[i:]
		rest = rest[strings.Index(rest, "\n")+1:]
		// Drop line comments first (the contract's queries hold no "--"
		// inside string literals, but their comments may hold a ";"), then
		// end at the statement's ";": pgbench gets each statement on one line.
		var lines []string
		for _, l := range strings.Split(rest, "\n") {
			if k := strings.Index(l, "--"); k >= 0 {
				l = l[:k]
			}
			lines = append(lines, l)
		}
		rest = strings.Join(lines, "\n")
		if j := strings.Index(rest, ";"); j >= 0 {
			rest = rest[:j]
		}
		return strings.TrimSpace(rest)
	}
	panic("query " + name + " not found in queries/*.sql")
}

// claimSQL is the single-statement claim (singleClaimSQL) with literal parameters.
func claimSQL(batch int, owner string) string {
	return strings.NewReplacer(
		"@max_attempts::integer", "12::integer",
		"@recover_expired::boolean", "true",
		"@batch::integer", strconv.Itoa(batch)+"::integer",
		"@owner::text", owner+"::text",
		"@lease::interval", "'60 seconds'::interval",
	).Replace(singleClaimSQL)
}

// The SQL ceiling's scripts. ceilingDispatcher (the ceiling the goals
// compare with) runs the dispatcher's own statements of a backlog round, as
// the dispatcher runs them; ceilingClaimOnly is the ceiling as first
// measured (issue 15's 66%), cheaper than any dispatcher can be.
const (
	ceilingDispatcher = "dispatcher"
	ceilingClaimOnly  = "claim-only"
)

// pgbenchScript is one transaction of the SQL ceiling, each statement its own
// autocommit transaction, fenced and durable like the dispatcher's.
//
// ceilingDispatcher: OutboxClaimWindow and OutboxMarkDoneMany over what the
// claim returned. The claim's upper bound is one snapshot
// (pg_current_snapshot, as OutboxClaimSnapshot reads it) taken when the
// round's rows are in (prepare; passed with -D), as a dispatcher's claims
// inside one window reuse the snapshot that opened it. The claim's rows go
// to pgbench whole (payload, headers and all, which pgbench reads and
// drops), as they go to a dispatcher: their output conversion and their
// bytes on the wire are part
// of every message's cost. pgbench keeps only one row of a result, so the
// claim also stores its ids and lease versions in two session settings
// (one extra one-row CTE), which the finalize reads back. The window claim
// runs without a cursor: its fresh lane reads the pending index of the
// backlog from the start, as the single-statement claim does (the dispatcher's keyset only
// makes its scans shorter).
//
// ceilingClaimOnly: the single-statement claim with its ids and lease versions aggregated
// into one row (\gset; no message leaves the server) and OutboxMarkDoneMany.
func pgbenchScript(batch int, kind string) string {
	oneLine := func(s string) string {
		// pgbench reads one SQL command up to the semicolon; keep it tidy.
		return regexp.MustCompile(`\s+`).ReplaceAllString(s, " ")
	}
	// Every row was claimed under the owner 'pgbench' (the dispatcher's
	// owners differ per claim, but one array of them costs the same).
	done := func(ids, vers string) string {
		return strings.NewReplacer(
			"@ids::bigint[]", ids,
			"@lease_versions::bigint[]", vers,
			"@lease_owners::text[]", "array_fill('pgbench'::text, ARRAY[coalesce(cardinality("+ids+"), 0)])",
			// The ceiling's rows are unordered, as the dispatcher says of such a batch.
			"@unordered_only::boolean", "true",
		).Replace(querySQL("OutboxMarkDoneMany"))
	}
	if kind == ceilingClaimOnly {
		claim := claimSQL(batch, "'pgbench'")
		// The claim ends in SELECT ... FROM claimed AS c ORDER BY c.id; keep its
		// CTEs and aggregate the claimed ids and lease versions instead.
		i := strings.LastIndex(claim, "SELECT c.id")
		if i < 0 || !strings.Contains(claim[i:], "FROM claimed AS c") {
			panic("singleClaimSQL no longer ends in SELECT c.id ... FROM claimed AS c; update pgbenchScript")
		}
		claimAgg := claim[:i] + "SELECT array_agg(c.id) AS ids, array_agg(c.lease_version) AS vers FROM claimed AS c"
		return oneLine(claimAgg) + " \\gset\n" + oneLine(done(":ids::bigint[]", ":vers::bigint[]")) + ";\n"
	}
	claim := strings.NewReplacer(
		"@snapshot::text", "'1:1:'::text",
		"@upper::text", ":snapshot::text",
		"@batch::integer", strconv.Itoa(batch)+"::integer",
		"@after_txid::bigint", "0::bigint",
		"@after_id::bigint", "0::bigint",
		"@due_after::timestamptz", ":at::timestamptz",
		"@owner::text", "'pgbench'::text",
		"@lease::interval", "'60 seconds'::interval",
	).Replace(querySQL("OutboxClaimWindow"))
	// The claim ends in SELECT ... FROM claimed AS c ORDER BY ...: add the
	// one-row CTE that keeps the ids and versions, joined to every row.
	i := strings.LastIndex(claim, "SELECT c.id")
	j := strings.LastIndex(claim, "FROM claimed AS c")
	if i < 0 || j < i {
		panic("OutboxClaimWindow no longer ends in SELECT c.id ... FROM claimed AS c; update pgbenchScript")
	}
	keep := "kept AS MATERIALIZED (SELECT set_config('pgbench.ids', coalesce(array_agg(k.id), '{}')::text, false) AS ids, " +
		"set_config('pgbench.vers', coalesce(array_agg(k.lease_version), '{}')::text, false) AS vers FROM claimed AS k) "
	// (A one-time filter on kept: a function of its columns in the select
	// list would run once per row, over two texts of some 20 kB each.)
	claim = claim[:i-1] + ", " + keep + claim[i:j] + "FROM kept, claimed AS c WHERE kept.ids IS NOT NULL AND kept.vers IS NOT NULL" +
		claim[j+len("FROM claimed AS c"):]
	return oneLine(claim) + ";\n" +
		oneLine(done("current_setting('pgbench.ids')::bigint[]", "current_setting('pgbench.vers')::bigint[]")) + ";\n"
}

// ceilingRunner runs the pgbench script of the SQL ceiling.
type ceilingRunner struct {
	pgbench, script string
	kind            string
	batch           int
	snapshot, at    string // the window the round's claims share (prepare)
}

func newCeilingRunner(e *env, kind string) (*ceilingRunner, func(), error) {
	pgbench := filepath.Join(e.pgBin, "pgbench")
	if _, err := os.Stat(pgbench); err != nil {
		return nil, nil, fmt.Errorf("pgbench not found next to pg_ctl: %w", err)
	}
	batch := outboxSetup().cfg.Batch
	f, err := os.CreateTemp("", "pgoutbox-ceiling-*.sql")
	if err != nil {
		return nil, nil, err
	}
	if _, err := f.WriteString(pgbenchScript(batch, kind)); err != nil {
		f.Close()
		os.Remove(f.Name())
		return nil, nil, err
	}
	f.Close()
	os.Chmod(f.Name(), 0o644)
	return &ceilingRunner{pgbench: pgbench, script: f.Name(), kind: kind, batch: batch}, func() { os.Remove(f.Name()) }, nil
}

// prepare gives the next run a fresh table of rows pending rows.
func (c *ceilingRunner) prepare(ctx context.Context, e *env, rows int) error {
	if err := resetOutbox(ctx, e.outbox); err != nil {
		return err
	}
	if err := fillOutboxSQL(ctx, e.outbox, rows, "pending"); err != nil {
		return err
	}
	// The window of the round: every row is committed, as when a dispatcher
	// opens its window on a backlog (OutboxClaimSnapshot).
	return e.outbox.QueryRow(ctx, "SELECT pg_current_snapshot()::text, now()::text").Scan(&c.snapshot, &c.at)
}

// run drives the script with the given clients over the prepared rows and
// returns rows/s, checked against the table.
func (c *ceilingRunner) run(ctx context.Context, e *env, clients, rows int) (float64, error) {
	perClient := rows / c.batch / clients
	host, port, user, dbname := splitURL(e.outboxURL)
	// The dispatcher's statements go as the dispatcher sends them: parsed
	// and planned at every execution, never a cached plan (dispatcher/plans.go).
	mode := "extended"
	if c.kind == ceilingClaimOnly {
		mode = "prepared" // as first measured
	}
	args := []string{"-n", "-M", mode, "-c", strconv.Itoa(clients),
		"-j", strconv.Itoa(clients), "-t", strconv.Itoa(perClient), "-f", c.script,
		"-h", host, "-p", port, "-U", user}
	if c.kind == ceilingDispatcher {
		args = append(args, "-D", "snapshot="+c.snapshot, "-D", "at="+c.at)
	}
	cmd := exec.CommandContext(ctx, c.pgbench, append(args, dbname)...)
	start, mc0 := time.Now(), readMachineCPU()
	out, err := cmd.CombinedOutput()
	elapsed, mc1 := time.Since(start), readMachineCPU()
	if err != nil {
		return 0, fmt.Errorf("pgbench: %w\n%s", err, out)
	}
	tps, err := parseTPS(string(out))
	if err != nil {
		return 0, fmt.Errorf("%w\n%s", err, out)
	}
	done, err := countDone(ctx, e.outbox)
	if err != nil {
		return 0, err
	}
	if want := int64(perClient * clients * c.batch); done != want {
		return 0, fmt.Errorf("pgbench ceiling: %d rows done, want %d\n%s", done, want, out)
	}
	rate := tps * float64(c.batch)
	logf("ceiling (%s): pgbench %d client(s), batch %d: %.1f tx/s = %.0f rows/s (%d rows in %s; machine %.0f%% busy, %s a row)", c.kind, clients, c.batch, tps, rate,
		done, elapsed.Round(time.Millisecond), 100*mc0.share(mc1), (mc1.busy-mc0.busy)/time.Duration(max(done, 1)))
	return rate, nil
}

// ceilingClients is the client count of the ceiling rounds interleaved with
// the drain rounds (the best of 1, 2 and 4 on this machine; item 5 measures
// all three).
const ceilingClients = 2

// runCeiling is item 5's detail: the ceiling with 1, 2 and 4 clients, and
// the claim-only ceiling as first measured with 2. The ceiling the goal
// compares with is measured in the drain item, in rounds interleaved with
// pgoutbox's and River's.
func runCeiling(ctx context.Context, e *env) error {
	rows := 200_000
	if e.o.full {
		rows = 500_000
	}
	e.res.CeilingRows = rows
	rounds := 1
	if e.o.full {
		rounds = 3
	}
	var details []string
	for _, m := range []struct {
		kind    string
		clients []int
	}{{ceilingDispatcher, []int{1, 2, 4}}, {ceilingClaimOnly, []int{ceilingClients}}} {
		c, cleanup, err := newCeilingRunner(e, m.kind)
		if err != nil {
			return err
		}
		defer cleanup()
		e.res.CeilingBatch = c.batch
		for _, clients := range m.clients {
			var rates []float64
			for r := 0; r < rounds; r++ {
				if err := c.prepare(ctx, e, rows); err != nil {
					return err
				}
				if err := settle(ctx, e.outbox, "outbox"); err != nil {
					return err
				}
				rate, err := c.run(ctx, e, clients, rows)
				if err != nil {
					return err
				}
				rates = append(rates, rate)
			}
			label := fmt.Sprintf("%d client(s)", clients)
			if m.kind == ceilingClaimOnly {
				label = fmt.Sprintf("claim-only script (the single-statement claim, ids aggregated, no row shipped), %d clients", clients)
			}
			details = append(details, fmt.Sprintf("%s: %s rows/s", label, kfmt(median(rates))))
		}
	}
	e.res.CeilingDetail = strings.Join(details, "; ")
	return nil
}

var tpsRE = regexp.MustCompile(`tps = ([0-9.]+) \((?:without initial connection time|excluding connections establishing)\)`)

func parseTPS(out string) (float64, error) {
	m := tpsRE.FindStringSubmatch(out)
	if m == nil {
		return 0, fmt.Errorf("pgbench: no tps line in output")
	}
	return strconv.ParseFloat(m[1], 64)
}

// splitURL takes postgres://user@host:port/db?... apart for pgbench.
func splitURL(u string) (host, port, user, dbname string) {
	re := regexp.MustCompile(`^postgres(?:ql)?://([^@/]+)@([^:/]+):(\d+)/([^?]+)`)
	m := re.FindStringSubmatch(u)
	if m == nil {
		return "127.0.0.1", "5432", "postgres", "postgres"
	}
	return m[2], m[3], m[1], m[4]
}
