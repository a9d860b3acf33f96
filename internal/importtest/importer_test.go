// Package importtest measures what an application inherits when it imports
// pgoutbox's dispatcher: a fresh module with its own Go and pgx versions runs
// `go mod tidy` against this checkout (through a replace directive) and the
// test reads the go.mod that results (`go mod edit -json`).
//
// The figures are in docs/dependencies.md; run with -v to print them.
package importtest

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// importerGo and importerPgx are the versions of the application in issue 13
// (go 1.25.0, pgx 5.8). go 1.25.0 is also pgoutbox's own go line: every
// requirement in go.mod is at a version whose go line is at most 1.25.0
// (franz-go v1.21.x, nats.go v1.53.x, x/* chosen for it), so the importer's go
// line must not move.
const (
	importerGo  = "1.25.0"
	importerPgx = "v5.8.0"
)

type goMod struct {
	Go      string
	Require []struct {
		Path     string
		Version  string
		Indirect bool
	}
}

func repoRoot(t *testing.T) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

func goCmd(t *testing.T, dir string, args ...string) []byte {
	t.Helper()
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOTOOLCHAIN=local", "GOWORK=off")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go %s in %s: %v\n%s", strings.Join(args, " "), dir, err, out)
	}
	return out
}

// tidyImporter writes a module at importerGo with pgx at importerPgx whose
// main package imports pkgs (dispatcher and pgxpool always), runs go mod tidy
// and go build in it and returns its go.mod.
func tidyImporter(t *testing.T, pkgs ...string) goMod {
	t.Helper()
	dir := t.TempDir()
	root, err := filepath.Abs(repoRoot(t))
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "go.mod"), "module example.com/importer\n\ngo "+importerGo+"\n\n"+
		"require (\n\tgithub.com/jackc/pgx/v5 "+importerPgx+"\n\tgithub.com/pgoutbox/pgoutbox v0.0.0\n)\n\n"+
		"replace github.com/pgoutbox/pgoutbox => "+root+"\n")
	var blank strings.Builder
	for _, p := range pkgs {
		blank.WriteString("\t_ \"" + p + "\"\n")
	}
	writeFile(t, filepath.Join(dir, "main.go"), `package main

import (
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/pgoutbox/dispatcher"
`+blank.String()+`)

func main() {
	_ = dispatcher.Config{}
	_ = (*pgxpool.Pool)(nil)
}
`)
	goCmd(t, dir, "mod", "tidy")
	goCmd(t, dir, "build", "./...")
	var m goMod
	if err := json.Unmarshal(goCmd(t, dir, "mod", "edit", "-json"), &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// checkGoAndPgx fails the test when tidy moved the importer's go line or pgx.
func checkGoAndPgx(t *testing.T, m goMod) {
	t.Helper()
	if m.Go != importerGo {
		t.Errorf("go line raised from %s to %s", importerGo, m.Go)
	}
	for _, r := range m.Require {
		if r.Path == "github.com/jackc/pgx/v5" && r.Version != importerPgx {
			t.Errorf("pgx raised from %s to %s", importerPgx, r.Version)
		}
	}
}

func TestImporterOfDispatcherInheritsNoToolRequirements(t *testing.T) {
	t.Parallel()
	m := tidyImporter(t)
	checkGoAndPgx(t, m)
	var direct, indirect []string
	for _, r := range m.Require {
		for _, banned := range []string{"sqlc", "pg_query", "pganalyze", "wazero", "wasilibs", "grpc", "cel", "antlr"} {
			if strings.Contains(r.Path, banned) {
				t.Errorf("importer inherits %s %s (a code-generator requirement)", r.Path, r.Version)
			}
		}
		if r.Indirect {
			indirect = append(indirect, r.Path+" "+r.Version)
		} else {
			direct = append(direct, r.Path+" "+r.Version)
		}
	}
	t.Logf("importer go.mod after go mod tidy: go %s, %d direct, %d indirect requirements", m.Go, len(direct), len(indirect))
	for _, r := range indirect {
		t.Logf("  indirect %s", r)
	}
	// The ceiling is a guard against a new heavy dependency; raise it only
	// with a reason in the README's figures.
	if len(indirect) > 12 {
		t.Errorf("%d indirect requirements (at most 12 expected)", len(indirect))
	}
}

// An application that also imports the publishers (their client libraries:
// franz-go, nats.go, amqp091-go, and through them x/crypto, x/sys) keeps its
// go line and pgx as well.
func TestImporterOfEveryPublisherKeepsGoLine(t *testing.T) {
	t.Parallel()
	m := tidyImporter(t,
		"github.com/pgoutbox/pgoutbox/publisher/jetstream",
		"github.com/pgoutbox/pgoutbox/publisher/kafka",
		"github.com/pgoutbox/pgoutbox/publisher/rabbitmq",
		"github.com/pgoutbox/pgoutbox/publisher/stdout",
		"github.com/pgoutbox/pgoutbox/publisher/webhook",
	)
	checkGoAndPgx(t, m)
	t.Logf("importer of every publisher: go %s, %d requirements", m.Go, len(m.Require))
	for _, r := range m.Require {
		for _, banned := range []string{"sqlc", "wazero", "kfake"} {
			if strings.Contains(r.Path, banned) {
				t.Errorf("importer inherits %s %s (a tool or test-only requirement)", r.Path, r.Version)
			}
		}
	}
}

func writeFile(t *testing.T, path, body string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

// An application that mounts the web console (package console) keeps its go
// line and pgx, and inherits none of the browser tests' requirements
// (chromedp and its DevTools protocol bindings are test-only requirements
// of pgoutbox).
func TestImporterOfConsoleInheritsNoBrowserTestRequirements(t *testing.T) {
	t.Parallel()
	m := tidyImporter(t, "github.com/pgoutbox/pgoutbox/console")
	checkGoAndPgx(t, m)
	for _, r := range m.Require {
		for _, banned := range []string{"chromedp", "go-json-experiment", "sqlc", "kfake"} {
			if strings.Contains(r.Path, banned) {
				t.Errorf("importer of console inherits %s %s (a test-only or tool requirement)", r.Path, r.Version)
			}
		}
	}
	t.Logf("importer of console: go %s, %d requirements", m.Go, len(m.Require))
}
