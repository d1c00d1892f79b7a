package anthropic_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchboard-dev/switchboard/runtime/compat"
	"github.com/switchboard-dev/switchboard/runtime/compat/anthropic"
	"github.com/switchboard-dev/switchboard/runtime/engine"
	"github.com/switchboard-dev/switchboard/runtime/eventstore/memory"
	"github.com/switchboard-dev/switchboard/runtime/httpapi"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
	"github.com/switchboard-dev/switchboard/runtime/routing"
)

// The door behind the real HTTP server, engine and memory store, with a scripted
// adapter: what POST /v1/messages answers for what an execution does.

const waitTimeout = 10 * time.Second

// script is what the adapter does for one attempt.
type script func(ctx context.Context, a engine.Attempt, emit engine.Emitter) (engine.Outcome, error)

type env struct {
	srv     *httptest.Server
	handler http.Handler
	calls   atomic.Int64
	script  atomic.Pointer[script]
	mu      sync.Mutex
	seen    []engine.Attempt // the attempts the adapter ran
	// drain ends every request's context, as the server's shutdown does.
	drain context.CancelFunc
}

type fakeAdapter struct{ e *env }

func (f fakeAdapter) Execute(ctx context.Context, a engine.Attempt, emit engine.Emitter) (engine.Outcome, error) {
	f.e.calls.Add(1)
	f.e.mu.Lock()
	f.e.seen = append(f.e.seen, a)
	f.e.mu.Unlock()
	return (*f.e.script.Load())(ctx, a, emit)
}

func model(name string, caps ...protocol.Capability) routing.Deployment {
	return routing.Deployment{
		Ref:          routing.Ref{Namespace: "ai", Name: name},
		Provider:     "fake",
		Model:        name + "-v1",
		Abilities:    []string{"chat"},
		Capabilities: routing.CapsOf(append([]protocol.Capability{protocol.CapInputText, protocol.CapOutputText}, caps...)...),
		Weight:       100,
	}
}

func newEnv(t testing.TB, keepAlive time.Duration) *env {
	t.Helper()
	e := &env{}
	e.setScript(reply("Hello"))
	table := new(routing.Holder)
	table.Store(routing.NewTable([]routing.Deployment{
		model("small", protocol.CapTools, protocol.CapInputImage, protocol.CapInputFile),
		model("large"),
	}))
	table.MarkSynced()
	store := memory.New()
	eng := engine.New(engine.Config{
		Store: store, Table: table,
		Providers: map[string]engine.Provider{"fake": {New: func(*routing.Deployment) (engine.Adapter, error) { return fakeAdapter{e}, nil }}},
	})
	e.handler = httpapi.NewServer(httpapi.Config{
		Engine: eng, Store: store, Table: table, SSEKeepAlive: keepAlive,
		FrontDoors: []compat.Door{anthropic.Door{}},
	})
	base, cancel := context.WithCancel(context.Background())
	e.drain = cancel
	e.srv = httptest.NewUnstartedServer(e.handler)
	e.srv.Config.BaseContext = func(net.Listener) context.Context { return base }
	e.srv.Start()
	t.Cleanup(func() {
		cancel()
		e.srv.Close()
		_ = eng.Close()
		store.Close()
	})
	return e
}

func (e *env) setScript(s script) { e.script.Store(&s) }

func (e *env) attempts() []engine.Attempt {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]engine.Attempt(nil), e.seen...)
}

// reply emits one text delta per string, usage, and completes.
func reply(texts ...string) script {
	return func(_ context.Context, _ engine.Attempt, emit engine.Emitter) (engine.Outcome, error) {
		for _, s := range texts {
			if err := emit.Text(0, s); err != nil {
				return engine.Outcome{}, err
			}
		}
		if err := emit.Usage([]protocol.Usage{{Unit: protocol.UnitInputTokens, Quantity: 4, Source: protocol.SourceProvider},
			{Unit: protocol.UnitOutputTokens, Quantity: float64(len(texts)), Source: protocol.SourceProvider}}); err != nil {
			return engine.Outcome{}, err
		}
		return engine.Outcome{FinishReason: "end_turn"}, nil
	}
}

