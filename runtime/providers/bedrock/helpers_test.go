package bedrock_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/switchboard-dev/switchboard/runtime/engine"
	"github.com/switchboard-dev/switchboard/runtime/engine/enginetest"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
	"github.com/switchboard-dev/switchboard/runtime/providers/bedrock"
	"github.com/switchboard-dev/switchboard/runtime/providers/providerhttp"
	"github.com/switchboard-dev/switchboard/runtime/routing"
)

// Canaries: the credential values of every test. run checks after every attempt that no
// secret appears in an event, the error or a log line, and checkPlacement that each goes
// on the wire only where it must (the secret access key nowhere at all).
const (
	accessKeyID  = "AKIASWBDCANARY000001"
	secretCanary = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYsWBDcanary1"
	tokenCanary  = "IQoJb3JpZ2luX2VjEsWBDcanaryTokenZq7Xw3Vt9Rk2Lp5Nm8/aBc+dEf=="
	apiKeyCanary = "ABSKQmVkcm9ja0FQSUtleS1zd2JkLWNhbmFyeS1acTdYdzNWdDlSazJMcDVObTg"
	testRegion   = "us-west-2"
	testModel    = "us.anthropic.claude-3-5-sonnet-20241022-v2:0"
)

// allSecrets are every canary that must never leak.
var allSecrets = []string{secretCanary, tokenCanary, apiKeyCanary}

// signingTime is the clock of every adapter under test, so signatures are reproducible.
var signingTime = time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)

// keysJSON is AWS access keys as `aws configure export-credentials --format process`
// prints them; token adds the session token and an expiration after signingTime.
func keysJSON(token bool) string {
	if !token {
		return `{"Version":1,"AccessKeyId":"` + accessKeyID + `","SecretAccessKey":"` + secretCanary + `"}`
	}
	return `{"Version":1,"AccessKeyId":"` + accessKeyID + `","SecretAccessKey":"` + secretCanary +
		`","SessionToken":"` + tokenCanary + `","Expiration":"2026-03-04T06:06:07+00:00"}`
}

// testTimeout bounds every attempt; only a broken adapter reaches it.
const testTimeout = 10 * time.Second

// --- deployments --------------------------------------------------------------------

