package dispatcher_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The package documentation's map of guarantees (doc.go) names functions,
// queries and tests: each must exist where the map says, so that a reader
// who follows it finds what it promises.
func TestDoc_EveryNameInTheGuaranteeMapExists(t *testing.T) {
	b, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	// The comment as one line of text: names wrap across comment lines.
	doc := strings.Join(strings.Fields(strings.ReplaceAll(string(b), "//", " ")), " ")
	read := func(path string) string {
		t.Helper()
		b, err := os.ReadFile(filepath.Join("..", path))
		if err != nil {
			t.Fatalf("doc.go names %s: %v", path, err)
		}
		return string(b)
	}
	n := 0
	for _, m := range regexp.MustCompile(`code: (\w+) \(([\w/]+\.go)\)`).FindAllStringSubmatch(doc, -1) {
		n++
		if !regexp.MustCompile(`(?m)^func (\([^)]*\) )?` + m[1] + `[(\[]`).MatchString(read(m[2])) {
			t.Errorf("doc.go: no func %s in %s", m[1], m[2])
		}
	}
	for _, m := range regexp.MustCompile(`query: (\w+) \(([\w/]+\.sql)\)`).FindAllStringSubmatch(doc, -1) {
		n++
		if !strings.Contains(read(m[2]), "-- name: "+m[1]+" :") {
			t.Errorf("doc.go: no query %s in %s", m[1], m[2])
		}
	}
	for _, m := range regexp.MustCompile(`test: (Test\w+) \[(\w+)\]`).FindAllStringSubmatch(doc, -1) {
		n++
		files, err := filepath.Glob(filepath.Join("..", m[2], "*_test.go"))
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			found = found || strings.Contains(string(b), "\nfunc "+m[1]+"(t *testing.T)")
		}
		if !found {
			t.Errorf("doc.go: no test %s in package %s", m[1], m[2])
		}
	}
	if n < 20 {
		t.Fatalf("doc.go names %d things: the map or its patterns are broken", n)
	}
}
