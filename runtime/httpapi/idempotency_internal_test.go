package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchboard-dev/switchboard/runtime/engine"
	"github.com/switchboard-dev/switchboard/runtime/eventstore"
	"github.com/switchboard-dev/switchboard/runtime/eventstore/memory"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
	"github.com/switchboard-dev/switchboard/runtime/routing"
)

// errInjectedStore is a store failure the tests inject.
var errInjectedStore = errors.New("injected store failure")

// hookStore passes every call to the store it wraps, except where a hook intercepts it;
// next makes the real call.
type hookStore struct {
	eventstore.Store

	mu      sync.Mutex
	reserve func(r eventstore.Reservation, next func() (eventstore.Reservation, bool, error)) (eventstore.Reservation, bool, error)
	create  func(rec eventstore.Record, next func() error) error
	get     func(id string, next func() (eventstore.Status, error)) (eventstore.Status, error)
	appendH func(ev protocol.Event, next func() error) error
}

func (h *hookStore) set(f func(*hookStore)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	f(h)
}

func (h *hookStore) hooks() hookStore {
	h.mu.Lock()
	defer h.mu.Unlock()
	return hookStore{reserve: h.reserve, create: h.create, get: h.get, appendH: h.appendH}
}

func (h *hookStore) Reserve(ctx context.Context, key string, r eventstore.Reservation, ttl time.Duration, limit int) (eventstore.Reservation, bool, error) {
	next := func() (eventstore.Reservation, bool, error) { return h.Store.Reserve(ctx, key, r, ttl, limit) }
	if f := h.hooks().reserve; f != nil {
		return f(r, next)
	}
	return next()
}

func (h *hookStore) Create(ctx context.Context, rec eventstore.Record, owner string, ttl time.Duration) (eventstore.Lease, error) {
	var lease eventstore.Lease
	next := func() (err error) {
		lease, err = h.Store.Create(ctx, rec, owner, ttl)
		return err
	}
	if f := h.hooks().create; f != nil {
		return lease, f(rec, next)
	}
	return lease, next()
}

func (h *hookStore) Get(ctx context.Context, id string) (eventstore.Status, error) {
	next := func() (eventstore.Status, error) { return h.Store.Get(ctx, id) }
	if f := h.hooks().get; f != nil {
		return f(id, next)
	}
	return next()
}

func (h *hookStore) Append(ctx context.Context, fence eventstore.Fence, ev protocol.Event) error {
	next := func() error { return h.Store.Append(ctx, fence, ev) }
	if f := h.hooks().appendH; f != nil {
		return f(ev, next)
	}
	return next()
}

type doneAdapter struct{}

func (doneAdapter) Execute(context.Context, engine.Attempt, engine.Emitter) (engine.Outcome, error) {
	return engine.Outcome{FinishReason: "stop"}, nil
}

// newIdemServer returns a server over an engine and store of its own, shared with the
// servers made by replica (another replica, with its own clock).
func newIdemServer(t *testing.T) (s *server, store *hookStore, replica func(now func() time.Time) *server) {
	t.Helper()
	store = &hookStore{Store: memory.New()}
	holder := new(routing.Holder)
	holder.Store(routing.NewTable([]routing.Deployment{{
		Ref: routing.Ref{Namespace: "ai", Name: "small"}, Provider: "fake", Model: "small",
		Abilities: []string{"chat"}, Capabilities: routing.CapsOf(protocol.CapInputText, protocol.CapOutputText),
		Weight: 100,
	}}))
	holder.MarkSynced()
	eng := engine.New(engine.Config{
		Store: store, Table: holder,
		Providers: map[string]engine.Provider{"fake": {New: func(*routing.Deployment) (engine.Adapter, error) { return doneAdapter{}, nil }}},
	})
	t.Cleanup(func() {
		if err := eng.Close(); err != nil {
			t.Errorf("engine close: %v", err)
		}
		_ = store.Close()
	})
	replica = func(now func() time.Time) *server { return newServer(Config{Engine: eng, Store: store, Now: now}) }
	return replica(nil), store, replica
}

const idemBody = `{"ability":"chat","input":[{"type":"text","text":"hi"}]}`

func post(s *server, body, key string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodPost, "/v1/executions", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	rec := httptest.NewRecorder()
	s.mux.ServeHTTP(rec, req)
	return rec
}

// accepted checks a 202 and returns its execution id and whether it is a replay.
func accepted(t *testing.T, rec *httptest.ResponseRecorder) (id string, replayed bool) {
	t.Helper()
	if rec.Code != http.StatusAccepted {
		t.Fatalf("status %d, want 202: %s", rec.Code, rec.Body)
	}
	var body struct{ ID string }
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil || body.ID == "" {
		t.Fatalf("202 body %s: %v", rec.Body, err)
	}
	return body.ID, rec.Header().Get("Idempotent-Replayed") == "true"
}

