package openai_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"github.com/switchboard-dev/switchboard/runtime/auth"
	"github.com/switchboard-dev/switchboard/runtime/client"
	"github.com/switchboard-dev/switchboard/runtime/compat"
	"github.com/switchboard-dev/switchboard/runtime/compat/openai"
	"github.com/switchboard-dev/switchboard/runtime/engine"
	"github.com/switchboard-dev/switchboard/runtime/eventstore/memory"
	"github.com/switchboard-dev/switchboard/runtime/httpapi"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
	"github.com/switchboard-dev/switchboard/runtime/routing"
)

// The door's handler tests run it where it runs: behind the real HTTP API, engine and
// memory store, with a scripted adapter behind the routing table.

// waitTimeout bounds every wait; only a broken door reaches it.
const waitTimeout = 10 * time.Second

// script is what the fake adapter does for one attempt.
type script func(ctx context.Context, a engine.Attempt, emit engine.Emitter) (engine.Outcome, error)

// env is one runtime serving the OpenAI door.
type env struct {
	handler http.Handler
	srv     *httptest.Server
	engine  *engine.Engine
	store   *memory.Store
	client  *client.Client
	calls   atomic.Int64
	script  atomic.Pointer[script]

	mu       sync.Mutex
	requests []*protocol.Request // as each attempt saw it
	tried    []string            // deployments attempted, in order
	ids      []string            // executions attempted, in order
}

type envConfig struct {
	deployments []routing.Deployment
	keepAlive   time.Duration
	tokens      string // a static tokens file's lines; empty: no authentication
}

type envOption func(*envConfig)

func withDeployments(ds ...routing.Deployment) envOption {
	return func(c *envConfig) { c.deployments = ds }
}

func withKeepAlive(d time.Duration) envOption { return func(c *envConfig) { c.keepAlive = d } }

// withTokens authenticates callers with a static tokens file of lines.
func withTokens(lines string) envOption { return func(c *envConfig) { c.tokens = lines } }

// chatModel is a deployment of the fake provider serving chat, text and tools.
func chatModel(name string, caps ...protocol.Capability) routing.Deployment {
	return routing.Deployment{
		Ref:          routing.Ref{Namespace: "ai", Name: name},
		Provider:     "fake",
		Model:        name + "-model",
		Abilities:    []string{"chat"},
		Capabilities: routing.CapsOf(append([]protocol.Capability{protocol.CapInputText, protocol.CapOutputText, protocol.CapTools}, caps...)...),
		Weight:       100,
	}
}

func newEnv(t testing.TB, opts ...envOption) *env {
	t.Helper()
	cfg := envConfig{deployments: []routing.Deployment{chatModel("small")}}
	for _, o := range opts {
		o(&cfg)
	}
	e := &env{store: memory.New()}
	e.setScript(reply("hello"))
	table := new(routing.Holder)
	table.Store(routing.NewTable(cfg.deployments))
	table.MarkSynced()
	e.engine = engine.New(engine.Config{
		Store: e.store, Table: table,
		Providers: map[string]engine.Provider{"fake": {New: func(*routing.Deployment) (engine.Adapter, error) { return fakeAdapter{e}, nil }}},
	})
	api := httpapi.Config{
		Engine: e.engine, Store: e.store, Table: table, SSEKeepAlive: cfg.keepAlive,
		FrontDoors: []compat.Door{openai.Door{}},
	}
	if cfg.tokens != "" {
		path := filepath.Join(t.TempDir(), "tokens")
		if err := os.WriteFile(path, []byte(cfg.tokens), 0o600); err != nil {
			t.Fatal(err)
		}
		watch, stop := context.WithCancel(context.Background())
		t.Cleanup(stop)
		a, err := auth.Static(watch, path, logr.Discard())
		if err != nil {
			t.Fatal(err)
		}
		api.Auth = &a
	}
	e.handler = httpapi.NewServer(api)
	base, cancel := context.WithCancel(context.Background())
	e.srv = httptest.NewUnstartedServer(e.handler)
	e.srv.Config.BaseContext = func(net.Listener) context.Context { return base }
	e.srv.Start()
	var err error
	if e.client, err = client.New(e.srv.URL, client.WithHTTPClient(e.srv.Client())); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		e.srv.Close()
		if err := e.engine.Close(); err != nil {
			t.Errorf("engine close: %v", err)
		}
		e.store.Close()
	})
	return e
}

