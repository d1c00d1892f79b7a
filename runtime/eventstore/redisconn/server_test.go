package redisconn

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// These tests run real redis-server processes of their own, on free loopback ports.

// redisServer returns the path of redis-server. The test suite needs it (.ci/run
// installs it), so its absence fails the test rather than skipping what it proves.
func redisServer(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("redis-server is not installed (make test needs it; see .ci/run): %v", err)
	}
	return p
}

// freePort returns a loopback port that nothing listens on at the moment.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// syncBuffer collects a process's output for the failure message.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// startRedis runs redis-server with args in a directory of its own, waits until port
// accepts connections and kills the process when the test ends.
func startRedis(t *testing.T, port int, args ...string) {
	t.Helper()
	bin := redisServer(t)
	var out syncBuffer
	cmd := exec.Command(bin, args...)
	cmd.Dir = t.TempDir()
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatalf("start redis-server: %v", err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	for deadline := time.Now().Add(5 * time.Second); ; {
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			c.Close()
			return
		}
		select {
		case <-exited:
			t.Fatalf("redis-server %s exited:\n%s", strings.Join(args, " "), out.String())
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("redis-server %s does not listen on %s:\n%s", strings.Join(args, " "), addr, out.String())
		}
	}
}

// startPlain runs a redis-server with password pw on a free port and returns its port.
func startPlain(t *testing.T, pw string) int {
	t.Helper()
	port := freePort(t)
	startRedis(t, port, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--requirepass", pw,
		"--save", "", "--appendonly", "no")
	return port
}

// roundTrip writes and reads a key through client.
func roundTrip(t *testing.T, client goredis.UniversalClient) {
	t.Helper()
	ctx := t.Context()
	key := "redisconn-test:" + t.Name()
	if err := client.Set(ctx, key, "value", time.Minute).Err(); err != nil {
		t.Fatalf("SET: %v", err)
	}
	if got, err := client.Get(ctx, key).Result(); err != nil || got != "value" {
		t.Fatalf("GET: got %q, %v; want value", got, err)
	}
}

// connect resolves and connects cfg, failing the test on an error, and closes the
// client when the test ends.
func connect(t *testing.T, cfg Config, getenv func(string) string) (goredis.UniversalClient, *Target) {
	t.Helper()
	target, err := cfg.Resolve(getenv)
	if err != nil {
		t.Fatalf("Resolve: %v", err)
	}
	client, err := target.Connect(t.Context())
	if err != nil {
		t.Fatalf("Connect: %v", err)
	}
	t.Cleanup(func() { client.Close() })
	return client, target
}

// connectErr returns the error of Client, failing the test if there is none or if it
// shows the password.
func connectErr(t *testing.T, cfg Config, getenv func(string) string) string {
	t.Helper()
	client, err := cfg.Client(t.Context(), getenv)
	if err == nil {
		client.Close()
		t.Fatal("Client: no error")
	}
	t.Logf("Client error: %v", err)
	checkHidden(t, "error", err.Error())
	return err.Error()
}

func TestConnectSources(t *testing.T) {
	port := startPlain(t, canary)
	url := fmt.Sprintf("redis://:%s@127.0.0.1:%d/0", canary, port)
	file := writeFile(t, "url", url+"\n")
	other := "redis://:other@127.0.0.1:1/0"

	for _, tt := range []struct {
		name       string
		cfg        Config
		getenv     func(string) string
		wantSource string
	}{
		{"flag", Config{URL: url}, env(other), "--redis-url"},
		{"file", Config{URLFile: file}, env(other), "--redis-url-file " + file},
		{"env", Config{}, env(url), "$SWITCHBOARD_REDIS_URL"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			client, target := connect(t, tt.cfg, tt.getenv)
			roundTrip(t, client)
			want := fmt.Sprintf("redis://:***@127.0.0.1:%d/0", port)
			if target.String() != want || target.Source() != tt.wantSource {
				t.Errorf("target: got %q from %q, want %q from %q", target, target.Source(), want, tt.wantSource)
			}
		})
	}

	t.Run("Client", func(t *testing.T) {
		client, err := (&Config{URLFile: file}).Client(t.Context(), noEnv)
		if err != nil {
			t.Fatal(err)
		}
		defer client.Close()
		roundTrip(t, client)
	})

	t.Run("wrong password", func(t *testing.T) {
		wrong := writeFile(t, "wrong", fmt.Sprintf("redis://:%s-wrong@127.0.0.1:%d/0", canary, port))
		msg := connectErr(t, Config{URLFile: wrong}, noEnv)
		for _, want := range []string{"(URL from --redis-url-file " + wrong + ")", "WRONGPASS"} {
			if !strings.Contains(msg, want) {
				t.Errorf("error %q does not contain %q", msg, want)
			}
		}
	})

	t.Run("no password", func(t *testing.T) {
		msg := connectErr(t, Config{}, env(fmt.Sprintf("redis://127.0.0.1:%d/0", port)))
		if !strings.Contains(msg, "NOAUTH") {
			t.Errorf("error %q does not contain NOAUTH", msg)
		}
	})
}

