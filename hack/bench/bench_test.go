package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"sync"
	"testing"
	"time"
)

// Each subcommand runs in a tiny mode against binaries built once, so that the
// benchmarks keep working as the runtime changes. The figures are not checked: only
// that every call succeeded and the tables have their rows.

// buildBinaries builds switchboard, the demo provider and the relay into dir. The test builds
// them itself rather than in TestMain, so that `go test -run '^$' -bench .` builds
// nothing.
func buildBinaries(t *testing.T, dir string) {
	t.Helper()
	var wg sync.WaitGroup
	pkgs := []string{switchboardPkg, demoProviderPkg, relayPkg}
	errs := make([]error, len(pkgs))
	for i, pkg := range pkgs {
		wg.Go(func() {
			out, err := exec.Command("go", "build", "-o", filepath.Join(dir, path.Base(pkg)), pkg).CombinedOutput()
			if err != nil {
				errs[i] = fmt.Errorf("build %s: %w\n%s", pkg, err, out)
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
}

// redisURL is the Redis of the throughput test: $SWITCHBOARD_REDIS_URL, as for the
// runtime's Redis tests, else the benchmark's default.
func redisURL() string {
	if u := os.Getenv("SWITCHBOARD_REDIS_URL"); u != "" {
		return u
	}
	return "redis://127.0.0.1:6379/15"
}

func TestSubcommands(t *testing.T) {
	binDir := t.TempDir()
	buildBinaries(t, binDir)
	bins := []string{"-switchboard", filepath.Join(binDir, "switchboard"), "-demoprovider", filepath.Join(binDir, "demoprovider"),
		"-relay", filepath.Join(binDir, "relay")}
	tests := []struct {
		name string
		args []string
		rows []string // patterns, each matching one line of stdout
	}{{
		name: "overhead",
		args: []string{"overhead", "-c", "1,4", "-n", "20", "-batch", "10", "-warmup", "2"},
		rows: []string{
			`^1 +direct +20 `, `^1 +relay +20 `, `^1 +runtime +20 `, `^1 +added +\+`, `^1 +relay_added +[-+]`, `^1 +ratio +[0-9.]+x`,
			`^4 +direct +20 `, `^4 +relay +20 `, `^4 +runtime +20 `, `^4 +added `, `^4 +relay_added `, `^4 +ratio `,
			`^1 +relay +20 +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+$`, `^1 +runtime +20 +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+$`,
			`^4 +relay +20 +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+$`, `^4 +runtime +20 +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+$`,
		},
	}, {
		name: "fanout",
		args: []string{"fanout", "-subscribers", "1,10", "-chunks", "50", "-settle", "0"},
		rows: []string{`^1 +relay +54 +54 +[0-9.]+ `, `^1 +runtime +54 +54 +[0-9.]+ `, `^10 +relay +54 +540 +[0-9.]+ `, `^10 +runtime +54 +540 +[0-9.]+ `},
	}, {
		name: "throughput",
		args: []string{"throughput", "-c", "4", "-warmup", "100ms", "-duration", "300ms", "-redis-url", redisURL()},
		rows: []string{
			`^relay +4 +[1-9][0-9]* +[1-9][0-9]* `, `^memory +4 +[1-9][0-9]* +[1-9][0-9]* `, `^redis +4 +[1-9][0-9]* +[1-9][0-9]* `,
			`^memory +[0-9.]+x +[0-9.]+x +[0-9.]+x +[0-9.]+x$`, `^redis +[0-9.]+x +[0-9.]+x +[0-9.]+x +[0-9.]+x$`,
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			var stdout, stderr bytes.Buffer
			args := append(append([]string{tt.args[0]}, bins...), tt.args[1:]...)
			if err := run(ctx, args, &stdout, &stderr); err != nil {
				t.Fatalf("bench %v: %v\nstderr:\n%s", tt.args, err, stderr.String())
			}
			for _, row := range tt.rows {
				if !regexp.MustCompile("(?m)" + row).Match(stdout.Bytes()) {
					t.Errorf("no line matches %q in:\n%s", row, stdout.String())
				}
			}
		})
	}
}

func TestUsage(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), []string{"nope"}, &out, &out); err == nil {
		t.Error("an unknown subcommand was accepted")
	}
	if err := run(context.Background(), []string{"overhead", "-c", "0"}, &out, &out); err == nil {
		t.Error("concurrency 0 was accepted")
	}
	if err := run(context.Background(), []string{"throughput", "-stores", "etcd"}, &out, &out); err == nil {
		t.Error("an unknown EventStore was accepted")
	}
}
