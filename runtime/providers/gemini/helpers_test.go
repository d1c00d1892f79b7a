package gemini_test

import (
	"bytes"
	"context"
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/switchboard-dev/switchboard/runtime/engine"
	"github.com/switchboard-dev/switchboard/runtime/engine/enginetest"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
	"github.com/switchboard-dev/switchboard/runtime/providers/gemini"
	"github.com/switchboard-dev/switchboard/runtime/providers/providerhttp"
	"github.com/switchboard-dev/switchboard/runtime/routing"
)

// canaryKey is the gemini API key in every test. run checks after every attempt that it
// appears only in the x-goog-api-key request header.
const canaryKey = "AIzaSyCanary-Zq7Xw3Vt9Rk2Lp5Nm8Gemini01"

// testTimeout bounds every attempt; only a broken adapter reaches it.
const testTimeout = 10 * time.Second

// --- deployments --------------------------------------------------------------------

// geminiDeployment builds a gemini deployment at endpoint with the bundled defaults
// (input text and json, output text); options add to it.
func geminiDeployment(endpoint string, opts ...func(*routing.Deployment)) *routing.Deployment {
	d := &routing.Deployment{
		Ref:          routing.Ref{Namespace: "ai", Name: "flash"},
		Provider:     gemini.ProviderGemini,
		Model:        "gemini-2.5-flash",
		Endpoint:     endpoint,
		Credential:   routing.NewCredential(canaryKey),
		Capabilities: routing.CapsOf(protocol.CapInputText, protocol.CapInputJSON, protocol.CapOutputText),
	}
	for _, opt := range opts {
		opt(d)
	}
	return d
}

// vertexDeployment builds a vertex deployment at endpoint whose credential is sa.
func vertexDeployment(endpoint string, sa *serviceAccount, opts ...func(*routing.Deployment)) *routing.Deployment {
	d := &routing.Deployment{
		Ref:          routing.Ref{Namespace: "ai", Name: "vertex-flash"},
		Provider:     gemini.ProviderVertex,
		Model:        "gemini-2.5-flash",
		Endpoint:     endpoint,
		Region:       "us-central1",
		Project:      "sb-test-project",
		Credential:   routing.NewCredential(sa.json),
		Capabilities: routing.CapsOf(protocol.CapInputText, protocol.CapInputJSON, protocol.CapOutputText),
	}
	for _, opt := range opts {
		opt(d)
	}
	return d
}

// withCaps adds declared capabilities.
func withCaps(caps ...protocol.Capability) func(*routing.Deployment) {
	return func(d *routing.Deployment) { d.Capabilities |= routing.CapsOf(caps...) }
}

// streaming declares streaming.
var streaming = withCaps(protocol.CapStreaming)

// --- requests -----------------------------------------------------------------------

// decode builds a request from its JSON body through the real decoder, so test requests
// are ones the HTTP API would accept.
func decode(t testing.TB, body string) *protocol.Request {
	t.Helper()
	r, err := protocol.DecodeRequest([]byte(body))
	if err != nil {
		t.Fatalf("DecodeRequest: %v", err)
	}
	return r
}

func hello(t testing.TB) *protocol.Request {
	return decode(t, `{"ability":"chat","input":[{"type":"text","text":"Hello"}]}`)
}

// --- upstream -----------------------------------------------------------------------

// upstream is a fake Gemini endpoint. It answers every request with status, header and
// body (a testdata file, sent byte for byte) unless handler is set, and records what it
// received.
type upstream struct {
	*httptest.Server

	status  int
	header  http.Header
	body    []byte
	handler http.HandlerFunc

	mu   sync.Mutex
	reqs []captured
}

// captured is one request the upstream received.
type captured struct {
	Method, Path, RawQuery string
	Header                 http.Header
	Body                   []byte
}