// deployment builds a bedrock deployment at endpoint with temporary access keys and the
// bundled defaults (input text and json, output text); options add to it.
func deployment(endpoint string, opts ...func(*routing.Deployment)) *routing.Deployment {
	d := &routing.Deployment{
		Ref:          routing.Ref{Namespace: "ai", Name: "claude-bedrock"},
		Provider:     bedrock.Provider,
		Model:        testModel,
		Region:       testRegion,
		Endpoint:     endpoint,
		Credential:   routing.NewCredential(keysJSON(true)),
		Abilities:    []string{"chat"},
		Capabilities: routing.CapsOf(protocol.CapInputText, protocol.CapInputJSON, protocol.CapOutputText),
		Weight:       100,
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

// withCredential replaces the credential value.
func withCredential(v string) func(*routing.Deployment) {
	return func(d *routing.Deployment) { d.Credential = routing.NewCredential(v) }
}

// withModel replaces the model id.
func withModel(m string) func(*routing.Deployment) {
	return func(d *routing.Deployment) { d.Model = m }
}

// --- requests -----------------------------------------------------------------------

// decode builds a request from its JSON body through the real decoder, so test requests
// are ones the HTTP API would accept.
func decode(t *testing.T, body string) *protocol.Request {
	t.Helper()
	r, err := protocol.DecodeRequest([]byte(body))
	if err != nil {
		t.Fatalf("DecodeRequest: %v", err)
	}
	return r
}

func hello(t *testing.T) *protocol.Request {
	return decode(t, `{"ability":"chat","input":[{"type":"text","text":"Hello"}]}`)
}

// withExtensions sets extensions on a decoded request. The request decoder accepts only
// registered keys, and the bedrock.* keys are not (yet) in its registry, so the tests
// set them past it — exactly the case the adapter's own checks are for.
func withExtensions(r *protocol.Request, kv ...string) {
	r.Extensions = map[string]json.RawMessage{}
	for i := 0; i+1 < len(kv); i += 2 {
		r.Extensions[kv[i]] = json.RawMessage(kv[i+1])
	}
}

// --- upstream -----------------------------------------------------------------------

// upstream is a fake Bedrock Runtime endpoint. It authenticates every request the way
// AWS does — a bearer API key must be the canary, a SigV4 signature must verify with the
// canary secret (recomputed by verifySigV4) — records what it received, and answers
// with reply, or 403 when authentication fails.
type upstream struct {
	*httptest.Server
	reply http.HandlerFunc

	mu   sync.Mutex
	reqs []captured
}

// captured is one request the upstream received.
type captured struct {
	Method     string
	RequestURI string // the request target exactly as sent
	Header     http.Header
	Body       []byte
	AuthErr    error
}

func newUpstream(t *testing.T, reply http.HandlerFunc) *upstream {
	t.Helper()
	u := &upstream{reply: reply}
	u.Server = httptest.NewServer(http.HandlerFunc(u.serve))
	t.Cleanup(u.Close)
	return u
}

func (u *upstream) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	authErr := authenticate(r, body)
	u.mu.Lock()
	u.reqs = append(u.reqs, captured{Method: r.Method, RequestURI: r.RequestURI, Header: r.Header.Clone(), Body: body, AuthErr: authErr})
	u.mu.Unlock()
	if authErr != nil {
		w.Header().Set("x-amzn-ErrorType", "InvalidSignatureException:http://internal.amazon.com/coral/com.amazon.coral.service/")
		w.WriteHeader(http.StatusForbidden)
		_, _ = io.WriteString(w, `{"message":"The request signature we calculated does not match the signature you provided."}`)
		return
	}
	u.reply(w, r)
}

// authenticate accepts the canary API key as a bearer token, or a SigV4 signature made
// with the canary access keys for the test region and service "bedrock", at
// signingTime; a session token, when sent, must be the canary's.
func authenticate(r *http.Request, body []byte) error {
	h := r.Header.Get("Authorization")
	if key, ok := strings.CutPrefix(h, "Bearer "); ok {
		if key != apiKeyCanary {
			return errors.New("wrong bearer token")
		}
		return nil
	}
	// Everything that identifies the request must be signed: the host, the date and the
	// body's type (the body itself through the payload hash).
	want := sigv4Expect{accessKeyID: accessKeyID, secretAccessKey: secretCanary,
		region: testRegion, service: "bedrock", at: signingTime,
		signed: []string{"host", "x-amz-date", "content-type"}}
	if r.Header.Get("X-Amz-Security-Token") != "" {
		want.sessionToken = tokenCanary
	}
	return verifySigV4(r, body, want)
}

func (u *upstream) requests() []captured {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]captured(nil), u.reqs...)
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

// streamReply answers 200 with an event stream body.
func streamReply(body []byte, header ...string) http.HandlerFunc {
	return reply(http.StatusOK, bedrock.ContentTypeEventStream, body, header...)
}

// jsonReply answers status with a JSON body.
func jsonReply(status int, body []byte, header ...string) http.HandlerFunc {
	return reply(status, "application/json", body, header...)
}

func reply(status int, contentType string, body []byte, header ...string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", contentType)
		for i := 0; i+1 < len(header); i += 2 {
			w.Header().Set(header[i], header[i+1])
		}
		w.WriteHeader(status)
		_, _ = w.Write(body)
	}
}

