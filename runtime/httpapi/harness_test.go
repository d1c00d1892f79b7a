package httpapi_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchboard-dev/switchboard/runtime/client"
	"github.com/switchboard-dev/switchboard/runtime/engine"
	"github.com/switchboard-dev/switchboard/runtime/eventstore"
	"github.com/switchboard-dev/switchboard/runtime/eventstore/memory"
	"github.com/switchboard-dev/switchboard/runtime/httpapi"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
	"github.com/switchboard-dev/switchboard/runtime/routing"
)

// waitTimeout bounds every wait in these tests; only a broken server reaches it.
const waitTimeout = 10 * time.Second

// script is what the fake adapter does for one attempt.
type script func(ctx context.Context, a engine.Attempt, emit engine.Emitter) (engine.Outcome, error)

// fakeAdapter runs the environment's current script and counts its calls.
type fakeAdapter struct{ env *env }

func (f fakeAdapter) Execute(ctx context.Context, a engine.Attempt, emit engine.Emitter) (engine.Outcome, error) {
	f.env.calls.Add(1)
	return (*f.env.script.Load())(ctx, a, emit)
}

// env is one runtime under test: the real engine, a memory store (behind a spy), a
// routing table of text-only models and the real HTTP server on a loopback listener.
type env struct {
	// handler is the API handler itself, for in-process benchmarks.
	handler http.Handler
	store   *spyStore
	table   *countingTable
	engine  *engine.Engine
	srv     *httptest.Server
	client  *client.Client
	calls   atomic.Int64
	script  atomic.Pointer[script]
}

type envConfig struct {
	api           httpapi.Config
	engine        engine.Config
	maxConcurrent int
	store         []memory.Option
	listener      func(net.Listener) net.Listener
	wrap          func(http.Handler) http.Handler
	apiStore      func(httpapi.Store) httpapi.Store
	server        func(*http.Server)
	deployments   []routing.Deployment
}

type envOption func(*envConfig)

func withAPI(f func(*httpapi.Config)) envOption   { return func(c *envConfig) { f(&c.api) } }
func withEngine(f func(*engine.Config)) envOption { return func(c *envConfig) { f(&c.engine) } }
func withMaxConcurrent(n int) envOption           { return func(c *envConfig) { c.maxConcurrent = n } }

// withAPIStore gives the server the store f makes of the environment's; the engine keeps
// the environment's.
func withAPIStore(f func(httpapi.Store) httpapi.Store) envOption {
	return func(c *envConfig) { c.apiStore = f }
}
func withStore(opts ...memory.Option) envOption { return func(c *envConfig) { c.store = opts } }
func withListener(f func(net.Listener) net.Listener) envOption {
	return func(c *envConfig) { c.listener = f }
}
func withHandler(f func(http.Handler) http.Handler) envOption {
	return func(c *envConfig) { c.wrap = f }
}
func withServerHook(f func(*http.Server)) envOption { return func(c *envConfig) { c.server = f } }
func withDeployments(ds ...routing.Deployment) envOption {
	return func(c *envConfig) { c.deployments = ds }
}

// textModel is a deployment serving chat with the bundled text adapters' defaults.
func textModel(name string) routing.Deployment {
	return routing.Deployment{
		Ref:          routing.Ref{Namespace: "ai", Name: name},
		Provider:     "fake",
		Model:        name,
		Abilities:    []string{"chat"},
		Capabilities: routing.CapsOf(protocol.CapInputText, protocol.CapInputJSON, protocol.CapOutputText),
		Weight:       100,
	}
}

