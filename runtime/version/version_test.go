package version

import (
	"runtime"
	"runtime/debug"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestResolve(t *testing.T) {
	goVersion := runtime.Version()
	vcs := func(mainVersion string, settings ...string) func() (*debug.BuildInfo, bool) {
		return func() (*debug.BuildInfo, bool) {
			bi := &debug.BuildInfo{Main: debug.Module{Path: "github.com/switchboard-dev/switchboard", Version: mainVersion}}
			for i := 0; i+1 < len(settings); i += 2 {
				bi.Settings = append(bi.Settings, debug.BuildSetting{Key: settings[i], Value: settings[i+1]})
			}
			return bi, true
		}
	}
	none := func() (*debug.BuildInfo, bool) { return nil, false }
	for _, tc := range []struct {
		name                  string
		version, commit, date string
		buildInfo             func() (*debug.BuildInfo, bool)
		want                  Info
	}{{
		name:    "stamped by the linker",
		version: "v0.1.0", commit: "0123abc", date: "2026-12-03T04:00:00Z",
		buildInfo: vcs("(devel)", "vcs.revision", "fedcba9", "vcs.time", "2020-01-01T00:00:00Z"),
		want:      Info{Version: "v0.1.0", Commit: "0123abc", Date: "2026-12-03T04:00:00Z", GoVersion: goVersion},
	}, {
		name:      "go install of a tagged module",
		buildInfo: vcs("v0.2.0"),
		want:      Info{Version: "v0.2.0", Commit: Unknown, Date: Unknown, GoVersion: goVersion},
	}, {
		name:      "go build in a git work tree with changes",
		buildInfo: vcs("(devel)", "vcs.revision", "fedcba9", "vcs.time", "2026-11-30T10:00:00Z", "vcs.modified", "true"),
		want:      Info{Version: "(devel)", Commit: "fedcba9-dirty", Date: "2026-11-30T10:00:00Z", GoVersion: goVersion},
	}, {
		name:      "no build information",
		buildInfo: none,
		want:      Info{Version: "(devel)", Commit: Unknown, Date: Unknown, GoVersion: goVersion},
	}, {
		name:    "only the version stamped",
		version: "v0.3.0", buildInfo: vcs("", "vcs.revision", "fedcba9", "vcs.modified", "false"),
		want: Info{Version: "v0.3.0", Commit: "fedcba9", Date: Unknown, GoVersion: goVersion},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			got := resolve(tc.version, tc.commit, tc.date, tc.buildInfo)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("resolve (-want +got):\n%s", diff)
			}
		})
	}
}

func TestString(t *testing.T) {
	got := Info{Version: "v0.1.0", Commit: "abc1234", Date: "2026-12-03T04:00:00Z", GoVersion: "go1.26.8"}.String()
	if want := "v0.1.0 (commit abc1234, built 2026-12-03T04:00:00Z, go1.26.8)"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
}
