package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchboard-dev/switchboard/runtime/engine"
	"github.com/switchboard-dev/switchboard/runtime/engine/enginetest"
	"github.com/switchboard-dev/switchboard/runtime/eventstore"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
	"github.com/switchboard-dev/switchboard/runtime/routing"
)

// waitTimeout bounds every wait in these tests. Only a broken engine reaches it, so it
// is generous; timing assertions use their own, still generous, bounds.
const waitTimeout = 10 * time.Second

// step is one action of a scripted adapter.
type step struct {
	typ   protocol.EventType            // the type of the event emit records
	emit  func(em engine.Emitter) error // record an event
	fail  error                         // return fail
	hang  bool                          // wait for ctx to end, then return its error
	block chan struct{}                 // wait for block to close, ignoring ctx
}

// emit returns a step that records data, a protocol payload of the event type typ,
// through its Emitter method: the generic path of the scripts.
func emit(typ protocol.EventType, data any) step {
	return step{typ: typ, emit: func(em engine.Emitter) error {
		switch d := data.(type) {
		case protocol.OutputDeltaData:
			if d.Type != "" && d.Type != "text" {
				panic("scripts emit text deltas only")
			}
			return em.Text(d.Index, d.Text)
		case protocol.ToolCallStartedData:
			return em.ToolStarted(d.Index, d.CallID, d.Name)
		case protocol.ToolCallArgsDeltaData:
			return em.ToolArgs(d.CallID, d.Delta)
		case protocol.ProgressData:
			return em.Progress(d)
		case protocol.OutputResultData:
			return em.Result(d)
		case protocol.UsageReportedData:
			return em.Usage(d.Usage)
		}
		panic(fmt.Sprintf("no Emitter method for %T", data))
	}}
}

// panics returns a step that panics, standing in for an adapter bug.
func panics() step {
	return step{emit: func(engine.Emitter) error { panic("boom") }}
}

func fail(err error) step { return step{fail: err} }
func hang() step          { return step{hang: true} }

// block returns a step that ignores ctx until the test ends (or release is called).
func block(t *testing.T) (s step, release func()) {
	ch := make(chan struct{})
	var once sync.Once
	release = func() { once.Do(func() { close(ch) }) }
	t.Cleanup(release)
	return step{block: ch}, release
}

func delta(text string) step {
	return emit(protocol.EventOutputDelta, protocol.OutputDeltaData{Type: "text", Text: text})
}

// script is a scriptable fake Adapter: it runs its steps in order, records its calls,
// what its context said when a wait ended and what every emit returned.
type script struct {
	steps  []step
	finish string

	mu       sync.Mutex
	calls    []engine.Attempt
	emitErrs []error
	ctxErrs  []error       // cause of ctx when a hang ended
	done     chan struct{} // closed when Execute returns, for the first call
	once     sync.Once
}

func newScript(steps ...step) *script {
	return &script{steps: steps, finish: "stop", done: make(chan struct{})}
}

func (s *script) Execute(ctx context.Context, a engine.Attempt, em engine.Emitter) (engine.Outcome, error) {
	s.mu.Lock()
	s.calls = append(s.calls, a)
	s.mu.Unlock()
	defer s.once.Do(func() { close(s.done) })
	for _, st := range s.steps {
		switch {
		case st.fail != nil:
			return engine.Outcome{}, st.fail
		case st.hang:
			<-ctx.Done()
			s.mu.Lock()
			s.ctxErrs = append(s.ctxErrs, context.Cause(ctx))
			s.mu.Unlock()
			// Like a real adapter whose request was cut: an error that would be
			// retryable on its own. The engine must decide by the context's reason.
			return engine.Outcome{}, protocol.NewError(protocol.CodeProviderUnavailable, "stream cut")
		case st.block != nil:
			<-st.block
		default:
			err := st.emit(em)
			s.mu.Lock()
			s.emitErrs = append(s.emitErrs, err)
			s.mu.Unlock()
		}
	}
	return engine.Outcome{FinishReason: s.finish}, nil
}

func (s *script) callCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.calls)
}

func (s *script) attempts() []engine.Attempt {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]engine.Attempt(nil), s.calls...)
}

func (s *script) emitErrors() []error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]error(nil), s.emitErrs...)
}

func (s *script) contextErrors() []error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]error(nil), s.ctxErrs...)
}

// waitDone waits for the first Execute to return.
func (s *script) waitDone(t *testing.T) {
	t.Helper()
	select {
	case <-s.done:
	case <-time.After(waitTimeout):
		t.Fatal("adapter did not return")
	}
}

// deployment builds a routable text deployment served by the fake provider.
func deployment(name string, opts ...func(*routing.Deployment)) routing.Deployment {
	d := routing.Deployment{
		Ref:       routing.Ref{Namespace: "ai", Name: name},
		Provider:  "fake",
		Model:     name + "-model",
		Abilities: []string{"chat"},
		Capabilities: routing.CapsOf(protocol.CapInputText, protocol.CapInputJSON,
			protocol.CapOutputText),
		Weight: 100,
	}
	for _, o := range opts {
		o(&d)
	}
	return d
}