// script reads and encodes testdata/streams/name.
func script(t *testing.T, name string) []byte {
	t.Helper()
	b, err := bedrock.StreamScript(name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// frames encodes frames.
func frames(t *testing.T, fs ...bedrock.Frame) []byte {
	t.Helper()
	b, err := bedrock.EncodeFrames(fs...)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func testdata(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// --- running an attempt ---------------------------------------------------------------

// result is what one attempt produced.
type result struct {
	events  []enginetest.Emitted
	outcome engine.Outcome
	err     error
	logs    string
	elapsed time.Duration
}

// run executes one attempt on d with req and checks what every attempt must satisfy: the
// error, if any, is a *protocol.Error with a known code; and no secret appears in an
// event, the error or a log line.
func run(t *testing.T, d *routing.Deployment, req *protocol.Request) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	return runCtx(t, ctx, d, req)
}

// loopback is the client of the tests' adapters: their fake upstreams listen on
// loopback, which the shared client's fence refuses (spec/modeldeployments.md,
// "Endpoint").
var loopback = providerhttp.NewClient(providerhttp.Fence{AllowLoopback: true})

// runCtx is run with the attempt's context.
func runCtx(t *testing.T, ctx context.Context, d *routing.Deployment, req *protocol.Request) result {
	t.Helper()
	return runClient(t, ctx, d, req, nil)
}

// runWith is run sending through client.
func runWith(t *testing.T, d *routing.Deployment, req *protocol.Request, client *http.Client) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	return runClient(t, ctx, d, req, client)
}

// runClient is run on ctx sending through client, by default loopback.
func runClient(t *testing.T, ctx context.Context, d *routing.Deployment, req *protocol.Request, client *http.Client) result {
	t.Helper()
	if client == nil {
		client = loopback
	}
	var logs enginetest.LogSink
	ad, err := bedrock.New(d, bedrock.WithLogger(logs.Logger()), bedrock.WithHTTPClient(client),
		bedrock.WithClock(func() time.Time { return signingTime }))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	rec := &enginetest.Recorder{}
	start := time.Now()
	out, err := ad.Execute(ctx, engine.Attempt{ExecutionID: "exe_test", Number: 1, Request: req, Deployment: d}, rec)
	res := result{events: rec.Recorded(), outcome: out, err: err, logs: logs.Text(), elapsed: time.Since(start)}

	if err != nil {
		var pe *protocol.Error
		if !errors.As(err, &pe) || !pe.Code.Known() {
			t.Errorf("Execute error %T %v, want a *protocol.Error with a known code", err, err)
		}
	}
	checkNoSecrets(t, res)
	return res
}

// checkNoSecrets asserts that no canary secret is in res's events, error or logs.
func checkNoSecrets(t *testing.T, res result) {
	t.Helper()
	for _, secret := range allSecrets {
		if res.err != nil {
			b, _ := json.Marshal(res.err)
			if strings.Contains(string(b), secret) || strings.Contains(res.err.Error(), secret) {
				t.Errorf("error leaks a secret: %s", b)
			}
		}
		for _, e := range res.events {
			if strings.Contains(string(e.Data), secret) {
				t.Errorf("event %s leaks a secret", e.Type)
			}
		}
		if strings.Contains(res.logs, secret) {
			t.Errorf("logs leak a secret:\n%s", res.logs)
		}
	}
}

// checkPlacement asserts the request authenticated and carried the credential only where
// it must: the secret access key nowhere (only its signature travels), the session token
// only in X-Amz-Security-Token, an API key only in Authorization as a bearer token.
func checkPlacement(t *testing.T, c captured) {
	t.Helper()
	if c.AuthErr != nil {
		t.Errorf("request did not authenticate: %v", c.AuthErr)
	}
	allowed := map[string]string{tokenCanary: "X-Amz-Security-Token", apiKeyCanary: "Authorization"}
	for _, secret := range allSecrets {
		if strings.Contains(c.RequestURI, secret) || bytes.Contains(c.Body, []byte(secret)) {
			t.Errorf("request URL or body contains a secret")
		}
		for k, vs := range c.Header {
			if http.CanonicalHeaderKey(k) == allowed[secret] {
				continue
			}
			for _, v := range vs {
				if strings.Contains(v, secret) {
					t.Errorf("header %s contains a secret", k)
				}
			}
		}
	}
}

// --- snapshots ------------------------------------------------------------------------

// materialize folds the attempt into the execution's snapshot the way the runtime would
// record it: accepted, route.selected, the adapter's events, then the terminal event the
// engine derives from Execute's result.
func materialize(t *testing.T, res result) protocol.Snapshot {
	t.Helper()
	const id = "exe_test"
	events := enginetest.Envelopes(id, slices.Concat(
		[]enginetest.Emitted{
			enginetest.Encode(protocol.EventAccepted, protocol.AcceptedData{Ability: "chat"}),
			enginetest.Encode(protocol.EventRouteSelected, protocol.RouteSelectedData{Attempt: 1, Deployment: "ai/claude-bedrock", Provider: "bedrock", Model: testModel}),
		},
		res.events,
		[]enginetest.Emitted{enginetest.Terminal(res.outcome, res.err)},
	)...)
	return enginetest.Materialize(t, id, events)
}

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

// mustJSON is s as a JSON string literal.
func mustJSON(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
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
