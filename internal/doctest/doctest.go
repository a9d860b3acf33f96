// Package doctest runs the project's documentation as a user would: it reads
// the fenced blocks of Markdown files and runs the shell blocks, in order, in
// a scratch folder against a real database, with pgoutbox, sqlc and goose on
// PATH. The conventions a writer follows are in docs/development.md ("How the
// docs are tested"); this package enforces them.
package doctest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgoutbox/pgoutbox/internal/pgtest"
)

// Block is one fenced block of a Markdown file.
type Block struct {
	File    string // path as given to Parse
	Line    int    // line of the opening fence (1-based)
	Lang    string // the fence's info string: sh, text, yaml, go, ...
	Body    string // the lines between the fences, each ending in \n
	Heading string // the nearest heading above the block, without its #s
	Lead    string // the prose between the previous block (or heading) and this one
}

// Where names the block for messages: file:line.
func (b Block) Where() string { return fmt.Sprintf("%s:%d", b.File, b.Line) }

// Shell reports whether the block is one a user runs in a shell.
func (b Block) Shell() bool {
	switch b.Lang {
	case "sh", "bash", "shell", "console":
		return true
	}
	return false
}

// notRunRe is the first line of a block that cannot run in the test.
var notRunRe = regexp.MustCompile(`^# not run by the docs test: (.+)$`)

// SkipReason is the reason a shell block gives for not being run ("" when it
// runs).
func (b Block) SkipReason() string {
	first, _, _ := strings.Cut(b.Body, "\n")
	if m := notRunRe.FindStringSubmatch(strings.TrimSpace(first)); m != nil {
		return strings.TrimSpace(m[1])
	}
	return ""
}

// SkipReasons are the reasons a block may give for not being run, each with
// what such a block must contain: a marked block that holds none of it is
// runnable after all, and the marking an accident.
var SkipReasons = map[string]*regexp.Regexp{
	"needs a published release":    regexp.MustCompile(`go (install|get) github\.com/pgoutbox/pgoutbox`),
	"installs system packages":     regexp.MustCompile(`\b(apt-get|brew)\b`),
	"needs Docker or Kubernetes":   regexp.MustCompile(`\b(docker|kubectl)\b`),
	"needs hosts of your own":      regexp.MustCompile(`example\.com|…|\.\.\.|<[A-Za-z_]+>`),
	"names messages of your own":   regexp.MustCompile(`(dead (retry|skip|show)|redeliver) [0-9]`),
	"runs the test suite itself":   regexp.MustCompile(`\bmake (test|stress)\b`),
	"takes longer than a test may": regexp.MustCompile(`\bmake (bench|bench-full|chaos|chaos-long|chaos-failover)\b|\s-bench\s`),
}

// CheckSkip returns an error when the block's reason for not running is
// unknown, or the block holds nothing that reason is about.
func (b Block) CheckSkip() error {
	reason := b.SkipReason()
	if reason == "" {
		return nil
	}
	re, ok := SkipReasons[reason]
	if !ok {
		var known []string
		for k := range SkipReasons {
			known = append(known, fmt.Sprintf("%q", k))
		}
		return fmt.Errorf("%s: unknown reason %q for not running the block; use one of %s (docs/development.md)", b.Where(), reason, strings.Join(known, ", "))
	}
	_, rest, _ := strings.Cut(b.Body, "\n")
	if !re.MatchString(rest) {
		return fmt.Errorf("%s: the block says %q but holds nothing of the kind (%s): it can run, so remove the marking", b.Where(), reason, re)
	}
	return nil
}

// untilRe marks the last command of a block as one that runs until stopped.
var untilRe = regexp.MustCompile(`#\s*until Ctrl-C\s*$`)

// Until reports whether the block's last command runs until Ctrl-C.
func (b Block) Until() bool {
	lines := strings.Split(strings.TrimRight(b.Body, "\n"), "\n")
	return untilRe.MatchString(lines[len(lines)-1])
}

var (
	fenceRe   = regexp.MustCompile("^```\\s*([A-Za-z0-9_+-]*)")
	headingRe = regexp.MustCompile(`^#{1,6}\s+(.*)$`)
)

// Parse returns the fenced blocks of a Markdown file.
func Parse(path string) ([]Block, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var (
		blocks  []Block
		cur     *Block
		heading string
		lead    strings.Builder
	)
	sc := bufio.NewScanner(strings.NewReader(string(b)))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if cur != nil {
			if strings.HasPrefix(strings.TrimSpace(line), "```") {
				blocks = append(blocks, *cur)
				cur = nil
				lead.Reset()
				continue
			}
			cur.Body += line + "\n"
			continue
		}
		if m := fenceRe.FindStringSubmatch(line); m != nil {
			cur = &Block{File: path, Line: n, Lang: m[1], Heading: heading, Lead: strings.TrimSpace(lead.String())}
			continue
		}
		if m := headingRe.FindStringSubmatch(line); m != nil {
			heading = m[1]
			lead.Reset()
			continue
		}
		lead.WriteString(line + "\n")
	}
	if cur != nil {
		return nil, fmt.Errorf("%s:%d: a fence that is never closed", path, cur.Line)
	}
	return blocks, sc.Err()
}

