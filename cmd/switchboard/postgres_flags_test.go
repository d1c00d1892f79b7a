package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	neturl "net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/jackc/pgx/v5"

	postgresstore "github.com/switchboard-dev/switchboard/runtime/eventstore/postgres"
)

// The PostgreSQL store's connection flags (spec/postgres.md, "Connecting"): where the
// URL comes from, what two sources at once or an unusable file do, and that no error
// the binary prints holds the URL or its password.

// postgresServer is the URL of the PostgreSQL server these tests use, at its database
// postgres: the one of $SWITCHBOARD_POSTGRES_URL, else the local server CI starts
// (.ci/run: user postgres, no password, 127.0.0.1:5432). An unreachable server fails
// the tests rather than skipping them.
func postgresServer(tb testing.TB) *neturl.URL {
	tb.Helper()
	base := os.Getenv(postgresstore.EnvURL)
	if base == "" {
		base = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
	}
	u, err := neturl.Parse(base)
	if err != nil || u.Scheme == "" {
		tb.Fatalf("$%s must be a postgres:// URL for these tests (they create databases on its server)", postgresstore.EnvURL)
	}
	u.Path = "/postgres"
	return u
}

// freshPostgresDatabase creates an empty database sb_<random> on the test server and
// returns its URL; the database is dropped, with whatever connections it still has,
// when the test ends. Each test gets its own: the orphan index and the wake-up channel
// are shared by every execution of a database.
func freshPostgresDatabase(tb testing.TB) string {
	tb.Helper()
	server := postgresServer(tb)
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	name := "sb_" + hex.EncodeToString(b)
	admin := func(sql string) error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, server.String())
		if err != nil {
			return err
		}
		defer c.Close(context.Background())
		_, err = c.Exec(ctx, sql)
		return err
	}
	if err := admin("CREATE DATABASE " + name); err != nil {
		tb.Fatalf("create database %s on %s (these tests need PostgreSQL; set $%s): %v", name, server.Host, postgresstore.EnvURL, err)
	}
	tb.Cleanup(func() {
		// The server may be coming back from a restart the test made: try for a while.
		var err error
		for range 50 {
			if err = admin("DROP DATABASE IF EXISTS " + name + " WITH (FORCE)"); err == nil {
				return
			}
			time.Sleep(200 * time.Millisecond)
		}
		tb.Errorf("drop database %s: %v", name, err)
	})
	u := *server
	u.Path = "/" + name
	return u.String()
}

