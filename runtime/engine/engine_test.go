package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/switchboard-dev/switchboard/runtime/engine"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
	"github.com/switchboard-dev/switchboard/runtime/routing"
)

const (
	evAccepted  = protocol.EventAccepted
	evSelected  = protocol.EventRouteSelected
	evAttFailed = protocol.EventAttemptFailed
	evDelta     = protocol.EventOutputDelta
	evUsage     = protocol.EventUsageReported
	evCompleted = protocol.EventCompleted
	evFailed    = protocol.EventFailed
)

func TestHappyPath(t *testing.T) {
	a := newScript(
		delta("Hel"),
		delta("lo"),
		emit(evDelta, protocol.OutputDeltaData{Text: "!"}),
		emit(evUsage, protocol.UsageReportedData{Usage: []protocol.Usage{
			{Unit: protocol.UnitInputTokens, Quantity: 3, Source: protocol.SourceProvider},
			{Unit: protocol.UnitOutputTokens, Quantity: 2, Source: protocol.SourceProvider},
		}}),
	)
	h := newHarness(t, []routing.Deployment{deployment("a")}, map[string]*script{"a": a})

	req := request(func(r *protocol.Request) { r.Metadata = map[string]string{"team": "search"} })
	acc := h.Submit(req)
	evs := h.finish(acc.ID)

	want := []protocol.EventType{evAccepted, evSelected, evDelta, evDelta, evDelta, evUsage, evCompleted}
	if diff := cmp.Diff(want, types(evs)); diff != "" {
		t.Fatalf("event types (-want +got):\n%s", diff)
	}
	if got, want := acc.DeadlineAt.Sub(acc.CreatedAt), time.Duration(protocol.DefaultDeadlineMs)*time.Millisecond; got != want {
		t.Errorf("deadline after %v, want the default %v", got, want)
	}
	if diff := cmp.Diff(protocol.AcceptedData{Ability: "chat", DeadlineAt: acc.DeadlineAt},
		decode[protocol.AcceptedData](t, evs[0])); diff != "" {
		t.Errorf("accepted data (-want +got):\n%s", diff)
	}
	if !evs[0].Timestamp.Equal(acc.CreatedAt) {
		t.Errorf("accepted at %v, created at %v", evs[0].Timestamp, acc.CreatedAt)
	}
	if diff := cmp.Diff(protocol.RouteSelectedData{Attempt: 1, Deployment: "ai/a", Provider: "fake", Model: "a-model"},
		decode[protocol.RouteSelectedData](t, evs[1])); diff != "" {
		t.Errorf("route.selected data (-want +got):\n%s", diff)
	}
	if got := decode[protocol.CompletedData](t, evs[len(evs)-1]); got.FinishReason != "stop" {
		t.Errorf("finish_reason %q, want stop", got.FinishReason)
	}

	snap := protocol.Materialize(acc.ID, evs)
	if snap.Status != protocol.StatusCompleted || len(snap.Output) != 1 || snap.Output[0].Text != "Hello!" {
		t.Errorf("snapshot: status %s, output %+v", snap.Status, snap.Output)
	}
	if len(snap.Usage) != 2 {
		t.Errorf("snapshot usage %+v, want 2 entries", snap.Usage)
	}
	for i, err := range a.emitErrors() {
		if err != nil {
			t.Errorf("emit %d: %v", i, err)
		}
	}

	calls := a.attempts()
	if len(calls) != 1 {
		t.Fatalf("adapter called %d times", len(calls))
	}
	if c := calls[0]; c.ExecutionID != acc.ID || c.Number != 1 || c.Request != req ||
		c.Deployment.Ref.Name != "a" || c.CleanupGrace != 100*time.Millisecond {
		t.Errorf("attempt %+v", c)
	}

	rec, err := h.Store.Get(t.Context(), acc.ID)
	if err != nil {
		t.Fatal(err)
	}
	st := engine.StatusOf(rec)
	wantStatus := protocol.ExecutionStatus{
		ID: acc.ID, Ability: "chat", Status: protocol.StatusCompleted,
		CreatedAt: acc.CreatedAt, UpdatedAt: evs[len(evs)-1].Timestamp, DeadlineAt: acc.DeadlineAt,
		LastSequence: uint64(len(evs)), Attempts: 1,
		Route:    &protocol.RouteStatus{Deployment: "ai/a", Provider: "fake", Model: "a-model"},
		Metadata: map[string]string{"team": "search"},
	}
	if diff := cmp.Diff(wantStatus, st); diff != "" {
		t.Errorf("status (-want +got):\n%s", diff)
	}
}

