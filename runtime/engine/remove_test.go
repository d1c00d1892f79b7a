package engine_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/switchboard-dev/switchboard/runtime/engine"
	"github.com/switchboard-dev/switchboard/runtime/eventstore"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
	"github.com/switchboard-dev/switchboard/runtime/routing"
)

func TestRemove(t *testing.T) {
	t.Run("terminal execution", func(t *testing.T) {
		h := newHarness(t, []routing.Deployment{deployment("a")}, map[string]*script{"a": newScript(delta("done"))})
		acc := h.Submit(request())
		h.finish(acc.ID)
		if err := h.Engine.Remove(t.Context(), acc.ID); err != nil {
			t.Fatalf("Remove: %v", err)
		}
		if _, err := h.Store.Get(t.Context(), acc.ID); !errors.Is(err, eventstore.ErrNotFound) {
			t.Errorf("Get after Remove: %v, want ErrNotFound", err)
		}
		var pe *protocol.Error
		if err := h.Engine.Remove(t.Context(), acc.ID); !errors.As(err, &pe) || pe.Code != protocol.CodeNotFound {
			t.Errorf("second Remove: %v, want not_found", err)
		}
		if _, err := h.Engine.Cancel(t.Context(), acc.ID); !errors.As(err, &pe) || pe.Code != protocol.CodeNotFound {
			t.Errorf("Cancel after Remove: %v, want not_found", err)
		}
	})

	t.Run("running execution is cancelled first", func(t *testing.T) {
		a := newScript(delta("partial"), hang())
		h := newHarness(t, []routing.Deployment{deployment("a")}, map[string]*script{"a": a})
		acc := h.Submit(request())
		h.waitFor(acc.ID, 3) // accepted, route.selected, output.delta
		if err := h.Engine.Remove(t.Context(), acc.ID); err != nil {
			t.Fatalf("Remove: %v", err)
		}
		if _, err := h.Store.Get(t.Context(), acc.ID); !errors.Is(err, eventstore.ErrNotFound) {
			t.Errorf("Get after Remove: %v, want ErrNotFound", err)
		}
		a.waitDone(t)
		if errs := a.contextErrors(); len(errs) != 1 || errs[0] == nil {
			t.Errorf("adapter saw %v, want its context cancelled", errs)
		}
	})

	t.Run("an execution that does not stop in time stays", func(t *testing.T) {
		blocked, release := block(t)
		a := newScript(delta("partial"), blocked)
		h := newHarness(t, []routing.Deployment{deployment("a")}, map[string]*script{"a": a},
			func(c *engine.Config) { c.CleanupGrace = time.Hour })
		acc := h.Submit(request())
		h.waitFor(acc.ID, 3)
		ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
		defer cancel()
		var pe *protocol.Error
		if err := h.Engine.Remove(ctx, acc.ID); !errors.As(err, &pe) || pe.Code != protocol.CodeConflict || !pe.Retryable {
			t.Fatalf("Remove of an execution still stopping: %v, want conflict, retryable", err)
		}
		st, err := h.Store.Get(t.Context(), acc.ID)
		if err != nil || st.Terminal || !st.CancelRequested {
			t.Fatalf("after the refused Remove: %+v, %v; want it running, its cancel requested", st, err)
		}
		release()
		h.finish(acc.ID)
		if err := h.Engine.Remove(t.Context(), acc.ID); err != nil {
			t.Errorf("Remove once it stopped: %v", err)
		}
	})

	t.Run("unknown execution", func(t *testing.T) {
		h := newHarness(t, nil, nil)
		var pe *protocol.Error
		if err := h.Engine.Remove(t.Context(), "exe_unknown"); !errors.As(err, &pe) || pe.Code != protocol.CodeNotFound {
			t.Errorf("Remove: %v, want not_found", err)
		}
	})
}
