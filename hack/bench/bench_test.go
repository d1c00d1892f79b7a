package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
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

// postgresURL is the PostgreSQL of the throughput test: $BENCH_POSTGRES_URL, else a
// bench database of its own on the local server (make bench-throughput uses sb_bench).
func postgresURL() string {
	if u := os.Getenv("BENCH_POSTGRES_URL"); u != "" {
		return u
	}
	return "postgres://postgres@127.0.0.1:5432/sb_bench_test"
}

// startPeer starts the relay as a gateway the overhead benchmark measures as a -peer,
// in front of the demo provider it is going to start at provider, and returns the
// relay's address and process id.
func startPeer(t *testing.T, relay, provider string) (addr string, pid int) {
	t.Helper()
	cmd := exec.Command(relay, "--upstream", "http://"+provider+"/openai/v1", "--model", overheadModel, "--api-key", benchKey)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		_ = cmd.Wait()
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	addr, ok := strings.CutPrefix(strings.TrimSpace(line), "relay listening on http://")
	if err != nil || !ok {
		t.Fatalf("peer relay: ready line %q: %v", line, err)
	}
	return addr, cmd.Process.Pid
}

func TestSubcommands(t *testing.T) {
	binDir := t.TempDir()
	buildBinaries(t, binDir)
	bins := []string{"-switchboard", filepath.Join(binDir, "switchboard"), "-demoprovider", filepath.Join(binDir, "demoprovider"),
		"-relay", filepath.Join(binDir, "relay")}
	// The overhead run measures a second relay, in its translating mode, as a peer.
	provider, err := freeAddr()
	if err != nil {
		t.Fatal(err)
	}
	peer, peerPID := startPeer(t, filepath.Join(binDir, "relay"), provider)
	tests := []struct {
		name string
		args []string
		rows []string // patterns, each matching one line of stdout
		none []string // patterns no line may match
	}{{
		name: "overhead",
		args: []string{"overhead", "-c", "1,4", "-n", "20", "-batch", "10", "-warmup", "2", "-provider-addr", provider,
			"-peer", "http://" + peer + "/v1", "-peer-model", "chat", "-peer-pid", fmt.Sprint(peerPID), "-peer-name", "other"},
		rows: []string{
			`^1 +direct +20 `, `^1 +relay +20 `, `^1 +runtime +20 `, `^1 +translate +20 `, `^1 +other +20 `,
			`^1 +added +\+`, `^1 +relay_added +[-+]`, `^1 +translate_added +[-+]`, `^1 +other_added +[-+]`, `^1 +ratio +[0-9.]+x`,
			`^4 +direct +20 `, `^4 +relay +20 `, `^4 +runtime +20 `, `^4 +translate +20 `, `^4 +other +20 `,
			`^4 +added `, `^4 +relay_added `, `^4 +translate_added `, `^4 +other_added `, `^4 +ratio `,
			`^1 +relay +20 +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+$`, `^1 +runtime +20 +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+$`,
			`^1 +translate +20 +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+$`, `^1 +other +20 +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+$`,
			`^4 +relay +20 +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+$`, `^4 +runtime +20 +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+$`,
			`^4 +translate +20 +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+$`, `^4 +other +20 +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+$`,
			// each server against the native path and the translating baseline
			`^1 +runtime +[-+][0-9.]+ +(?:1\.00x|n/a) +(?:\S+x|n/a) +[0-9.]+ +\S+$`, `^1 +translate +[-+][0-9.]+ +(?:\S+x|n/a) +(?:1\.00x|n/a) +[0-9.]+ +\S+$`,
			`^4 +relay +[-+][0-9.]+ +(?:\S+x|n/a) +(?:\S+x|n/a) +[0-9.]+ +\S+$`, `^4 +other +[-+][0-9.]+ +(?:\S+x|n/a) +(?:\S+x|n/a) +[0-9.]+ +\S+$`,
			// the native path with a Budget, measured by default, against the native path
			`^1 +native\+budget +20 `, `^1 +native\+budget_added +[-+]`, `^4 +native\+budget +20 `,
			`^4 +native\+budget +20 +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+$`,
			`^1 +native\+budget +[-+][0-9.]+ +(?:\S+x|n/a) +(?:\S+x|n/a) +[0-9.]+ +\S+$`,
			`^1 +memory +[-+][0-9.]+ +[-+][0-9.]+ +(?:\S+x|n/a) +[-+][0-9.]+ +(?:\S+x|n/a) +[0-9.]+ +[0-9.]+ +n/a +n/a$`,
			`^4 +memory +[-+][0-9.]+ +[-+][0-9.]+ +(?:\S+x|n/a) +[-+][0-9.]+ +(?:\S+x|n/a) +[0-9.]+ +[0-9.]+ +n/a +n/a$`,
		},
	}, {
		// The Budget's counters and every execution in Redis, and the round trip to it.
		name: "overhead-redis",
		args: []string{"overhead", "-c", "1", "-n", "10", "-batch", "10", "-warmup", "2", "-front-door", "off",
			"-event-store", "redis", "-redis-url", redisURL()},
		rows: []string{
			`^1 +runtime +10 `, `^1 +native\+budget +10 `, `^1 +native\+budget_added +[-+]`,
			`^1 +redis +[-+][0-9.]+ +[-+][0-9.]+ +(?:\S+x|n/a) +[-+][0-9.]+ +(?:\S+x|n/a) +[0-9.]+ +[0-9.]+ +[0-9]+\.[0-9] +(?:met|missed)$`,
		},
	}, {
		name: "fanout",
		args: []string{"fanout", "-subscribers", "1,10", "-chunks", "50", "-settle", "0"},
		rows: []string{`^1 +relay +54 +54 +[0-9.]+ `, `^1 +runtime +54 +54 +[0-9.]+ `, `^10 +relay +54 +540 +[0-9.]+ `, `^10 +runtime +54 +540 +[0-9.]+ `},
	}, {
		name: "throughput",
		args: []string{"throughput", "-c", "4", "-warmup", "100ms", "-duration", "300ms", "-redis-url", redisURL(),
			"-postgres-url", postgresURL()},
		rows: []string{
			`^relay +4 +[1-9][0-9]* +[1-9][0-9]* +(?:\S+ +){5}n/a `, `^memory +4 +[1-9][0-9]* +[1-9][0-9]* +(?:\S+ +){5}n/a `,
			// Redis and PostgreSQL run on this machine: their servers' CPU is measured.
			`^redis +4 +[1-9][0-9]* +[1-9][0-9]* +(?:\S+ +){5}[0-9.]+ `, `^postgres +4 +[1-9][0-9]* +[1-9][0-9]* +(?:\S+ +){5}[0-9.]+ `,
			`^memory +[0-9.]+x +[0-9.]+x +[0-9.]+x +[0-9.]+x +[0-9.]+x$`, `^redis +[0-9.]+x +[0-9.]+x +[0-9.]+x +[0-9.]+x +[0-9.]+x$`,
			`^postgres +[0-9.]+x +[0-9.]+x +[0-9.]+x +[0-9.]+x +[0-9.]+x$`,
		},
	}, {
		// No PostgreSQL answers: the round is skipped, saying so.
		name: "throughput-no-postgres",
		args: []string{"throughput", "-c", "1", "-warmup", "0s", "-duration", "100ms", "-baseline=false", "-stores", "postgres",
			"-postgres-url", "postgres://postgres@" + unusedAddr(t) + "/sb_bench_none"},
		rows: []string{`^  postgres: skipped: no PostgreSQL answers at 127\.0\.0\.1:[0-9]+$`, `^store +submitters `},
		none: []string{`^postgres `},
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
			rows := tt.rows
			if tt.name == "overhead" { // the only run with the front doors
				rows = append(rows, frontDoorRows(t, stdout.Bytes())...)
			}
			for _, row := range rows {
				if !regexp.MustCompile("(?m)" + row).Match(stdout.Bytes()) {
					t.Errorf("no line matches %q in:\n%s", row, stdout.String())
				}
			}
			for _, row := range tt.none {
				if regexp.MustCompile("(?m)" + row).Match(stdout.Bytes()) {
					t.Errorf("a line matches %q in:\n%s", row, stdout.String())
				}
			}
		})
	}
}

