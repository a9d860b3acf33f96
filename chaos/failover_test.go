package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The failover figures go into a section of their own, added once after
// the existing text (which may not end in a newline), and replaced by the
// next run; the other sections are left alone.
func TestWriteReliability_FailoverSectionAddedOnceAndReplaced(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "RELIABILITY.md")
	old := reliabilityIntro + longBegin + "\nlong figures\n" + longEnd + "\n" + shortBegin + "\nshort figures\n" + shortEnd + "\nlast line, no newline"
	if err := os.WriteFile(path, []byte(old), 0o644); err != nil {
		t.Fatal(err)
	}
	fg := &figures{o: options{seed: 2, failover: true, duration: 90 * time.Second}}
	for _, text := range []string{"first run\n", "second run\n"} {
		if err := writeReliability(path, "failover", fg, text); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	for _, want := range []string{"long figures", "short figures", "last line, no newline\n\n## Failover run", "second run", " -failover\n"} {
		if !strings.Contains(doc, want) {
			t.Errorf("RELIABILITY.md lacks %q:\n%s", want, doc)
		}
	}
	if strings.Contains(doc, "first run") || strings.Count(doc, failoverBegin) != 1 || strings.Count(doc, "## Failover run") != 1 {
		t.Errorf("the failover section was not replaced in place:\n%s", doc)
	}
}

// relayOf names the relay that wrote a lease_owner; the audit checks
// compare it with the writer's application_name.
func TestRelayOf_StripsTheClaimSuffix(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"relay-1.3/0123456789abcdef.42": "relay-1.3",
		"a/b/0123456789abcdef.1":        "a/b",
		"relay-2.1":                     "relay-2.1",
		"":                              "",
	} {
		if got := relayOf(in); got != want {
			t.Errorf("relayOf(%q) = %q, want %q", in, got, want)
		}
	}
}