func TestUnsupportedCapabilityCreatesNothing(t *testing.T) {
	image := protocol.Part{Type: protocol.PartImage, MediaType: "image/png", Data: "iVBORw0KGgo="}
	tests := []struct {
		name    string
		req     *protocol.Request
		mention string // capability id the message names
	}{
		{
			name:    "image without requirements",
			req:     request(func(r *protocol.Request) { r.Input = append(r.Input, image) }),
			mention: "input.image",
		},
		{
			name: "image with narrower requirements",
			req: request(func(r *protocol.Request) {
				r.Input = append(r.Input, image)
				r.Requirements = []protocol.Capability{protocol.CapOutputText}
			}),
			mention: "input.image",
		},
		{
			name:    "explicit requirement",
			req:     request(func(r *protocol.Request) { r.Requirements = []protocol.Capability{protocol.CapTools} }),
			mention: "tools",
		},
		{
			name: "ability nobody serves",
			req:  request(func(r *protocol.Request) { r.Ability = "secret-ability" }),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := newScript()
			h := newHarness(t, []routing.Deployment{deployment("a"), deployment("b")},
				map[string]*script{"a": a, "b": a})
			_, _, err := h.Engine.Submit(t.Context(), engine.Principal{}, tt.req, engine.Idempotency{})
			pe := protocolError(t, err, protocol.CodeUnsupportedCapability)
			if pe.Code.HTTPStatus() != 422 || pe.Retryable {
				t.Errorf("error %+v", pe)
			}
			if !strings.Contains(pe.Message, tt.mention) {
				t.Errorf("message %q does not name %q", pe.Message, tt.mention)
			}
			if strings.Contains(pe.Message, tt.req.Ability) {
				t.Errorf("message %q names the ability", pe.Message)
			}
			if ids := h.faults.createdIDs(); len(ids) != 0 {
				t.Errorf("executions %v created, want none", ids)
			}
			if n := a.callCount(); n != 0 {
				t.Errorf("adapter called %d times", n)
			}
		})
	}
}