func TestConnectUnreachable(t *testing.T) {
	port := freePort(t)
	url := fmt.Sprintf("redis://:%s@127.0.0.1:%d/0", canary, port)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	_, err := (&Config{URL: url, PingTimeout: 2 * time.Second}).Client(ctx, noEnv)
	if err == nil {
		t.Fatal("Client: no error")
	}
	t.Logf("Client error: %v", err)
	checkHidden(t, "error", err.Error())
	want := fmt.Sprintf("redis redis://:***@127.0.0.1:%d/0 (URL from --redis-url): ", port)
	if !strings.HasPrefix(err.Error(), want) {
		t.Errorf("error %q does not start with %q", err, want)
	}
	if ctx.Err() != nil {
		t.Errorf("Client returned after its caller's deadline: the ping timeout did not bound it")
	}
}

func TestConnectRefusesCluster(t *testing.T) {
	port := freePort(t)
	dir := t.TempDir()
	startRedis(t, port, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--cluster-enabled", "yes",
		"--cluster-config-file", filepath.Join(dir, "nodes.conf"), "--save", "", "--appendonly", "no")
	msg := connectErr(t, Config{URL: fmt.Sprintf("redis://127.0.0.1:%d", port)}, noEnv)
	if !strings.Contains(msg, "Redis Cluster node, which the runtime does not support") {
		t.Errorf("error %q does not say that Redis Cluster is not supported", msg)
	}
}