func newUpstream(t *testing.T, status int, file string, header ...string) *upstream {
	t.Helper()
	u := &upstream{status: status, header: http.Header{}}
	if file != "" {
		u.body = testdata(t, file)
		if filepath.Ext(file) == ".sse" {
			u.header.Set("Content-Type", "text/event-stream")
		} else {
			u.header.Set("Content-Type", "application/json; charset=UTF-8")
		}
	}
	for i := 0; i+1 < len(header); i += 2 {
		u.header.Set(header[i], header[i+1])
	}
	u.Server = httptest.NewServer(http.HandlerFunc(u.serve))
	t.Cleanup(u.Close)
	return u
}

func (u *upstream) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	u.mu.Lock()
	u.reqs = append(u.reqs, captured{Method: r.Method, Path: r.URL.EscapedPath(), RawQuery: r.URL.RawQuery, Header: r.Header.Clone(), Body: body})
	u.mu.Unlock()
	if u.handler != nil {
		u.handler(w, r)
		return
	}
	for k, vs := range u.header {
		w.Header()[k] = vs
	}
	w.WriteHeader(u.status)
	_, _ = w.Write(u.body)
}

func (u *upstream) requests() []captured {
	u.mu.Lock()
	defer u.mu.Unlock()
	return slices.Clone(u.reqs)
}

// only returns the single request the upstream received.
func (u *upstream) only(t *testing.T) captured {
	t.Helper()
	reqs := u.requests()
	if len(reqs) != 1 {
		t.Fatalf("upstream received %d requests, want 1", len(reqs))
	}
	return reqs[0]
}

func testdata(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// --- service accounts and the token endpoint -------------------------------------------

// testKeys are RSA keys generated once per test binary: no private key is checked in.
var testKeys = sync.OnceValue(func() []*rsa.PrivateKey {
	keys := make([]*rsa.PrivateKey, 2)
	for i := range keys {
		k, err := rsa.GenerateKey(rand.Reader, 2048)
		if err != nil {
			panic(err)
		}
		keys[i] = k
	}
	return keys
})

// serviceAccount is a service account key file for a token server.
type serviceAccount struct {
	json  string // the key file, the deployment's credential
	pem   string // its private key
	keyID string // its private_key_id
	email string
	pub   *rsa.PublicKey
}

// newServiceAccount returns the key file of testKeys()[n] with keyID, whose token_uri is
// tokenURI. The token URI is part of the file, so every test's token server makes a key
// file of its own, with its own entry in the adapter's token cache.
func newServiceAccount(t testing.TB, n int, keyID, tokenURI string) *serviceAccount {
	t.Helper()
	key := testKeys()[n]
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	sa := &serviceAccount{
		pem:   string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})),
		keyID: keyID,
		email: "switchboard@sb-test-project.iam.gserviceaccount.com",
		pub:   &key.PublicKey,
	}
	file, err := json.MarshalIndent(map[string]string{
		"type":                        "service_account",
		"project_id":                  "sb-test-project",
		"private_key_id":              keyID,
		"private_key":                 sa.pem,
		"client_email":                sa.email,
		"client_id":                   "104729387474839201234",
		"auth_uri":                    "https://accounts.google.com/o/oauth2/auth",
		"token_uri":                   tokenURI,
		"auth_provider_x509_cert_url": "https://www.googleapis.com/oauth2/v1/certs",
		"client_x509_cert_url":        "https://www.googleapis.com/robot/v1/metadata/x509/switchboard%40sb-test-project.iam.gserviceaccount.com",
		"universe_domain":             "googleapis.com",
	}, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	sa.json = string(file)
	return sa
}

// mintedTokens holds every access token a token server minted, so that run can check
// that none leaks.
var mintedTokens sync.Map

// tokenServer is a fake OAuth 2.0 token endpoint for service accounts. It checks every
// request as Google's endpoint would — the JWT-bearer grant, an RS256 assertion signed by
// the key named in its kid, issued by the account for this endpoint and the
// cloud-platform scope — and mints a token per key id.
type tokenServer struct {
	*httptest.Server
	t *testing.T

	mu      sync.Mutex
	keys    map[string]*serviceAccount // by private_key_id
	tokens  map[string]string          // minted token by private_key_id
	fetches int
	// inFlight counts requests being answered; maxInFlight is its highest value.
	inFlight, maxInFlight int
	status                int // non-zero: answer every request with it and an error body
	// hold, when set, delays every answer until it is closed.
	hold chan struct{}
}

