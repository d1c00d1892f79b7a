package replicate

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"

	"github.com/switchboard-dev/switchboard/runtime/engine"
	"github.com/switchboard-dev/switchboard/runtime/engine/enginetest"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
	"github.com/switchboard-dev/switchboard/runtime/routing"
)

// canary is the deployment credential in every test. It must appear in the Authorization
// header and nowhere else: not in events, errors, logs, URLs or request bodies.
const canary = "r8_CANARY_4f1d0c9be2a87d35"

// waitTimeout bounds every wait; only a broken adapter reaches it.
const waitTimeout = 10 * time.Second

// reply is one scripted response of the fake Replicate API.
type reply struct {
	status int
	file   string // a testdata file, with {{server}} and {{token}} filled in; "" for no body
	header map[string]string
}

func okJSON(file string) reply      { return reply{status: http.StatusOK, file: file} }
func createdJSON(file string) reply { return reply{status: http.StatusCreated, file: file} }

// seen is a request the fake API received.
type seen struct {
	Method string
	Path   string // with the raw query, if any
	Header http.Header
	Body   string
	At     time.Time
}

// fakeReplicate is an httptest server speaking Replicate's documented predictions API
// with scripted responses: create, then polls in order (the last one repeats), cancel.
type fakeReplicate struct {
	t   *testing.T
	srv *httptest.Server

	create reply
	polls  []reply
	cancel reply
	// holdCreate and holdCancel keep those requests open until the client goes away.
	holdCreate bool
	holdCancel bool
	// createDelay delays the create's answer, whether or not the client is still there
	// (the prediction exists upstream either way).
	createDelay time.Duration
	// foreign fills {{foreign}} in testdata: another origin's base URL.
	foreign string
	// finished, once set, answers every later poll: the prediction ended meanwhile.
	finished atomic.Pointer[reply]

	mu        sync.Mutex
	requests  []seen
	pollCount int
	// created and stopped are the predictions created and cancelled, by id.
	created, stopped []string
	polled           chan struct{} // receives (without blocking) after every poll answered
	cancelled        chan struct{} // closed when the first cancel arrives
	once             sync.Once
}

func newFake(t *testing.T, create reply, polls ...reply) *fakeReplicate {
	t.Helper()
	f := &fakeReplicate{
		t:         t,
		create:    create,
		polls:     polls,
		cancel:    okJSON("flux_canceled.json"),
		polled:    make(chan struct{}, 64),
		cancelled: make(chan struct{}),
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/models/{owner}/{name}/predictions", f.handleCreate)
	mux.HandleFunc("POST /v1/predictions", f.handleCreate)
	mux.HandleFunc("GET /v1/predictions/{id}", f.handlePoll)
	mux.HandleFunc("POST /v1/predictions/{id}/cancel", f.handleCancel)
	f.srv = httptest.NewServer(f.record(mux))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeReplicate) record(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		f.mu.Lock()
		f.requests = append(f.requests, seen{Method: r.Method, Path: r.URL.RequestURI(), Header: r.Header.Clone(), Body: string(body), At: time.Now()})
		f.mu.Unlock()
		next.ServeHTTP(w, r)
	})
}

func (f *fakeReplicate) handleCreate(w http.ResponseWriter, r *http.Request) {
	if f.holdCreate {
		<-r.Context().Done()
		return
	}
	if f.create.status == http.StatusCreated && f.create.file != "" {
		id := predictionID(f.t, render(f.t, f.create.file, f.srv.URL, f.foreign))
		f.mu.Lock()
		f.created = append(f.created, id)
		f.mu.Unlock()
	}
	time.Sleep(f.createDelay)
	f.write(w, f.create)
}

// predictionID is the id of a prediction object.
func predictionID(t *testing.T, b []byte) string {
	var p struct{ ID string }
	if err := json.Unmarshal(b, &p); err != nil {
		t.Errorf("testdata prediction: %v", err)
	}
	return p.ID
}

