package engine_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/switchboard-dev/switchboard/runtime/engine"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
	"github.com/switchboard-dev/switchboard/runtime/routing"
)

// A store error from WaitCancel must not leave the execution deaf to cancels: the engine
// waits again, and a later cancel still ends it.
func TestWatchCancelSurvivesStoreErrors(t *testing.T) {
	a := newScript(hang())
	h := newHarness(t, []routing.Deployment{deployment("a")}, map[string]*script{"a": a})
	var calls atomic.Int64
	h.faults.onWaitCancel(func(next func() error) error {
		if calls.Add(1) <= 3 {
			return errTransient
		}
		return next()
	})
	// Without the retry the execution would only end at its deadline.
	acc := h.Submit(request(withDeadline(3000)))
	h.waitFor(acc.ID, 2)
	if _, err := h.Engine.Cancel(t.Context(), acc.ID); err != nil {
		t.Fatalf("Cancel: %v", err)
	}
	evs := h.finish(acc.ID)
	if e := terminalError(t, evs); e.Code != protocol.CodeCancelled {
		t.Errorf("error %+v, want cancelled", e)
	}
	if n := calls.Load(); n < 4 {
		t.Errorf("WaitCancel called %d times, want it retried after each of 3 failures", n)
	}
}

// Once the execution's record exists, execution.accepted is retried; a write that landed
// although it failed is not repeated.
func TestAcceptedWriteRetried(t *testing.T) {
	for _, landed := range []bool{false, true} {
		name := map[bool]string{false: "lost write", true: "landed write"}[landed]
		t.Run(name, func(t *testing.T) {
			a := newScript(delta("ok"))
			h := newHarness(t, []routing.Deployment{deployment("a")}, map[string]*script{"a": a})
			var calls atomic.Int64
			h.faults.onAppend(failing(evAccepted, 1, landed, &calls))
			acc, _, err := h.Engine.Submit(t.Context(), engine.Principal{}, request(), engine.Idempotency{})
			if err != nil {
				t.Fatalf("Submit: %v", err)
			}
			evs := h.finish(acc.ID) // one accepted, sequences without gaps
			want := []protocol.EventType{evAccepted, evSelected, evDelta, evCompleted}
			if diff := cmp.Diff(want, types(evs)); diff != "" {
				t.Fatalf("event types (-want +got):\n%s", diff)
			}
			if n, want := calls.Load(), map[bool]int64{false: 2, true: 1}[landed]; n != want {
				t.Errorf("execution.accepted written %d times, want %d", n, want)
			}
		})
	}

	t.Run("never written", func(t *testing.T) {
		a := newScript(delta("ok"))
		h := newHarness(t, []routing.Deployment{deployment("a")}, map[string]*script{"a": a},
			func(c *engine.Config) { c.MaxConcurrent = 1 })
		var calls atomic.Int64
		h.faults.onAppend(failing(evAccepted, -1, false, &calls))
		_, _, err := h.Engine.Submit(t.Context(), engine.Principal{}, request(), engine.Idempotency{})
		protocolError(t, err, protocol.CodeInternal)
		if n := calls.Load(); n < 2 || n > 10 {
			t.Errorf("execution.accepted tried %d times, want a few", n)
		}
		ids := h.faults.createdIDs()
		if len(ids) != 1 {
			t.Fatalf("records %v created, want one", ids)
		}
		// The record stays without events: nothing else is recorded, nothing runs.
		st, err := h.Store.Get(t.Context(), ids[0])
		if err != nil || st.LastSequence != 0 {
			t.Errorf("record %+v, %v; want one without events", st, err)
		}
		if n := a.callCount(); n != 0 {
			t.Errorf("adapter called %d times", n)
		}
		// Its slot is free again.
		h.faults.onAppend(nil)
		h.finish(h.Submit(request()).ID)
	})
}