func TestFallback(t *testing.T) {
	unavailable := protocol.NewError(protocol.CodeProviderUnavailable, "provider unavailable")
	rejected := protocol.NewError(protocol.CodeProviderRejected, "credential rejected")
	three := []routing.Deployment{
		deployment("a", withPriority(30)), deployment("b", withPriority(20)), deployment("c", withPriority(10)),
	}

	t.Run("retryable before output falls back", func(t *testing.T) {
		a, b := newScript(fail(unavailable)), newScript(delta("ok"))
		h := newHarness(t, three[:2], map[string]*script{"a": a, "b": b})
		evs := h.finish(h.Submit(request()).ID)
		want := []protocol.EventType{evAccepted, evSelected, evAttFailed, evSelected, evDelta, evCompleted}
		if diff := cmp.Diff(want, types(evs)); diff != "" {
			t.Fatalf("event types (-want +got):\n%s", diff)
		}
		af := decode[protocol.AttemptFailedData](t, evs[2])
		if af.Attempt != 1 || af.Deployment != "ai/a" || af.Error.Code != protocol.CodeProviderUnavailable || !af.Error.Retryable {
			t.Errorf("attempt_failed %+v (%+v)", af, af.Error)
		}
		if sel := decode[protocol.RouteSelectedData](t, evs[3]); sel.Attempt != 2 || sel.Deployment != "ai/b" {
			t.Errorf("second route.selected %+v", sel)
		}
		if calls := b.attempts(); len(calls) != 1 || calls[0].Number != 2 {
			t.Errorf("second adapter's attempts %+v, want one numbered 2", calls)
		}
	})

	t.Run("failure after output is terminal", func(t *testing.T) {
		a, b := newScript(delta("partial"), fail(unavailable)), newScript(delta("ok"))
		h := newHarness(t, three[:2], map[string]*script{"a": a, "b": b})
		evs := h.finish(h.Submit(request()).ID)
		want := []protocol.EventType{evAccepted, evSelected, evDelta, evFailed}
		if diff := cmp.Diff(want, types(evs)); diff != "" {
			t.Fatalf("event types (-want +got):\n%s", diff)
		}
		// After output a failure is never retryable: downstream effects may exist.
		if e := terminalError(t, evs); e.Code != protocol.CodeProviderUnavailable || e.Retryable {
			t.Errorf("error %+v, want provider_unavailable, not retryable", e)
		}
		if n := b.callCount(); n != 0 {
			t.Errorf("second adapter called %d times", n)
		}
	})

	t.Run("non-retryable is terminal at once", func(t *testing.T) {
		a, b := newScript(fail(rejected)), newScript(delta("ok"))
		h := newHarness(t, three[:2], map[string]*script{"a": a, "b": b})
		evs := h.finish(h.Submit(request()).ID)
		want := []protocol.EventType{evAccepted, evSelected, evFailed}
		if diff := cmp.Diff(want, types(evs)); diff != "" {
			t.Fatalf("event types (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff(rejected, terminalError(t, evs)); diff != "" {
			t.Errorf("error (-want +got):\n%s", diff)
		}
		if n := b.callCount(); n != 0 {
			t.Errorf("second adapter called %d times", n)
		}
	})

	t.Run("max attempts honoured", func(t *testing.T) {
		a, b, c := newScript(fail(unavailable)), newScript(fail(unavailable)), newScript(delta("ok"))
		h := newHarness(t, three, map[string]*script{"a": a, "b": b, "c": c})
		evs := h.finish(h.Submit(request(withMaxAttempts(2))).ID)
		want := []protocol.EventType{evAccepted, evSelected, evAttFailed, evSelected, evFailed}
		if diff := cmp.Diff(want, types(evs)); diff != "" {
			t.Fatalf("event types (-want +got):\n%s", diff)
		}
		if e := terminalError(t, evs); e.Code != protocol.CodeProviderUnavailable {
			t.Errorf("error %+v", e)
		}
		if n := c.callCount(); n != 0 {
			t.Errorf("third adapter called %d times", n)
		}
	})

	t.Run("default attempts use every candidate up to three", func(t *testing.T) {
		a, b, c := newScript(fail(unavailable)), newScript(fail(unavailable)), newScript(delta("ok"))
		h := newHarness(t, three, map[string]*script{"a": a, "b": b, "c": c})
		evs := h.finish(h.Submit(request()).ID)
		if got := evs[len(evs)-1].Type; got != evCompleted {
			t.Fatalf("ended with %s", got)
		}
		rec, _ := h.Store.Get(t.Context(), evs[0].ExecutionID)
		if st := engine.StatusOf(rec); st.Attempts != 3 || st.Route.Deployment != "ai/c" {
			t.Errorf("status attempts %d route %+v", st.Attempts, st.Route)
		}
	})
}

func TestDeadline(t *testing.T) {
	const deadline, grace = 200 * time.Millisecond, 100 * time.Millisecond
	// slack absorbs scheduling on a loaded machine; the bound still catches an engine
	// that waits for the adapter instead of the deadline.
	const slack = 2 * time.Second

	check := func(t *testing.T, h *harness, acc engine.Accepted, b *script) []protocol.Event {
		t.Helper()
		evs := h.finish(acc.ID)
		want := []protocol.EventType{evAccepted, evSelected, evFailed}
		if diff := cmp.Diff(want, types(evs)); diff != "" {
			t.Fatalf("event types (-want +got):\n%s", diff)
		}
		e := terminalError(t, evs)
		if e.Code != protocol.CodeDeadlineExceeded || e.Retryable {
			t.Errorf("error %+v, want deadline_exceeded, not retryable", e)
		}
		end := evs[len(evs)-1].Timestamp
		if end.Before(acc.DeadlineAt.Add(-10*time.Millisecond)) || end.After(acc.DeadlineAt.Add(grace+slack)) {
			t.Errorf("terminal at %v, deadline %v", end, acc.DeadlineAt)
		}
		if n := b.callCount(); n != 0 {
			t.Errorf("a later attempt started after the deadline (%d calls)", n)
		}
		return evs
	}

	t.Run("adapter honours ctx", func(t *testing.T) {
		a, b := newScript(hang()), newScript(delta("too late"))
		h := newHarness(t, []routing.Deployment{deployment("a", withPriority(2)), deployment("b", withPriority(1))},
			map[string]*script{"a": a, "b": b}, func(c *engine.Config) { c.CleanupGrace = grace })
		acc := h.Submit(request(withDeadline(deadline.Milliseconds())))
		check(t, h, acc, b)
		a.waitDone(t)
		if errs := a.contextErrors(); len(errs) != 1 || errs[0] == nil {
			t.Errorf("adapter saw %v, want its context ended", errs)
		}
	})

	t.Run("adapter ignoring ctx is abandoned", func(t *testing.T) {
		blocked, release := block(t)
		a, b := newScript(blocked, delta("late")), newScript(delta("too late"))
		h := newHarness(t, []routing.Deployment{deployment("a", withPriority(2)), deployment("b", withPriority(1))},
			map[string]*script{"a": a, "b": b}, func(c *engine.Config) { c.CleanupGrace = grace })
		acc := h.Submit(request(withDeadline(deadline.Milliseconds())))
		evs := check(t, h, acc, b)

		release()
		a.waitDone(t)
		if errs := a.emitErrors(); len(errs) != 1 || !errors.Is(errs[0], engine.ErrAttemptOver) {
			t.Errorf("late emit returned %v, want ErrAttemptOver", errs)
		}
		after, _ := h.Store.Read(t.Context(), acc.ID, 0, 0)
		if len(after) != len(evs) {
			t.Errorf("%d events after the late emit, want %d", len(after), len(evs))
		}
	})
}

func TestAttemptTimeoutFallsBack(t *testing.T) {
	a, b := newScript(hang()), newScript(delta("ok"))
	h := newHarness(t,
		[]routing.Deployment{deployment("a", withPriority(2), withAttemptTimeout(50*time.Millisecond)), deployment("b", withPriority(1))},
		map[string]*script{"a": a, "b": b})
	evs := h.finish(h.Submit(request()).ID)
	want := []protocol.EventType{evAccepted, evSelected, evAttFailed, evSelected, evDelta, evCompleted}
	if diff := cmp.Diff(want, types(evs)); diff != "" {
		t.Fatalf("event types (-want +got):\n%s", diff)
	}
	af := decode[protocol.AttemptFailedData](t, evs[2])
	if af.Error.Code != protocol.CodeProviderTimeout || !af.Error.Retryable {
		t.Errorf("attempt error %+v, want provider_timeout, retryable", af.Error)
	}
	a.waitDone(t)
	if errs := a.contextErrors(); len(errs) != 1 || errs[0] == nil {
		t.Errorf("adapter saw %v, want its context ended", errs)
	}
}

func TestAttemptTimeoutNeverExtendsDeadline(t *testing.T) {
	a := newScript(hang())
	h := newHarness(t, []routing.Deployment{deployment("a", withAttemptTimeout(time.Hour))},
		map[string]*script{"a": a})
	evs := h.finish(h.Submit(request(withDeadline(100))).ID)
	if e := terminalError(t, evs); e.Code != protocol.CodeDeadlineExceeded {
		t.Errorf("error %+v, want deadline_exceeded", e)
	}
}

func TestCancel(t *testing.T) {
	t.Run("mid-stream", func(t *testing.T) {
		a := newScript(delta("partial"), hang())
		h := newHarness(t, []routing.Deployment{deployment("a")}, map[string]*script{"a": a})
		acc := h.Submit(request())
		h.waitFor(acc.ID, 3) // accepted, route.selected, output.delta

		st, err := h.Engine.Cancel(t.Context(), acc.ID)
		if err != nil {
			t.Fatalf("Cancel: %v", err)
		}
		if !st.CancelRequested || st.ID != acc.ID {
			t.Errorf("Cancel status %+v", st)
		}
		evs := h.finish(acc.ID)
		want := []protocol.EventType{evAccepted, evSelected, evDelta, evFailed}
		if diff := cmp.Diff(want, types(evs)); diff != "" {
			t.Fatalf("event types (-want +got):\n%s", diff)
		}
		if e := terminalError(t, evs); e.Code != protocol.CodeCancelled || e.Retryable {
			t.Errorf("error %+v, want cancelled, not retryable", e)
		}
		a.waitDone(t)
		if errs := a.contextErrors(); len(errs) != 1 || errs[0] == nil {
			t.Errorf("adapter saw %v, want its context cancelled", errs)
		}
	})

	t.Run("adapter ignoring ctx is abandoned after the grace", func(t *testing.T) {
		blocked, release := block(t)
		a := newScript(delta("partial"), blocked, delta("late"))
		h := newHarness(t, []routing.Deployment{deployment("a")}, map[string]*script{"a": a})
		acc := h.Submit(request())
		h.waitFor(acc.ID, 3)
		if _, err := h.Engine.Cancel(t.Context(), acc.ID); err != nil {
			t.Fatalf("Cancel: %v", err)
		}
		evs := h.finish(acc.ID)
		if e := terminalError(t, evs); e.Code != protocol.CodeCancelled {
			t.Errorf("error %+v, want cancelled", e)
		}
		release()
		a.waitDone(t)
		if errs := a.emitErrors(); len(errs) != 2 || errs[0] != nil || !errors.Is(errs[1], engine.ErrAttemptOver) {
			t.Errorf("emit errors %v, want nil then ErrAttemptOver", errs)
		}
		after, _ := h.Store.Read(t.Context(), acc.ID, 0, 0)
		if len(after) != len(evs) {
			t.Errorf("%d events after the late emit, want %d", len(after), len(evs))
		}
	})

	t.Run("terminal execution is a no-op", func(t *testing.T) {
		a := newScript(delta("done"))
		h := newHarness(t, []routing.Deployment{deployment("a")}, map[string]*script{"a": a})
		acc := h.Submit(request())
		evs := h.finish(acc.ID)
		st, err := h.Engine.Cancel(t.Context(), acc.ID)
		if err != nil {
			t.Fatalf("Cancel: %v", err)
		}
		if !st.Terminal || st.CancelRequested || st.LastSequence != uint64(len(evs)) {
			t.Errorf("Cancel status %+v", st)
		}
		after, _ := h.Store.Read(t.Context(), acc.ID, 0, 0)
		if diff := cmp.Diff(evs, after); diff != "" {
			t.Errorf("events changed (-before +after):\n%s", diff)
		}
	})

	t.Run("reports whether the execution was already terminal", func(t *testing.T) {
		a := newScript(hang())
		h := newHarness(t, []routing.Deployment{deployment("a")}, map[string]*script{"a": a})
		acc := h.Submit(request())
		h.waitFor(acc.ID, 2)
		c, err := h.Engine.Cancel(t.Context(), acc.ID)
		if err != nil || c.AlreadyTerminal {
			t.Fatalf("Cancel of a running execution: %+v, %v; want AlreadyTerminal false", c, err)
		}
		h.finish(acc.ID)
		// Decided by the store at the request, not by a read of the status: the status
		// now shows a cancel requested, and the execution is terminal.
		c, err = h.Engine.Cancel(t.Context(), acc.ID)
		if err != nil || !c.AlreadyTerminal || !c.Terminal || !c.CancelRequested {
			t.Fatalf("Cancel of a terminal execution: %+v, %v; want AlreadyTerminal", c, err)
		}
	})

	t.Run("unknown execution", func(t *testing.T) {
		h := newHarness(t, nil, nil)
		_, err := h.Engine.Cancel(t.Context(), engine.NewExecutionID())
		protocolError(t, err, protocol.CodeNotFound)
	})
}

func TestUsageValidation(t *testing.T) {
	u := func(unit string, q float64) protocol.Usage {
		return protocol.Usage{Unit: unit, Quantity: q, Source: protocol.SourceProvider}
	}
	a := newScript(
		emit(evUsage, protocol.UsageReportedData{Usage: []protocol.Usage{
			u(protocol.UnitInputTokens, 10),
			u(protocol.UnitOutputTokens, math.NaN()),
			u(protocol.UnitOutputTokens, -1),
			u(protocol.UnitReasoningTokens, math.Inf(1)),
			u(protocol.UnitOutputTokens, 5),
		}}),
		// Nothing valid remains: nothing is recorded.
		emit(evUsage, protocol.UsageReportedData{Usage: []protocol.Usage{u(protocol.UnitImages, math.Inf(-1))}}),
	)
	h := newHarness(t, []routing.Deployment{deployment("a")}, map[string]*script{"a": a})
	evs := h.finish(h.Submit(request()).ID)

	want := []protocol.EventType{evAccepted, evSelected, evUsage, evCompleted}
	if diff := cmp.Diff(want, types(evs)); diff != "" {
		t.Fatalf("event types (-want +got):\n%s", diff)
	}
	got := decode[protocol.UsageReportedData](t, evs[2])
	wantUsage := []protocol.Usage{u(protocol.UnitInputTokens, 10), u(protocol.UnitOutputTokens, 5)}
	if diff := cmp.Diff(wantUsage, got.Usage); diff != "" {
		t.Errorf("usage (-want +got):\n%s", diff)
	}
	for i, err := range a.emitErrors() {
		if err != nil {
			t.Errorf("emit %d: %v", i, err)
		}
	}
	if n := h.logs.Count("Dropped invalid usage entry"); n != 4 {
		t.Errorf("%d drops logged, want 4:\n%s", n, h.logs.Text())
	}
}

func TestEmitRefusesInvalidEvents(t *testing.T) {
	over, under, back := 100.5, -1.0, -1
	invalid := []step{
		emit(evDelta, protocol.OutputDeltaData{Index: -1, Text: "x"}),
		emit(protocol.EventToolCallStarted, protocol.ToolCallStartedData{Name: "f"}),
		emit(protocol.EventToolCallStarted, protocol.ToolCallStartedData{CallID: "c1"}),
		emit(protocol.EventToolCallStarted, protocol.ToolCallStartedData{Index: -1, CallID: "c1", Name: "f"}),
		emit(protocol.EventToolCallArgsDelta, protocol.ToolCallArgsDeltaData{Delta: "{"}),
		emit(protocol.EventProgress, protocol.ProgressData{Stage: "sleeping"}),
		emit(protocol.EventProgress, protocol.ProgressData{Stage: protocol.StageRunning, Percent: &over}),
		emit(protocol.EventProgress, protocol.ProgressData{Stage: protocol.StageRunning, Percent: &under}),
		emit(protocol.EventProgress, protocol.ProgressData{Stage: protocol.StageQueued, QueuePosition: &back}),
		emit(protocol.EventOutputResult, protocol.OutputResultData{Artifacts: []protocol.Artifact{{MediaType: "image/png"}}}),
		emit(protocol.EventOutputResult, protocol.OutputResultData{Artifacts: []protocol.Artifact{{URI: "https://x/y.png"}}}),
		emit(protocol.EventOutputResult, protocol.OutputResultData{Result: json.RawMessage(`{"unterminated":`)}),
	}
	a := newScript(append(invalid, delta("fine"))...)
	h := newHarness(t, []routing.Deployment{deployment("a")}, map[string]*script{"a": a})
	evs := h.finish(h.Submit(request()).ID)

	want := []protocol.EventType{evAccepted, evSelected, evDelta, evCompleted}
	if diff := cmp.Diff(want, types(evs)); diff != "" {
		t.Fatalf("event types (-want +got):\n%s", diff)
	}
	errs := a.emitErrors()
	for i := range invalid {
		if !errors.Is(errs[i], engine.ErrInvalidEvent) {
			t.Errorf("emit %d (%s): %v, want ErrInvalidEvent", i, invalid[i].typ, errs[i])
		}
	}
	if err := errs[len(errs)-1]; err != nil {
		t.Errorf("valid emit: %v", err)
	}
}

func TestEmitNormalisesValidEvents(t *testing.T) {
	pct := 50.0
	a := newScript(
		emit(protocol.EventProgress, protocol.ProgressData{Stage: protocol.StageRunning, Percent: &pct}),
		emit(protocol.EventToolCallStarted, protocol.ToolCallStartedData{CallID: "c1", Name: "get_weather"}),
		emit(protocol.EventToolCallArgsDelta, protocol.ToolCallArgsDeltaData{CallID: "c1", Delta: `{"city":`}),
		emit(protocol.EventOutputResult, protocol.OutputResultData{Result: json.RawMessage(`{"ok":true}`)}),
		emit(evDelta, protocol.OutputDeltaData{Text: "no type given"}),
	)
	h := newHarness(t, []routing.Deployment{deployment("a")}, map[string]*script{"a": a})
	evs := h.finish(h.Submit(request()).ID)
	if len(evs) != 8 {
		t.Fatalf("event types %v", types(evs))
	}
	if got := string(evs[5].Data); got != `{"result":{"ok":true},"artifacts":[]}` {
		t.Errorf("output.result data %s", got)
	}
	if got := decode[protocol.OutputDeltaData](t, evs[6]); got.Type != "text" {
		t.Errorf("delta type %q, want text", got.Type)
	}
	snap := protocol.Materialize(evs[0].ExecutionID, evs)
	if snap.Sequence != uint64(len(evs)) || len(snap.ToolCalls) != 1 {
		t.Errorf("snapshot did not fold every event: %+v", snap)
	}
}

func TestConcurrencyLimit(t *testing.T) {
	a := newScript(hang())
	h := newHarness(t, []routing.Deployment{deployment("a")}, map[string]*script{"a": a},
		func(c *engine.Config) { c.MaxConcurrent = 1 })
	first := h.Submit(request())

	_, _, err := h.Engine.Submit(t.Context(), engine.Principal{}, request(), engine.Idempotency{})
	pe := protocolError(t, err, protocol.CodeRateLimited)
	if !pe.Retryable || pe.RetryAfterMs <= 0 {
		t.Errorf("error %+v, want retryable with a retry hint", pe)
	}
	if ids := h.faults.createdIDs(); !slices.Equal(ids, []string{first.ID}) {
		t.Errorf("executions %v created, want only the first, %s", ids, first.ID)
	}

	if _, err := h.Engine.Cancel(t.Context(), first.ID); err != nil {
		t.Fatal(err)
	}
	h.finish(first.ID)

	// The slot is freed just after the terminal event; poll instead of racing it.
	deadline := time.Now().Add(waitTimeout)
	for {
		acc, _, err := h.Engine.Submit(t.Context(), engine.Principal{}, request(), engine.Idempotency{})
		if err == nil {
			if _, err := h.Engine.Cancel(t.Context(), acc.ID); err != nil {
				t.Fatal(err)
			}
			h.finish(acc.ID)
			break
		}
		protocolError(t, err, protocol.CodeRateLimited)
		if time.Now().After(deadline) {
			t.Fatal("slot never freed")
		}
		time.Sleep(time.Millisecond)
	}
}

func TestShutdown(t *testing.T) {
	blocked, _ := block(t)
	a, b := newScript(hang()), newScript(blocked)
	h := newHarness(t, []routing.Deployment{deployment("a", withPriority(2)), deployment("b", withPriority(1))},
		map[string]*script{"a": a, "b": b})
	first := h.Submit(request())
	second := h.Submit(request(func(r *protocol.Request) {
		r.Routing = &protocol.Routing{Prefer: []string{"ai/b"}}
	}))
	h.waitFor(first.ID, 2)
	h.waitFor(second.ID, 2)

	// The grace ends at once: with a store of its own (no HandOver) the engine ends
	// what still runs itself.
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	if err := h.Engine.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Shutdown: %v, want the grace's end", err)
	}
	for _, id := range []string{first.ID, second.ID} {
		evs := h.finish(id)
		e := terminalError(t, evs)
		if e.Code != protocol.CodeInternal || e.Retryable || e.Message != "the runtime replica running this execution stopped" {
			t.Errorf("%s: error %+v, want internal, not retryable, with the fixed message", id, e)
		}
		if n := len(types(evs)); n != 3 {
			t.Errorf("%s: events %v, want no fallback", id, types(evs))
		}
	}
	_, _, err := h.Engine.Submit(t.Context(), engine.Principal{}, request(), engine.Idempotency{})
	protocolError(t, err, protocol.CodeProviderUnavailable)
	if err := h.Engine.Close(); err != nil {
		t.Errorf("second shutdown: %v", err)
	}
}

