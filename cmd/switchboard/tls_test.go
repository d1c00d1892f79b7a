package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/switchboard-dev/switchboard/runtime/client"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
)

// TestRuntimeTLS: with --tls-cert-file and --tls-key-file the execution API is served
// over HTTPS (event streams included, over HTTP/2 too), and a renewed certificate is
// served without a restart, while a pair that does not load leaves the previous one in
// force (spec/http-api.md, "TLS").
func TestRuntimeTLS(t *testing.T) {
	dir := t.TempDir()
	ca := newTestCA(t)
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	ca.issue(t, certFile, keyFile, 100)
	e := setup(t, "--tls-cert-file", certFile, "--tls-key-file", keyFile)
	base := "https://" + e.api

	pool := x509.NewCertPool()
	pool.AddCert(ca.cert)
	// A new connection per request, so that each one sees the certificate served now.
	transport := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}, ForceAttemptHTTP2: true, DisableKeepAlives: true}
	hc := &http.Client{Transport: transport, Timeout: 30 * time.Second}
	served := func() int64 {
		resp, err := hc.Get(base + "/v1/executions/exe_none")
		if err != nil {
			t.Fatalf("GET over TLS: %v", err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound || resp.ProtoMajor != 2 {
			t.Fatalf("GET over TLS: %d over %s, want 404 over HTTP/2", resp.StatusCode, resp.Proto)
		}
		return resp.TLS.PeerCertificates[0].SerialNumber.Int64()
	}
	if got := served(); got != 100 {
		t.Fatalf("serial %d served, want 100", got)
	}

	// A submission and its event stream, over HTTP/2.
	c, err := client.New(base, client.WithHTTPClient(&http.Client{Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}, ForceAttemptHTTP2: true}}))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	acc, err := c.Submit(ctx, textRequest("chat", "hello over TLS"))
	if err != nil {
		t.Fatal(err)
	}
	if events := follow(t, ctx, c, acc.ID); len(events) == 0 || events[len(events)-1].Type != protocol.EventCompleted {
		t.Errorf("events over TLS: %v", types(events))
	}
	// Plain HTTP to the TLS port is refused.
	if resp, err := http.Get("http://" + e.api + "/v1/executions/exe_none"); err == nil {
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("plain HTTP to the TLS port: %d, want 400", resp.StatusCode)
		}
	}

	// cert-manager renews the Secret: the kubelet swaps both files.
	ca.issue(t, certFile, keyFile, 101)
	eventually(t, 20*time.Second, "the renewed certificate served", func() bool { return served() == 101 })

	// A key that does not match the certificate: logged, and the previous pair stays.
	other := newTestCA(t)
	other.issue(t, filepath.Join(dir, "other.crt"), filepath.Join(dir, "other.key"), 200)
	replaceFile(t, keyFile, filepath.Join(dir, "other.key"))
	ca.issue(t, certFile, "", 102)
	eventually(t, 20*time.Second, "the failed reload logged", func() bool {
		return strings.Contains(e.runtime.String(), "private key does not match public key")
	})
	if got := served(); got != 101 {
		t.Errorf("serial %d served after a mismatched pair, want 101 still", got)
	}
}

// testCA issues certificates for 127.0.0.1.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

func newTestCA(t *testing.T) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "switchboard test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &testCA{cert: cert, key: key}
}

// issue writes a new key and a certificate with serial for it to certFile and keyFile,
// each replaced as a whole; with keyFile "" the key is not written.
func (ca *testCA) issue(t *testing.T, certFile, keyFile string, serial int64) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial),
		Subject:      pkix.Name{CommonName: "switchboard"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	if keyFile != "" {
		writeReplacing(t, keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}))
	}
	writeReplacing(t, certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
}

// writeReplacing replaces the file at path with data as a whole (write, then rename).
func writeReplacing(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path+".new", data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".new", path); err != nil {
		t.Fatal(err)
	}
}

// replaceFile replaces dst with a copy of src.
func replaceFile(t *testing.T, dst, src string) {
	t.Helper()
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	writeReplacing(t, dst, data)
}

// TestClusterTLS: in cluster mode the execution API serves --tls-cert-file as well, and
// /metrics the certificate of --metrics-cert-path instead of a self-signed one, reloaded
// when it is renewed (spec/authentication.md, "Metrics").
func TestClusterTLS(t *testing.T) {
	t.Parallel()
	w := cluster(t)
	dir, metricsDir := t.TempDir(), t.TempDir()
	ca := newTestCA(t)
	ca.issue(t, filepath.Join(dir, "api.crt"), filepath.Join(dir, "api.key"), 300)
	ca.issue(t, filepath.Join(metricsDir, "tls.crt"), filepath.Join(metricsDir, "tls.key"), 400)
	sb := startInCluster(t, w, "tls", "--tls-cert-file", filepath.Join(dir, "api.crt"), "--tls-key-file", filepath.Join(dir, "api.key"),
		"--metrics-cert-path", metricsDir)
	pool := x509.NewCertPool()
	pool.AddCert(ca.cert)
	// serial returns the serial number of the certificate addr presents, verified.
	serial := func(addr string) int64 {
		conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12})
		if err != nil {
			t.Fatalf("TLS to %s: %v", addr, err)
		}
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0].SerialNumber.Int64()
	}
	if got := serial(sb.api); got != 300 {
		t.Errorf("the execution API serves serial %d, want 300", got)
	}
	if got := serial(sb.metrics); got != 400 {
		t.Errorf("/metrics serves serial %d, want 400", got)
	}
	ca.issue(t, filepath.Join(metricsDir, "tls.crt"), filepath.Join(metricsDir, "tls.key"), 401)
	eventually(t, 20*time.Second, "the renewed metrics certificate served", func() bool { return serial(sb.metrics) == 401 })
}