func newEnv(t testing.TB, opts ...envOption) *env {
	t.Helper()
	cfg := envConfig{deployments: []routing.Deployment{textModel("small"), textModel("large")}}
	for _, o := range opts {
		o(&cfg)
	}
	e := &env{store: &spyStore{Store: memory.New(cfg.store...)}}
	e.setScript(reply("hello"))
	e.table = &countingTable{Holder: new(routing.Holder)}
	e.table.Store(routing.NewTable(cfg.deployments))
	e.table.MarkSynced()
	ecfg := cfg.engine
	ecfg.Store, ecfg.Table = e.store, e.table
	ecfg.Providers = map[string]engine.Provider{"fake": {New: func(*routing.Deployment) (engine.Adapter, error) { return fakeAdapter{e}, nil }}}
	ecfg.MaxConcurrent = cfg.maxConcurrent
	e.engine = engine.New(ecfg)
	api := cfg.api
	api.Engine, api.Store = e.engine, e.store
	if cfg.apiStore != nil {
		api.Store = cfg.apiStore(e.store)
	}
	h := httpapi.NewServer(api)
	e.handler = h
	if cfg.wrap != nil {
		h = cfg.wrap(h)
	}

	// Request contexts derive from base, so cancelling it ends every open stream and
	// Close does not wait for streams of executions that never finish.
	base, cancel := context.WithCancel(context.Background())
	e.srv = httptest.NewUnstartedServer(h)
	e.srv.Config.BaseContext = func(net.Listener) context.Context { return base }
	if cfg.listener != nil {
		e.srv.Listener = cfg.listener(e.srv.Listener)
	}
	if cfg.server != nil {
		cfg.server(e.srv.Config)
	}
	e.srv.Start()
	var err error
	e.client, err = client.New(e.srv.URL,
		client.WithHTTPClient(e.srv.Client()),
		client.WithBackoff(client.Backoff{Initial: 5 * time.Millisecond, Max: 50 * time.Millisecond, Retries: 5}))
	if err != nil {
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

// reply emits one text delta per string and completes.
func reply(texts ...string) script {
	return func(ctx context.Context, _ engine.Attempt, emit engine.Emitter) (engine.Outcome, error) {
		for _, text := range texts {
			if err := emit.Text(0, text); err != nil {
				return engine.Outcome{}, err
			}
		}
		return engine.Outcome{FinishReason: "stop"}, nil
	}
}

// hang runs until the attempt's context ends (cancel, deadline, shutdown).
func hang(ctx context.Context, _ engine.Attempt, _ engine.Emitter) (engine.Outcome, error) {
	<-ctx.Done()
	return engine.Outcome{}, ctx.Err()
}

// gate is a script driven by the test: every text sent on steps is emitted; closing
// steps completes the attempt.
type gate struct{ steps chan step }

type step struct {
	text string
	done chan error // receives the emit's result, if not nil
}

func newGate() *gate { return &gate{steps: make(chan step)} }

func (g *gate) script(ctx context.Context, _ engine.Attempt, emit engine.Emitter) (engine.Outcome, error) {
	for {
		select {
		case <-ctx.Done():
			return engine.Outcome{}, ctx.Err()
		case st, ok := <-g.steps:
			if !ok {
				return engine.Outcome{FinishReason: "stop"}, nil
			}
			err := emit.Text(0, st.text)
			if st.done != nil {
				st.done <- err
			}
		}
	}
}

// delta makes the gated attempt emit text and waits until it is recorded.
func (g *gate) delta(t testing.TB, text string) {
	t.Helper()
	done := make(chan error, 1)
	select {
	case g.steps <- step{text, done}:
	case <-time.After(waitTimeout):
		t.Fatal("the gated attempt is not running")
	}
	if err := <-done; err != nil {
		t.Fatalf("emit %q: %v", text, err)
	}
}

// finish completes the gated attempt.
func (g *gate) finish() { close(g.steps) }

// countingTable is the environment's routing table; it counts the engine's loads of it.
type countingTable struct {
	*routing.Holder
	loads atomic.Int64
}

func (c *countingTable) Load() *routing.Table {
	c.loads.Add(1)
	return c.Holder.Load()
}

// spyStore counts what the engine creates and can fail the reads of event streams.
type spyStore struct {
	*memory.Store
	creates  atomic.Int64
	accepted atomic.Int64
	// failTail makes Read after sequence 0 and Wait fail, as a store outage would
	// after a stream's first batch.
	failTail atomic.Bool
	// beforeCancel, if set, runs at the start of RequestCancel.
	beforeCancel atomic.Pointer[func(id string)]
	// unavailable makes every Get and Snapshot fail as a store whose database cannot be
	// reached.
	unavailable atomic.Bool
}

// errUnreachable is a store whose database is down (a restart), with text that must
// never reach a client.
var errUnreachable = fmt.Errorf("postgres: get exe: connection failed at 10.0.0.7: %w", eventstore.ErrUnavailable)

func (s *spyStore) Get(ctx context.Context, id string) (eventstore.Status, error) {
	if s.unavailable.Load() {
		return eventstore.Status{}, errUnreachable
	}
	return s.Store.Get(ctx, id)
}

func (s *spyStore) Snapshot(ctx context.Context, id string) (protocol.Snapshot, error) {
	if s.unavailable.Load() {
		return protocol.Snapshot{}, errUnreachable
	}
	return s.Store.Snapshot(ctx, id)
}

func (s *spyStore) RequestCancel(ctx context.Context, id string) error {
	if f := s.beforeCancel.Load(); f != nil {
		(*f)(id)
	}
	return s.Store.RequestCancel(ctx, id)
}

// errInjected carries text that must never reach a client.
var errInjected = errors.New("injected store failure: secret-internal-detail")

func (s *spyStore) Create(ctx context.Context, rec eventstore.Record, owner string, ttl time.Duration) (eventstore.Lease, error) {
	l, err := s.Store.Create(ctx, rec, owner, ttl)
	if err == nil {
		s.creates.Add(1)
	}
	return l, err
}

func (s *spyStore) Append(ctx context.Context, fence eventstore.Fence, ev protocol.Event) error {
	err := s.Store.Append(ctx, fence, ev)
	if err == nil && ev.Type == protocol.EventAccepted {
		s.accepted.Add(1)
	}
	return err
}

func (s *spyStore) Read(ctx context.Context, id string, after uint64, limit int) ([]protocol.Event, error) {
	if after > 0 && s.failTail.Load() {
		return nil, errInjected
	}
	return s.Store.Read(ctx, id, after, limit)
}

func (s *spyStore) Wait(ctx context.Context, id string, after uint64) error {
	if s.failTail.Load() {
		return errInjected
	}
	return s.Store.Wait(ctx, id, after)
}

// response is a finished HTTP exchange.
type response struct {
	status int
	header http.Header
	body   string
}

// do sends a request; headers are name, value pairs. A POST with a body is declared
// application/json (as is every submission) unless headers give a Content-Type; an
// empty Content-Type value sends none.
func (e *env) do(t testing.TB, method, path, body string, headers ...string) response {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, e.srv.URL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Add(headers[i], headers[i+1])
	}
	switch ct, given := req.Header["Content-Type"]; {
	case given && len(ct) == 1 && ct[0] == "":
		req.Header.Del("Content-Type") // the test asks for none
	case !given && method == http.MethodPost && (body != "" || path == "/v1/executions"):
		req.Header.Set("Content-Type", "application/json")
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

// submit posts body and requires a 202, returning the execution id.
func (e *env) submit(t testing.TB, body string, headers ...string) string {
	t.Helper()
	r := e.do(t, http.MethodPost, "/v1/executions", body, headers...)
	if r.status != http.StatusAccepted {
		t.Fatalf("POST: status %d, body %s", r.status, r.body)
	}
	var acc client.Accepted
	mustUnmarshal(t, r.body, &acc)
	return acc.ID
}

// waitTerminal follows the execution to its end and returns its snapshot.
func (e *env) waitTerminal(t testing.TB, id string) *protocol.Snapshot {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	s, err := e.client.FollowResult(ctx, id)
	if err != nil {
		t.Fatalf("follow %s: %v", id, err)
	}
	return s
}

// chat is a valid request body with one text part.
func chat(text string) string {
	return fmt.Sprintf(`{"ability":"chat","input":[{"type":"text","text":%q}]}`, text)
}

// eventually polls cond until it holds or the wait times out.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// errorBody decodes a JSON error response, failing unless it is one.
func errorBody(t testing.TB, r response) *protocol.Error {
	t.Helper()
	if ct := r.header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("error response has Content-Type %q, body %q", ct, r.body)
	}
	var body protocol.ErrorBody
	mustUnmarshal(t, r.body, &body)
	if body.Error == nil || body.Error.Code == "" || body.Error.Message == "" {
		t.Fatalf("error body without code or message: %s", r.body)
	}
	return body.Error
}

// wantError checks the status and code of an error response.
func wantError(t testing.TB, r response, status int, code protocol.Code) *protocol.Error {
	t.Helper()
	if r.status != status {
		t.Fatalf("status %d, want %d; body %s", r.status, status, r.body)
	}
	pe := errorBody(t, r)
	if pe.Code != code {
		t.Fatalf("code %q, want %q; body %s", pe.Code, code, r.body)
	}
	if pe.Retryable != code.Retryable() {
		t.Errorf("retryable %v for %s", pe.Retryable, code)
	}
	return pe
}

// collector gathers what many goroutines report.
type collector[T any] struct {
	mu    sync.Mutex
	items []T
}

func (c *collector[T]) add(v T) {
	c.mu.Lock()
	c.items = append(c.items, v)
	c.mu.Unlock()
}

func (c *collector[T]) all() []T {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]T(nil), c.items...)
}