func withPriority(p int32) func(*routing.Deployment) {
	return func(d *routing.Deployment) { d.Priority = p }
}

func withAttemptTimeout(t time.Duration) func(*routing.Deployment) {
	return func(d *routing.Deployment) { d.AttemptTimeout = t }
}

func withProvider(p string) func(*routing.Deployment) {
	return func(d *routing.Deployment) { d.Provider = p }
}

// request builds a valid chat request with one text part.
func request(opts ...func(*protocol.Request)) *protocol.Request {
	r := &protocol.Request{
		Ability: "chat",
		Input:   []protocol.Part{{Type: protocol.PartText, Text: "hello"}},
	}
	for _, o := range opts {
		o(r)
	}
	return r
}

func withDeadline(ms int64) func(*protocol.Request) {
	return func(r *protocol.Request) { r.DeadlineMs = &ms }
}

func withMaxAttempts(n int) func(*protocol.Request) {
	return func(r *protocol.Request) { r.Routing = &protocol.Routing{MaxAttempts: &n} }
}

// harness is an engine over a real memory store and routing table, with one script per
// deployment name.
type harness struct {
	*enginetest.Harness
	t       *testing.T
	scripts map[string]*script
	logs    *enginetest.LogSink
	// faults sits between the engine and the memory store; it passes everything
	// through until a test sets a hook.
	faults *faultStore
}

func newHarness(t *testing.T, deployments []routing.Deployment, scripts map[string]*script, opts ...func(*engine.Config)) *harness {
	t.Helper()
	h := &harness{t: t, scripts: scripts, logs: &enginetest.LogSink{}}
	cfg := engine.Config{
		Providers: map[string]engine.Provider{
			"fake": {New: func(d *routing.Deployment) (engine.Adapter, error) {
				s, ok := scripts[d.Ref.Name]
				if !ok {
					return nil, fmt.Errorf("no script for %s", d.Ref)
				}
				return s, nil
			}},
		},
		CleanupGrace: 100 * time.Millisecond,
		Logger:       h.logs.Logger(),
	}
	for _, o := range opts {
		o(&cfg)
	}
	h.Harness = enginetest.NewHarnessWithStore(t, cfg, func(s engine.Store) engine.Store {
		h.faults = &faultStore{Store: s}
		return h.faults
	}, deployments...)
	return h
}

// errTransient is a store failure that passes: a timeout, a dropped connection.
var errTransient = errors.New("injected transient store failure")

// faultStore passes every call to the store it wraps, except where a hook intercepts it.
// A hook gets the call's argument and next, which makes the real call; it decides what
// the engine sees (so a hook can fail before the write, or after it landed).
type faultStore struct {
	engine.Store

	mu         sync.Mutex
	append     func(ev protocol.Event, next func() error) error
	waitCancel func(next func() error) error
	create     func(rec eventstore.Record, next func() error) error
	get        func(id string, next func() (eventstore.Status, error)) (eventstore.Status, error)
	reserve    func(r eventstore.Reservation, next func() (eventstore.Reservation, bool, error)) (eventstore.Reservation, bool, error)
	reads      []readCall // every Read, in order
	created    []string   // the ids of the records created, in order
}

// createdIDs returns the ids of the records created so far.
func (f *faultStore) createdIDs() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.created)
}

// set changes the faults' hooks under their lock.
func (f *faultStore) set(change func(*faultStore)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	change(f)
}

func (f *faultStore) Create(ctx context.Context, rec eventstore.Record, owner string, ttl time.Duration) (eventstore.Lease, error) {
	f.mu.Lock()
	h := f.create
	f.mu.Unlock()
	var lease eventstore.Lease
	next := func() (err error) {
		lease, err = f.Store.Create(ctx, rec, owner, ttl)
		if err == nil {
			f.mu.Lock()
			f.created = append(f.created, rec.ID)
			f.mu.Unlock()
		}
		return err
	}
	if h == nil {
		return lease, next()
	}
	return lease, h(rec, next)
}

func (f *faultStore) Get(ctx context.Context, id string) (eventstore.Status, error) {
	f.mu.Lock()
	h := f.get
	f.mu.Unlock()
	next := func() (eventstore.Status, error) { return f.Store.Get(ctx, id) }
	if h == nil {
		return next()
	}
	return h(id, next)
}

func (f *faultStore) Reserve(ctx context.Context, key string, r eventstore.Reservation, ttl time.Duration, limit int) (eventstore.Reservation, bool, error) {
	f.mu.Lock()
	h := f.reserve
	f.mu.Unlock()
	next := func() (eventstore.Reservation, bool, error) { return f.Store.Reserve(ctx, key, r, ttl, limit) }
	if h == nil {
		return next()
	}
	return h(r, next)
}

// readCall is one Read through a faultStore: its limit and how many events it returned.
type readCall struct {
	limit, events int
}

func (f *faultStore) Read(ctx context.Context, id string, after uint64, limit int) ([]protocol.Event, error) {
	evs, err := f.Store.Read(ctx, id, after, limit)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reads = append(f.reads, readCall{limit: limit, events: len(evs)})
	return evs, err
}