func newTokenServer(t *testing.T) *tokenServer {
	ts := &tokenServer{t: t, keys: map[string]*serviceAccount{}, tokens: map[string]string{}}
	ts.Server = httptest.NewServer(http.HandlerFunc(ts.serve))
	t.Cleanup(ts.Close)
	return ts
}

// account returns a key file of testKeys()[n] with keyID whose token_uri is ts, and the
// token ts mints for it.
func (ts *tokenServer) account(n int, keyID string) (*serviceAccount, string) {
	sa := newServiceAccount(ts.t, n, keyID, ts.URL+"/token")
	token := "ya29.sb-canary-" + fmt.Sprintf("%x", sha256.Sum256([]byte(ts.URL+" "+keyID)))[:24]
	mintedTokens.Store(token, true)
	ts.mu.Lock()
	defer ts.mu.Unlock()
	ts.keys[keyID] = sa
	ts.tokens[keyID] = token
	return sa, token
}

func (ts *tokenServer) count() int {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return ts.fetches
}

// peak returns the highest number of token requests answered at once.
func (ts *tokenServer) peak() int {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return ts.maxInFlight
}

func (ts *tokenServer) serve(w http.ResponseWriter, r *http.Request) {
	ts.mu.Lock()
	ts.fetches++
	ts.inFlight++
	ts.maxInFlight = max(ts.maxInFlight, ts.inFlight)
	status, hold := ts.status, ts.hold
	ts.mu.Unlock()
	defer func() {
		ts.mu.Lock()
		ts.inFlight--
		ts.mu.Unlock()
	}()
	if hold != nil {
		select {
		case <-hold:
		case <-r.Context().Done():
			return
		}
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	if status != 0 {
		w.WriteHeader(status)
		// Google's error body; the assertion is echoed to prove it never surfaces.
		_ = r.ParseForm()
		_, _ = fmt.Fprintf(w, `{"error":"invalid_grant","error_description":"Invalid JWT Signature: %s"}`, r.PostForm.Get("assertion"))
		return
	}
	if err := ts.check(r); err != nil {
		ts.t.Errorf("token request: %v", err)
		w.WriteHeader(http.StatusBadRequest)
		_, _ = io.WriteString(w, `{"error":"invalid_grant"}`)
		return
	}
	_ = r.ParseForm()
	kid, _ := jwtHeader(r.PostForm.Get("assertion"))
	ts.mu.Lock()
	token := ts.tokens[kid]
	ts.mu.Unlock()
	_ = json.NewEncoder(w).Encode(map[string]any{"access_token": token, "expires_in": 3599, "token_type": "Bearer"})
}

// check verifies one token request.
func (ts *tokenServer) check(r *http.Request) error {
	if r.Method != http.MethodPost || r.URL.Path != "/token" {
		return fmt.Errorf("%s %s, want POST /token", r.Method, r.URL.Path)
	}
	if err := r.ParseForm(); err != nil {
		return err
	}
	if g := r.PostForm.Get("grant_type"); g != "urn:ietf:params:oauth:grant-type:jwt-bearer" {
		return fmt.Errorf("grant_type %q", g)
	}
	assertion := r.PostForm.Get("assertion")
	kid, err := jwtHeader(assertion)
	if err != nil {
		return err
	}
	ts.mu.Lock()
	sa := ts.keys[kid]
	ts.mu.Unlock()
	if sa == nil {
		return fmt.Errorf("unknown key id %q", kid)
	}
	parts := strings.Split(assertion, ".")
	sig, err := base64.RawURLEncoding.DecodeString(parts[2])
	if err != nil {
		return fmt.Errorf("signature encoding: %w", err)
	}
	digest := sha256.Sum256([]byte(parts[0] + "." + parts[1]))
	if err := rsa.VerifyPKCS1v15(sa.pub, crypto.SHA256, digest[:], sig); err != nil {
		return fmt.Errorf("assertion not signed by the service account's key: %w", err)
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return err
	}
	var claims struct {
		Iss   string `json:"iss"`
		Scope string `json:"scope"`
		Aud   string `json:"aud"`
		Exp   int64  `json:"exp"`
		Iat   int64  `json:"iat"`
	}
	if err := json.Unmarshal(payload, &claims); err != nil {
		return err
	}
	if claims.Iss != sa.email || claims.Scope != "https://www.googleapis.com/auth/cloud-platform" || claims.Aud != ts.URL+"/token" {
		return fmt.Errorf("claims %+v", claims)
	}
	if claims.Exp <= time.Now().Unix() || claims.Exp-claims.Iat > 3600 {
		return fmt.Errorf("assertion lifetime %d..%d", claims.Iat, claims.Exp)
	}
	return nil
}

// jwtHeader returns the kid of a compact JWS, checking it is RS256.
func jwtHeader(jws string) (string, error) {
	parts := strings.Split(jws, ".")
	if len(parts) != 3 {
		return "", errors.New("assertion is not a compact JWS")
	}
	raw, err := base64.RawURLEncoding.DecodeString(parts[0])
	if err != nil {
		return "", err
	}
	var h struct {
		Alg, Typ, Kid string
	}
	if err := json.Unmarshal(raw, &h); err != nil {
		return "", err
	}
	if h.Alg != "RS256" {
		return "", fmt.Errorf("alg %q", h.Alg)
	}
	return h.Kid, nil
}

// --- running an attempt ---------------------------------------------------------------

// result is what one attempt produced.
type result struct {
	events  []enginetest.Emitted
	outcome engine.Outcome
	err     error
	logs    string
}

// secretsOf are the secret values of d's credential: the API key, or the service
// account's private key and key id plus every token minted so far.
func secretsOf(d *routing.Deployment) []string {
	if d.Provider != gemini.ProviderVertex {
		return []string{d.Credential.Reveal()}
	}
	var key struct {
		PrivateKey   string `json:"private_key"`
		PrivateKeyID string `json:"private_key_id"`
	}
	_ = json.Unmarshal([]byte(d.Credential.Reveal()), &key)
	out := []string{key.PrivateKey, key.PrivateKeyID}
	mintedTokens.Range(func(k, _ any) bool {
		out = append(out, k.(string))
		return true
	})
	return out
}

// run executes one attempt on d with req and checks what every attempt must satisfy: the
// error, if any, is a *protocol.Error with a known code; and no secret of the credential
// appears in an event, the error, the outcome or a log line.
func run(t *testing.T, d *routing.Deployment, req *protocol.Request) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	return runCtx(t, ctx, d, req)
}

