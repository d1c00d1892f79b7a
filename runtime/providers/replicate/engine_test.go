package replicate

import (
	"context"
	"testing"
	"time"

	"github.com/switchboard-dev/switchboard/runtime/engine"
	"github.com/switchboard-dev/switchboard/runtime/engine/enginetest"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
	"github.com/switchboard-dev/switchboard/runtime/routing"
)

// TestThroughEngine runs the adapter inside the real engine and memory store, so the
// engine's own checks of every emitted event apply, and the snapshot is the one served.
func TestThroughEngine(t *testing.T) {
	t.Run("completed", func(t *testing.T) {
		f := newFake(t, createdJSON("pro_starting.json"), okJSON("pro_succeeded.json"))
		h := newEngine(t, f)
		id := h.Submit(request(t, `{"ability":"image","input":[{"type":"text","text":"a paper boat"}]}`)).ID
		snap := protocol.Materialize(id, h.WaitTerminal(id))
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
		h := newEngine(t, f)
		id := h.Submit(request(t, foxRequest)).ID
		<-f.polled
		<-f.polled
		if _, err := h.Engine.Cancel(context.Background(), id); err != nil {
			t.Fatalf("Cancel: %v", err)
		}
		snap := protocol.Materialize(id, h.WaitTerminal(id))
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

// newEngine runs the adapter, talking to f, inside a real engine.
func newEngine(t *testing.T, f *fakeReplicate) *enginetest.Harness {
	t.Helper()
	return enginetest.NewHarness(t, engine.Config{
		Providers: map[string]engine.Provider{
			Provider: {New: func(d *routing.Deployment) (engine.Adapter, error) { return New(d, fast(f)...) }},
		},
		CleanupGrace: 2 * time.Second,
	}, *deployment(f.srv.URL))
}
