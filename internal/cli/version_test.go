package cli

import (
	"regexp"
	"runtime"
	"strings"
	"testing"
)

func TestVersion_PrintsVersionCommitAndGoVersion(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"version"}, {"--version"}} {
		r := call(t, invocation{}, args...)
		wantCode(t, r, ExitOK)
		for _, want := range []string{"pgoutbox ", "commit:", "go:       " + runtime.Version(), "platform: " + runtime.GOOS + "/" + runtime.GOARCH} {
			mustContain(t, r, "stdout", want)
		}
	}
}

func TestHelp_ShowsTheBuild(t *testing.T) {
	t.Parallel()
	r := call(t, invocation{}, "--help")
	wantCode(t, r, ExitOK)
	if !regexp.MustCompile(`(?m)^Build: pgoutbox \S+ \(commit \S+, go\S+ \S+/\S+\)$`).MatchString(r.stdout) {
		t.Fatalf("no build line in --help\n%s", r)
	}
	if !strings.Contains(r.stdout, "version ") {
		t.Fatalf("the version command is not listed\n%s", r)
	}
}
