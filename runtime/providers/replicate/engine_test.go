package replicate

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

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

// TestAdoptedThroughEngine: two replicas share a store. The first creates the
// prediction and is shut down while it runs, handing the execution over; the second
// adopts it, follows the same prediction to its end and completes the execution. The
// upstream sees one create and no cancel.
func TestAdoptedThroughEngine(t *testing.T) {
	f := newFake(t, createdJSON("flux_starting.json"), okJSON("flux_processing_1.json"))
	cfg := engine.Config{
		Providers: map[string]engine.Provider{
			Provider: {New: func(d *routing.Deployment) (engine.Adapter, error) { return New(d, fast(f)...) }},
		},
		CleanupGrace: 2 * time.Second,
		HandOver:     true,
		Lease:        time.Hour, // only the hand-over releases it
	}
	h := enginetest.NewHarness(t, cfg, *deployment(f.srv.URL))
	peerCfg := cfg
	peerCfg.Store, peerCfg.Table, peerCfg.Replica = h.Store, h.Table, "peer"
	peer := engine.New(peerCfg)
	t.Cleanup(func() { _ = peer.Close() })

	id := h.Submit(request(t, foxRequest)).ID
	<-f.polled
	<-f.polled
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := h.Engine.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Shutdown: %v, want the grace's end", err)
	}
	if n := cancels(f); n != 0 {
		t.Fatalf("the handed-over prediction was cancelled; requests: %v", f.calls())
	}
	if n := peer.Sweep(context.Background()); n != 1 {
		t.Fatalf("the peer took over %d executions, want 1", n)
	}
	// The peer follows the prediction from where it is: still processing, then done.
	wctx, wcancel := context.WithTimeout(context.Background(), waitTimeout)
	defer wcancel()
	if err := h.Store.Wait(wctx, id, 4); err != nil {
		t.Fatalf("waiting for the peer's progress: %v", err)
	}
	f.finished.Store(ptr(okJSON("flux_succeeded.json")))

	evs := h.WaitTerminal(id)
	var types []protocol.EventType
	for _, e := range evs {
		types = append(types, e.Type)
	}
	// The peer reports the progress it polled again: it cannot know what the first
	// replica reported.
	want := []protocol.EventType{protocol.EventAccepted, protocol.EventRouteSelected,
		protocol.EventProgress, protocol.EventProgress, protocol.EventProgress,
		protocol.EventOutputResult, protocol.EventUsageReported, protocol.EventCompleted}
	if diff := cmp.Diff(want, types); diff != "" {
		t.Errorf("event types (-want +got):\n%s", diff)
	}
	snap := protocol.Materialize(id, evs)
	if snap.Status != protocol.StatusCompleted || snap.FinishReason != "succeeded" || len(snap.Artifacts) != 2 || len(snap.Usage) != 1 {
		t.Errorf("snapshot = %+v, want completed with the prediction's two files and its usage", snap)
	}
	if n := strings.Count(strings.Join(f.calls(), "\n"), "POST /v1/models/"); n != 1 {
		t.Errorf("%d predictions created, want 1; requests: %v", n, f.calls())
	}
	if n := cancels(f); n != 0 {
		t.Errorf("%d cancels; requests: %v", n, f.calls())
	}
	assertAuth(t, f.seen())
}

func ptr[T any](v T) *T { return &v }

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