// frontDoorRows are the rows of the front doors in the overhead run's output: none for
// a door the binary does not have, when frontDoorDefault let the run skip it, saying
// so.
func frontDoorRows(t *testing.T, stdout []byte) []string {
	t.Helper()
	var rows []string
	for _, side := range []string{sideFrontDoor, sideMessages} {
		if regexp.MustCompile(`(?m)^  ` + side + `: skipped: `).Match(stdout) {
			if frontDoorDefault != "auto" {
				t.Errorf("%s was skipped with -front-door=%s", side, frontDoorDefault)
			}
			t.Logf("%s was skipped: this switchboard does not serve it", side)
			continue
		}
		s := regexp.QuoteMeta(side)
		target := `(?:\S+x (?:met|missed)|n/a)`
		rows = append(rows,
			`^1 +`+s+` +20 `, `^1 +`+s+`_added +[-+]`, `^4 +`+s+` +20 `, `^4 +`+s+`_added +[-+]`,
			`^1 +`+s+` +20 +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+$`, `^4 +`+s+` +20 +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+$`,
			`^1 +`+s+` +[-+][0-9.]+ +(?:\S+x|n/a) +(?:\S+x|n/a) +[0-9.]+ +\S+$`, `^4 +`+s+` +[-+][0-9.]+ +(?:\S+x|n/a) +(?:\S+x|n/a) +[0-9.]+ +\S+$`,
			// against the targets
			`^1 +`+s+` +`+target+` +`+target+` +`+target+`$`, `^4 +`+s+` +`+target+` +`+target+` +`+target+`$`,
		)
	}
	return rows
}

