package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// BENCHMARKS.md is results and how to reproduce them: the development log
// (bench/tuning-log.md) stays out of it, and so do references to it.
func TestWriteReport_LeavesTheDevelopmentLogOut(t *testing.T) {
	out := t.TempDir()
	if err := os.MkdirAll(filepath.Join(out, "docs", "bench"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := writeReport(out, &results{}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(out, "BENCHMARKS.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"Tuning log", "tuning log", "Measured during development"} {
		if strings.Contains(string(b), bad) {
			t.Errorf("BENCHMARKS.md contains %q", bad)
		}
	}
}
