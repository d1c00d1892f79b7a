package redisconn

import (
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// canary is the password of the tests: no error or description may contain it.
const canary = "CANARY-pw-3f9a"

func noEnv(string) string { return "" }

func env(v string) func(string) string {
	return func(k string) string {
		if k == EnvURL {
			return v
		}
		return ""
	}
}

// writeFile writes content to a new file in the test's directory and returns its path.
func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// checkHidden fails the test if s contains the canary or its URL-escaped form.
func checkHidden(t *testing.T, what, s string) {
	t.Helper()
	if strings.Contains(s, "CANARY") {
		t.Errorf("%s shows the password: %s", what, s)
	}
}

func TestResolveSource(t *testing.T) {
	fileURL := "redis://:" + canary + "@file:6379/1"
	file := writeFile(t, "url", "\n  "+fileURL+"  \n")
	empty := writeFile(t, "empty", " \n")
	missing := filepath.Join(t.TempDir(), "missing")
	flagURL := "redis://:" + canary + "@flag:6379/2"
	envURL := "redis://:" + canary + "@env:6379/3"

	tests := []struct {
		name       string
		cfg        Config
		getenv     func(string) string
		wantSource string
		wantDesc   string
		wantErr    string
	}{
		{name: "flag", cfg: Config{URL: flagURL}, getenv: noEnv, wantSource: "--redis-url", wantDesc: "redis://:***@flag:6379/2"},
		{name: "file", cfg: Config{URLFile: file}, getenv: noEnv, wantSource: "--redis-url-file " + file, wantDesc: "redis://:***@file:6379/1"},
		{name: "env", getenv: env(" " + envURL + "\n"), wantSource: "$SWITCHBOARD_REDIS_URL", wantDesc: "redis://:***@env:6379/3"},
		{name: "flag over env", cfg: Config{URL: flagURL}, getenv: env(envURL), wantSource: "--redis-url", wantDesc: "redis://:***@flag:6379/2"},
		{name: "file over env", cfg: Config{URLFile: file}, getenv: env(envURL), wantSource: "--redis-url-file " + file, wantDesc: "redis://:***@file:6379/1"},
		{name: "flag and file", cfg: Config{URL: flagURL, URLFile: file}, getenv: noEnv,
			wantErr: "both --redis-url and --redis-url-file are set"},
		{name: "none", getenv: noEnv, wantErr: "no Redis URL: set --redis-url-file, $SWITCHBOARD_REDIS_URL or --redis-url"},
		{name: "blank env", getenv: env("  "), wantErr: "no Redis URL"},
		{name: "missing file", cfg: Config{URLFile: missing}, getenv: noEnv,
			wantErr: "--redis-url-file " + missing + ": no such file or directory"},
		{name: "empty file", cfg: Config{URLFile: empty}, getenv: noEnv, wantErr: "--redis-url-file " + empty + ": the file is empty"},
		{name: "bad URL names its source", cfg: Config{URLFile: writeFile(t, "bad", "redis://:"+canary+"%zz@h/0")}, getenv: noEnv,
			wantErr: "--redis-url-file "},
		{name: "bad env URL", getenv: env("http://:" + canary + "@h/0"), wantErr: "$SWITCHBOARD_REDIS_URL: the URL's scheme must be redis:// or rediss://"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.cfg.Resolve(tt.getenv)
			if tt.wantErr != "" {
				if err == nil {
					t.Fatalf("Resolve: got %s from %s, want an error", got, got.Source())
				}
				if !strings.Contains(err.Error(), tt.wantErr) {
					t.Errorf("Resolve error %q does not contain %q", err, tt.wantErr)
				}
				checkHidden(t, "error", err.Error())
				return
			}
			if err != nil {
				t.Fatalf("Resolve: %v", err)
			}
			if got.Source() != tt.wantSource || got.String() != tt.wantDesc {
				t.Errorf("Resolve: got %q from %q, want %q from %q", got, got.Source(), tt.wantDesc, tt.wantSource)
			}
			if got.opts.Password != canary {
				t.Errorf("password: got %q, want %q", got.opts.Password, canary)
			}
		})
	}
}