// readCalls returns the Reads made so far.
func (f *faultStore) readCalls() []readCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.reads)
}

func (f *faultStore) onAppend(h func(ev protocol.Event, next func() error) error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.append = h
}

func (f *faultStore) onWaitCancel(h func(next func() error) error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.waitCancel = h
}

func (f *faultStore) Append(ctx context.Context, fence eventstore.Fence, ev protocol.Event) error {
	f.mu.Lock()
	h := f.append
	f.mu.Unlock()
	next := func() error { return f.Store.Append(ctx, fence, ev) }
	if h == nil {
		return next()
	}
	return h(ev, next)
}

func (f *faultStore) WaitCancel(ctx context.Context, id string) error {
	f.mu.Lock()
	h := f.waitCancel
	f.mu.Unlock()
	next := func() error { return f.Store.WaitCancel(ctx, id) }
	if h == nil {
		return next()
	}
	return h(next)
}

// failing returns an Append hook that fails the first n writes of events of type typ
// (every one when n < 0): before the write when landed is false, after it when true (a
// write whose reply was lost). It counts the writes of typ in calls.
func failing(typ protocol.EventType, n int, landed bool, calls *atomic.Int64) func(protocol.Event, func() error) error {
	return func(ev protocol.Event, next func() error) error {
		if ev.Type != typ {
			return next()
		}
		c := calls.Add(1)
		if n >= 0 && c > int64(n) {
			return next()
		}
		if landed {
			if err := next(); err != nil {
				return err
			}
		}
		return errTransient
	}
}

// waitFor waits until execution id has at least n events.
func (h *harness) waitFor(id string, n uint64) {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := h.Store.Wait(ctx, id, n-1); err != nil {
		h.t.Fatalf("waiting for event %d of %s: %v", n, id, err)
	}
}

// finish waits for the terminal event of id and returns every event after checking the
// envelope invariants.
func (h *harness) finish(id string) []protocol.Event {
	h.t.Helper()
	evs := h.WaitTerminal(id)
	checkEvents(h.t, id, evs)
	return evs
}

// checkEvents asserts the envelope invariants of a finished execution (spec/events.md,
// "Envelope"): sequences 1..N without gaps, the execution's id, non-decreasing UTC
// timestamps, execution.accepted first and exactly one terminal event, last.
func checkEvents(t *testing.T, id string, evs []protocol.Event) {
	t.Helper()
	if len(evs) == 0 {
		t.Fatal("no events")
	}
	if evs[0].Type != protocol.EventAccepted {
		t.Errorf("first event is %s, want execution.accepted", evs[0].Type)
	}
	terminals := 0
	for i, ev := range evs {
		if ev.Sequence != uint64(i+1) {
			t.Errorf("event %d has sequence %d", i, ev.Sequence)
		}
		if ev.ExecutionID != id {
			t.Errorf("event %d has execution id %q, want %q", ev.Sequence, ev.ExecutionID, id)
		}
		if ev.Timestamp.Location() != time.UTC {
			t.Errorf("event %d timestamp %v is not UTC", ev.Sequence, ev.Timestamp)
		}
		if i > 0 && ev.Timestamp.Before(evs[i-1].Timestamp) {
			t.Errorf("event %d timestamp %v is before the previous %v", ev.Sequence, ev.Timestamp, evs[i-1].Timestamp)
		}
		if !json.Valid(ev.Data) {
			t.Errorf("event %d data is not JSON: %s", ev.Sequence, ev.Data)
		}
		if ev.Type.Terminal() {
			terminals++
		}
	}
	if terminals != 1 {
		t.Errorf("%d terminal events, want exactly 1", terminals)
	}
	if last := evs[len(evs)-1]; !last.Type.Terminal() {
		t.Errorf("last event is %s, want a terminal event", last.Type)
	}
}

func types(evs []protocol.Event) []protocol.EventType {
	out := make([]protocol.EventType, len(evs))
	for i, ev := range evs {
		out[i] = ev.Type
	}
	return out
}

func decode[T any](t *testing.T, ev protocol.Event) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(ev.Data, &v); err != nil {
		t.Fatalf("decode %s data %s: %v", ev.Type, ev.Data, err)
	}
	return v
}

// terminalError returns the error of the execution.failed event that ends evs.
func terminalError(t *testing.T, evs []protocol.Event) *protocol.Error {
	t.Helper()
	last := evs[len(evs)-1]
	if last.Type != protocol.EventFailed {
		t.Fatalf("last event is %s (%s), want execution.failed", last.Type, last.Data)
	}
	d := decode[protocol.FailedData](t, last)
	if d.Error == nil {
		t.Fatal("execution.failed without error")
	}
	return d.Error
}

// protocolError asserts err is a *protocol.Error with the code.
func protocolError(t *testing.T, err error, code protocol.Code) *protocol.Error {
	t.Helper()
	var pe *protocol.Error
	if !errors.As(err, &pe) {
		t.Fatalf("error %v (%T) is not a *protocol.Error", err, err)
	}
	if pe.Code != code {
		t.Fatalf("code %s (%s), want %s", pe.Code, pe.Message, code)
	}
	return pe
}