func TestAdapterErrorsAreMapped(t *testing.T) {
	const secret = "prompt text sk-secret"
	tests := []struct {
		name      string
		d         routing.Deployment
		script    *script
		code      protocol.Code
		logged    string
		retryable bool
	}{
		{
			name:   "plain Go error",
			d:      deployment("a"),
			script: newScript(fail(errors.New("dial https://api.example/?key=" + secret))),
			code:   protocol.CodeInternal,
			logged: "Attempt failed with an unmapped error",
		},
		{
			name:   "wrapped protocol error",
			d:      deployment("a"),
			script: newScript(fail(errorsJoin(protocol.NewError(protocol.CodeContentFiltered, "content filtered")))),
			code:   protocol.CodeContentFiltered,
		},
		{
			name:   "unknown code",
			d:      deployment("a"),
			script: newScript(fail(&protocol.Error{Code: "teapot", Message: secret})),
			code:   protocol.CodeInternal,
		},
		{
			name:   "panic",
			d:      deployment("a"),
			script: newScript(panics()),
			code:   protocol.CodeInternal,
			logged: "adapter panic",
		},
		{
			name:   "factory error",
			d:      deployment("missing"),
			code:   protocol.CodeProviderRejected,
			logged: "Cannot build adapter",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			scripts := map[string]*script{}
			if tt.script != nil {
				scripts[tt.d.Ref.Name] = tt.script
			}
			h := newHarness(t, []routing.Deployment{tt.d}, scripts)
			evs := h.finish(h.Submit(request()).ID)
			e := terminalError(t, evs)
			if e.Code != tt.code || e.Retryable != tt.retryable {
				t.Errorf("error %+v, want %s", e, tt.code)
			}
			for _, ev := range evs {
				if strings.Contains(string(ev.Data), "secret") {
					t.Errorf("event %s leaks the error text: %s", ev.Type, ev.Data)
				}
			}
			if tt.logged != "" && h.logs.Count(tt.logged) == 0 {
				t.Errorf("log does not mention %q:\n%s", tt.logged, h.logs.Text())
			}
		})
	}
}