func TestDescribe(t *testing.T) {
	tests := []struct {
		url  string
		want string
	}{
		{"redis://:" + canary + "@127.0.0.1:6379/0", "redis://:***@127.0.0.1:6379/0"},
		{"redis://redis", "redis://redis:6379/0"},
		{"redis://alice@redis:7000/4", "redis://alice@redis:7000/4"},
		{"rediss://alice:" + canary + "@redis.example:6380/2?dial_timeout=3s#frag", "rediss://alice:***@redis.example:6380/2"},
		{"redis://:pass%2Fword@[::1]:6379/0", "redis://:***@[::1]:6379/0"},
		{"redis://:" + canary + "@redis/5?db=6", "redis://:***@redis:6379/6"},
	}
	for _, tt := range tests {
		got, err := (&Config{URL: tt.url}).Resolve(noEnv)
		if err != nil {
			t.Errorf("Resolve(%q): %v", tt.url, err)
			continue
		}
		if got.String() != tt.want {
			t.Errorf("Resolve(%q).String() = %q, want %q", tt.url, got, tt.want)
		}
	}
}

// TestResolveHidesThePassword feeds URLs that go-redis or net/url refuse, many of them
// with the password's delimiters unescaped, and checks that no error shows any of it.
func TestResolveHidesThePassword(t *testing.T) {
	for _, raw := range []string{
		"redis://:" + canary + "%zz@h:6379/0",       // bad escape
		"redis://:12/" + canary + "@h:6379/0",       // '/' in the password: the rest is the path
		"redis://:" + canary + "/x@h:6379/0",        // … and the first part a bad port
		"redis://u:" + canary + "?x=1@h:6379/0",     // '?' in the password
		"redis://:1?" + canary + "=1@h:6379/0",      // … with the rest an option
		"redis://:1#" + canary + "@h:6379/0",        // '#' in the password
		"redis://:1/0?db=" + canary + "@h",          // the rest a bad database
		"redis://:" + canary + "@h:6379/0?bogus=1",  // an unknown option
		"redis://:" + canary + "@h:6379/notanumber", // a bad database
		"redis://:" + canary + "@h:6379/0/1",        // a bad path
		"redis://:" + canary + "@h:port/0",          // a bad port
		"redis://:" + canary + "\x7f@h:6379/0",      // a control character
		"redis:" + canary + "@h:6379",               // no //
		"http://:" + canary + "@h:6379/0",           // another scheme
		"unix://:" + canary + "@/tmp/redis.sock",
		":" + canary + "@h:6379/0", // no scheme
	} {
		if _, err := (&Config{URL: raw}).Resolve(noEnv); err == nil {
			t.Errorf("Resolve(%q): no error", raw)
		} else {
			checkHidden(t, "error", err.Error())
		}
	}
	ca := writeFile(t, "ca.pem", "")
	_, err := (&Config{URL: "redis://:" + canary + "@h:6379/0", CAFile: ca}).Resolve(noEnv)
	if err == nil || !strings.Contains(err.Error(), "needs a rediss:// URL") {
		t.Errorf("Resolve with --redis-ca-file and redis://: got %v, want an error", err)
	} else {
		checkHidden(t, "error", err.Error())
	}
}

// FuzzResolveHidesThePassword checks that whatever a password holds, unescaped, neither
// an error nor the description shows it.
func FuzzResolveHidesThePassword(f *testing.F) {
	for _, s := range []string{"", "x", "/", "?a=b", "#f", "@", "@h:1/0#", "%zz", "%41", ":", "/0?db=", "\x00", "@[::1]:1/0?x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, pw string) {
		for _, raw := range []string{
			"redis://user:" + canary + pw + "@h:1/0",
			"rediss://:" + pw + canary + "@h:1/0",
		} {
			got, err := (&Config{URL: raw}).Resolve(noEnv)
			if err != nil {
				checkHidden(t, "error", err.Error())
				continue
			}
			checkHidden(t, "description", got.String())
		}
	})
}