// fail fails every attempt with e, before any output.
func fail(pe *protocol.Error) script {
	return func(context.Context, engine.Attempt, engine.Emitter) (engine.Outcome, error) {
		return engine.Outcome{}, pe
	}
}

type response struct {
	status int
	header http.Header
	body   string
}

// post sends a Messages request with the usual headers (version 2023-06-01, JSON), then
// the given header pairs, which replace them.
func (e *env) post(t *testing.T, body string, header ...string) response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, e.srv.URL+"/v1/messages", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Anthropic-Version", "2023-06-01")
	for i := 0; i+1 < len(header); i += 2 {
		if header[i+1] == "" {
			req.Header.Del(header[i])
			continue
		}
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return response{resp.StatusCode, resp.Header, string(b)}
}

// native reads path from the native API.
func (e *env) native(t *testing.T, path string, v any) {
	t.Helper()
	resp, err := e.srv.Client().Get(e.srv.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d", path, resp.StatusCode)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatal(err)
	}
}

// status waits for execution id to end and returns its status.
func (e *env) terminal(t *testing.T, id string) protocol.ExecutionStatus {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for {
		var st protocol.ExecutionStatus
		e.native(t, "/v1/executions/"+id, &st)
		if st.Status.Terminal() {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("execution %s still %s", id, st.Status)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func hello(extra string) string {
	return `{"model":"chat","max_tokens":64,"messages":[{"role":"user","content":"Hello"}]` + extra + `}`
}

// anthropicError is the error body of Anthropic's shape.
type anthropicError struct {
	Type  string `json:"type"`
	Error struct {
		Type        string `json:"type"`
		Message     string `json:"message"`
		Switchboard struct {
			Code         string `json:"code"`
			Retryable    bool   `json:"retryable"`
			RetryAfterMs int64  `json:"retry_after_ms"`
		} `json:"switchboard"`
	} `json:"error"`
}

func wantError(t *testing.T, r response, status int, typ, code string) anthropicError {
	t.Helper()
	var e anthropicError
	if err := json.Unmarshal([]byte(r.body), &e); err != nil {
		t.Fatalf("%d %s: not JSON: %v", r.status, r.body, err)
	}
	if r.status != status || e.Type != "error" || e.Error.Type != typ || e.Error.Switchboard.Code != code || e.Error.Message == "" {
		t.Errorf("answer %d %s, want %d with type %s and code %s", r.status, r.body, status, typ, code)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type = %q", ct)
	}
	return e
}

func TestMessage(t *testing.T) {
	e := newEnv(t, 0)
	e.setScript(reply("Hel", "lo"))
	r := e.post(t, hello(`,"metadata":{"user_id":"u-1"}`))
	if r.status != http.StatusOK {
		t.Fatalf("%d %s", r.status, r.body)
	}
	var m struct {
		ID, Type, Role, Model, StopReason string `json:"-"`
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal([]byte(r.body), &raw); err != nil {
		t.Fatal(err)
	}
	_ = json.Unmarshal(raw["id"], &m.ID)
	_ = json.Unmarshal(raw["model"], &m.Model)
	_ = json.Unmarshal(raw["stop_reason"], &m.StopReason)
	id := r.header.Get(compat.ExecutionHeader)
	if id == "" || m.ID != id || r.header.Get("Request-Id") != id {
		t.Errorf("id %q, Switchboard-Execution-Id %q, request-id %q", m.ID, id, r.header.Get("Request-Id"))
	}
	if m.StopReason != "end_turn" || string(raw["content"]) != `[{"type":"text","text":"Hello"}]` ||
		string(raw["usage"]) != `{"input_tokens":4,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":2}` {
		t.Errorf("message %s", r.body)
	}
	if m.Model != "small-v1" && m.Model != "large-v1" {
		t.Errorf("model %q, want the serving deployment's spec.model", m.Model)
	}
	// The same execution, natively.
	st := e.terminal(t, id)
	if st.Status != protocol.StatusCompleted || st.Metadata["user_id"] != "u-1" || st.Route == nil || st.Route.Model != m.Model {
		t.Errorf("status %+v", st)
	}
	var snap protocol.Snapshot
	e.native(t, "/v1/executions/"+id+"/result", &snap)
	if len(snap.Output) != 1 || snap.Output[0].Text != "Hello" {
		t.Errorf("result %+v", snap)
	}
	// The adapter got the generation option max_tokens became.
	a := e.attempts()
	if len(a) != 1 || string(a[0].Request.Extensions[protocol.GenerationMaxOutputTokens]) != "64" {
		t.Errorf("attempts %+v", a)
	}
}

func TestPinnedModel(t *testing.T) {
	e := newEnv(t, 0)
	for range 3 {
		r := e.post(t, `{"model":"ai/large","max_tokens":5,"messages":[{"role":"user","content":"Hi"}]}`)
		if r.status != http.StatusOK || !strings.Contains(r.body, `"model":"large-v1"`) {
			t.Fatalf("%d %s", r.status, r.body)
		}
	}
	for _, a := range e.attempts() {
		if a.Deployment.Ref.Name != "large" || len(a.Request.Routing.Only) != 1 {
			t.Errorf("attempt on %s, routing %+v", a.Deployment.Ref, a.Request.Routing)
		}
	}
}

func TestRefusedBeforeTheEngine(t *testing.T) {
	const marker = "ZQXCANARY"
	e := newEnv(t, 0)
	for _, tc := range []struct {
		name      string
		body      string
		header    []string
		status    int
		typ, code string
		message   string
	}{
		{"no version", hello(""), []string{"Anthropic-Version", ""}, 400, "invalid_request_error", "invalid_request", "anthropic-version: header is required"},
		{"an unknown version", hello(""), []string{"Anthropic-Version", marker}, 400, "invalid_request_error", "invalid_request", "anthropic-version: must be a published API version (2023-06-01, 2023-01-01, 2026-10-21)"},
		{"an unknown model", `{"model":"` + marker + `","max_tokens":5,"messages":[{"role":"user","content":"Hi"}]}`, nil, 404, "not_found_error", "not_found", "model: no such model, or the caller may not use it"},
		{"an unknown deployment", `{"model":"ai/` + strings.ToLower(marker) + `","max_tokens":5,"messages":[{"role":"user","content":"Hi"}]}`, nil, 404, "not_found_error", "not_found", "model: no such model, or the caller may not use it"},
		{"an unknown field", hello(`,"` + marker + `":1`), nil, 400, "invalid_request_error", "invalid_request", "body: unknown field"},
		{"not JSON", hello(""), []string{"Content-Type", "text/plain"}, 415, "invalid_request_error", "invalid_request", ""},
		{"a capability no model has", `{"model":"ai/large","max_tokens":5,"messages":[{"role":"user","content":[{"type":"image","source":{"type":"url","url":"https://x/a.png"}}]}]}`, nil, 422, "invalid_request_error", "unsupported_capability", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := e.post(t, tc.body, tc.header...)
			got := wantError(t, r, tc.status, tc.typ, tc.code)
			if tc.message != "" && got.Error.Message != tc.message {
				t.Errorf("message %q, want %q", got.Error.Message, tc.message)
			}
			if strings.Contains(strings.ToLower(r.body+r.header.Get("Retry-After")), strings.ToLower(marker)) {
				t.Errorf("the answer echoes the caller: %s", r.body)
			}
			if r.header.Get("X-Should-Retry") != "false" {
				t.Errorf("x-should-retry = %q", r.header.Get("X-Should-Retry"))
			}
		})
	}
	if n := e.calls.Load(); n != 0 {
		t.Errorf("the adapter ran %d times for refused requests", n)
	}
	// Other methods on the path are 405 in Anthropic's shape.
	resp, err := e.srv.Client().Get(e.srv.URL + "/v1/messages")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	wantError(t, response{resp.StatusCode, resp.Header, string(b)}, 405, "invalid_request_error", "invalid_request")
	// Every published version is served alike.
	for _, v := range anthropic.Versions {
		if r := e.post(t, hello(""), "Anthropic-Version", v); r.status != http.StatusOK {
			t.Errorf("%s: %d %s", v, r.status, r.body)
		}
	}
}

// TestFailureBeforeOutput: a call whose execution fails before any output gets an HTTP
// error with the failure's status, streamed or not, so that SDKs raise their typed
// errors; retry facts go to Retry-After and x-should-retry.
func TestFailureBeforeOutput(t *testing.T) {
	e := newEnv(t, 0)
	for _, tc := range []struct {
		name      string
		err       *protocol.Error
		status    int
		typ       string
		retry     string
		retryHint string
	}{
		{"overloaded", protocol.NewError(protocol.CodeProviderUnavailable, "the provider is unavailable"), 503, "overloaded_error", "", "true"},
		{"rate limited", &protocol.Error{Code: protocol.CodeRateLimited, Message: "the provider is rate limiting", Retryable: true, RetryAfterMs: 1500}, 429, "rate_limit_error", "2", "true"},
		{"rejected", protocol.NewError(protocol.CodeProviderRejected, "the provider rejected the deployment's request"), 502, "api_error", "", "false"},
	} {
		for _, stream := range []bool{false, true} {
			t.Run(tc.name, func(t *testing.T) {
				e.setScript(fail(tc.err))
				extra := ""
				if stream {
					extra = `,"stream":true`
				}
				r := e.post(t, hello(extra))
				got := wantError(t, r, tc.status, tc.typ, string(tc.err.Code))
				if r.header.Get("Retry-After") != tc.retry || r.header.Get("X-Should-Retry") != tc.retryHint {
					t.Errorf("Retry-After %q, x-should-retry %q", r.header.Get("Retry-After"), r.header.Get("X-Should-Retry"))
				}
				if got.Error.Switchboard.RetryAfterMs != tc.err.RetryAfterMs {
					t.Errorf("retry_after_ms %d", got.Error.Switchboard.RetryAfterMs)
				}
				if id := r.header.Get(compat.ExecutionHeader); id == "" || e.terminal(t, id).Status != protocol.StatusFailed {
					t.Errorf("execution %q", id)
				}
			})
		}
	}
}

// sse reads a stream's frames as they come.
type sse struct {
	resp *http.Response
	sc   *bufio.Scanner
}

func (e *env) stream(t *testing.T, body string, header ...string) *sse {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, e.srv.URL+"/v1/messages", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Anthropic-Version", "2023-06-01")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("%d %s %s", resp.StatusCode, resp.Header.Get("Content-Type"), b)
	}
	return &sse{resp: resp, sc: bufio.NewScanner(resp.Body)}
}

// next returns the next frame's event name and data; "" at the end.
func (s *sse) next(t *testing.T) (string, string) {
	t.Helper()
	var event, data string
	for s.sc.Scan() {
		line := s.sc.Text()
		switch {
		case line == "" && event != "":
			return event, data
		case strings.HasPrefix(line, "event: "):
			event = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			data = strings.TrimPrefix(line, "data: ")
		default:
			t.Fatalf("unexpected line %q", line)
		}
	}
	return "", ""
}

func (s *sse) events(t *testing.T) []string {
	t.Helper()
	var names []string
	for {
		name, _ := s.next(t)
		if name == "" {
			return names
		}
		names = append(names, name)
	}
}

// gate is a script that emits a text delta per step it is given.
type gate struct{ steps chan string }

func (g gate) script(ctx context.Context, _ engine.Attempt, emit engine.Emitter) (engine.Outcome, error) {
	for {
		select {
		case s, ok := <-g.steps:
			if !ok {
				return engine.Outcome{FinishReason: "end_turn"}, nil
			}
			if s == "fail" {
				return engine.Outcome{}, protocol.NewError(protocol.CodeProviderUnavailable, "the provider's stream was cut")
			}
			if err := emit.Text(0, s); err != nil {
				return engine.Outcome{}, err
			}
		case <-ctx.Done():
			return engine.Outcome{}, ctx.Err()
		}
	}
}

func TestStream(t *testing.T) {
	e := newEnv(t, 50*time.Millisecond)
	g := gate{steps: make(chan string, 1)}
	e.setScript(g.script)
	g.steps <- "Hel" // the head waits for the first output
	s := e.stream(t, hello(`,"stream":true`))
	id := s.resp.Header.Get(compat.ExecutionHeader)
	for _, want := range []string{"message_start", "content_block_start", "content_block_delta"} {
		if name, data := s.next(t); name != want {
			t.Fatalf("frame %s %s, want %s", name, data, want)
		}
	}
	// Idle: pings keep the connection alive.
	if name, data := s.next(t); name != "ping" || data != `{"type":"ping"}` {
		t.Fatalf("frame %s %s, want a ping", name, data)
	}
	g.steps <- "lo"
	close(g.steps)
	var rest []string
	for _, n := range s.events(t) {
		if n != "ping" {
			rest = append(rest, n)
		}
	}
	if strings.Join(rest, " ") != "content_block_delta content_block_stop message_delta message_stop" {
		t.Errorf("rest of the stream: %v", rest)
	}
	if st := e.terminal(t, id); st.Status != protocol.StatusCompleted {
		t.Errorf("status %s", st.Status)
	}
}

// TestStreamFailsAfterOutput: an error event ends the stream, without message_stop.
func TestStreamFailsAfterOutput(t *testing.T) {
	e := newEnv(t, 0)
	g := gate{steps: make(chan string, 2)}
	g.steps <- "par"
	g.steps <- "fail"
	e.setScript(g.script)
	s := e.stream(t, hello(`,"stream":true`))
	var names []string
	var last string
	for {
		name, data := s.next(t)
		if name == "" {
			break
		}
		names, last = append(names, name), data
	}
	if strings.Join(names, " ") != "message_start content_block_start content_block_delta error" {
		t.Fatalf("stream: %v", names)
	}
	var ev anthropicError
	if err := json.Unmarshal([]byte(last), &ev); err != nil || ev.Type != "error" || ev.Error.Type != "overloaded_error" || ev.Error.Switchboard.Retryable {
		t.Errorf("error event %s", last)
	}
}

// TestDisconnect: a call that leaves before its execution ended cancels it; one that
// carried an Idempotency-Key does not, and its retry replays the stream from the start.
func TestDisconnect(t *testing.T) {
	e := newEnv(t, 0)
	g := gate{steps: make(chan string, 1)}
	e.setScript(g.script)
	for _, keyed := range []bool{false, true} {
		g.steps <- "first"
		var header []string
		if keyed {
			header = []string{"Idempotency-Key", "retry-me"}
		}
		s := e.stream(t, hello(`,"stream":true`), header...)
		id := s.resp.Header.Get(compat.ExecutionHeader)
		for _, want := range []string{"message_start", "content_block_start", "content_block_delta"} {
			if name, _ := s.next(t); name != want {
				t.Fatalf("frame %s, want %s", name, want)
			}
		}
		s.resp.Body.Close()
		if !keyed {
			st := e.terminal(t, id)
			if st.Status != protocol.StatusFailed || st.Error == nil || st.Error.Code != protocol.CodeCancelled {
				t.Errorf("status after the client left: %+v", st)
			}
			continue
		}
		time.Sleep(100 * time.Millisecond)
		var st protocol.ExecutionStatus
		e.native(t, "/v1/executions/"+id, &st)
		if st.Status.Terminal() {
			t.Fatalf("a keyed call's execution ended when its client left: %+v", st)
		}
		again := e.stream(t, hello(`,"stream":true`), header...)
		if got := again.resp.Header.Get(compat.ExecutionHeader); got != id {
			t.Fatalf("the retry re-attached to %s, want %s", got, id)
		}
		for _, want := range []string{"message_start", "content_block_start", "content_block_delta"} {
			if name, data := again.next(t); name != want || (name == "content_block_delta" && !strings.Contains(data, `"first"`)) {
				t.Fatalf("replayed frame %s %s, want %s", name, data, want)
			}
		}
		close(g.steps)
		if names := again.events(t); strings.Join(names, " ") != "content_block_stop message_delta message_stop" {
			t.Errorf("rest of the replay: %v", names)
		}
	}
	if n := e.calls.Load(); n != 2 {
		t.Errorf("the adapter ran %d times, want 2 (the retry re-attached)", n)
	}
}

// TestNonStreamedDisconnect: a non-streamed call that leaves cancels its execution too.
func TestNonStreamedDisconnect(t *testing.T) {
	e := newEnv(t, 0)
	g := gate{steps: make(chan string)}
	e.setScript(g.script)
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, e.srv.URL+"/v1/messages", strings.NewReader(hello("")))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Anthropic-Version", "2023-06-01")
	done := make(chan struct{})
	go func() {
		defer close(done)
		if resp, err := e.srv.Client().Do(req); err == nil {
			resp.Body.Close()
			t.Errorf("answered %d before the execution ended", resp.StatusCode)
		} else if !errors.Is(err, context.Canceled) {
			t.Errorf("request: %v", err)
		}
	}()
	g.steps <- "started" // the attempt runs
	cancel()
	<-done
	deadline := time.Now().Add(waitTimeout)
	for {
		// The execution is the only one; find it through the adapter's attempt.
		a := e.attempts()
		if len(a) == 1 {
			var st protocol.ExecutionStatus
			e.native(t, "/v1/executions/"+a[0].ExecutionID, &st)
			if st.Status == protocol.StatusFailed && st.Error != nil && st.Error.Code == protocol.CodeCancelled {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("the execution of a call that left was not cancelled")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestStreamIdleBeforeOutput: a stream that waited a keep-alive interval without output
// writes its head and pings; a failure after that is the stream's error event.
func TestStreamIdleBeforeOutput(t *testing.T) {
	e := newEnv(t, 50*time.Millisecond)
	g := gate{steps: make(chan string)}
	e.setScript(g.script)
	// Pinned, so that the failure has no deployment to fall back to. The call returns
	// once the head is out: after the first ping.
	s := e.stream(t, `{"model":"ai/small","max_tokens":5,"stream":true,"messages":[{"role":"user","content":"Hi"}]}`)
	if name, _ := s.next(t); name != "ping" {
		t.Fatalf("first frame %s, want ping", name)
	}
	g.steps <- "fail"
	var names []string
	var last string
	for {
		name, data := s.next(t)
		if name == "" {
			break
		}
		if name != "ping" {
			names, last = append(names, name), data
		}
	}
	if strings.Join(names, " ") != "error" || !strings.Contains(last, `"type":"overloaded_error"`) {
		t.Errorf("frames after the pings: %v %s", names, last)
	}
}

// TestDrain: when this replica ends calls (its shutdown), a call still connected is told
// so — retryable when keyed — and its execution is cancelled unless keyed.
func TestDrain(t *testing.T) {
	e := newEnv(t, 0)
	g := gate{steps: make(chan string)}
	e.setScript(g.script)
	done := make(chan response, 1)
	go func() { done <- e.post(t, hello("")) }()
	eventually(t, func() bool { return len(e.attempts()) == 1 })
	e.drain()
	r := <-done
	got := wantError(t, r, 503, "overloaded_error", "provider_unavailable")
	if got.Error.Switchboard.Retryable || r.header.Get("X-Should-Retry") != "false" {
		t.Errorf("an unkeyed call's interruption: %s", r.body)
	}
	if st := e.terminal(t, r.header.Get(compat.ExecutionHeader)); st.Error == nil || st.Error.Code != protocol.CodeCancelled {
		t.Errorf("status %+v", st)
	}
}

func eventually(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("timed out")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