func errorsJoin(err error) error { return errors.Join(errors.New("context"), err) }

func TestTimestampsNeverDecrease(t *testing.T) {
	// A clock that steps back a second on every reading.
	start := time.Date(2026, 12, 2, 13, 0, 0, 0, time.UTC)
	var (
		mu sync.Mutex
		n  int
	)
	clock := func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		n++
		return start.Add(-time.Duration(n) * time.Second)
	}
	a := newScript(delta("a"), delta("b"))
	h := newHarness(t, []routing.Deployment{deployment("a")}, map[string]*script{"a": a},
		func(c *engine.Config) { c.Now = clock })
	acc, _, err := h.Engine.Submit(t.Context(), engine.Principal{}, request(), engine.Idempotency{})
	if err != nil {
		t.Fatal(err)
	}
	evs := h.finish(acc.ID) // checks non-decreasing timestamps
	for _, ev := range evs {
		if !ev.Timestamp.Equal(acc.CreatedAt) {
			t.Errorf("event %d at %v, want the creation time %v", ev.Sequence, ev.Timestamp, acc.CreatedAt)
		}
	}
}

func TestSubmitDetachedFromCallerContext(t *testing.T) {
	a := newScript(delta("ok"))
	h := newHarness(t, []routing.Deployment{deployment("a")}, map[string]*script{"a": a})
	ctx, cancel := context.WithCancel(t.Context())
	acc, _, err := h.Engine.Submit(ctx, engine.Principal{}, request(), engine.Idempotency{})
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	if got := h.finish(acc.ID); got[len(got)-1].Type != evCompleted {
		t.Errorf("ended with %s after the caller's context was cancelled", got[len(got)-1].Type)
	}
}

// MaxPerPrincipal bounds one caller's running executions without holding up another's.
func TestMaxPerPrincipal(t *testing.T) {
	blocked, release := block(t)
	s := newScript(blocked)
	h := newHarness(t, []routing.Deployment{deployment("a")}, map[string]*script{"a": s},
		func(c *engine.Config) { c.MaxPerPrincipal = 2 })
	submit := func(p string) (engine.Accepted, error) {
		acc, _, err := h.Engine.Submit(t.Context(), engine.Principal{Name: p}, request(), engine.Idempotency{})
		return acc, err
	}
	var first []string
	for range 2 {
		acc, err := submit("alice")
		if err != nil {
			t.Fatal(err)
		}
		first = append(first, acc.ID)
	}
	_, err := submit("alice")
	if pe := protocolError(t, err, protocol.CodeRateLimited); !pe.Retryable || pe.RetryAfterMs <= 0 {
		t.Errorf("third execution of one principal: %+v, want rate_limited, retryable, with a hint", pe)
	}
	if _, err := submit("bob"); err != nil {
		t.Errorf("another principal: %v, want accepted", err)
	}
	release()
	for _, id := range first {
		h.finish(id)
	}
	waitUntil(t, func() bool { _, err := submit("alice"); return err == nil })
}
