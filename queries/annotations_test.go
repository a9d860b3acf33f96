package queries_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// annotated is one query of the .sql files under queries/: its file, name,
// sqlc command (many, one, exec, ...) and its own comment (the comment lines
// right above its "-- name:" line).
type annotated struct {
	path, name, command, comment string
}

// queryFiles reads every query under queries/ (subfolders included).
func queryFiles(t *testing.T) []annotated {
	t.Helper()
	nameRE := regexp.MustCompile(`^-- name: (\w+) :(\w+)`)
	var out []annotated
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".sql") {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		lines := strings.Split(string(b), "\n")
		for i, l := range lines {
			m := nameRE.FindStringSubmatch(l)
			if m == nil {
				continue
			}
			j := i
			for j > 0 && strings.HasPrefix(lines[j-1], "--") {
				j--
			}
			out = append(out, annotated{path: path, name: m[1], command: m[2], comment: strings.Join(lines[j:i], "\n")})
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(out) < 50 {
		t.Fatalf("found %d queries under queries/: the walk is broken", len(out))
	}
	return out
}

// Every query under queries/ opens with its own comment (not only its file's
// header), saying what it does, its lock strategy ("Lock strategy: ..."),
// which index serves it (or that it reads no table, or scans it) and what an
// empty result means: a reviewer reads one query at a time, and sqlc copies
// that comment onto the generated method.
func TestEveryQuerySaysItsLockStrategyAndWhatNoRowsMeans(t *testing.T) {
	// What an empty result means, in one of the forms the queries use.
	rowsRE := regexp.MustCompile(`(?i)0 rows|no rows?\b|always one row|one row|rows affected|0 is the normal|returns|nothing`)
	// Which index serves it, in one of the forms the queries use (an INSERT
	// reads none; a catalog or lock-manager read has no table index).
	indexRE := regexp.MustCompile(`(?i)\bindex(es)?\b|access path|primary key|no table read|pg_locks|catalog|scans the table|\binsert`)
	for _, q := range queryFiles(t) {
		if !strings.HasPrefix(q.comment, "-- "+q.name+" ") && !strings.HasPrefix(q.comment, "-- "+q.name+":") {
			t.Errorf("%s: %s: its comment does not open with its name", q.path, q.name)
		}
		if !strings.Contains(q.comment, "Lock strategy:") {
			t.Errorf("%s: %s: its comment does not say its lock strategy (Lock strategy: ...)", q.path, q.name)
		}
		if !indexRE.MatchString(q.comment) {
			t.Errorf("%s: %s: its comment does not say which index serves it", q.path, q.name)
		}
		if !rowsRE.MatchString(q.comment) {
			t.Errorf("%s: %s (:%s): its comment does not say what an empty result means", q.path, q.name, q.command)
		}
	}
}
