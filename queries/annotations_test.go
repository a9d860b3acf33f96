package queries_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// Every query under queries/ opens with its own comment (not only its file's
// header), saying what it does, its lock strategy ("Lock strategy: ...") and
// what an empty result means: a reviewer reads one query at a time, and
// sqlc copies that comment onto the generated method.
func TestEveryQuerySaysItsLockStrategyAndWhatNoRowsMeans(t *testing.T) {
	nameRE := regexp.MustCompile(`^-- name: (\w+) :(\w+)`)
	// What an empty result means, in one of the forms the queries use.
	rowsRE := regexp.MustCompile(`(?i)0 rows|no rows?\b|always one row|one row|rows affected|0 is the normal|returns|nothing`)
	n := 0
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
			n++
			j := i
			for j > 0 && strings.HasPrefix(lines[j-1], "--") {
				j--
			}
			block := strings.Join(lines[j:i], "\n")
			if !strings.HasPrefix(block, "-- "+m[1]+" ") && !strings.HasPrefix(block, "-- "+m[1]+":") {
				t.Errorf("%s: %s: its comment does not open with its name", path, m[1])
			}
			if !strings.Contains(block, "Lock strategy:") {
				t.Errorf("%s: %s: its comment does not say its lock strategy (Lock strategy: ...)", path, m[1])
			}
			if !rowsRE.MatchString(block) {
				t.Errorf("%s: %s (:%s): its comment does not say what an empty result means", path, m[1], m[2])
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n < 50 {
		t.Fatalf("found %d queries: the walk is broken", n)
	}
}
