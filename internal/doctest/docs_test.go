package doctest

import (
	"bufio"
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/pgoutbox/pgoutbox/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// readmeMaxLines is the front door's budget: what and why, install, quick
// start, producing, the relay, the guarantees, adoption, links. Everything
// deeper goes to docs/<topic>.md.
const readmeMaxLines = 400

func TestReadme_AtMost400Lines(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(Root(), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(b), "\n"); n > readmeMaxLines {
		t.Errorf("README.md has %d lines, at most %d: move the deep material to docs/<topic>.md and link it", n, readmeMaxLines)
	}
}

// docs are the Markdown files whose shell blocks run: README.md and every
// .md under docs/.
func docs(t *testing.T) []string {
	t.Helper()
	files := []string{"README.md"}
	err := filepath.WalkDir(filepath.Join(Root(), "docs"), func(p string, e fs.DirEntry, err error) error {
		if err == nil && !e.IsDir() && strings.HasSuffix(p, ".md") {
			rel, _ := filepath.Rel(Root(), p)
			files = append(files, rel)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(files)
	return files
}

// userFiles are the files a user reads or copies: the docs, the SQL that
// init copies, the Go packages whose doc comments pkg.go.dev shows, the
// command's help text (internal/cli) and the examples.
func userFiles(t *testing.T) []string {
	t.Helper()
	var files []string
	add := func(dir string, match func(string) bool) {
		err := filepath.WalkDir(filepath.Join(Root(), dir), func(p string, e fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if e.IsDir() {
				if e.Name() == "testdata" {
					return filepath.SkipDir
				}
				return nil
			}
			if match(p) {
				rel, _ := filepath.Rel(Root(), p)
				files = append(files, rel)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	md := func(p string) bool { return strings.HasSuffix(p, ".md") }
	sql := func(p string) bool { return strings.HasSuffix(p, ".sql") }
	goSrc := func(p string) bool { return strings.HasSuffix(p, ".go") && !strings.HasSuffix(p, "_test.go") }
	files = append(files, "README.md", "BENCHMARKS.md", "RELIABILITY.md", "sqlc.yaml", "Makefile", "Dockerfile")
	add("docs", func(p string) bool { return md(p) || sql(p) })
	add("queries", sql)
	add("migrations", func(p string) bool { return sql(p) || goSrc(p) })
	add("examples", func(p string) bool { return md(p) || sql(p) || goSrc(p) })
	for _, dir := range []string{"dispatcher", "publisher", "db", "console", "cmd", "internal/cli", "deploy"} {
		add(dir, goSrc)
	}
	return files
}

// forbidden are references a user cannot follow: documents outside the
// repository, the design notes and development log the project was built
// from, issue numbers of its tracker.
var forbidden = []*regexp.Regexp{
	regexp.MustCompile(`(?i)shared/seeds|\.\./shared/`),
	regexp.MustCompile(`(?i)\bthe seed\b|\bseed's\b`),
	regexp.MustCompile(`(?i)tuning[ -]log`),
	regexp.MustCompile(`(?i)\bissues? #?[0-9]+`),
	regexp.MustCompile(`(?i)\bentr(y|ies) [0-9]+`),
	regexp.MustCompile(`(?i)development log|design notes?\b`),
}

func TestUserFiles_ReferToNothingUsersLack(t *testing.T) {
	for _, f := range userFiles(t) {
		fh, err := os.Open(filepath.Join(Root(), f))
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(fh)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for n := 1; sc.Scan(); n++ {
			for _, re := range forbidden {
				if m := re.FindString(sc.Text()); m != "" {
					t.Errorf("%s:%d: %q refers to something users do not have; say it in the project's own words:\n\t%s", f, n, m, strings.TrimSpace(sc.Text()))
				}
			}
		}
		fh.Close()
	}
}

var linkRe = regexp.MustCompile(`\]\(([^)#\s]+)(#[^)\s]*)?\)`)

// Every relative link in the docs points at a file that exists.
func TestDocs_LinksResolve(t *testing.T) {
	for _, f := range append(docs(t), "BENCHMARKS.md", "RELIABILITY.md", "examples/adopt/README.md") {
		b, err := os.ReadFile(filepath.Join(Root(), f))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range linkRe.FindAllStringSubmatch(string(b), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			if _, err := os.Stat(filepath.Join(Root(), filepath.Dir(f), target)); err != nil {
				t.Errorf("%s: link %s: %v", f, target, err)
			}
		}
	}
}

// A migration nobody documented fails here: docs/schema.md has one row per
// file of migrations/.
func TestDocs_EveryMigrationIsDocumented(t *testing.T) {
	schema, err := os.ReadFile(filepath.Join(Root(), "docs", "schema.md"))
	if err != nil {
		t.Fatal(err)
	}
	// The numbered files; schema.sql, the baseline, is described above the table.
	if !strings.Contains(string(schema), "`migrations/schema.sql`") {
		t.Error("docs/schema.md does not describe migrations/schema.sql")
	}
	names, err := filepath.Glob(filepath.Join(Root(), "migrations", "0*.sql"))
	if err != nil || len(names) == 0 {
		t.Fatalf("no migrations found: %v", err)
	}
	for _, n := range names {
		row := "| `" + filepath.Base(n) + "` |"
		if !strings.Contains(string(schema), row) {
			t.Errorf("migrations/%s has no row in docs/schema.md (%s what it does |): document every migration there", filepath.Base(n), row)
		}
	}
}

var (
	sqlcFloorRe = regexp.MustCompile(`sqlc ([0-9]+\.[0-9]+\.[0-9]+) or\s+later`)
	sqlcPinRe   = regexp.MustCompile(`(?m)^\s*github\.com/sqlc-dev/sqlc v([0-9.]+)`)
)

// The README states the lowest sqlc it supports, and that is the version
// make verify regenerates with and the adoption test runs (tools.mod).
func TestDocs_SqlcFloorIsTheTestedVersion(t *testing.T) {
	mod, err := os.ReadFile(filepath.Join(Root(), "tools.mod"))
	if err != nil {
		t.Fatal(err)
	}
	pin := sqlcPinRe.FindSubmatch(mod)
	if pin == nil {
		t.Fatal("tools.mod pins no sqlc")
	}
	for _, f := range []string{"README.md", "docs/adoption.md", "internal/cli/initcmd.go", "Makefile"} {
		b, err := os.ReadFile(filepath.Join(Root(), f))
		if err != nil {
			t.Fatal(err)
		}
		floors := sqlcFloorRe.FindAllSubmatch(b, -1)
		if len(floors) == 0 {
			t.Errorf("%s states no supported sqlc (\"sqlc X.Y.Z or later\")", f)
		}
		for _, fl := range floors {
			if string(fl[1]) != string(pin[1]) {
				t.Errorf("%s says sqlc %s or later, but the version tested (tools.mod, make verify, the adoption test) is %s", f, fl[1], pin[1])
			}
		}
	}
}

var (
	benchRunRe = regexp.MustCompile(`Generated by .* on ([0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2} UTC)`)
	// The goal row of BENCHMARKS.md the README restates: pgoutbox run
	// with no tuning flags against River.
	benchRiverRe = regexp.MustCompile("\\| Defaults: `pgoutbox run` \\(no tuning flags\\) vs River \\(same run\\) \\| [^|]+ \\| ([0-9.]+)× \\(([0-9,]+) vs ([0-9,]+) msg/s\\)")
	// A figure set against River: "2.6× River", "River's 17,973", "River
	// under the same snapshot: 9.3×".
	riverFigureRes = []*regexp.Regexp{
		regexp.MustCompile(`[0-9][0-9.]*×\s+River`),
		regexp.MustCompile(`River's\s+[0-9]`),
		regexp.MustCompile(`River[^.\n|]{0,40}?[0-9][0-9.]*×`),
	}
)

// The README states the comparison with River once, as BENCHMARKS.md's
// latest run measured it (the defaults row: `pgoutbox run` with no tuning
// flags), naming that run; no other document states a figure of its own.
func TestDocs_RiverFigureIsBenchmarksLatestRun(t *testing.T) {
	bench, err := os.ReadFile(filepath.Join(Root(), "BENCHMARKS.md"))
	if err != nil {
		t.Fatal(err)
	}
	run := benchRunRe.FindSubmatch(bench)
	row := benchRiverRe.FindSubmatch(bench)
	if run == nil || row == nil {
		t.Fatalf("BENCHMARKS.md: no run date (%v) or no defaults-vs-River goal row (%v): update this test with the benchmark's format", run != nil, row != nil)
	}
	want := fmt.Sprintf("%s× River's rate (%s vs %s msg/s", row[1], row[2], row[3])
	for _, f := range docs(t) {
		b, err := os.ReadFile(filepath.Join(Root(), f))
		if err != nil {
			t.Fatal(err)
		}
		text := strings.Join(strings.Fields(string(b)), " ") // a figure may wrap
		var figures []string
		for _, re := range riverFigureRes {
			figures = append(figures, re.FindAllString(text, -1)...)
		}
		if f != "README.md" {
			for _, fig := range figures {
				t.Errorf("%s: %q: state the comparison with River only in the README's Performance section (from BENCHMARKS.md) and refer to it", f, fig)
			}
			continue
		}
		if len(figures) != 1 || !strings.Contains(text, want) {
			t.Errorf("README.md states River figures %q; want exactly one, BENCHMARKS.md's latest run: %q", figures, want)
		}
		if !strings.Contains(text, "make bench` run of "+string(run[1])) {
			t.Errorf("README.md does not name the run its River figure comes from: want \"make bench` run of %s\" (BENCHMARKS.md)", run[1])
		}
	}
}

// Every block marked as not run says why, with a reason the test knows and
// content that reason is about.
func TestDocs_NotRunMarkingsAreDeliberate(t *testing.T) {
	marked := 0
	for _, f := range docs(t) {
		blocks, err := Parse(filepath.Join(Root(), f))
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range blocks {
			if !b.Shell() {
				continue
			}
			if err := b.CheckSkip(); err != nil {
				t.Error(err)
			}
			if b.SkipReason() != "" {
				marked++
			}
		}
	}
	t.Logf("%d blocks marked as not run", marked)
}

// sampleApp names the documents that run in a copy of examples/adopt (an
// application adopting pgoutbox) instead of a copy of this repository.
var sampleApp = map[string]bool{"docs/adoption.md": true}

// adoptionHeading is the README section internal/adopttest runs, command for
// command, in copies of examples/adopt.
const adoptionHeading = "Adopting the SQL into your sqlc project"

// TestDocs_ShellBlocksRun runs every shell block of README.md and docs/ in
// order, one document at a time, in a scratch copy of this repository (or of
// examples/adopt), against a fresh database.
func TestDocs_ShellBlocksRun(t *testing.T) {
	tl := Build(t)
	for _, f := range docs(t) {
		t.Run(strings.ReplaceAll(f, "/", "_"), func(t *testing.T) {
			t.Parallel()
			blocks, err := Parse(filepath.Join(Root(), f))
			if err != nil {
				t.Fatal(err)
			}
			var run []Block
			for _, b := range blocks {
				if f == "README.md" && b.Heading == adoptionHeading {
					continue // internal/adopttest runs these in the sample application
				}
				run = append(run, b)
			}
			if !hasShell(run) {
				return
			}
			src := Root()
			if sampleApp[f] {
				src = filepath.Join(Root(), "examples", "adopt")
			}
			dir := filepath.Join(t.TempDir(), filepath.Base(src))
			CopyTree(t, src, dir)
			dbURL := EmptyDatabase(t, "doc_"+strings.Map(func(r rune) rune {
				if r >= 'a' && r <= 'z' {
					return r
				}
				return '_'
			}, strings.ToLower(strings.TrimSuffix(filepath.Base(f), ".md"))))
			NewShell(t, tl, dir, dbURL).RunAll(t, run)
		})
	}
}

func hasShell(blocks []Block) bool {
	for _, b := range blocks {
		if b.Shell() && b.SkipReason() == "" {
			return true
		}
	}
	return false
}

func ExampleBlock_SkipReason() {
	b := Block{Lang: "sh", Body: "# not run by the docs test: needs a published release\ngo install github.com/pgoutbox/pgoutbox/cmd/pgoutbox@latest\n"}
	fmt.Println(b.SkipReason(), b.CheckSkip() == nil)
	// Output: needs a published release true
}

// A createdb line of the docs, whatever server it names, creates a
// database on the test's server: the README's quick start runs as written
// without a server of the reader's own.
func TestShell_CreatedbRunsOnTheTestServer(t *testing.T) {
	dir := t.TempDir()
	s := NewShell(t, Tools{Bin: dir}, dir, EmptyDatabase(t, "doc_shell"))
	s.Run(t, Block{File: "test.md", Line: 1, Lang: "sh", Body: "createdb -h localhost -p 1 -U nobody outbox_try\n"}, "")
	s.mu.Lock()
	created := append([]string(nil), s.created...)
	s.mu.Unlock()
	if len(created) != 1 {
		t.Fatalf("createdb lines rewritten: %d, want 1", len(created))
	}
	conn, err := pgx.Connect(context.Background(), pgtest.AdminURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var n int
	if err := conn.QueryRow(context.Background(), "SELECT count(*) FROM pg_database WHERE datname = $1", created[0]).Scan(&n); err != nil || n != 1 {
		t.Errorf("database %s on the test server: %d (%v), want 1", created[0], n, err)
	}
}

var (
	exportURLRe = regexp.MustCompile(`(?m)^export DATABASE_URL='?[a-z]+://[^/\s']*/([A-Za-z0-9_]+)`)
	uiAddrRe    = regexp.MustCompile(`f\.String\("addr", "([^"]+)"`)
)

// What a newcomer meets first in the README's quick start: the example of
// a server of their own creates a database and points DATABASE_URL at it
// (not at the postgres maintenance database), nothing promises "no tools"
// before a `go install`, and the console's address is given as
// `pgoutbox ui` serves it by default.
func TestReadme_QuickStartOnYourOwnServer(t *testing.T) {
	blocks, err := Parse(filepath.Join(Root(), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	var own Block
	for _, b := range blocks {
		if b.Heading == "Quick start" && b.Shell() && strings.Contains(b.Body, "export DATABASE_URL=") {
			own = b
		}
	}
	if own.Body == "" {
		t.Fatal("README.md: no quick-start block that sets DATABASE_URL")
	}
	m := exportURLRe.FindStringSubmatch(own.Body)
	switch {
	case m == nil:
		t.Errorf("%s: DATABASE_URL names no database:\n%s", own.Where(), own.Body)
	case m[1] == "postgres" || m[1] == "template1":
		t.Errorf("%s: DATABASE_URL points at the %s maintenance database; create a database to try pgoutbox in", own.Where(), m[1])
	case !regexp.MustCompile(`(?m)^createdb\b.*\s` + m[1] + `\s*$`).MatchString(own.Body):
		t.Errorf("%s: DATABASE_URL names database %s, which no createdb line before it creates:\n%s", own.Where(), m[1], own.Body)
	}
	b, err := os.ReadFile(filepath.Join(Root(), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	readme := strings.Join(strings.Fields(string(b)), " ")
	if strings.Contains(readme, "no global tools") && strings.Contains(readme, "go install ./cmd/pgoutbox") {
		t.Error(`README.md promises "no global tools" and then runs go install`)
	}
	src, err := os.ReadFile(filepath.Join(Root(), "internal", "cli", "console.go"))
	if err != nil {
		t.Fatal(err)
	}
	addr := uiAddrRe.FindSubmatch(src)
	if addr == nil {
		t.Fatal("internal/cli/console.go: no default --addr of pgoutbox ui found")
	}
	if want := "`pgoutbox ui` serves the web console on <http://" + string(addr[1]) + "/>"; !strings.Contains(readme, want) {
		t.Errorf("README.md does not say where the console is: want %q", want)
	}
}
