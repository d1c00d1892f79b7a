package anthropic_test

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
	"github.com/switchboard-dev/switchboard/runtime/providers/anthropic"
	"github.com/switchboard-dev/switchboard/runtime/providers/providerhttp"
	"github.com/switchboard-dev/switchboard/runtime/routing"
)

// canary is the deployment credential in every test. run checks after every attempt that
// it appears only in the x-api-key request header.
const canary = "sk-ant-canary-Zq7Xw3Vt9Rk2Lp5Nm8"

// testTimeout bounds every attempt; only a broken adapter reaches it.
const testTimeout = 10 * time.Second

// --- deployments --------------------------------------------------------------------

// deployment builds an anthropic deployment at endpoint with the bundled defaults (input
// text and json, output text); options add to it.
func deployment(endpoint string, opts ...func(*routing.Deployment)) *routing.Deployment {
	d := &routing.Deployment{
		Ref:        routing.Ref{Namespace: "ai", Name: "claude"},
		Provider:   anthropic.Provider,
		Model:      "claude-sonnet-4-5",
		Endpoint:   endpoint,
		Credential: routing.NewCredential(canary),
		Capabilities: routing.CapsOf(
			protocol.CapInputText, protocol.CapInputJSON, protocol.CapOutputText),
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

// --- upstream -----------------------------------------------------------------------

// upstream is a fake Anthropic endpoint. It answers every request with status, header and
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
	Method, Path string
	Header       http.Header
	Body         []byte
}

func newUpstream(t *testing.T, status int, file string, header ...string) *upstream {
	t.Helper()
	u := &upstream{status: status, header: http.Header{}}
	if file != "" {
		u.body = testdata(t, file)
		switch filepath.Ext(file) {
		case ".sse":
			u.header.Set("Content-Type", "text/event-stream; charset=utf-8")
		default:
			u.header.Set("Content-Type", "application/json")
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
	u.reqs = append(u.reqs, captured{Method: r.Method, Path: r.URL.Path, Header: r.Header.Clone(), Body: body})
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

// loopback is the client of the tests' adapters: their fake upstreams listen on
// loopback, which the shared client's fence refuses (spec/modeldeployments.md,
// "Endpoint").
var loopback = providerhttp.NewClient(providerhttp.Fence{AllowLoopback: true})

// run executes one attempt on d with req and checks what every attempt must satisfy: the
// error, if any, is a *protocol.Error with a known code; and the credential appears in no
// event, error, log line, request body or header other than x-api-key.
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
	ad, err := anthropic.New(d, anthropic.WithLogger(logs.Logger()), anthropic.WithHTTPClient(loopback))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	rec := &enginetest.Recorder{}
	start := time.Now()
	out, err := ad.Execute(ctx, engine.Attempt{ExecutionID: "exe_test", Number: 1, Request: req, Deployment: d}, rec)
	elapsed := time.Since(start)
	res := result{events: rec.Recorded(), outcome: out, err: err, logs: logs.Text(), elapsed: elapsed}

	if err != nil {
		var pe *protocol.Error
		if !errors.As(err, &pe) || !pe.Code.Known() {
			t.Errorf("Execute error %T %v, want a *protocol.Error with a known code", err, err)
		}
		b, _ := json.Marshal(err)
		if strings.Contains(string(b), canary) || strings.Contains(err.Error(), canary) {
			t.Errorf("error leaks the credential: %s", b)
		}
	}
	for _, e := range res.events {
		if strings.Contains(string(e.Data), canary) {
			t.Errorf("event %s leaks the credential", e.Type)
		}
	}
	if strings.Contains(res.logs, canary) {
		t.Errorf("logs leak the credential:\n%s", res.logs)
	}
	return res
}

// checkCredentialPlacement asserts the credential went out only as x-api-key.
func checkCredentialPlacement(t *testing.T, c captured) {
	t.Helper()
	if got := c.Header.Get("x-api-key"); got != canary {
		t.Errorf("x-api-key = %q, want the credential", got)
	}
	if bytes.Contains(c.Body, []byte(canary)) {
		t.Error("request body contains the credential")
	}
	for k, vs := range c.Header {
		if http.CanonicalHeaderKey(k) == "X-Api-Key" {
			continue
		}
		for _, v := range vs {
			if strings.Contains(v, canary) {
				t.Errorf("header %s contains the credential", k)
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
			enginetest.Encode(protocol.EventRouteSelected, protocol.RouteSelectedData{Attempt: 1, Deployment: "ai/claude", Provider: "anthropic", Model: "claude-sonnet-4-5"}),
		},
		res.events,
		[]enginetest.Emitted{enginetest.Terminal(res.outcome, res.err)},
	)...)
	return enginetest.Materialize(t, id, events)
}

// diffSnapshot compares snapshots as the JSON the API would serve (the contract's shape).
func diffSnapshot(t *testing.T, got, want protocol.Snapshot) {
	t.Helper()
	g, _ := json.Marshal(got)
	w, _ := json.Marshal(want)
	var gv, wv any
	_ = json.Unmarshal(g, &gv)
	_ = json.Unmarshal(w, &wv)
	if d := cmp.Diff(wv, gv); d != "" {
		t.Errorf("snapshot mismatch (-want +got):\n%s", d)
	}
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

// asError returns err as a *protocol.Error, failing the test otherwise.
func asError(t *testing.T, err error) *protocol.Error {
	t.Helper()
	var pe *protocol.Error
	if !errors.As(err, &pe) {
		t.Fatalf("error = %T %v, want *protocol.Error", err, err)
	}
	return pe
}
