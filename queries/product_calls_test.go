package queries_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// notRunByTheProduct lists the queries kept although no product code calls
// them, each with the reason. Keep it empty where possible: a reviewer reads
// queries/ as the SQL pgoutbox runs.
var notRunByTheProduct = map[string]string{}

// Every query under queries/ is called by product code (a non-test Go file
// of this module outside the generated db/): the statements a reviewer
// reads are the statements the relay, the CLI, the console and the inbox
// run, not statements only tests call.
func TestEveryQueryIsCalledByProductCode(t *testing.T) {
	names := map[string]string{} // query name -> file
	for _, q := range queryFiles(t) {
		names[q.name] = q.path
	}
	var product strings.Builder
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch filepath.ToSlash(path) {
			case "../db", "../bench", "../deploy", "../.git":
				return filepath.SkipDir // generated code; modules of their own
			}
			if d.Name() == "testdata" {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		product.Write(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	code := product.String()
	for name, file := range names {
		called := regexp.MustCompile(`\.` + name + `\(`).MatchString(code)
		_, kept := notRunByTheProduct[name]
		switch {
		case !called && !kept:
			t.Errorf("%s (%s) is called by no product code: remove it, or call it", name, file)
		case called && kept:
			t.Errorf("%s is called by product code now: remove it from notRunByTheProduct", name)
		}
	}
	for name := range notRunByTheProduct {
		if _, ok := names[name]; !ok {
			t.Errorf("notRunByTheProduct names %s, which is no query any more", name)
		}
	}
}

// The top folder, queries/*.sql, is the core a team copies: exactly the
// statements the relay (package dispatcher, producers' Enqueue included)
// runs. An operator's or the console's read belongs in queries/ops/ or
// queries/console/.
func TestCoreQueriesAreTheRelays(t *testing.T) {
	var relay strings.Builder
	files, err := filepath.Glob(filepath.Join("..", "dispatcher", "*.go"))
	if err != nil || len(files) < 10 {
		t.Fatalf("dispatcher sources: %d (%v)", len(files), err)
	}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		relay.Write(b)
	}
	code := relay.String()
	core := 0
	for _, q := range queryFiles(t) {
		if filepath.Dir(q.path) != "." {
			continue
		}
		core++
		if !regexp.MustCompile(`\.` + q.name + `\(`).MatchString(code) {
			t.Errorf("%s (%s) is in the core folder but the relay never runs it: move it to queries/ops/ or queries/console/", q.name, q.path)
		}
	}
	if core < 20 {
		t.Fatalf("found %d queries in queries/*.sql: the filter is broken", core)
	}
}