// runCtx is run with the attempt's context.
func runCtx(t *testing.T, ctx context.Context, d *routing.Deployment, req *protocol.Request) result {
	t.Helper()
	var logs enginetest.LogSink
	ad, err := gemini.New(d, gemini.WithLogger(logs.Logger()), gemini.WithHTTPClient(loopback))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	rec := &enginetest.Recorder{}
	out, err := ad.Execute(ctx, engine.Attempt{ExecutionID: "exe_test", Number: 1, Request: req, Deployment: d}, rec)
	res := result{events: rec.Recorded(), outcome: out, err: err, logs: logs.Text()}

	if err != nil {
		var pe *protocol.Error
		if !errors.As(err, &pe) || !pe.Code.Known() {
			t.Errorf("Execute error %T %v, want a *protocol.Error with a known code", err, err)
		}
	}
	for _, secret := range secretsOf(d) {
		if secret == "" {
			continue
		}
		if err != nil {
			b, _ := json.Marshal(err)
			if strings.Contains(string(b), secret) || strings.Contains(fmt.Sprintf("%v %+v %#v", err, err, err), secret) {
				t.Errorf("error leaks a secret: %s", b)
			}
		}
		for _, e := range res.events {
			if bytes.Contains(e.Data, []byte(secret)) {
				t.Errorf("event %s leaks a secret", e.Type)
			}
		}
		if strings.Contains(res.logs, secret) {
			t.Errorf("logs leak a secret:\n%s", res.logs)
		}
		if strings.Contains(out.FinishReason+out.ResponseModel, secret) {
			t.Error("outcome leaks a secret")
		}
	}
	return res
}

