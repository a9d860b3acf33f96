package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

func TestReleases_OnePinnedBuildForEachMajorFrom13To18(t *testing.T) {
	var majors []int
	for _, r := range releases {
		majors = append(majors, r.Major)
		if !strings.HasPrefix(r.Package, strconv.Itoa(r.Major)+".") {
			t.Errorf("PostgreSQL %d pinned to package %s of another major version", r.Major, r.Package)
		}
		if !strings.HasPrefix(r.Integrity, "sha512-") {
			t.Errorf("PostgreSQL %d: integrity %q is not npm's sha512", r.Major, r.Integrity)
		}
	}
	if got, want := itoaAll(majors), "13,14,15,16,17,18"; got != want {
		t.Errorf("pinned majors %s, want %s", got, want)
	}
}

func TestChaosSummary_ReadsCommittedAndLost(t *testing.T) {
	out := "producers paused (12 events committed); later\n" +
		"pgoutbox chaos run: PASS: every invariant holds\n" +
		"  events committed         5012  (1700 ordered in 40 aggregates; 0 committed, 0 not)\n" +
		"  lost                     0\n"
	if got, want := chaosSummary(out), "5012 events committed, 0 lost"; got != want {
		t.Errorf("chaosSummary = %q, want %q", got, want)
	}
	if got := chaosSummary("PASS\n"); got != "passed" {
		t.Errorf("chaosSummary without figures = %q, want passed", got)
	}
}

func TestUntarAndLinkLibraries_UnpackThePackageAndItsLibraryLinks(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pkg")
	data := tgz(t, map[string]string{
		"package/native/bin/pg_ctl":             "#!/bin/sh\n",
		"package/native/lib/libpq.so.5.17":      "lib",
		"package/native/pg-symlinks.json":       `[{"source":"native/lib/libpq.so.5.17","target":"native/lib/libpq.so.5"}]`,
		"package/package.json":                  "{}",
		"package/native/share/postgresql.bki":   "bki",
		"package/native/share/extension/x.sql":  "x",
		"package/native/lib/postgresql/plp.so":  "so",
		"package/native/share/timezone/Etc/UTC": "tz",
	})
	if err := untar(data, dir); err != nil {
		t.Fatal(err)
	}
	if err := linkLibraries(dir); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(dir, "native/bin/pg_ctl"))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode()&0o111 == 0 {
		t.Errorf("native/bin/pg_ctl mode %v: not executable", fi.Mode())
	}
	b, err := os.ReadFile(filepath.Join(dir, "native/lib/libpq.so.5"))
	if err != nil || string(b) != "lib" {
		t.Errorf("libpq.so.5 through its link: %q, %v", b, err)
	}
}

func TestLinkLibraries_RefusesALinkOutOfItsDirectory(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "native"), 0o755); err != nil {
		t.Fatal(err)
	}
	bad := `[{"source":"native/lib/libpq.so.5.17","target":"native/../../evil"}]`
	if err := os.WriteFile(filepath.Join(dir, "native/pg-symlinks.json"), []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := linkLibraries(dir); err == nil || !strings.Contains(err.Error(), "leaves its directory") {
		t.Errorf("linkLibraries = %v, want a link that leaves its directory refused", err)
	}
}

func TestUntar_RefusesAnEntryOutsideThePackage(t *testing.T) {
	data := tgz(t, map[string]string{"package/../../etc/x": "x"})
	if err := untar(data, t.TempDir()); err == nil {
		t.Error("untar accepted an entry outside the package")
	}
}

func tgz(t *testing.T, files map[string]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for name, body := range files {
		// npm packs every file 0644, programs included.
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(body)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := gz.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func itoaAll(ns []int) string {
	s := make([]string, len(ns))
	for i, n := range ns {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ",")
}
