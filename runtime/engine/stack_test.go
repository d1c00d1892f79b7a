package engine_test

import (
	"context"
	"runtime/debug"
	"testing"

	"github.com/switchboard-dev/switchboard/runtime/engine"
	"github.com/switchboard-dev/switchboard/runtime/engine/enginetest"
	"github.com/switchboard-dev/switchboard/runtime/internal/stack/stacktest"
	"github.com/switchboard-dev/switchboard/runtime/routing"
)

// adapterStack is the stack an adapter can use without its goroutine's stack being
// grown: what is left of the 8 KiB the engine grows it to, with room for the engine's
// frames below the adapter and the runtime's guard area.
const adapterStack = 4 << 10

// stackProbe is an adapter that reports whether using adapterStack bytes of stack made
// the runtime copy its goroutine's stack.
type stackProbe chan bool

func (p stackProbe) Execute(context.Context, engine.Attempt, engine.Emitter) (engine.Outcome, error) {
	p <- stacktest.Copied(func() { stacktest.Use(adapterStack) })
	return engine.Outcome{FinishReason: "stop"}, nil
}

// TestAttemptStack: an attempt's goroutine starts its adapter with a grown stack, so that
// the runtime does not copy the stack deep in the adapter's encoding and decoding
// (runtime/internal/stack).
func TestAttemptStack(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(-1)) // a collection can copy a stack too
	probe := make(stackProbe, 1)
	h := enginetest.NewHarness(t, engine.Config{Providers: map[string]engine.Provider{
		"fake": {New: func(*routing.Deployment) (engine.Adapter, error) { return probe, nil }},
	}}, deployment("a"))
	h.WaitTerminal(h.Submit(request()).ID)
	if <-probe {
		t.Errorf("the adapter's goroutine grew its stack to use %d bytes", adapterStack)
	}
}