// created checks that execution id exists with its execution.accepted.
func created(t *testing.T, store eventstore.Store, id string) {
	t.Helper()
	st, err := store.Get(context.Background(), id)
	if err != nil || st.LastSequence == 0 {
		t.Fatalf("execution %s: %+v, %v; want it created", id, st, err)
	}
}

func errorCode(t *testing.T, rec *httptest.ResponseRecorder, status int, code protocol.Code) *protocol.Error {
	t.Helper()
	var body protocol.ErrorBody
	if rec.Code != status || json.Unmarshal(rec.Body.Bytes(), &body) != nil || body.Error == nil || body.Error.Code != code {
		t.Fatalf("status %d body %s, want %d %s", rec.Code, rec.Body, status, code)
	}
	return body.Error
}

// reservation stores a reservation of idemBody under key, as another request would have.
func reservation(t *testing.T, store eventstore.Store, key, id string, createdAt time.Time) eventstore.Reservation {
	t.Helper()
	fp, err := protocol.Fingerprint([]byte(idemBody))
	if err != nil {
		t.Fatal(err)
	}
	r := eventstore.Reservation{Fingerprint: fp, ExecutionID: id, Response: appendAccepted(nil, id, createdAt, ""), CreatedAt: createdAt}
	if _, ok, err := store.Reserve(context.Background(), scopedKey("runtime", key), r, time.Hour, 0); err != nil || !ok {
		t.Fatalf("Reserve: %v, %v", ok, err)
	}
	return r
}

// A Reserve whose answer names this request's own execution (a retried Reserve after a
// lost reply) is this request's reservation, not a replay of something never created.
func TestReserveFindingItsOwnReservation(t *testing.T) {
	s, store, _ := newIdemServer(t)
	store.set(func(h *hookStore) {
		h.reserve = func(r eventstore.Reservation, next func() (eventstore.Reservation, bool, error)) (eventstore.Reservation, bool, error) {
			cur, _, err := next()
			return cur, false, err // the store has it, the answer says "existing"
		}
	})
	id, replayed := accepted(t, post(s, idemBody, "own"))
	if replayed {
		t.Error("answered as a replay")
	}
	created(t, store, id)
}

// A duplicate on a replica whose clock is ahead (by less than the execution lease) must
// not replay a reservation whose creator is still submitting and is then rejected: it
// waits for the outcome.
func TestDuplicateWaitsForASlowSubmit(t *testing.T) {
	s, store, replica := newIdemServer(t)
	ahead := replica(func() time.Time { return time.Now().Add(engine.DefaultLease / 2) })
	entered, unblock := make(chan struct{}), make(chan struct{})
	var once, released sync.Once
	release := func() { released.Do(func() { close(unblock) }) }
	t.Cleanup(release) // before the engine's shutdown, which waits for the submission
	store.set(func(h *hookStore) {
		h.create = func(rec eventstore.Record, next func() error) error {
			first := false
			once.Do(func() { first = true })
			if !first {
				return next()
			}
			close(entered)
			<-unblock
			return errInjectedStore // the first submission fails after a long while
		}
	})
	first := make(chan *httptest.ResponseRecorder, 1)
	go func() { first <- post(s, idemBody, "slow") }()
	<-entered
	dup := make(chan *httptest.ResponseRecorder, 1)
	go func() { dup <- post(ahead, idemBody, "slow") }()
	select {
	case rec := <-dup:
		t.Fatalf("the duplicate answered before the first request ended: %d %s", rec.Code, rec.Body)
	case <-time.After(100 * time.Millisecond):
	}
	release()
	errorCode(t, <-first, http.StatusInternalServerError, protocol.CodeInternal)
	id, replayed := accepted(t, <-dup)
	if replayed {
		t.Error("the duplicate replayed a rejected request")
	}
	created(t, store, id)
}

// A duplicate whose first request neither creates nor releases in time gets 409
// conflict, retryable, never a 202 for an execution that may not exist.
func TestDuplicateConflictWhileUndecided(t *testing.T) {
	s, store, _ := newIdemServer(t)
	s.replayWait = 100 * time.Millisecond
	reservation(t, store, "undecided", engine.NewExecutionID(), s.now())
	rec := post(s, idemBody, "undecided")
	pe := errorCode(t, rec, http.StatusConflict, protocol.CodeConflict)
	if !pe.Retryable || rec.Header().Get("Retry-After") == "" {
		t.Errorf("409 %+v, Retry-After %q; want retryable with a hint", pe, rec.Header().Get("Retry-After"))
	}

	// An execution recorded without execution.accepted (the engine gave up creating
	// it) is not replayed either.
	id := engine.NewExecutionID()
	if _, err := store.Create(context.Background(), eventstore.Record{ID: id, CreatedAt: s.now()}, "", 0); err != nil {
		t.Fatal(err)
	}
	reservation(t, store, "eventless", id, s.now())
	errorCode(t, post(s, idemBody, "eventless"), http.StatusConflict, protocol.CodeConflict)
}

