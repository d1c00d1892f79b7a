package replicate

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

// TestThroughEngine runs the adapter inside the real engine and memory store, so the
// engine's own checks of every emitted event apply, and the snapshot is the one served.
func TestThroughEngine(t *testing.T) {
	t.Run("completed", func(t *testing.T) {
		f := newFake(t, createdJSON("pro_starting.json"), okJSON("pro_succeeded.json"))
		eng, store := newEngine(t, f)
		id := submit(t, eng, `{"ability":"image","input":[{"type":"text","text":"a paper boat"}]}`)
		snap := protocol.Materialize(id, waitTerminal(t, store, id))
		snap.ID = "exe_test"
		const url = "https://replicate.delivery/czjl/Xq4cYvRrvVZ2fRk8e8TuBRmBKn9mwjoUX8aEo0yMUGUSwPTnA/output.png"
		assertJSON(t, "snapshot", snap, `{
			"id":"exe_test","status":"completed","sequence":6,"output":[],"tool_calls":[],
			"result":"`+url+`",
			"artifacts":[{"uri":"`+url+`","media_type":"image/png","expires_at":"2026-03-12T12:27:21.602Z"}],
			"usage":[{"unit":"replicate.predict_time_seconds","quantity":3.190351,"source":"provider"}],
			"finish_reason":"succeeded"}`)
	})
	t.Run("cancelled", func(t *testing.T) {
		f := newFake(t, createdJSON("flux_starting.json"), okJSON("flux_processing_1.json"))
		eng, store := newEngine(t, f)
		id := submit(t, eng, foxRequest)
		<-f.polled
		<-f.polled
		if _, err := eng.Cancel(context.Background(), id); err != nil {
			t.Fatalf("Cancel: %v", err)
		}
		snap := protocol.Materialize(id, waitTerminal(t, store, id))
		snap.ID = "exe_test"
		assertJSON(t, "snapshot", snap, `{
			"id":"exe_test","status":"failed","sequence":5,"output":[],"tool_calls":[],"artifacts":[],"usage":[],
			"error":{"code":"cancelled","message":"the execution was cancelled","retryable":false}}`)
		select {
		case <-f.cancelled:
		default:
			t.Error("the prediction was not cancelled remotely before the terminal event")
		}
		assertAuth(t, f.seen())
	})
}

func newEngine(t *testing.T, f *fakeReplicate) (*engine.Engine, *memory.Store) {
	t.Helper()
	store := memory.New()
	holder := new(routing.Holder)
	holder.Store(routing.NewTable([]routing.Deployment{*deployment(f.srv.URL)}))
	eng := engine.New(engine.Config{
		Store: store,
		Table: holder,
		Adapters: map[string]engine.Factory{
			Provider: func(d *routing.Deployment) (engine.Adapter, error) { return New(d, fast(f)...) },
		},
		CleanupGrace: 2 * time.Second,
	})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		defer cancel()
		if err := eng.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		_ = store.Close()
	})
	return eng, store
}

func submit(t *testing.T, eng *engine.Engine, body string) string {
	t.Helper()
	id := engine.NewExecutionID()
	if _, err := eng.Submit(context.Background(), id, time.Time{}, request(t, body)); err != nil {
		t.Fatalf("Submit: %v", err)
	}
	return id
}

// waitTerminal returns the execution's events once the terminal one is recorded.
func waitTerminal(t *testing.T, store eventstore.Store, id string) []protocol.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	var events []protocol.Event
	for {
		more, err := store.Read(ctx, id, uint64(len(events)), 0)
		if err != nil {
			t.Fatalf("Read: %v", err)
		}
		events = append(events, more...)
		if n := len(events); n > 0 && events[n-1].Type.Terminal() {
			return events
		}
		if err := store.Wait(ctx, id, uint64(len(events))); err != nil && !errors.Is(err, eventstore.ErrTerminated) {
			t.Fatalf("Wait: %v", err)
		}
	}
}