func TestNoRoute(t *testing.T) {
	for _, tt := range []struct {
		err  error
		want bool
	}{
		{&statusError{status: 404, body: []byte(`{"error":{"code":"not_found","message":"no such resource","retryable":false}}`)}, true},
		{&statusError{status: 404, body: []byte("404 page not found\n")}, true},
		{&statusError{status: 404, body: []byte(`{"error":{"message":"The model does not exist.","type":"not_found_error","param":"model","code":"not_found"}}`)}, false},
		{&statusError{status: 404, body: []byte(`{"type":"error","error":{"type":"not_found_error","message":"The model does not exist."}}`)}, false},
		{&statusError{status: 400, body: []byte(`{}`)}, false},
		{errors.New("connection refused"), false},
	} {
		if got := noRoute(tt.err); got != tt.want {
			t.Errorf("noRoute(%v) = %v, want %v", tt.err, got, tt.want)
		}
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
	for _, url := range []string{
		"postgres://postgres@127.0.0.1:5432/app",       // would be dropped
		"postgres://postgres@127.0.0.1:5432/sb_bench;", // needs quoting
		"postgres://postgres:secret@127.0.0.1:5432/",   // no database
		"postgres://postgres:secret@[::1/sb_bench",     // not a URL
	} {
		err := run(context.Background(), []string{"throughput", "-postgres-url", url}, &out, &out)
		if err == nil {
			t.Errorf("throughput -postgres-url %q was accepted", url)
		} else if strings.Contains(err.Error(), "secret") {
			t.Errorf("throughput -postgres-url %q: the error shows the password: %v", url, err)
		}
	}
	for _, args := range [][]string{
		{"-front-door", "maybe"},
		{"-event-store", "etcd"},
		{"-event-store", "redis", "-redis-url", "http://127.0.0.1:6379"},
		{"-peer", "127.0.0.1:8080"},
		{"-peer", "ftp://127.0.0.1/v1"},
		{"-peer", "http://127.0.0.1:8080/v1", "-peer-name", "runtime"},
		{"-peer", "http://127.0.0.1:8080/v1", "-peer-name", "frontdoor-messages"},
		{"-peer", "http://127.0.0.1:8080/v1", "-peer-name", "x_added"},
		{"-peer", "http://127.0.0.1:8080/v1", "-peer-model", ""},
		{"-peer", "http://127.0.0.1:8080/v1", "-peer-pid", "-1"},
	} {
		if err := run(context.Background(), append([]string{"overhead"}, args...), &out, &out); err == nil {
			t.Errorf("overhead %q was accepted", args)
		}
	}
}

// unusedAddr is a loopback address where nothing listens (a moment ago).
func unusedAddr(t *testing.T) string {
	t.Helper()
	a, err := freeAddr()
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func TestPGTitle(t *testing.T) {
	for _, tt := range []struct {
		cmdline, cluster, db string
		client               bool
	}{
		{"postgres: 15/main: postgres sb_bench 127.0.0.1(35518) idle", "15/main", "sb_bench", true},
		{"postgres: 15/main: app test [local] SELECT", "15/main", "test", true},
		{"postgres: alice orders ::1(5000) idle in transaction", "", "orders", true},
		{"postgres: 15/main: checkpointer ", "15/main", "", false},
		{"postgres: 15/main: logical replication launcher ", "15/main", "", false},
		{"postgres: 15/main: autovacuum worker sb_bench", "15/main", "", false},
		{"/usr/lib/postgresql/15/bin/postgres\x00-D\x00/var/lib/postgresql/15/main\x00", "15/main", "", false},
	} {
		db, client := pgTitle(tt.cmdline, tt.cluster)
		if db != tt.db || client != tt.client {
			t.Errorf("pgTitle(%q, %q) = %q, %v; want %q, %v", tt.cmdline, tt.cluster, db, client, tt.db, tt.client)
		}
	}
}

// TestPGServerMeter checks on the local PostgreSQL that the meter counts the CPU time
// of the bench database's backends, those that end in the window included, and leaves
// out the backends of other databases.
func TestPGServerMeter(t *testing.T) {
	ctx := context.Background()
	cfg, err := parsePostgresURL(strings.Replace(postgresURL(), "sb_bench_test", "sb_bench_meter", 1))
	if err != nil {
		t.Fatal(err)
	}
	pg, why, err := openPGBench(ctx, cfg)
	if err != nil || pg == nil {
		t.Fatalf("postgres: %v %s", err, why)
	}
	defer pg.close()
	if err := pg.recreate(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := pg.drop(ctx); err != nil {
			t.Error(err)
		}
	}()
	m, why, err := pgServerMeter(ctx, pg.admin, pg.database)
	if err != nil || m == nil {
		t.Fatalf("meter: %v %s", err, why)
	}
	bench, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	var benchPID, adminPID int
	if err := bench.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&benchPID); err != nil {
		t.Fatal(err)
	}
	if err := pg.admin.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&adminPID); err != nil {
		t.Fatal(err)
	}
	busy := func(c *pgx.Conn) {
		t.Helper()
		if _, err := c.Exec(ctx, `SELECT count(*) FROM generate_series(1, 3000000)`); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.start(); err != nil {
		t.Fatal(err)
	}
	busy(pg.admin) // the "postgres" database: not counted
	if err := m.poll(); err != nil {
		t.Fatal(err)
	}
	if other := m.used(); other > 50*time.Millisecond {
		t.Errorf("%v counted while only another database's backend worked", other)
	}
	busy(bench)
	if err := m.poll(); err != nil {
		t.Fatal(err)
	}
	if err := bench.Close(ctx); err != nil { // the backend ends
		t.Fatal(err)
	}
	if err := m.poll(); err != nil {
		t.Fatal(err)
	}
	var sawBench, sawAdmin bool
	var benchCPU time.Duration
	for k, cpu := range m.last {
		sawBench = sawBench || k.pid == benchPID
		sawAdmin = sawAdmin || k.pid == adminPID
		if k.pid == benchPID {
			benchCPU = cpu - m.first[k]
		}
	}
	if !sawBench || sawAdmin {
		t.Errorf("bench backend listed: %v (want true), admin backend listed: %v (want false)", sawBench, sawAdmin)
	}
	if benchCPU <= 0 || m.used() < benchCPU {
		t.Errorf("the bench backend used %v, the meter counts %v in all", benchCPU, m.used())
	}
}