// A failed terminal write is retried within the cleanup grace, and never produces a
// second terminal event.
func TestTerminalWriteRetried(t *testing.T) {
	for _, landed := range []bool{false, true} {
		name := map[bool]string{false: "lost write", true: "landed write"}[landed]
		t.Run(name, func(t *testing.T) {
			a := newScript(delta("ok"))
			h := newHarness(t, []routing.Deployment{deployment("a")}, map[string]*script{"a": a},
				func(c *engine.Config) { c.CleanupGrace = 2 * time.Second })
			var calls atomic.Int64
			h.faults.onAppend(failing(evCompleted, 2, landed, &calls))
			evs := h.finish(h.Submit(request()).ID) // exactly one terminal event, last
			want := []protocol.EventType{evAccepted, evSelected, evDelta, evCompleted}
			if diff := cmp.Diff(want, types(evs)); diff != "" {
				t.Fatalf("event types (-want +got):\n%s", diff)
			}
			if n, want := calls.Load(), map[bool]int64{false: 3, true: 1}[landed]; n != want {
				t.Errorf("execution.completed written %d times, want %d", n, want)
			}
			if n := h.logs.Count("Cannot record terminal event"); n != 0 {
				t.Errorf("logged a lost terminal event:\n%s", h.logs.Text())
			}
		})
	}

	t.Run("after an emit that landed", func(t *testing.T) {
		// The adapter's emit failed although it landed, so the writer is one sequence
		// behind the store; the terminal write catches up instead of failing for good.
		a := newScript(delta("ok"))
		h := newHarness(t, []routing.Deployment{deployment("a")}, map[string]*script{"a": a})
		var calls atomic.Int64
		h.faults.onAppend(failing(evDelta, 1, true, &calls))
		evs := h.finish(h.Submit(request()).ID)
		want := []protocol.EventType{evAccepted, evSelected, evDelta, evCompleted}
		if diff := cmp.Diff(want, types(evs)); diff != "" {
			t.Fatalf("event types (-want +got):\n%s", diff)
		}
		if errs := a.emitErrors(); len(errs) != 1 || !errors.Is(errs[0], errTransient) {
			t.Errorf("emit errors %v, want the injected failure", errs)
		}
	})

	t.Run("gives up after the grace", func(t *testing.T) {
		a := newScript(delta("ok"))
		h := newHarness(t, []routing.Deployment{deployment("a")}, map[string]*script{"a": a})
		var calls atomic.Int64
		h.faults.onAppend(failing(evCompleted, -1, false, &calls))
		acc := h.Submit(request())
		a.waitDone(t)
		start := time.Now()
		ctx, cancel := context.WithTimeout(t.Context(), waitTimeout)
		defer cancel()
		if err := h.Engine.Shutdown(ctx); err != nil { // waits for the execution's slot
			t.Fatalf("Shutdown: %v", err)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("the terminal write was retried for %v, beyond the 100ms grace", d)
		}
		if n := calls.Load(); n < 2 {
			t.Errorf("execution.completed tried %d times, want retries", n)
		}
		if h.logs.Count("Cannot record terminal event") != 1 {
			t.Errorf("the lost terminal event was not logged:\n%s", h.logs.Text())
		}
		evs, _ := h.Store.Read(t.Context(), acc.ID, 0, 0)
		if diff := cmp.Diff([]protocol.EventType{evAccepted, evSelected, evDelta}, types(evs)); diff != "" {
			t.Errorf("event types (-want +got):\n%s", diff)
		}
	})
}

// A write retried after a failure learns the execution's progress from its status and
// reads at most the last event, to tell whether it is the write being retried (a
// terminal write needs not even that): never the events after the writer's sequence
// without a bound.
func TestRetryReadsTheLastEventOnly(t *testing.T) {
	const deltas = 100
	steps := make([]step, deltas)
	for i := range steps {
		steps[i] = delta("x")
	}
	for _, typ := range []protocol.EventType{evAccepted, evCompleted} {
		t.Run(string(typ), func(t *testing.T) {
			a := newScript(steps...)
			h := newHarness(t, []routing.Deployment{deployment("a")}, map[string]*script{"a": a},
				func(c *engine.Config) { c.CleanupGrace = 2 * time.Second })
			var calls atomic.Int64
			h.faults.onAppend(failing(typ, 1, true, &calls))
			evs := h.finish(h.Submit(request()).ID)
			if n := len(evs); n != deltas+3 || evs[n-1].Type != evCompleted {
				t.Fatalf("%d events ending with %s, want %d ending with %s", n, evs[n-1].Type, deltas+3, evCompleted)
			}
			if n := calls.Load(); n != 1 {
				t.Errorf("%s written %d times, want once: it landed", typ, n)
			}
			for _, r := range h.faults.readCalls() {
				if r.limit <= 0 || r.events > 1 {
					t.Errorf("the retry read with limit %d and got %d events, want at most the last event", r.limit, r.events)
				}
			}
		})
	}
}

// racer returns success while its emit is still being recorded, and the attempt timeout
// fires before the engine has taken the result in: the success must stand.
type racer struct {
	ctxs    chan context.Context // the attempt's context, for the store hook
	entered chan struct{}        // the emit is inside the store, holding the writer
}

func (r racer) Execute(ctx context.Context, _ engine.Attempt, em engine.Emitter) (engine.Outcome, error) {
	r.ctxs <- ctx
	go func() { _ = em.Text(0, "done") }()
	<-r.entered
	return engine.Outcome{FinishReason: "stop"}, nil
}

func TestSuccessJustBeforeAttemptTimeout(t *testing.T) {
	r := racer{ctxs: make(chan context.Context, 1), entered: make(chan struct{})}
	h := newHarness(t, []routing.Deployment{deployment("a", withAttemptTimeout(200*time.Millisecond))}, nil,
		func(c *engine.Config) {
			c.Providers = map[string]engine.Provider{"fake": {New: func(*routing.Deployment) (engine.Adapter, error) { return r, nil }}}
		})
	h.faults.onAppend(func(ev protocol.Event, next func() error) error {
		if ev.Type == evDelta {
			actx := <-r.ctxs
			close(r.entered) // the adapter returns its success now
			<-actx.Done()    // the writer stays busy until the attempt timeout has fired
		}
		return next()
	})
	evs := h.finish(h.Submit(request()).ID)
	want := []protocol.EventType{evAccepted, evSelected, evDelta, evCompleted}
	if diff := cmp.Diff(want, types(evs)); diff != "" {
		t.Fatalf("event types (-want +got):\n%s\nlast event: %s", diff, evs[len(evs)-1].Data)
	}
}
