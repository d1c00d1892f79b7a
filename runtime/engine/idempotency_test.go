package engine_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/switchboard-dev/switchboard/runtime/engine"
	"github.com/switchboard-dev/switchboard/runtime/eventstore"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
	"github.com/switchboard-dev/switchboard/runtime/routing"
)

// errInjectedStore is a store failure the tests inject.
var errInjectedStore = errors.New("injected store failure")

// fingerprint is the fingerprint the tests' submissions with a key have.
const fingerprint = "fp-of-the-request"

// keyed is the idempotency of a submission with key in the runtime's scope.
func keyed(key string) engine.Idempotency {
	return engine.Idempotency{Scope: engine.RuntimeScope, Key: key, Fingerprint: fingerprint}
}

// storeKey is the store key of key in the runtime's scope, as every version stores it.
func storeKey(key string) string { return "runtime " + key }

// newIdemHarness is an engine whose one deployment completes every request at once.
func newIdemHarness(t *testing.T, opts ...func(*engine.Config)) *harness {
	t.Helper()
	s := newScript(delta("ok"))
	return newHarness(t, []routing.Deployment{deployment("a")}, map[string]*script{"a": s}, opts...)
}

// submitKeyed submits a request with key.
func (h *harness) submitKeyed(key string) (engine.Accepted, bool, error) {
	return h.Engine.Submit(h.t.Context(), engine.Principal{}, request(), keyed(key))
}

// sameAccepted reports whether a and b describe the same execution the same way.
func sameAccepted(a, b engine.Accepted) bool {
	return a.ID == b.ID && a.CreatedAt.Equal(b.CreatedAt) && a.DeadlineAt.Equal(b.DeadlineAt)
}

// created checks that execution id exists with its execution.accepted.
func created(t *testing.T, store engine.Store, id string) {
	t.Helper()
	st, err := store.Get(context.Background(), id)
	if err != nil || st.LastSequence == 0 {
		t.Fatalf("execution %s: %+v, %v; want it created", id, st, err)
	}
}

// reservation stores, under key, a reservation of the tests' request for execution id,
// made at createdAt, as another request would have.
func reservation(t *testing.T, store engine.Store, key, id string, createdAt time.Time) {
	t.Helper()
	r := eventstore.Reservation{Scope: engine.RuntimeScope, Fingerprint: fingerprint, ExecutionID: id, CreatedAt: createdAt}
	if _, ok, err := store.Reserve(context.Background(), storeKey(key), r, time.Hour, 0); err != nil || !ok {
		t.Fatalf("Reserve: %v, %v", ok, err)
	}
}

// The same key and request answer with the execution the first submission created,
// after it ended too, with the creation time and deadline it was accepted with; another
// request with the key is idempotency_key_reused.
func TestSubmitReplays(t *testing.T) {
	h := newIdemHarness(t)
	first, replayed, err := h.submitKeyed("k")
	if err != nil || replayed {
		t.Fatalf("first submission: %+v, %v, %v", first, replayed, err)
	}
	h.finish(first.ID)
	again, replayed, err := h.submitKeyed("k")
	if err != nil || !replayed || !sameAccepted(again, first) {
		t.Errorf("replay: %+v, %v, %v; want %+v replayed", again, replayed, err, first)
	}
	_, _, err = h.Engine.Submit(t.Context(), engine.Principal{}, request(), engine.Idempotency{Scope: engine.RuntimeScope, Key: "k", Fingerprint: "another"})
	protocolError(t, err, protocol.CodeIdempotencyKeyReused)
	if ids := h.faults.createdIDs(); len(ids) != 1 {
		t.Errorf("executions %v created, want one", ids)
	}
}

// A Reserve whose answer names this request's own execution (a retried Reserve after a
// lost reply) is this request's reservation, not a replay of something never created.
func TestReserveFindingItsOwnReservation(t *testing.T) {
	h := newIdemHarness(t)
	h.faults.set(func(f *faultStore) {
		f.reserve = func(r eventstore.Reservation, next func() (eventstore.Reservation, bool, error)) (eventstore.Reservation, bool, error) {
			cur, _, err := next()
			return cur, false, err // the store has it, the answer says "existing"
		}
	})
	acc, replayed, err := h.submitKeyed("own")
	if err != nil || replayed {
		t.Fatalf("Submit: %+v, %v, %v; want a new execution", acc, replayed, err)
	}
	created(t, h.Store, acc.ID)
}

