package adopttest

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/pgoutbox/pgoutbox/internal/doctest"
	"github.com/pgoutbox/pgoutbox/migrations"
)

// adoptionHeading is the README section these tests follow.
const adoptionHeading = "Adopting the SQL into your sqlc project"

// readme returns the README's adoption blocks: route 1's commands and the
// output they show, route 2's commands and its sqlc entry. Every shell block
// of the section must be one of them, so a command added to the README is a
// command this package runs.
func readme(t *testing.T) (route1, route1Out, route2, route2Entry doctest.Block) {
	t.Helper()
	blocks, err := doctest.Parse(filepath.Join(repoRoot(), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	find := func(lang, lead string) (doctest.Block, int) {
		b, i, err := doctest.Find(blocks, lang, adoptionHeading, lead)
		if err != nil {
			t.Fatal(err)
		}
		return b, i
	}
	route1, i := find("sh", "Route 1")
	if i+1 >= len(blocks) || blocks[i+1].Lang != "text" {
		t.Fatalf("%s: route 1 has no text block with its output", route1.Where())
	}
	route1Out = blocks[i+1]
	route2, _ = find("sh", "Route 2")
	route2Entry, _ = find("yaml", "add an item under `sql:`")
	for _, b := range blocks {
		if b.Heading == adoptionHeading && b.Shell() && b.Line != route1.Line && b.Line != route2.Line {
			t.Errorf("%s: a shell block of %q that internal/adopttest does not run", b.Where(), adoptionHeading)
		}
	}
	return route1, route1Out, route2, route2Entry
}

// adopted is an application copy with its own migrations applied by its own
// goose command, its sqlc code generated, and a shell in its folder.
type adopted struct {
	dir   string
	dbURL string
	sh    *doctest.Shell
	store map[string]string // the app's sqlc package before adopting
}

// prepare copies examples/adopt, applies its migrations as the app does
// (appGoose: its goose command) and generates its code: the state an
// application is in before it adopts pgoutbox.
func prepare(t *testing.T, edit func(dir string), appGoose string) *adopted {
	t.Helper()
	a := &adopted{dir: app(t), dbURL: emptyDatabase(t)}
	if edit != nil {
		edit(a.dir)
	}
	a.sh = doctest.NewShell(t, doctest.Build(t), a.dir, a.dbURL)
	a.run(t, appGoose)
	a.run(t, "sqlc generate")
	a.store = readDir(t, filepath.Join(a.dir, "store"))
	return a
}

// run runs one command line in the app's folder, as a user types it.
func (a *adopted) run(t *testing.T, line string) string {
	t.Helper()
	return a.sh.Run(t, doctest.Block{File: "command", Line: 1, Lang: "sh", Body: line + "\n"}, "")
}

// relay runs `pgoutbox run ...` until it prints want.
func (a *adopted) relay(t *testing.T, line, want string) {
	t.Helper()
	a.sh.Run(t, doctest.Block{File: "command", Line: 1, Lang: "sh", Body: line + "   # until Ctrl-C\n"}, want)
}

func readDir(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out[e.Name()] = string(b)
	}
	return out
}

var typeRe = regexp.MustCompile(`(?m)^type (\w+) `)

// storeGained returns the types the app's sqlc package gained since prepare,
// and fails on any other change to it.
func (a *adopted) storeGained(t *testing.T) []string {
	t.Helper()
	now := readDir(t, filepath.Join(a.dir, "store"))
	var gained []string
	for name, body := range now {
		before, ok := a.store[name]
		if !ok {
			t.Errorf("the app's package store gained the file %s", name)
			continue
		}
		if body == before {
			continue
		}
		old := map[string]bool{}
		for _, m := range typeRe.FindAllStringSubmatch(before, -1) {
			old[m[1]] = true
		}
		for _, m := range typeRe.FindAllStringSubmatch(body, -1) {
			if !old[m[1]] {
				gained = append(gained, m[1])
			}
		}
		if name != "models.go" {
			t.Errorf("the app's store/%s changed", name)
		}
	}
	return gained
}

// The README's route 1, command for command: pgoutbox init with
// --sqlc-config, sqlc generate, the goose command, an event enqueued and
// delivered by the relay. The commands init prints are the README's, the
// app's package, tests, mock and migrator are untouched, and migrate status
// reads the history.
func TestAdopt_ReadmeRoute1(t *testing.T) {
	t.Parallel()
	route1, out, _, _ := readme(t)
	a := prepare(t, nil, `goose -dir db/migrations postgres "$DATABASE_URL" up`)
	a.sh.Run(t, route1, out.Body)

	if gained := a.storeGained(t); len(gained) > 0 {
		t.Errorf("the app's package store gained %v", gained)
	}
	// Every command init printed is in the README's block, as printed.
	printed := a.run(t, "pgoutbox init --table hr_outbox --dir db/outbox --sqlc-config sqlc.yaml --upgrade")
	for _, line := range initCommands(printed) {
		if !strings.Contains(route1.Body, line) && !strings.Contains(line, "pgoutbox migrate up") {
			t.Errorf("init prints %q, which the README's route 1 does not show", line)
		}
	}
	writeRelay(t, a.dir, "db/outbox/hroutbox", "HrOutbox")
	a.run(t, "go vet ./... && go test ./...")
	if got := a.run(t, "go run ./cmd/relay enqueue Ada EmployeeOnboarded && go run ./cmd/relay relay"); !strings.Contains(got, "relayed 2 EmployeeOnboarded") {
		t.Errorf("the relay written against the generated code: %s", got)
	}
	st := a.run(t, "pgoutbox migrate status --table hr_outbox")
	if !strings.Contains(st, "up to date") || strings.Contains(st, "pending") {
		t.Errorf("migrate status:\n%s", st)
	}
	a.run(t, `goose -dir db/migrations postgres "$DATABASE_URL" up`) // the app's own migrator still runs
}

// The README's route 2, command for command: the module's files copied
// into folders of their own (every migration, by the glob), applied with
// pgoutbox's version table, the README's sqlc entry added, sqlc generate,
// and the relay delivering from the copied table.
func TestAdopt_ReadmeRoute2(t *testing.T) {
	t.Parallel()
	_, _, route2, entry := readme(t)
	a := prepare(t, nil, `goose -dir db/migrations postgres "$DATABASE_URL" up`)
	// The README says: after `go get github.com/pgoutbox/pgoutbox`. No
	// release is published where this test can fetch it, so the module is
	// this checkout.
	a.run(t, "go mod edit -require=github.com/pgoutbox/pgoutbox@v0.0.0-00010101000000-000000000000 -replace=github.com/pgoutbox/pgoutbox="+repoRoot())
	a.sh.Run(t, route2, "")
	copied, _ := filepath.Glob(filepath.Join(a.dir, "db", "outbox", "migrations", "*.sql"))
	if want := len(migrationNames(t)); len(copied) != want {
		t.Errorf("route 2 copied %d migrations, pgoutbox has %d", len(copied), want)
	}
	addSQLCEntry(t, a.dir, entry.Body)
	a.run(t, "sqlc generate")
	models, err := os.ReadFile(filepath.Join(a.dir, "db", "outboxdb", "models.go"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(models), "Employee") || strings.Contains(string(models), "Payslip") {
		t.Errorf("the outbox package holds the app's models:\n%s", models)
	}
	if gained := a.storeGained(t); len(gained) > 0 {
		t.Errorf("the app's package store gained %v", gained)
	}
	writeRelay(t, a.dir, "db/outboxdb", "Outbox")
	a.run(t, "go vet ./... && go test ./...")
	if got := a.run(t, "go run ./cmd/relay enqueue Ada EmployeeHired && go run ./cmd/relay relay"); !strings.Contains(got, "relayed 1 EmployeeHired") {
		t.Errorf("the relay written against the generated code: %s", got)
	}
	a.run(t, "go run ./cmd/relay enqueue Grace EmployeeOnboarded")
	a.relay(t, "pgoutbox run --publisher stdout", `{"id":"2",…"event_type":"EmployeeOnboarded",…}`)
	st := a.run(t, "pgoutbox migrate status")
	if !strings.Contains(st, "up to date") {
		t.Errorf("migrate status:\n%s", st)
	}
}

var initCmdRe = regexp.MustCompile(`(?m)^  \$ (.+?)(?:\s+#.*)?$`)

// initCommands are the commands init prints (the lines starting "  $ ").
func initCommands(stderr string) []string {
	var out []string
	for _, m := range initCmdRe.FindAllStringSubmatch(stderr, -1) {
		out = append(out, strings.TrimSpace(m[1]))
	}
	return out
}

// The core alone, in a fresh sqlc project: the README's route 2, command for
// command, in a folder that holds nothing but a go.mod; the README's sqlc
// entry is the whole sqlc.yaml. sqlc compiles queries/*.sql against
// schema.sql alone, the generated package builds and vets, and goose applied
// the numbered migrations to an empty database.
func TestAdopt_ReadmeRoute2InAnEmptyProject(t *testing.T) {
	t.Parallel()
	_, _, route2, entry := readme(t)
	dir := filepath.Join(t.TempDir(), "empty")
	mustWrite(t, filepath.Join(dir, "go.mod"), "module example.com/empty\n\ngo 1.24\n")
	dbURL := emptyDatabase(t)
	s := doctest.NewShell(t, doctest.Build(t), dir, dbURL)
	run := func(line string) string {
		return s.Run(t, doctest.Block{File: "command", Line: 1, Lang: "sh", Body: line + "\n"}, "")
	}
	run("go mod edit -require=github.com/pgoutbox/pgoutbox@v0.0.0-00010101000000-000000000000 -replace=github.com/pgoutbox/pgoutbox=" + repoRoot())
	s.Run(t, route2, "")
	body := entry.Body
	if i := strings.Index(body, "\nsql:\n"); i >= 0 {
		body = body[i+len("\nsql:\n"):]
	}
	mustWrite(t, filepath.Join(dir, "sqlc.yaml"), "version: \"2\"\nsql:\n"+body)
	run("sqlc generate")
	run("go mod tidy && go vet ./...")
	got, err := os.ReadDir(filepath.Join(dir, "db", "outboxdb"))
	if err != nil {
		t.Fatal(err)
	}
	var files []string
	for _, f := range got {
		files = append(files, f.Name())
	}
	queries, _ := filepath.Glob(filepath.Join(repoRoot(), "queries", "*.sql"))
	if len(files) != len(queries)+2 { // one .go per query file, db.go, models.go
		t.Errorf("generated %v from %d query files", files, len(queries))
	}
	conn, err := pgx.Connect(context.Background(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var version int64
	if err := conn.QueryRow(context.Background(), "SELECT max(version_id) FROM pgoutbox_migrations WHERE is_applied").Scan(&version); err != nil || version != migrations.Latest() {
		t.Errorf("goose left the database at version %d (%v), want %d", version, err, migrations.Latest())
	}
}
