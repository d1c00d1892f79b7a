// Package version tells which build of switchboard is running. Release builds (`make
// build`, `make image`, the Dockerfile) stamp the version, commit and build date into the
// binary with the linker:
//
//	-X github.com/switchboard-dev/switchboard/runtime/version.version=v0.1.0
//	-X github.com/switchboard-dev/switchboard/runtime/version.commit=<git commit>
//	-X github.com/switchboard-dev/switchboard/runtime/version.date=2026-12-03T04:00:00Z
//
// A plain `go build` or `go install` leaves them empty; Get then falls back on what the Go
// toolchain recorded in the binary (module version, VCS revision and commit time).
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Set by the linker (-ldflags -X); see the package comment.
var (
	version string
	commit  string
	date    string
)

// Unknown stands for a value neither the linker nor the build information supplied.
const Unknown = "unknown"

// Info describes the running binary.
type Info struct {
	// Version is the release version (a git tag such as v0.1.0), or "(devel)".
	Version string
	// Commit is the git commit the binary was built from, "-dirty" appended when the
	// work tree had changes, or Unknown.
	Commit string
	// Date is the build date in RFC 3339; release builds use the commit's date, so that
	// a rebuild of the same commit is identical. Unknown when not recorded.
	Date string
	// GoVersion is the Go toolchain that built the binary.
	GoVersion string
}

// Get returns the running binary's version information.
func Get() Info {
	return resolve(version, commit, date, debug.ReadBuildInfo)
}

// String is the one-line form `switchboard --version` prints after the program name:
// "v0.1.0 (commit 0123abc, built 2026-12-03T04:00:00Z, go1.26.8)".
func (i Info) String() string {
	return fmt.Sprintf("%s (commit %s, built %s, %s)", i.Version, i.Commit, i.Date, i.GoVersion)
}

// resolve completes the linker-stamped values from the build information.
func resolve(version, commit, date string, readBuildInfo func() (*debug.BuildInfo, bool)) Info {
	info := Info{Version: version, Commit: commit, Date: date, GoVersion: runtime.Version()}
	if bi, ok := readBuildInfo(); ok {
		if info.Version == "" && bi.Main.Version != "" {
			info.Version = bi.Main.Version
		}
		settings := map[string]string{}
		for _, s := range bi.Settings {
			settings[s.Key] = s.Value
		}
		if info.Commit == "" && settings["vcs.revision"] != "" {
			info.Commit = settings["vcs.revision"]
			if settings["vcs.modified"] == "true" {
				info.Commit += "-dirty"
			}
		}
		if info.Date == "" {
			info.Date = settings["vcs.time"]
		}
	}
	if info.Version == "" {
		info.Version = "(devel)"
	}
	if info.Commit == "" {
		info.Commit = Unknown
	}
	if info.Date == "" {
		info.Date = Unknown
	}
	return info
}