// writeTLS writes a CA and a server certificate for 127.0.0.1 and localhost signed by it
// into dir.
func writeTLS(t *testing.T, dir string) (caFile, certFile, keyFile string) {
	t.Helper()
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "redisconn test CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "redis"},
		DNSNames:     []string{"localhost"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	write := func(name, typ string, der []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	return write("ca.pem", "CERTIFICATE", caDER), write("cert.pem", "CERTIFICATE", der), write("key.pem", "PRIVATE KEY", keyDER)
}

func TestConnectTLS(t *testing.T) {
	redisServer(t)
	caFile, certFile, keyFile := writeTLS(t, t.TempDir())
	port := freePort(t)
	startRedis(t, port, "--port", "0", "--tls-port", strconv.Itoa(port), "--bind", "127.0.0.1", "127.0.0.2",
		"--tls-cert-file", certFile, "--tls-key-file", keyFile, "--tls-ca-cert-file", caFile, "--tls-auth-clients", "no",
		"--requirepass", canary, "--save", "", "--appendonly", "no")

	for _, host := range []string{"127.0.0.1", "localhost"} {
		t.Run("CA file, "+host, func(t *testing.T) {
			client, target := connect(t, Config{URL: fmt.Sprintf("rediss://:%s@%s:%d/0", canary, host, port), CAFile: caFile}, noEnv)
			roundTrip(t, client)
			if want := fmt.Sprintf("rediss://:***@%s:%d/0", host, port); target.String() != want {
				t.Errorf("String() = %q, want %q", target, want)
			}
		})
	}

	t.Run("system roots", func(t *testing.T) {
		// The test CA is not among the system roots, so verification must fail.
		msg := connectErr(t, Config{URL: fmt.Sprintf("rediss://:%s@127.0.0.1:%d/0", canary, port)}, noEnv)
		if !strings.Contains(msg, "certificate") {
			t.Errorf("error %q does not mention the certificate", msg)
		}
	})

	t.Run("wrong server name", func(t *testing.T) {
		// 127.0.0.2 reaches the server too, but its certificate does not name it.
		msg := connectErr(t, Config{URL: fmt.Sprintf("rediss://:%s@127.0.0.2:%d/0", canary, port), CAFile: caFile}, noEnv)
		if !strings.Contains(msg, "not 127.0.0.2") {
			t.Errorf("error %q does not name the mismatch", msg)
		}
	})
}

func TestConnectSentinel(t *testing.T) {
	redisServer(t)
	const masterPW, sentinelPW = canary + "-master", "sentinel-pw"
	masterPort := startPlain(t, masterPW)

	dir := t.TempDir()
	sentinelPort := freePort(t)
	conf := filepath.Join(dir, "sentinel.conf")
	err := os.WriteFile(conf, []byte(fmt.Sprintf(`port %d
bind 127.0.0.1
dir %s
requirepass %s
sentinel monitor mymaster 127.0.0.1 %d 1
sentinel auth-pass mymaster %s
`, sentinelPort, dir, sentinelPW, masterPort, masterPW)), 0o600)
	if err != nil {
		t.Fatal(err)
	}
	startRedis(t, sentinelPort, conf, "--sentinel")

	// The first Sentinel listed is down: the client moves on to the next.
	addrs := fmt.Sprintf("127.0.0.1:%d,127.0.0.1:%d", freePort(t), sentinelPort)
	urlFile := writeFile(t, "url", "redis://:"+masterPW+"@/0")
	pwFile := writeFile(t, "sentinel-pw", sentinelPW+"\n")
	base := func() Config {
		cfg := Config{URLFile: urlFile, SentinelMaster: "mymaster", SentinelPasswordFile: pwFile, PingTimeout: 3 * time.Second}
		var err error
		if cfg.SentinelAddrs, err = splitAddrs(addrs); err != nil {
			t.Fatal(err)
		}
		return cfg
	}

	t.Run("round trip", func(t *testing.T) {
		client, target := connect(t, base(), noEnv)
		roundTrip(t, client)
		if want := "sentinel master mymaster via " + addrs + ", db 0"; target.String() != want {
			t.Errorf("String() = %q, want %q", target, want)
		}
		// The key is on the master the Sentinel named.
		direct := goredis.NewClient(&goredis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", masterPort), Password: masterPW})
		defer direct.Close()
		if got, err := direct.Get(t.Context(), "redisconn-test:"+t.Name()).Result(); err != nil || got != "value" {
			t.Errorf("GET on the master: got %q, %v; want value", got, err)
		}
	})

	t.Run("wrong master password", func(t *testing.T) {
		cfg := base()
		cfg.URLFile = writeFile(t, "wrong", "redis://:"+canary+"-wrong@/0")
		msg := connectErr(t, cfg, noEnv)
		for _, want := range []string{"redis sentinel master mymaster via " + addrs, "WRONGPASS"} {
			if !strings.Contains(msg, want) {
				t.Errorf("error %q does not contain %q", msg, want)
			}
		}
	})

	// Without an answer the error reports what each Sentinel says.
	t.Run("no Sentinel password", func(t *testing.T) {
		cfg := base()
		cfg.SentinelPasswordFile = ""
		cfg.PingTimeout = 500 * time.Millisecond
		msg := connectErr(t, cfg, noEnv)
		if want := fmt.Sprintf("sentinel 127.0.0.1:%d: NOAUTH", sentinelPort); !strings.Contains(msg, want) {
			t.Errorf("error %q does not contain %q", msg, want)
		}
	})

	t.Run("unknown master", func(t *testing.T) {
		cfg := base()
		cfg.SentinelMaster = "other"
		cfg.PingTimeout = 500 * time.Millisecond
		msg := connectErr(t, cfg, noEnv)
		if want := fmt.Sprintf("sentinel 127.0.0.1:%d does not know master other", sentinelPort); !strings.Contains(msg, want) {
			t.Errorf("error %q does not contain %q", msg, want)
		}
	})
}