// running lists the predictions created and not cancelled.
func (f *fakeReplicate) running() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, id := range f.created {
		if !slices.Contains(f.stopped, id) {
			out = append(out, id)
		}
	}
	return out
}

func (f *fakeReplicate) handlePoll(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	i := min(f.pollCount, len(f.polls)-1)
	f.pollCount++
	f.mu.Unlock()
	switch rep := f.finished.Load(); {
	case rep != nil:
		f.write(w, *rep)
	case i < 0:
		http.NotFound(w, r)
		return
	default:
		f.write(w, f.polls[i])
	}
	select {
	case f.polled <- struct{}{}:
	default:
	}
}

func (f *fakeReplicate) handleCancel(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	f.stopped = append(f.stopped, r.PathValue("id"))
	f.mu.Unlock()
	f.once.Do(func() { close(f.cancelled) })
	if f.holdCancel {
		<-r.Context().Done()
		return
	}
	f.write(w, f.cancel)
}

func (f *fakeReplicate) write(w http.ResponseWriter, rep reply) {
	for k, v := range rep.header {
		w.Header().Set(k, v)
	}
	if rep.file == "" {
		w.WriteHeader(rep.status)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	if rep.status >= 400 {
		w.Header().Set("Content-Type", "application/problem+json")
	}
	w.WriteHeader(rep.status)
	_, _ = w.Write(render(f.t, rep.file, f.srv.URL, f.foreign))
}

// seen returns the requests received so far.
func (f *fakeReplicate) seen() []seen {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]seen(nil), f.requests...)
}

// calls lists the received requests as "METHOD path".
func (f *fakeReplicate) calls() []string {
	var out []string
	for _, s := range f.seen() {
		out = append(out, s.Method+" "+s.Path)
	}
	return out
}

// render reads a testdata file and fills in its placeholders: {{server}} (the fake's
// base URL), {{foreign}} (another origin), {{token}} and {{token_escaped}} (the
// credential, literally and as JSON \u escapes, for upstreams that echo it).
func render(t *testing.T, file, server, foreign string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", file))
	if err != nil {
		t.Fatalf("read testdata: %v", err)
	}
	var esc strings.Builder
	for _, r := range canary {
		fmt.Fprintf(&esc, `\u%04x`, r)
	}
	s := strings.NewReplacer("{{server}}", server, "{{foreign}}", foreign, "{{token_escaped}}", esc.String(), "{{token}}", canary).Replace(string(b))
	return []byte(s)
}

// deployment builds the routing entry for a test, with functional options.
func deployment(endpoint string, opts ...func(*routing.Deployment)) *routing.Deployment {
	d := &routing.Deployment{
		Ref:          routing.Ref{Namespace: "ai", Name: "flux"},
		Provider:     Provider,
		Model:        "black-forest-labs/flux-schnell",
		Endpoint:     endpoint,
		Credential:   routing.NewCredential(canary),
		Abilities:    []string{"image"},
		Capabilities: routing.CapsOf(protocol.CapInputText, protocol.CapInputJSON, protocol.CapOutputImage),
		Parameters:   []string{"num_outputs", "aspect_ratio", "output_format"},
		Weight:       100,
	}
	for _, o := range opts {
		o(d)
	}
	return d
}

func withModel(m string) func(*routing.Deployment) {
	return func(d *routing.Deployment) { d.Model = m }
}

func withCaps(caps ...protocol.Capability) func(*routing.Deployment) {
	return func(d *routing.Deployment) { d.Capabilities = routing.CapsOf(caps...) }
}

// request decodes body as a real submission would be.
func request(t *testing.T, body string) *protocol.Request {
	t.Helper()
	req, err := protocol.DecodeRequest([]byte(body))
	if err != nil {
		t.Fatalf("DecodeRequest: %v", err)
	}
	return req
}

// fast are the options every test uses: the fake server's client and short polls.
func fast(f *fakeReplicate) []Option {
	return []Option{WithHTTPClient(f.srv.Client()), WithPollBackoff(5*time.Millisecond, 20*time.Millisecond)}
}