// Root is the repository's root folder.
func Root() string {
	_, file, _, _ := runtime.Caller(0)
	root, _ := filepath.Abs(filepath.Join(filepath.Dir(file), "..", ".."))
	return root
}

// Tools holds the commands the docs use, built once per test binary.
type Tools struct {
	Bin string // a folder with pgoutbox, sqlc and goose
}

var (
	toolsOnce sync.Once
	tools     Tools
	toolsErr  error
)

// Build builds pgoutbox (this checkout), sqlc (the version tools.mod pins)
// and goose (cmd/goose: goose's Provider behind goose's command-line flags;
// goose's own command is not pinned, it pulls every database driver) into a
// folder that lives as long as the test binary.
func Build(t testing.TB) Tools {
	t.Helper()
	toolsOnce.Do(func() {
		dir, err := os.MkdirTemp("", "pgoutbox-doctest-bin-")
		if err != nil {
			toolsErr = err
			return
		}
		for _, args := range [][]string{
			{"build", "-o", filepath.Join(dir, "pgoutbox"), "./cmd/pgoutbox"},
			{"build", "-o", filepath.Join(dir, "goose"), "./internal/cmd/goose"},
			{"build", "-modfile=tools.mod", "-o", filepath.Join(dir, "sqlc"), "github.com/sqlc-dev/sqlc/cmd/sqlc"},
		} {
			cmd := exec.Command("go", args...)
			cmd.Dir = Root()
			cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOWORK=off")
			if out, err := cmd.CombinedOutput(); err != nil {
				toolsErr = fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, out)
				return
			}
		}
		tools = Tools{Bin: dir}
	})
	if toolsErr != nil {
		t.Fatal(toolsErr)
	}
	return tools
}

// EmptyDatabase creates a database with nothing in it on the test server
// and returns its URL; it is dropped when the test passes.
func EmptyDatabase(t testing.TB, prefix string) string {
	t.Helper()
	ctx := context.Background()
	admin := pgtest.AdminURL(t)
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	name := fmt.Sprintf("%s_%d", prefix, time.Now().UnixNano())
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("kept the database of the failed test: %s", name)
			return
		}
		c, err := pgx.Connect(context.Background(), admin)
		if err == nil {
			_, _ = c.Exec(context.Background(), "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
			_ = c.Close(context.Background())
		}
	})
	u, err := url.Parse(admin)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + name
	return u.String()
}

// CopyTree copies the folder src to dst, leaving out .git and build output.
func CopyTree(t testing.TB, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if e.IsDir() {
			switch rel {
			case ".git", "bin", "dist":
				return filepath.SkipDir
			}
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		if !e.Type().IsRegular() {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		info, err := e.Info()
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), b, info.Mode().Perm())
	})
	if err != nil {
		t.Fatal(err)
	}
}

// Shell runs blocks one after the other as one user's terminal: a block's
// cd and exports carry over to the next.
type Shell struct {
	DatabaseURL string
	env         []string
	state       string
	adminURL    string // the test server, where createdb lines create their databases
	mu          sync.Mutex
	created     []string // databases created by createdb lines, dropped at the end
}

// NewShell starts in dir with DATABASE_URL set, the tools first on PATH, and
// GOBIN a folder of its own (also on PATH), so `go install` lands there.
func NewShell(t testing.TB, tl Tools, dir, databaseURL string) *Shell {
	t.Helper()
	state := t.TempDir()
	gobin := filepath.Join(state, "gobin")
	if err := os.MkdirAll(gobin, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(state, "cwd"), []byte(dir), 0o644); err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(),
		"PATH="+gobin+string(os.PathListSeparator)+tl.Bin+string(os.PathListSeparator)+os.Getenv("PATH"),
		"GOBIN="+gobin, "DATABASE_URL="+databaseURL,
		"GOWORK=off", "GOTOOLCHAIN=local", "CGO_ENABLED=0", "GOFLAGS=-mod=mod",
		"NO_COLOR=1",
	)
	s := &Shell{DatabaseURL: databaseURL, env: env, state: state, adminURL: pgtest.AdminURL(t)}
	t.Cleanup(func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if len(s.created) == 0 {
			return
		}
		ctx := context.Background()
		c, err := pgx.Connect(ctx, s.adminURL)
		if err != nil {
			return
		}
		defer c.Close(ctx)
		for _, name := range s.created {
			_, _ = c.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
		}
	})
	return s
}

var (
	exportDBRe = regexp.MustCompile(`(?m)^(\s*)export DATABASE_URL=.*$`)
	createdbRe = regexp.MustCompile(`(?m)^(\s*)createdb\b.*$`)
)