// A reservation whose execution is missing is replayed only if the store marked it
// created: the execution existed and was removed after its retention. One never
// created belongs to a creator that died between Reserve and Create: once it is older
// than the execution lease it is released and the request creates its own; before
// that, the creator may still be on its way (409, retryable).
func TestReservationsWithoutExecution(t *testing.T) {
	s, store, _ := newIdemServer(t)
	s.replayWait = 20 * time.Millisecond
	old := s.now().Add(-2 * engine.DefaultLease)

	// Created with the key, then removed by retention (the Get hook plays the removal).
	removed := engine.NewExecutionID()
	r := reservation(t, store, "removed", removed, old)
	rec := eventstore.Record{ID: removed, CreatedAt: old, IdempotencyKey: scopedKey("runtime", "removed")}
	if _, err := store.Create(context.Background(), rec, "", 0); err != nil {
		t.Fatal(err)
	}
	store.set(func(h *hookStore) {
		h.get = func(id string, next func() (eventstore.Status, error)) (eventstore.Status, error) {
			if id == removed {
				return eventstore.Status{}, eventstore.ErrNotFound
			}
			return next()
		}
	})
	resp := post(s, idemBody, "removed")
	id, replayed := accepted(t, resp)
	if !replayed || id != removed || resp.Body.String() != string(r.Response) {
		t.Errorf("replay of a removed execution: %v %s, want the original body %s", replayed, resp.Body, r.Response)
	}

	young := reservation(t, store, "young", engine.NewExecutionID(), s.now())
	errorCode(t, post(s, idemBody, "young"), http.StatusConflict, protocol.CodeConflict)

	dead := reservation(t, store, "dead", engine.NewExecutionID(), old)
	id, replayed = accepted(t, post(s, idemBody, "dead"))
	if replayed || id == dead.ExecutionID || id == young.ExecutionID {
		t.Errorf("execution %s (replayed %v), want a new one instead of the never created %s", id, replayed, dead.ExecutionID)
	}
	created(t, store, id)
}

// After a failed submission the key is released only when the store says the execution
// does not exist (or was never accepted), not after any error reading it.
func TestReleaseOnlyWhenNotCreated(t *testing.T) {
	const image = `{"ability":"chat","input":[{"type":"image","media_type":"image/png","data":"AA=="}]}`
	s, store, _ := newIdemServer(t)
	var mine string
	store.set(func(h *hookStore) {
		h.reserve = func(r eventstore.Reservation, next func() (eventstore.Reservation, bool, error)) (eventstore.Reservation, bool, error) {
			mine = r.ExecutionID
			return next()
		}
		h.get = func(id string, next func() (eventstore.Status, error)) (eventstore.Status, error) {
			if id == mine {
				return eventstore.Status{}, errInjectedStore
			}
			return next()
		}
	})
	errorCode(t, post(s, image, "kept"), http.StatusUnprocessableEntity, protocol.CodeUnsupportedCapability)
	store.set(func(h *hookStore) { h.reserve, h.get = nil, nil })
	cur, ok, err := store.Reserve(context.Background(), scopedKey("runtime", "kept"), eventstore.Reservation{ExecutionID: "exe_probe"}, time.Hour, 0)
	if err != nil || ok || cur.ExecutionID != mine {
		t.Fatalf("Reserve after the failure: %+v, %v, %v; want the key still reserved for %s", cur, ok, err, mine)
	}

	// execution.accepted cannot be written: the engine answers internal, the record
	// has no events, and the key is released, so a retry creates the execution.
	store.set(func(h *hookStore) {
		h.appendH = func(ev protocol.Event, next func() error) error {
			if ev.Type == protocol.EventAccepted {
				return errInjectedStore
			}
			return next()
		}
	})
	errorCode(t, post(s, idemBody, "unaccepted"), http.StatusInternalServerError, protocol.CodeInternal)
	store.set(func(h *hookStore) { h.appendH = nil })
	id, replayed := accepted(t, post(s, idemBody, "unaccepted"))
	if replayed {
		t.Error("replayed an execution that was never accepted")
	}
	created(t, store, id)
}
