package openai_test

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
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"

	"github.com/switchboard-dev/switchboard/runtime/engine"
	"github.com/switchboard-dev/switchboard/runtime/engine/enginetest"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
	"github.com/switchboard-dev/switchboard/runtime/providers/openai"
	"github.com/switchboard-dev/switchboard/runtime/providers/providerhttp"
	"github.com/switchboard-dev/switchboard/runtime/routing"
)

// canary is the deployment credential in every test. It is made of characters a
// provider identifier may contain, so only a deliberate scrub keeps it out of
// provider_error when an upstream echoes it back.
const canary = "sk-canary-7f3a9c2e51d04b6b"

// captured is what the fake upstream received.
type captured struct {
	Method   string
	Path     string
	RawQuery string
	Header   http.Header
	Body     []byte
}

// upstream is a fake Chat Completions server replaying one reply for every request.
type upstream struct {
	srv   *httptest.Server
	mu    sync.Mutex
	calls []captured
}

func serve(t *testing.T, reply http.HandlerFunc) *upstream {
	t.Helper()
	u := &upstream{}
	u.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		u.mu.Lock()
		u.calls = append(u.calls, captured{Method: r.Method, Path: r.URL.Path, RawQuery: r.URL.RawQuery, Header: r.Header.Clone(), Body: body})
		u.mu.Unlock()
		reply(w, r)
	}))
	t.Cleanup(u.srv.Close)
	return u
}

func (u *upstream) endpoint() string { return u.srv.URL + "/v1" }

func (u *upstream) requests() []captured {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]captured(nil), u.calls...)
}

// only returns the single request the upstream received.
func (u *upstream) only(t *testing.T) captured {
	t.Helper()
	rs := u.requests()
	if len(rs) != 1 {
		t.Fatalf("upstream received %d requests, want 1", len(rs))
	}
	return rs[0]
}

func testdata(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// frames splits an event stream body into its frames, each with its blank line, so a
// replay can flush them one by one and a test can cut the stream at a frame boundary.
func frames(body []byte) [][]byte {
	var out [][]byte
	for len(body) > 0 {
		i := bytes.Index(body, []byte("\n\n"))
		if i < 0 {
			out = append(out, body)
			break
		}
		out = append(out, body[:i+2])
		body = body[i+2:]
	}
	return out
}

// sseReply replays body byte for byte as a 200 event stream, flushing after every frame.
func sseReply(body []byte, header ...string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
		w.Header().Set("x-request-id", "req_sb0123456789abcdef")
		for i := 0; i+1 < len(header); i += 2 {
			w.Header().Set(header[i], header[i+1])
		}
		w.WriteHeader(http.StatusOK)
		for _, f := range frames(body) {
			w.Write(f)
			http.NewResponseController(w).Flush()
		}
	}
}

// jsonReply answers status with body and the given header pairs.
func jsonReply(status int, body []byte, header ...string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		for i := 0; i+1 < len(header); i += 2 {
			w.Header().Set(header[i], header[i+1])
		}
		w.WriteHeader(status)
		w.Write(body)
	}
}

// stallReply sends prefix as a 200 event stream and then nothing more until the client
// goes away — a provider that stopped mid-stream.
func stallReply(prefix []byte) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		w.Write(prefix)
		http.NewResponseController(w).Flush()
		<-r.Context().Done()
	}
}

// deployment builds an openai deployment on endpoint: text and json in, text out,
// credential canary. Options adjust it.
func deployment(endpoint string, opts ...func(*routing.Deployment)) *routing.Deployment {
	d := &routing.Deployment{
		Ref:          routing.Ref{Namespace: "ai", Name: "gpt"},
		Provider:     openai.ProviderOpenAI,
		Model:        "gpt-4o-mini",
		Endpoint:     endpoint,
		Credential:   routing.NewCredential(canary),
		Abilities:    []string{"chat"},
		Capabilities: routing.CapsOf(protocol.CapInputText, protocol.CapInputJSON, protocol.CapOutputText),
		Weight:       100,
	}
	for _, o := range opts {
		o(d)
	}
	return d
}

// with adds declared capabilities.
func with(caps ...protocol.Capability) func(*routing.Deployment) {
	return func(d *routing.Deployment) { d.Capabilities |= routing.CapsOf(caps...) }
}

func streaming() func(*routing.Deployment) { return with(protocol.CapStreaming) }

// request decodes a request body the way the HTTP API does.
func request(t *testing.T, body string) *protocol.Request {
	t.Helper()
	r, err := protocol.DecodeRequest([]byte(body))
	if err != nil {
		t.Fatalf("DecodeRequest: %v", err)
	}
	return r
}

const hello = `{"ability":"chat","input":[{"type":"text","text":"Say hello."}]}`

// ev is the expected form of one emitted event, its data given as JSON text.
func ev(typ protocol.EventType, data string) enginetest.Emitted {
	return enginetest.Emitted{Type: typ, Data: json.RawMessage(data)}
}

// result is one Execute call's outcome.
type result struct {
	events []enginetest.Emitted
	out    engine.Outcome
	err    error
	logs   string
}

// loopback is the client of the tests' adapters: their fake upstreams listen on
// loopback, which the shared client's fence refuses (spec/modeldeployments.md,
// "Endpoint").
var loopback = providerhttp.NewClient(providerhttp.Fence{AllowLoopback: true})

// execute builds the adapter for d and runs one attempt of req.
func execute(t *testing.T, ctx context.Context, d *routing.Deployment, req *protocol.Request) result {
	t.Helper()
	// The logger comes with the attempt's context, as the engine passes it.
	var logs enginetest.LogSink
	ctx = logr.NewContext(ctx, logs.Logger())
	a, err := openai.New(d, openai.WithHTTPClient(loopback))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	rec := &enginetest.Recorder{}
	out, err := a.Execute(ctx, engine.Attempt{ExecutionID: "exe_test", Number: 1, Request: req, Deployment: d, CleanupGrace: time.Second}, rec)
	return result{events: rec.Recorded(), out: out, err: err, logs: logs.Text()}
}

// protoErr returns the portable error of res, failing the test if there is none.
func (res result) protoErr(t *testing.T) *protocol.Error {
	t.Helper()
	var pe *protocol.Error
	if !errors.As(res.err, &pe) {
		t.Fatalf("Execute error = %v (%T), want *protocol.Error", res.err, res.err)
	}
	return pe
}

// snapshot folds the recorded events, plus the terminal event the engine would record
// for the outcome, into the result snapshot, as JSON.
func (res result) snapshot(t *testing.T) string {
	t.Helper()
	events := enginetest.Envelopes("exe_test", slices.Concat(res.events, []enginetest.Emitted{enginetest.Terminal(res.out, res.err)})...)
	b, err := json.Marshal(enginetest.Materialize(t, "exe_test", events))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// compactJSON normalises an expected JSON literal.
func compactJSON(t *testing.T, s string) string {
	t.Helper()
	var buf bytes.Buffer
	if err := json.Compact(&buf, []byte(s)); err != nil {
		t.Fatalf("bad expected JSON: %v", err)
	}
	return buf.String()
}

func diffEvents(t *testing.T, got, want []enginetest.Emitted) {
	t.Helper()
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("emitted events (-want +got):\n%s", d)
	}
}

func diffJSON(t *testing.T, what, got, want string) {
	t.Helper()
	if d := cmp.Diff(compactJSON(t, want), got); d != "" {
		t.Errorf("%s (-want +got):\n%s", what, d)
	}
}
