// Package buildinfo says which build of pgoutbox is running: the version
// (set by `make release` through -ldflags, else the module version that `go
// install ...@version` records, else "devel"), the VCS commit and time that
// the Go toolchain stamps into binaries built from a checkout, and the Go
// version.
package buildinfo

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
)

// Version is set at link time by `make release`:
//
//	go build -ldflags "-X github.com/pgoutbox/pgoutbox/internal/buildinfo.Version=v1.2.3"
//
// Defaults to "": the module version from the build information.
var Version string

// Commit is set at link time by `make release` (the toolchain's vcs.revision
// is used when it is empty). Defaults to "".
var Commit string

// Info describes a build.
type Info struct {
	Version   string // v1.2.3, or "devel"
	Commit    string // full revision, or "unknown"
	Time      string // commit time (RFC 3339), or ""
	Modified  bool   // the work tree had uncommitted changes (known only with VCS)
	VCS       bool   // the toolchain stamped VCS information (vcs.* settings)
	GoVersion string // go1.25.0
	Platform  string // linux/amd64
}

// Read returns the running binary's build information.
func Read() Info {
	info := Info{Version: Version, Commit: Commit, GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if bi, ok := debug.ReadBuildInfo(); ok {
		if info.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			info.Version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			if strings.HasPrefix(s.Key, "vcs.") {
				info.VCS = true
			}
			switch s.Key {
			case "vcs.revision":
				if info.Commit == "" {
					info.Commit = s.Value
				}
			case "vcs.time":
				info.Time = s.Value
			case "vcs.modified":
				info.Modified = s.Value == "true"
			}
		}
	}
	if info.Version == "" {
		info.Version = "devel"
	}
	if info.Commit == "" {
		info.Commit = "unknown"
	}
	return info
}

// String is one line: "pgoutbox v1.2.3 (commit 0123abcd, go1.25.0 linux/amd64)".
func (i Info) String() string {
	commit := i.Commit
	if len(commit) > 12 {
		commit = commit[:12]
	}
	if i.Modified {
		commit += "+modified"
	}
	return fmt.Sprintf("pgoutbox %s (commit %s, %s %s)", i.Version, commit, i.GoVersion, i.Platform)
}

// Long is the multi-line form `pgoutbox version` prints.
func (i Info) Long() string {
	var b strings.Builder
	fmt.Fprintf(&b, "pgoutbox %s\n", i.Version)
	fmt.Fprintf(&b, "commit:   %s\n", i.Commit)
	if i.Time != "" {
		fmt.Fprintf(&b, "time:     %s\n", i.Time)
	}
	if i.VCS {
		fmt.Fprintf(&b, "modified: %t\n", i.Modified)
	}
	fmt.Fprintf(&b, "go:       %s\n", i.GoVersion)
	fmt.Fprintf(&b, "platform: %s\n", i.Platform)
	return b.String()
}
