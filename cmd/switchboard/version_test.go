package main

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// --version prints the version, commit and build date the linker stamped (Makefile,
// Dockerfile), and the Go version, then exits 0 without validating other flags or
// contacting anything.
func TestVersionFlag(t *testing.T) {
	o, err := parseFlags([]string{"--version", "--idempotency-ttl=1h"}, &strings.Builder{})
	if err != nil || !o.version {
		t.Fatalf("parseFlags(--version) = %+v, %v; want the version flag set and no validation error", o, err)
	}

	const pkg = "github.com/switchboard-dev/switchboard/runtime/version"
	bin := filepath.Join(t.TempDir(), "switchboard")
	ldflags := "-X " + pkg + ".version=v0.1.0-test -X " + pkg + ".commit=abc1234 -X " + pkg + ".date=2026-12-03T04:00:00Z"
	if out, err := exec.Command("go", "build", "-ldflags", ldflags, "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	cmd := exec.Command(bin, "--version", "--auth=bogus")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("switchboard --version: %v\n%s", err, stderr.String())
	}
	want := "switchboard v0.1.0-test (commit abc1234, built 2026-12-03T04:00:00Z, " + runtime.Version() + ")\n"
	if string(out) != want || stderr.Len() != 0 {
		t.Errorf("switchboard --version printed %q on stdout and %q on stderr, want %q and nothing", out, stderr.String(), want)
	}
}