func (e *env) setScript(s script) { e.script.Store(&s) }

// fakeAdapter runs the environment's script and records what each attempt got.
type fakeAdapter struct{ env *env }

func (f fakeAdapter) Execute(ctx context.Context, a engine.Attempt, emit engine.Emitter) (engine.Outcome, error) {
	f.env.calls.Add(1)
	f.env.mu.Lock()
	f.env.requests = append(f.env.requests, a.Request)
	f.env.tried = append(f.env.tried, a.Deployment.Ref.String())
	f.env.ids = append(f.env.ids, a.ExecutionID)
	f.env.mu.Unlock()
	return (*f.env.script.Load())(ctx, a, emit)
}

// lastRequest is the request the latest attempt got.
func (e *env) lastRequest(t *testing.T) *protocol.Request {
	t.Helper()
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.requests) == 0 {
		t.Fatal("no attempt ran")
	}
	return e.requests[len(e.requests)-1]
}

func (e *env) triedDeployments() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.tried...)
}

// reply emits one text delta per string, reports usage and completes with stop.
func reply(texts ...string) script {
	return func(ctx context.Context, _ engine.Attempt, emit engine.Emitter) (engine.Outcome, error) {
		for _, text := range texts {
			if err := emit.Text(0, text); err != nil {
				return engine.Outcome{}, err
			}
		}
		if err := emit.Usage([]protocol.Usage{
			{Unit: protocol.UnitInputTokens, Quantity: 7, Source: protocol.SourceProvider},
			{Unit: protocol.UnitOutputTokens, Quantity: float64(len(texts)), Source: protocol.SourceProvider},
		}); err != nil {
			return engine.Outcome{}, err
		}
		return engine.Outcome{FinishReason: "stop"}, nil
	}
}

// gate is a script driven by the test: each text sent on steps is emitted; closing
// steps completes the attempt.
type gate struct {
	steps   chan string
	started chan struct{}
	once    sync.Once
}

func newGate() *gate { return &gate{steps: make(chan string), started: make(chan struct{})} }

func (g *gate) script(ctx context.Context, _ engine.Attempt, emit engine.Emitter) (engine.Outcome, error) {
	g.once.Do(func() { close(g.started) })
	for {
		select {
		case <-ctx.Done():
			return engine.Outcome{}, ctx.Err()
		case text, ok := <-g.steps:
			if !ok {
				return engine.Outcome{FinishReason: "stop"}, nil
			}
			if err := emit.Text(0, text); err != nil {
				return engine.Outcome{}, err
			}
		}
	}
}

// send emits text, or fails the test when the attempt does not take it.
func (g *gate) send(t *testing.T, text string) {
	t.Helper()
	select {
	case g.steps <- text:
	case <-time.After(waitTimeout):
		t.Fatal("the attempt did not take the next step")
	}
}

// getAs reads a path of the API with a bearer token.
func (e *env) getAs(t *testing.T, token, path string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, e.srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, readAll(t, resp)
}

// post sends a JSON body to POST /v1/chat/completions.
func (e *env) post(t testing.TB, ctx context.Context, body string, header ...string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.srv.URL+"/v1/chat/completions", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// get reads a path of the API.
func (e *env) get(t *testing.T, path string) (int, string) {
	t.Helper()
	resp, err := e.srv.Client().Get(e.srv.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// readAll reads a response's body and closes it.
func readAll(t *testing.T, resp *http.Response) string {
	t.Helper()
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// frames reads an event stream's data lines until it ends.
func frames(t *testing.T, resp *http.Response) []string {
	t.Helper()
	defer resp.Body.Close()
	var out []string
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
	for sc.Scan() {
		if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			out = append(out, data)
		}
	}
	if err := sc.Err(); err != nil && !errors.Is(err, io.EOF) {
		t.Fatalf("read stream: %v", err)
	}
	return out
}

// waitStatus waits until execution id has status want, and returns it.
func (e *env) waitStatus(t *testing.T, id string, want protocol.Status) *protocol.ExecutionStatus {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for {
		st, err := e.client.Get(context.Background(), id)
		if err == nil && st.Status == want {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("execution %s: status %+v (err %v), want %s", id, st, err, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
