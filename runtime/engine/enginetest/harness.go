package enginetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/switchboard-dev/switchboard/runtime/engine"
	"github.com/switchboard-dev/switchboard/runtime/eventstore"
	"github.com/switchboard-dev/switchboard/runtime/eventstore/memory"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
	"github.com/switchboard-dev/switchboard/runtime/routing"
)

// waitTimeout bounds every wait of a Harness; only a broken engine or adapter reaches it.
const waitTimeout = 10 * time.Second

// Harness is a real engine.Engine over a memory store and a routing table, so that
// adapters run as they do in the runtime, under the engine's own checks.
type Harness struct {
	// Engine is the engine under test.
	Engine *engine.Engine
	// Store is the engine's store.
	Store *memory.Store
	// Table publishes the engine's routing table; a test may store a new table to
	// change what the next submission is routed with (a rotated credential, say).
	Table *routing.Holder

	t testing.TB
}

// NewHarness starts an engine configured by cfg, with a fresh memory store as cfg.Store
// and a routing table of deployments as cfg.Table. When the test ends it shuts the engine
// down, failing t if that takes longer than ten seconds, then closes the store.
func NewHarness(t testing.TB, cfg engine.Config, deployments ...routing.Deployment) *Harness {
	t.Helper()
	return NewHarnessWithStore(t, cfg, nil, deployments...)
}

// NewHarnessWithStore is NewHarness with the engine recording through wrap(Store), for
// tests that inject store faults; Store remains the memory store underneath, which
// shows what was recorded. A nil wrap is NewHarness.
func NewHarnessWithStore(t testing.TB, cfg engine.Config, wrap func(engine.Store) engine.Store, deployments ...routing.Deployment) *Harness {
	t.Helper()
	h := &Harness{Store: memory.New(), t: t}
	cfg.Store = h.Store
	if wrap != nil {
		cfg.Store = wrap(h.Store)
	}
	h.Table = new(routing.Holder)
	h.Table.Store(routing.NewTable(deployments))
	cfg.Table = h.Table
	h.Engine = engine.New(cfg)
	t.Cleanup(func() {
		_ = h.Engine.Close()
		_ = h.Store.Close()
	})
	return h
}

// Submit submits req as a new execution, failing the test on error.
func (h *Harness) Submit(req *protocol.Request) engine.Accepted {
	h.t.Helper()
	acc, _, err := h.Engine.Submit(h.t.Context(), engine.Principal{}, req, engine.Idempotency{})
	if err != nil {
		h.t.Fatalf("Submit: %v", err)
	}
	return acc
}

// WaitTerminal waits until the terminal event of execution id is recorded and returns
// every event of the execution.
func (h *Harness) WaitTerminal(id string) []protocol.Event {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	var events []protocol.Event
	for {
		more, err := h.Store.Read(ctx, id, uint64(len(events)), 0)
		if err != nil {
			h.t.Fatalf("Read: %v", err)
		}
		events = append(events, more...)
		if n := len(events); n > 0 && events[n-1].Type.Terminal() {
			return events
		}
		if err := h.Store.Wait(ctx, id, uint64(len(events))); err != nil && !errors.Is(err, eventstore.ErrTerminated) {
			h.t.Fatalf("waiting for the terminal event of %s: %v", id, err)
		}
	}
}