// A duplicate on a replica whose clock is ahead (by less than the execution lease) must
// not replay a reservation whose creator is still submitting and is then refused: it
// waits for the outcome.
func TestDuplicateWaitsForASlowSubmit(t *testing.T) {
	h := newIdemHarness(t)
	ahead := engine.New(engine.Config{
		Store: h.faults, Table: h.Table, Providers: scriptProvider(newScript(delta("ok"))),
		Now: func() time.Time { return time.Now().Add(engine.DefaultLease / 2) },
	})
	t.Cleanup(func() { _ = ahead.Close() })
	entered, unblock := make(chan struct{}), make(chan struct{})
	var once, released sync.Once
	release := func() { released.Do(func() { close(unblock) }) }
	t.Cleanup(release) // before the engine's shutdown, which waits for the submission
	h.faults.set(func(f *faultStore) {
		f.create = func(rec eventstore.Record, next func() error) error {
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
	type answer struct {
		acc      engine.Accepted
		replayed bool
		err      error
	}
	first := make(chan answer, 1)
	go func() {
		acc, replayed, err := h.submitKeyed("slow")
		first <- answer{acc, replayed, err}
	}()
	<-entered
	dup := make(chan answer, 1)
	go func() {
		acc, replayed, err := ahead.Submit(t.Context(), engine.Principal{}, request(), keyed("slow"))
		dup <- answer{acc, replayed, err}
	}()
	select {
	case a := <-dup:
		t.Fatalf("the duplicate answered before the first request ended: %+v", a)
	case <-time.After(100 * time.Millisecond):
	}
	release()
	protocolError(t, (<-first).err, protocol.CodeInternal)
	a := <-dup
	if a.err != nil || a.replayed {
		t.Fatalf("duplicate: %+v; want a new execution, not a replay of a refused request", a)
	}
	created(t, h.Store, a.acc.ID)
}

// A duplicate whose first request neither creates nor releases in time gets conflict,
// retryable, never an execution that may not exist.
func TestDuplicateConflictWhileUndecided(t *testing.T) {
	h := newIdemHarness(t)
	engine.SetReplayWait(h.Engine, 100*time.Millisecond)
	reservation(t, h.Store, "undecided", engine.NewExecutionID(), time.Now())
	_, _, err := h.submitKeyed("undecided")
	if pe := protocolError(t, err, protocol.CodeConflict); !pe.Retryable || pe.RetryAfterMs <= 0 {
		t.Errorf("conflict %+v; want retryable with a hint", pe)
	}

	// An execution recorded without execution.accepted (the engine gave up creating
	// it) is not replayed either.
	id := engine.NewExecutionID()
	if _, err := h.Store.Create(context.Background(), eventstore.Record{ID: id, CreatedAt: time.Now()}, "", 0); err != nil {
		t.Fatal(err)
	}
	reservation(t, h.Store, "eventless", id, time.Now())
	_, _, err = h.submitKeyed("eventless")
	protocolError(t, err, protocol.CodeConflict)
}

// A reservation whose execution is missing is replayed only if the store marked it
// created: the execution existed and was removed after its retention. One never
// created belongs to a creator that died between Reserve and Create: once it is older
// than the execution lease it is released and the request creates its own; before
// that, the creator may still be on its way (conflict, retryable).
func TestReservationsWithoutExecution(t *testing.T) {
	h := newIdemHarness(t)
	engine.SetReplayWait(h.Engine, 20*time.Millisecond)
	old := time.Now().UTC().Truncate(time.Microsecond).Add(-2 * engine.DefaultLease)

	// Created with the key, then removed by retention (the Get hook plays the removal).
	removed := engine.NewExecutionID()
	reservation(t, h.Store, "removed", removed, old)
	rec := eventstore.Record{ID: removed, CreatedAt: old, IdempotencyKey: storeKey("removed")}
	if _, err := h.Store.Create(context.Background(), rec, "", 0); err != nil {
		t.Fatal(err)
	}
	h.faults.set(func(f *faultStore) {
		f.get = func(id string, next func() (eventstore.Status, error)) (eventstore.Status, error) {
			if id == removed {
				return eventstore.Status{}, eventstore.ErrNotFound
			}
			return next()
		}
	})
	acc, replayed, err := h.submitKeyed("removed")
	if want := (engine.Accepted{ID: removed, CreatedAt: old}); err != nil || !replayed || !sameAccepted(acc, want) {
		t.Errorf("replay of a removed execution: %+v, %v, %v; want %+v replayed", acc, replayed, err, want)
	}

	young := engine.NewExecutionID()
	reservation(t, h.Store, "young", young, time.Now())
	_, _, err = h.submitKeyed("young")
	protocolError(t, err, protocol.CodeConflict)

	dead := engine.NewExecutionID()
	reservation(t, h.Store, "dead", dead, old)
	acc, replayed, err = h.submitKeyed("dead")
	if err != nil || replayed || acc.ID == dead || acc.ID == young {
		t.Errorf("execution %+v (replayed %v, %v), want a new one instead of the never created %s", acc, replayed, err, dead)
	}
	created(t, h.Store, acc.ID)
}

// After a refused submission the key is released only when the store says the
// execution does not exist (or was never accepted), not after any error reading it.
func TestReleaseOnlyWhenNotCreated(t *testing.T) {
	image := request(func(r *protocol.Request) {
		r.Input = []protocol.Part{{Type: protocol.PartImage, MediaType: "image/png", Data: "AA=="}}
	})
	h := newIdemHarness(t)
	var mine string
	h.faults.set(func(f *faultStore) {
		f.reserve = func(r eventstore.Reservation, next func() (eventstore.Reservation, bool, error)) (eventstore.Reservation, bool, error) {
			mine = r.ExecutionID
			return next()
		}
		f.get = func(id string, next func() (eventstore.Status, error)) (eventstore.Status, error) {
			if id == mine {
				return eventstore.Status{}, errInjectedStore
			}
			return next()
		}
	})
	_, _, err := h.Engine.Submit(t.Context(), engine.Principal{}, image, keyed("kept"))
	protocolError(t, err, protocol.CodeUnsupportedCapability)
	h.faults.set(func(f *faultStore) { f.reserve, f.get = nil, nil })
	cur, ok, err := h.Store.Reserve(context.Background(), storeKey("kept"), eventstore.Reservation{ExecutionID: "exe_probe"}, time.Hour, 0)
	if err != nil || ok || cur.ExecutionID != mine {
		t.Fatalf("Reserve after the failure: %+v, %v, %v; want the key still reserved for %s", cur, ok, err, mine)
	}

	// execution.accepted cannot be written: the engine answers internal, the record
	// has no events, and the key is released, so a retry creates the execution.
	h.faults.onAppend(func(ev protocol.Event, next func() error) error {
		if ev.Type == protocol.EventAccepted {
			return errInjectedStore
		}
		return next()
	})
	_, _, err = h.submitKeyed("unaccepted")
	protocolError(t, err, protocol.CodeInternal)
	h.faults.onAppend(nil)
	acc, replayed, err := h.submitKeyed("unaccepted")
	if err != nil || replayed {
		t.Fatalf("retry: %+v, %v, %v; want a new execution", acc, replayed, err)
	}
	created(t, h.Store, acc.ID)
}

// A scope that holds Config.MaxReservations keys refuses a new one with rate_limited,
// retryable when its earliest key expires, before anything is created; a replay is not
// refused, nor is another scope.
func TestReservationLimit(t *testing.T) {
	h := newIdemHarness(t, func(c *engine.Config) { c.MaxReservations = 1 })
	first, _, err := h.submitKeyed("one")
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = h.submitKeyed("two")
	pe := protocolError(t, err, protocol.CodeRateLimited)
	if wait := time.Duration(pe.RetryAfterMs) * time.Millisecond; !pe.Retryable || wait < engine.DefaultIdempotencyTTL-time.Minute || wait > engine.DefaultIdempotencyTTL {
		t.Errorf("error %+v; want retryable in about %v", pe, engine.DefaultIdempotencyTTL)
	}
	if acc, replayed, err := h.submitKeyed("one"); err != nil || !replayed || acc.ID != first.ID {
		t.Errorf("replay at the limit: %+v, %v, %v", acc, replayed, err)
	}
	other := engine.Idempotency{Scope: engine.Principal{Name: "alice"}.IdempotencyScope(), Key: "two", Fingerprint: fingerprint}
	if _, _, err := h.Engine.Submit(t.Context(), engine.Principal{Name: "alice"}, request(), other); err != nil {
		t.Errorf("another scope: %v", err)
	}
	if ids := h.faults.createdIDs(); len(ids) != 2 {
		t.Errorf("executions %v created, want two", ids)
	}
}

// The idempotency scopes are stored with every reservation: their form never changes.
func TestIdempotencyScopes(t *testing.T) {
	for _, tt := range []struct {
		p    engine.Principal
		want string
	}{
		{engine.Principal{Name: "alice"}, "principal:alice"},
		{engine.Principal{Name: "system:serviceaccount:a:b", UID: "42"}, "principal-uid:42/system:serviceaccount:a:b"},
	} {
		if got := tt.p.IdempotencyScope(); got != tt.want {
			t.Errorf("scope of %+v: %q, want %q", tt.p, got, tt.want)
		}
	}
	if engine.RuntimeScope != "runtime" {
		t.Errorf("runtime scope %q", engine.RuntimeScope)
	}
}