// outcome is what one Execute or Resume call produced.
type outcome struct {
	out    engine.Outcome
	err    error
	events []enginetest.Emitted // never nil, so that no events read as [] in JSON
	// handles are the remote-job handles recorded.
	handles []json.RawMessage
	// order lists what was recorded, in order: event types, and "remote job" for a
	// handle.
	order []string
	logs  string
}

// attempt executes req on d with ctx (which carries the log sink) and the given grace.
func attempt(ctx context.Context, t *testing.T, d *routing.Deployment, req *protocol.Request, grace time.Duration, opts ...Option) outcome {
	t.Helper()
	return perform(ctx, t, d, grace, execute(req), false, opts...)
}

// call runs one attempt of an adapter: Execute or Resume.
type call func(ctx context.Context, ad engine.Adapter, at engine.Attempt, emit engine.Emitter) (engine.Outcome, error)

// execute is the call of Execute with req.
func execute(req *protocol.Request) call {
	return func(ctx context.Context, ad engine.Adapter, at engine.Attempt, emit engine.Emitter) (engine.Outcome, error) {
		at.Request = req
		return ad.Execute(ctx, at, emit)
	}
}

// resume is the call of Resume with handle; the attempt carries no request, as when the
// engine resumes one.
func resume(handle string) call {
	return func(ctx context.Context, ad engine.Adapter, at engine.Attempt, emit engine.Emitter) (engine.Outcome, error) {
		return ad.(engine.Resumer).Resume(ctx, at, json.RawMessage(handle), emit)
	}
}

// perform runs c on an adapter built for d with ctx (which carries the log sink) and the
// given grace. The recorder refuses everything once ctx has ended, as the engine does,
// unless late is set: then it takes what comes after.
func perform(ctx context.Context, t *testing.T, d *routing.Deployment, grace time.Duration, c call, late bool, opts ...Option) outcome {
	t.Helper()
	ad, err := New(d, opts...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	logs := &enginetest.LogSink{}
	ctx = logr.NewContext(ctx, logs.Logger())
	recCtx := ctx
	if late {
		recCtx = nil
	}
	// This adapter emits only progress, results and usage.
	rec := &tracer{Recorder: &enginetest.Recorder{Context: recCtx, Types: []protocol.EventType{
		protocol.EventProgress, protocol.EventOutputResult, protocol.EventUsageReported}}}
	at := engine.Attempt{ExecutionID: "exe_test", Number: 1, Deployment: d, CleanupGrace: grace}
	out, err := c(ctx, ad, at, rec)
	return outcome{
		out: out, err: err,
		events:  append([]enginetest.Emitted{}, rec.Recorded()...),
		handles: rec.Handles(),
		order:   rec.recorded(),
		logs:    logs.Text(),
	}
}

// tracer is a Recorder that also remembers the order of events and handles.
type tracer struct {
	*enginetest.Recorder
	mu    sync.Mutex
	order []string
}

func (tr *tracer) Text(index int, text string) error {
	return tr.noted(protocol.EventOutputDelta, tr.Recorder.Text(index, text))
}

func (tr *tracer) ToolStarted(index int, callID, name string) error {
	return tr.noted(protocol.EventToolCallStarted, tr.Recorder.ToolStarted(index, callID, name))
}

func (tr *tracer) ToolArgs(callID, delta string) error {
	return tr.noted(protocol.EventToolCallArgsDelta, tr.Recorder.ToolArgs(callID, delta))
}

func (tr *tracer) Progress(p protocol.ProgressData) error {
	return tr.noted(protocol.EventProgress, tr.Recorder.Progress(p))
}

func (tr *tracer) Result(res protocol.OutputResultData) error {
	return tr.noted(protocol.EventOutputResult, tr.Recorder.Result(res))
}

func (tr *tracer) Usage(usage []protocol.Usage) error {
	return tr.noted(protocol.EventUsageReported, tr.Recorder.Usage(usage))
}

// noted notes typ when err, what recording it returned, is nil.
func (tr *tracer) noted(typ protocol.EventType, err error) error {
	if err == nil {
		tr.note(string(typ))
	}
	return err
}

func (tr *tracer) RemoteJob(handle json.RawMessage) error {
	err := tr.Recorder.RemoteJob(handle)
	if err == nil {
		tr.note("remote job")
	}
	return err
}

func (tr *tracer) note(s string) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.order = append(tr.order, s)
}