// script wraps a block: restore the previous block's directory and
// environment, run the block under bash -e, save them again. Where the
// docs name a server of the reader's own, the block runs against the
// test's: `export DATABASE_URL=...` gets the test's empty database, and
// `createdb [connection options] NAME` creates a database of a fresh name
// on the test server (dropped at the end).
func (s *Shell) script(body string) string {
	body = exportDBRe.ReplaceAllString(body, "${1}export DATABASE_URL='"+strings.ReplaceAll(s.DatabaseURL, "'", "")+"'")
	body = createdbRe.ReplaceAllStringFunc(body, func(line string) string {
		indent := line[:len(line)-len(strings.TrimLeft(line, " \t"))]
		s.mu.Lock()
		name := fmt.Sprintf("doc_createdb_%d_%d", time.Now().UnixNano(), len(s.created))
		s.created = append(s.created, name)
		s.mu.Unlock()
		return fmt.Sprintf("%screatedb --maintenance-db='%s' %s", indent, strings.ReplaceAll(s.adminURL, "'", ""), name)
	})
	return fmt.Sprintf(`set -e -o pipefail
if [ -f %[1]s/env ]; then . %[1]s/env; fi
cd "$(cat %[1]s/cwd)"
trap 'export -p > %[1]s/env; pwd > %[1]s/cwd' EXIT
%[2]s`, s.state, body)
}

// Run runs one shell block and returns what it printed (stdout and stderr
// together). A block whose last command runs until Ctrl-C is stopped with
// SIGINT once every line of expect has appeared (… stands for any text).
func (s *Shell) Run(t testing.TB, b Block, expect string) string {
	t.Helper()
	cmd := exec.Command("bash", "-c", s.script(b.Body))
	cmd.Env = s.env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		t.Fatalf("%s: %v", b.Where(), err)
	}
	var (
		out    strings.Builder
		mu     sync.Mutex
		wants  = expectations(expect)
		done   = make(chan struct{})
		seen   = make(chan struct{})
		closed bool
	)
	if len(wants) == 0 {
		closed = true
		close(seen)
	}
	go func() {
		defer close(done)
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			mu.Lock()
			out.WriteString(sc.Text() + "\n")
			if !closed && wants[0].MatchString(sc.Text()) {
				wants = wants[1:]
				if len(wants) == 0 {
					closed = true
					close(seen)
				}
			}
			mu.Unlock()
		}
	}()
	wait := make(chan error, 1)
	go func() { err := cmd.Wait(); _ = pw.Close(); wait <- err }()
	limit := time.NewTimer(10 * time.Minute)
	defer limit.Stop()
	output := func() string { mu.Lock(); defer mu.Unlock(); return out.String() }
	if b.Until() {
		select {
		case <-seen:
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGINT)
		case err := <-wait:
			<-done
			t.Fatalf("%s: the block ended (%v) before printing what the docs show:\n%s\nit printed:\n%s", b.Where(), err, expect, output())
		case <-limit.C:
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			t.Fatalf("%s: no %q within 10 minutes; it printed:\n%s", b.Where(), expect, output())
		}
	}
	select {
	case err := <-wait:
		<-done
		if err != nil {
			t.Fatalf("%s: %v\n--- block:\n%s--- output:\n%s", b.Where(), err, b.Body, output())
		}
	case <-limit.C:
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		t.Fatalf("%s: still running after 10 minutes; it printed:\n%s", b.Where(), output())
	}
	if !b.Until() && len(wants) > 0 {
		t.Fatalf("%s: the output lacks %q:\n%s", b.Where(), wants[0], output())
	}
	return output()
}

// expectations turns a text block into one pattern per non-empty line: the
// line as shown, where … stands for any text.
func expectations(text string) []*regexp.Regexp {
	var res []*regexp.Regexp
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		parts := strings.Split(line, "…")
		for i, p := range parts {
			parts[i] = regexp.QuoteMeta(p)
		}
		res = append(res, regexp.MustCompile("^\\s*"+strings.Join(parts, ".*")+"\\s*$"))
	}
	return res
}

// RunAll runs a document's shell blocks in order, each after checking its
// marking; a block ending in `# until Ctrl-C` waits for the text block that
// follows it.
func (s *Shell) RunAll(t testing.TB, blocks []Block) {
	t.Helper()
	for i, b := range blocks {
		if !b.Shell() {
			continue
		}
		if err := b.CheckSkip(); err != nil {
			t.Fatal(err)
		}
		if b.SkipReason() != "" {
			continue
		}
		expect := ""
		if b.Until() {
			if i+1 >= len(blocks) || blocks[i+1].Lang != "text" {
				t.Fatalf("%s: a block ending in `# until Ctrl-C` needs a text block right after it with the output to wait for", b.Where())
			}
			expect = blocks[i+1].Body
		}
		t.Logf("running %s", b.Where())
		s.Run(t, b, expect)
	}
}

// ErrNoBlock is returned by Find when no block matches.
var ErrNoBlock = errors.New("doctest: no such block")

// Find returns the first block of lang whose heading contains heading and
// whose lead contains lead.
func Find(blocks []Block, lang, heading, lead string) (Block, int, error) {
	for i, b := range blocks {
		if b.Lang == lang && strings.Contains(b.Heading, heading) && strings.Contains(b.Lead, lead) {
			return b, i, nil
		}
	}
	return Block{}, -1, fmt.Errorf("%w: %s block under %q after %q", ErrNoBlock, lang, heading, lead)
}