// openPostgresFromFlags runs the runtime's flag parsing and openStore on args, as the
// binary does at start-up.
func openPostgresFromFlags(t *testing.T, args ...string) (eventStore, func(), error) {
	t.Helper()
	o, err := parseFlags(append([]string{"--event-store=postgres"}, args...), &strings.Builder{})
	if err != nil {
		t.Fatalf("parseFlags(%q): %v", args, err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	return openStore(ctx, o, logr.Discard())
}

// TestPostgresURLSourceErrors: a URL given two ways, or a --postgres-url-file that is
// missing or empty, is refused before anything connects, naming the flag and the file
// and never a file's content.
func TestPostgresURLSourceErrors(t *testing.T) {
	t.Setenv(postgresstore.EnvURL, "")
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, []byte(" \n\t\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	good := filepath.Join(dir, "url")
	const canary = "postgres://postgres:s3cret-canary@127.0.0.1:1/x"
	if err := os.WriteFile(good, []byte(canary+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing")
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"both flags", []string{"--postgres-url", canary, "--postgres-url-file", good},
			[]string{"--event-store=postgres: both --postgres-url and --postgres-url-file are set: give the PostgreSQL URL one way"}},
		{"missing file", []string{"--postgres-url-file", missing},
			[]string{"--event-store=postgres: --postgres-url-file " + missing + ": no such file or directory"}},
		{"a directory", []string{"--postgres-url-file", dir},
			[]string{"--event-store=postgres: --postgres-url-file " + dir + ": is a directory"}},
		{"empty file", []string{"--postgres-url-file", empty},
			[]string{"--event-store=postgres: --postgres-url-file " + empty + ": the file is empty"}},
		{"no source", nil,
			[]string{"no PostgreSQL URL: set --postgres-url-file, $SWITCHBOARD_POSTGRES_URL or --postgres-url"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, closeStore, err := openPostgresFromFlags(t, tc.args...)
			if err == nil {
				closeStore()
				t.Fatalf("openStore(%q) succeeded, want it refused", tc.args)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q, want it to say %q", err, w)
				}
			}
			if strings.Contains(err.Error(), "s3cret-canary") || strings.Contains(err.Error(), "127.0.0.1:1") {
				t.Errorf("error %q holds the URL or its password", err)
			}
		})
	}
}

// TestPostgresURLFromEnvironment: without a flag the URL is $SWITCHBOARD_POSTGRES_URL
// (the chart's way, spec/postgres.md "Connecting"), and a flag wins over it.
func TestPostgresURLFromEnvironment(t *testing.T) {
	url := freshPostgresDatabase(t)
	other := freshPostgresDatabase(t)
	// hasSchema reports whether the runtime's schema was created in the database at u:
	// the proof of which URL the store opened.
	hasSchema := func(u string) bool {
		t.Helper()
		c, err := pgx.Connect(t.Context(), u)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(context.Background())
		var n int
		if err := c.QueryRow(t.Context(), "SELECT count(*) FROM pg_namespace WHERE nspname = 'switchboard'").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == 1
	}

	t.Setenv(postgresstore.EnvURL, url)
	s, closeStore, err := openPostgresFromFlags(t)
	if err != nil {
		t.Fatalf("openStore with $%s only: %v", postgresstore.EnvURL, err)
	}
	if err := s.pinger.Ping(t.Context()); err != nil {
		t.Errorf("Ping: %v", err)
	}
	closeStore()
	if !hasSchema(url) || hasSchema(other) {
		t.Errorf("schema in $%s's database %v, in the other %v; want only the first", postgresstore.EnvURL, hasSchema(url), hasSchema(other))
	}

	// A file wins over the environment, whose URL is now unusable.
	t.Setenv(postgresstore.EnvURL, "postgres://postgres:s3cret-canary@127.0.0.1:1/x")
	file := filepath.Join(t.TempDir(), "url")
	if err := os.WriteFile(file, []byte(other+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, closeStore, err = openPostgresFromFlags(t, "--postgres-url-file", file)
	if err != nil {
		t.Fatalf("openStore with --postgres-url-file and $%s: %v", postgresstore.EnvURL, err)
	}
	closeStore()
	if !hasSchema(other) {
		t.Errorf("--postgres-url-file's database has no schema: the file's URL was not used")
	}
}

// TestPostgresBadURLExits: the binary started with a URL it cannot use exits 1 with an
// error that names the failure and holds neither the URL, its password, its user, host
// or database, nor a server's message — whichever source the URL came from.
func TestPostgresBadURLExits(t *testing.T) {
	server := postgresServer(t)
	serverURL := func(user, db string) string {
		u := *server
		u.User = neturl.UserPassword(user, "s3cret-canary")
		u.Path = "/" + db
		return u.String()
	}
	dir := manifestsDir(t, freeAddr(t))
	for _, tc := range []struct {
		name   string
		url    string
		source string // flag, file or env
		want   string
		secret []string // besides the URL and the password
	}{
		{"closed port", "postgres://postgres:s3cret-canary@127.0.0.1:1/x", "flag",
			"open postgres event store: postgres: connect to postgres: connection failed", []string{"127.0.0.1:1"}},
		{"unknown host", "postgres://postgres:s3cret-canary@sb-no-such-host.invalid:5432/x", "file",
			"open postgres event store: postgres: connect to postgres: connection failed", []string{"sb-no-such-host"}},
		{"unknown database", serverURL("postgres", "sb_no_such_database"), "env",
			"open postgres event store: postgres: connect to postgres: server error (SQLSTATE 3D000)", []string{"sb_no_such_database"}},
		{"unknown role", serverURL("sb_no_such_role", "postgres"), "flag",
			"open postgres event store: postgres: connect to postgres: server error (SQLSTATE 28000)", []string{"sb_no_such_role"}},
		{"malformed URL", "postgres://postgres:s3cret-canary@127.0.0.1:port/x", "env",
			"open postgres event store: postgres: parse postgres url: malformed URL or DSN", []string{"127.0.0.1:port"}},
		{"key/value DSN", "host=127.0.0.1 port=1 user=postgres password=s3cret-canary dbname=x connect_timeout=5", "file",
			"open postgres event store: postgres: connect to postgres: connection failed", []string{"dbname=x"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			args := []string{"--manifests", dir, "--runtime-bind-address", freeAddr(t),
				"--health-probe-bind-address", freeAddr(t), "--metrics-bind-address", "0", "--event-store", "postgres"}
			env := append(os.Environ(), postgresstore.EnvURL+"=")
			switch tc.source {
			case "flag":
				args = append(args, "--postgres-url", tc.url)
			case "file":
				file := filepath.Join(t.TempDir(), "url")
				if err := os.WriteFile(file, []byte(tc.url), 0o600); err != nil {
					t.Fatal(err)
				}
				args = append(args, "--postgres-url-file", file)
			case "env":
				env = append(env, postgresstore.EnvURL+"="+tc.url)
			}
			cmd := exec.CommandContext(ctx, filepath.Join(binDir, "switchboard"), args...)
			cmd.Env = env
			out, err := cmd.CombinedOutput()
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() != 1 {
				t.Fatalf("switchboard with a %s: %v, want exit status 1\n%s", tc.name, err, out)
			}
			if !strings.Contains(string(out), "switchboard: "+tc.want+"\n") {
				t.Errorf("output lacks %q:\n%s", "switchboard: "+tc.want, out)
			}
			for _, secret := range append([]string{tc.url, "s3cret-canary"}, tc.secret...) {
				if strings.Contains(string(out), secret) {
					t.Errorf("output holds %q:\n%s", secret, out)
				}
			}
		})
	}
}