func (tr *tracer) recorded() []string {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return slices.Clone(tr.order)
}

// envelopes wraps the recorded emits as the engine would: accepted and route.selected
// first, the terminal event from Execute's result last.
func envelopes(d *routing.Deployment, o outcome) []protocol.Event {
	deadline := time.Date(2026, 12, 2, 13, 5, 0, 0, time.UTC)
	return enginetest.Envelopes("exe_test", slices.Concat(
		[]enginetest.Emitted{
			enginetest.Encode(protocol.EventAccepted, protocol.AcceptedData{Ability: "image", DeadlineAt: deadline}),
			enginetest.Encode(protocol.EventRouteSelected, protocol.RouteSelectedData{Attempt: 1, Deployment: d.Ref.String(), Provider: d.Provider, Model: d.Model}),
		},
		o.events,
		[]enginetest.Emitted{enginetest.Terminal(o.out, o.err)},
	)...)
}

// assertJSON compares got (marshalled) with the JSON text want, ignoring formatting.
func assertJSON(t *testing.T, what string, got any, want string) {
	t.Helper()
	b, err := json.Marshal(got)
	if err != nil {
		t.Fatalf("%s: marshal: %v", what, err)
	}
	var g, w any
	if err := json.Unmarshal(b, &g); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("%s: bad expectation: %v", what, err)
	}
	if diff := cmp.Diff(w, g); diff != "" {
		t.Errorf("%s mismatch (-want +got):\n%s", what, diff)
	}
}

// assertError checks that err is a *protocol.Error with exactly the JSON want.
func assertError(t *testing.T, err error, want string) {
	t.Helper()
	var pe *protocol.Error
	if !errors.As(err, &pe) {
		t.Fatalf("error = %v (%T), want a *protocol.Error", err, err)
	}
	assertJSON(t, "error", pe, want)
}

// assertAuth checks that every request carried exactly the bearer credential, and that
// the credential appears nowhere else in any request.
func assertAuth(t *testing.T, reqs []seen) {
	t.Helper()
	for _, r := range reqs {
		if got := r.Header.Get("Authorization"); got != "Bearer "+canary {
			t.Errorf("%s %s: Authorization = %q, want the bearer credential", r.Method, r.Path, got)
		}
		if strings.Contains(r.Path, canary) || strings.Contains(r.Body, canary) {
			t.Errorf("%s %s: credential outside the Authorization header", r.Method, r.Path)
		}
		for k, vs := range r.Header {
			if k == "Authorization" {
				continue
			}
			for _, v := range vs {
				if strings.Contains(v, canary) {
					t.Errorf("%s %s: credential in header %s", r.Method, r.Path, k)
				}
			}
		}
	}
}

// assertNoCanary checks that the credential is in none of the outcome's events, handles,
// error or logs.
func assertNoCanary(t *testing.T, o outcome) {
	t.Helper()
	b, _ := json.Marshal(o.events)
	if strings.Contains(string(b), canary) {
		t.Errorf("credential in events: %s", b)
	}
	for _, h := range o.handles {
		if strings.Contains(string(h), canary) {
			t.Errorf("credential in a remote-job handle: %s", h)
		}
	}
	if o.err != nil {
		eb, _ := json.Marshal(protocol.AsError(o.err))
		if strings.Contains(string(eb), canary) || strings.Contains(o.err.Error(), canary) {
			t.Errorf("credential in error: %s", eb)
		}
	}
	if strings.Contains(o.logs, canary) {
		t.Errorf("credential in logs:\n%s", o.logs)
	}
}