// checkCredentialPlacement asserts that the credential value went out only in header.
func checkCredentialPlacement(t *testing.T, c captured, header, value string) {
	t.Helper()
	if got := c.Header.Get(header); got != value {
		t.Errorf("%s = %q, want the credential", header, got)
	}
	if bytes.Contains(c.Body, []byte(value)) || strings.Contains(c.Path+"?"+c.RawQuery, value) {
		t.Error("request URL or body contains the credential")
	}
	if q, _ := url.ParseQuery(c.RawQuery); q.Has("key") {
		t.Error("request URL has a key parameter")
	}
	for k, vs := range c.Header {
		if http.CanonicalHeaderKey(k) == http.CanonicalHeaderKey(header) {
			continue
		}
		for _, v := range vs {
			if strings.Contains(v, value) {
				t.Errorf("header %s contains the credential", k)
			}
		}
	}
}

// --- comparisons ----------------------------------------------------------------------

func diffEvents(t *testing.T, got, want []enginetest.Emitted) {
	t.Helper()
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("events mismatch (-want +got):\n%s", d)
	}
}

// jsonEqual compares two JSON documents by value.
func jsonEqual(t *testing.T, got []byte, want string) {
	t.Helper()
	var gv, wv any
	if err := json.Unmarshal(got, &gv); err != nil {
		t.Fatalf("got is not JSON: %v\n%s", err, got)
	}
	if err := json.Unmarshal([]byte(want), &wv); err != nil {
		t.Fatalf("want is not JSON: %v", err)
	}
	if d := cmp.Diff(wv, gv); d != "" {
		t.Errorf("JSON mismatch (-want +got):\n%s", d)
	}
}

// asError returns err as a *protocol.Error, failing the test otherwise.
func asError(t *testing.T, err error) *protocol.Error {
	t.Helper()
	var pe *protocol.Error
	if !errors.As(err, &pe) {
		t.Fatalf("error = %T %v, want *protocol.Error", err, err)
	}
	return pe
}

// counter counts calls, for handlers.
type counter struct{ n atomic.Int32 }

func (c *counter) inc() int { return int(c.n.Add(1)) }

// watchingRecorder is a Recorder that closes first when the first text is recorded.
type watchingRecorder struct {
	enginetest.Recorder
	first chan struct{}
	once  sync.Once
}

func (w *watchingRecorder) Text(index int, text string) error {
	err := w.Recorder.Text(index, text)
	w.once.Do(func() { close(w.first) })
	return err
}

// execute runs one attempt of hello on d, recording into emit.
func execute(t *testing.T, ctx context.Context, d *routing.Deployment, emit engine.Emitter) (engine.Outcome, error) {
	t.Helper()
	ad, err := gemini.New(d, gemini.WithHTTPClient(loopback))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return ad.Execute(ctx, engine.Attempt{ExecutionID: "exe_test", Number: 1, Request: hello(t), Deployment: d}, emit)
}

// loopback is the client of the tests' adapters: their fake upstreams listen on
// loopback, which the shared client's fence refuses (spec/modeldeployments.md,
// "Endpoint").
var loopback = providerhttp.NewClient(providerhttp.Fence{AllowLoopback: true})

// newAdapter builds the adapter for d, sending through loopback.
func newAdapter(d *routing.Deployment) (engine.Adapter, error) {
	return gemini.New(d, gemini.WithHTTPClient(loopback))
}