func TestSentinelConfig(t *testing.T) {
	pwFile := writeFile(t, "sentinel-pw", "sentinel-secret\n")
	tests := []struct {
		name    string
		cfg     Config
		wantErr string
	}{
		{name: "master without addrs", cfg: Config{SentinelMaster: "m"}, wantErr: "--redis-sentinel-master m needs --redis-sentinel-addrs"},
		{name: "addrs without master", cfg: Config{SentinelAddrs: []string{"a:1"}}, wantErr: "--redis-sentinel-addrs needs --redis-sentinel-master"},
		{name: "password without master", cfg: Config{SentinelPasswordFile: pwFile}, wantErr: "--redis-sentinel-password-file needs --redis-sentinel-master"},
		{name: "bad addr", cfg: Config{SentinelMaster: "m", SentinelAddrs: []string{"a"}}, wantErr: `--redis-sentinel-addrs: sentinel address "a" is not host:port`},
		{name: "bad port", cfg: Config{SentinelMaster: "m", SentinelAddrs: []string{"a:0"}}, wantErr: `port "0" is not a number from 1 to 65535`},
		{name: "missing password file", cfg: Config{SentinelMaster: "m", SentinelAddrs: []string{"a:1"}, SentinelPasswordFile: pwFile + "x"},
			wantErr: "--redis-sentinel-password-file " + pwFile + "x: no such file or directory"},
		{name: "CA without rediss", cfg: Config{SentinelMaster: "m", SentinelAddrs: []string{"a:1"}, CAFile: pwFile},
			wantErr: "--redis-ca-file " + pwFile + " needs a rediss:// URL"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := tt.cfg.Resolve(noEnv)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("Resolve: got error %v, want one containing %q", err, tt.wantErr)
			}
		})
	}

	t.Run("no URL", func(t *testing.T) {
		got, err := (&Config{SentinelMaster: "m", SentinelAddrs: []string{"a:26379", "b:26379"}}).Resolve(noEnv)
		if err != nil {
			t.Fatal(err)
		}
		if want := "sentinel master m via a:26379,b:26379, db 0"; got.String() != want || got.Source() != "" {
			t.Errorf("got %q from %q, want %q from nowhere", got, got.Source(), want)
		}
	})

	t.Run("URL options carried over", func(t *testing.T) {
		cfg := Config{
			URL:                  "rediss://alice:" + canary + "@redis.example/3?dial_timeout=2s&pool_size=7&max_retries=1",
			SentinelMaster:       "mymaster",
			SentinelAddrs:        []string{"a:26379", "b:26379"},
			SentinelPasswordFile: pwFile,
		}
		got, err := cfg.Resolve(noEnv)
		if err != nil {
			t.Fatal(err)
		}
		if want := "sentinel master mymaster via a:26379,b:26379, db 3, tls"; got.String() != want {
			t.Errorf("String() = %q, want %q", got, want)
		}
		o := got.failover
		type carried struct {
			Master, Username, Password, SentinelPassword, ServerName string
			Addrs                                                    []string
			DB, PoolSize, MaxRetries                                 int
			DialTimeout                                              time.Duration
		}
		want := carried{"mymaster", "alice", canary, "sentinel-secret", "redis.example", []string{"a:26379", "b:26379"}, 3, 7, 1, 2 * time.Second}
		gotc := carried{o.MasterName, o.Username, o.Password, o.SentinelPassword, o.TLSConfig.ServerName, o.SentinelAddrs, o.DB, o.PoolSize, o.MaxRetries, o.DialTimeout}
		if diff := cmp.Diff(want, gotc); diff != "" {
			t.Errorf("failover options (-want +got):\n%s", diff)
		}
	})

	t.Run("TLS without a host verifies the dialled one", func(t *testing.T) {
		got, err := (&Config{URL: "rediss://:" + canary + "@/0", SentinelMaster: "m", SentinelAddrs: []string{"a:1"}}).Resolve(noEnv)
		if err != nil {
			t.Fatal(err)
		}
		if sn := got.failover.TLSConfig.ServerName; sn != "" {
			t.Errorf("ServerName = %q, want empty", sn)
		}
	})
}

func TestRegisterFlags(t *testing.T) {
	var c Config
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	c.RegisterFlags(fs)
	err := fs.Parse([]string{
		"--redis-url-file=/run/secrets/redis-url",
		"--redis-ca-file=/etc/ca.pem",
		"--redis-sentinel-master=mymaster",
		"--redis-sentinel-addrs=a:26379, b:26379,",
		"--redis-sentinel-addrs=[::1]:26379",
		"--redis-sentinel-password-file=/run/secrets/sentinel",
	})
	if err != nil {
		t.Fatal(err)
	}
	want := Config{
		URLFile:              "/run/secrets/redis-url",
		CAFile:               "/etc/ca.pem",
		SentinelMaster:       "mymaster",
		SentinelAddrs:        []string{"a:26379", "b:26379", "[::1]:26379"},
		SentinelPasswordFile: "/run/secrets/sentinel",
	}
	if diff := cmp.Diff(want, c); diff != "" {
		t.Errorf("Config (-want +got):\n%s", diff)
	}

	if err := fs.Parse([]string{"--redis-sentinel-addrs=a:26379,b"}); err == nil || !strings.Contains(err.Error(), `"b" is not host:port`) {
		t.Errorf("--redis-sentinel-addrs=a:26379,b: got %v, want an error", err)
	}
}
