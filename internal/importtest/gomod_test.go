package importtest

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
)

// Whatever go.mod requires, every importer inherits: an application at
// x/crypto v0.48 that imports dispatcher is moved to the version listed
// here. So an indirect requirement is listed at the version pgoutbox's own
// dependencies need and no newer: some other module of the graph requires it
// at that version. A requirement raised by hand (`go get x@newer`, kept by
// tidy) fails here; lower it with `go get x@<the version the graph needs>`.
func TestGoMod_IndirectRequirementsAreNoNewerThanTheDependenciesNeed(t *testing.T) {
	t.Parallel()
	root := repoRoot(t)
	var m goMod
	if err := json.Unmarshal(goCmd(t, root, "mod", "edit", "-json"), &m); err != nil {
		t.Fatal(err)
	}
	need := map[string]string{} // module -> highest version another module requires
	for _, line := range strings.Split(string(goCmd(t, root, "mod", "graph")), "\n") {
		from, to, ok := strings.Cut(strings.TrimSpace(line), " ")
		if !ok || !strings.Contains(from, "@") {
			continue // an edge from the main module itself
		}
		path, v, _ := strings.Cut(to, "@")
		if compareVersions(v, need[path]) > 0 {
			need[path] = v
		}
	}
	for _, r := range m.Require {
		if !r.Indirect {
			continue
		}
		if n := need[r.Path]; compareVersions(r.Version, n) > 0 {
			t.Errorf("go.mod requires %s %s, but its dependencies need only %s: every importer inherits the newer one (go get %s@%s)", r.Path, r.Version, n, r.Path, n)
		}
	}
}

// compareVersions orders two module versions (vMAJOR.MINOR.PATCH[-pre]) as
// semver does; "" is lower than any version. (golang.org/x/mod/semver would
// add a requirement that every importer inherits, for a test.)
func compareVersions(a, b string) int {
	if a == b {
		return 0
	}
	if a == "" || b == "" {
		if a == "" {
			return -1
		}
		return 1
	}
	aCore, aPre, _ := strings.Cut(strings.TrimPrefix(a, "v"), "-")
	bCore, bPre, _ := strings.Cut(strings.TrimPrefix(b, "v"), "-")
	as, bs := strings.Split(aCore, "."), strings.Split(bCore, ".")
	for i := 0; i < 3 && i < len(as) && i < len(bs); i++ {
		x, _ := strconv.Atoi(as[i])
		y, _ := strconv.Atoi(bs[i])
		if x != y {
			if x < y {
				return -1
			}
			return 1
		}
	}
	switch {
	case aPre == bPre:
		return 0
	case aPre == "":
		return 1
	case bPre == "":
		return -1
	case aPre < bPre:
		return -1
	}
	return 1
}
