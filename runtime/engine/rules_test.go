package engine_test

import (
	"context"
	"errors"
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

// These tests cover the rules the engine applies on every terminal path: the retryable
// rule, refusals before anything was sent, admission at routing time, the per-execution
// limits, and the credential an attempt uses.

// TestRetryableRule runs every way an execution can fail and checks the recorded
// retryable flag: the code's table value before any output, never true after output,
// never raised by an adapter, lowered when the adapter says so.
func TestRetryableRule(t *testing.T) {
	unavailable := func() *protocol.Error {
		e := protocol.NewError(protocol.CodeProviderUnavailable, "provider unavailable")
		e.RetryAfterMs = 1500
		return e
	}
	lowered := protocol.NewError(protocol.CodeProviderUnavailable, "provider says do not retry")
	lowered.Retryable = false
	raised := protocol.NewError(protocol.CodeProviderRejected, "rejected, but claims retryable")
	raised.Retryable = true

	type run struct {
		steps []step
		// act, if set, runs once the adapter is running (cancel, shutdown).
		act      func(h *harness, id string)
		deadline int64 // deadline_ms, 0 for the default
		timeout  time.Duration
		maxBytes int64
	}
	tests := []struct {
		name      string
		run       run
		code      protocol.Code
		retryable bool
	}{
		{"retryable failure before output", run{steps: []step{fail(unavailable())}}, protocol.CodeProviderUnavailable, true},
		{"retryable failure after output", run{steps: []step{delta("x"), fail(unavailable())}}, protocol.CodeProviderUnavailable, false},
		{"adapter lowers retryable", run{steps: []step{fail(lowered)}}, protocol.CodeProviderUnavailable, false},
		{"adapter cannot raise retryable", run{steps: []step{fail(raised)}}, protocol.CodeProviderRejected, false},
		{"attempt timeout before output", run{steps: []step{hang()}, timeout: 50 * time.Millisecond}, protocol.CodeProviderTimeout, true},
		{"attempt timeout after output", run{steps: []step{delta("x"), hang()}, timeout: 50 * time.Millisecond}, protocol.CodeProviderTimeout, false},
		{"deadline", run{steps: []step{hang()}, deadline: 50}, protocol.CodeDeadlineExceeded, false},
		{"cancel", run{steps: []step{hang()}, act: func(h *harness, id string) {
			if _, err := h.Engine.Cancel(context.Background(), id); err != nil {
				h.t.Errorf("Cancel: %v", err)
			}
		}}, protocol.CodeCancelled, false},
		// A replica that stops with a store of its own ends its executions itself.
		{"shutdown before output", run{steps: []step{hang()}, act: shutdown}, protocol.CodeInternal, false},
		{"shutdown after output", run{steps: []step{delta("x"), hang()}, act: shutdown}, protocol.CodeInternal, false},
		{"output too large", run{steps: []step{delta("0123456789")}, maxBytes: 4}, protocol.CodeOutputTooLarge, false},
		{"adapter panic", run{steps: []step{panics()}}, protocol.CodeInternal, false},
		{"refused before sending", run{steps: []step{fail(engine.NotSent(protocol.NewError(protocol.CodeUnsupportedCapability, "cannot encode")))}}, protocol.CodeUnsupportedCapability, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newScript(tt.run.steps...)
			started := make(chan struct{})
			var once sync.Once
			d := deployment("a", withAttemptTimeout(tt.run.timeout))
			h := newHarness(t, []routing.Deployment{d}, map[string]*script{"a": s}, func(c *engine.Config) {
				c.MaxOutputBytes = tt.run.maxBytes
				next := c.Providers["fake"].New
				c.Providers["fake"] = engine.Provider{New: func(d *routing.Deployment) (engine.Adapter, error) {
					once.Do(func() { close(started) })
					return next(d)
				}}
			})
			var opts []func(*protocol.Request)
			if tt.run.deadline > 0 {
				opts = append(opts, withDeadline(tt.run.deadline))
			}
			id := h.Submit(request(opts...)).ID
			if tt.run.act != nil {
				<-started
				if strings.Contains(tt.name, "after output") {
					h.waitFor(id, 3) // accepted, route.selected, the delta
				}
				tt.run.act(h, id)
			}
			e := terminalError(t, h.finish(id))
			if e.Code != tt.code || e.Retryable != tt.retryable {
				t.Errorf("terminal error %s retryable=%v (%s), want %s retryable=%v", e.Code, e.Retryable, e.Message, tt.code, tt.retryable)
			}
			if !e.Retryable && e.RetryAfterMs != 0 {
				t.Errorf("retry_after_ms %d on an error that is not retryable", e.RetryAfterMs)
			}
		})
	}
}

func shutdown(h *harness, _ string) {
	go func() { _ = h.Engine.Close() }()
}

// TestRefusalBeforeSendingFallsBack: an adapter that refuses the request before sending
// anything (or cannot be built) is not a provider failure: the next candidate runs, and
// with none left the refusal is the terminal error.
func TestRefusalBeforeSendingFallsBack(t *testing.T) {
	refusal := func() error {
		return engine.NotSent(protocol.NewError(protocol.CodeUnsupportedCapability, "the adapter cannot encode this part"))
	}
	t.Run("next candidate runs", func(t *testing.T) {
		a, b := newScript(fail(refusal())), newScript(delta("ok"))
		h := newHarness(t, []routing.Deployment{deployment("a", withPriority(1)), deployment("b")}, map[string]*script{"a": a, "b": b})
		evs := h.finish(h.Submit(request()).ID)
		want := []protocol.EventType{evAccepted, evSelected, evAttFailed, evSelected, evDelta, evCompleted}
		if diff := cmp.Diff(want, types(evs)); diff != "" {
			t.Fatalf("event types (-want +got):\n%s", diff)
		}
		if af := decode[protocol.AttemptFailedData](t, evs[2]); af.Error.Code != protocol.CodeUnsupportedCapability || af.Error.Retryable {
			t.Errorf("route.attempt_failed error %+v", af.Error)
		}
	})
	t.Run("an adapter that cannot be built", func(t *testing.T) {
		b := newScript(delta("ok"))
		// "missing" has no script, so its factory fails.
		h := newHarness(t, []routing.Deployment{deployment("missing", withPriority(1)), deployment("b")}, map[string]*script{"b": b})
		evs := h.finish(h.Submit(request()).ID)
		if last := evs[len(evs)-1]; last.Type != protocol.EventCompleted {
			t.Fatalf("last event %s %s, want execution.completed after falling back", last.Type, last.Data)
		}
	})
	t.Run("last candidate refuses", func(t *testing.T) {
		a, b := newScript(fail(refusal())), newScript(fail(refusal()))
		h := newHarness(t, []routing.Deployment{deployment("a", withPriority(1)), deployment("b")}, map[string]*script{"a": a, "b": b})
		e := terminalError(t, h.finish(h.Submit(request()).ID))
		if e.Code != protocol.CodeUnsupportedCapability || e.Retryable {
			t.Errorf("terminal error %+v, want unsupported_capability", e)
		}
	})
	t.Run("a refusal after output is terminal", func(t *testing.T) {
		a, b := newScript(delta("x"), fail(refusal())), newScript(delta("ok"))
		h := newHarness(t, []routing.Deployment{deployment("a", withPriority(1)), deployment("b")}, map[string]*script{"a": a, "b": b})
		h.finish(h.Submit(request()).ID)
		if n := b.callCount(); n != 0 {
			t.Errorf("second candidate called %d times after output", n)
		}
	})
}

// TestAdmission: routing asks each candidate's adapter whether it can encode the
// request; refused deployments are not eligible, and their adapters never run.
func TestAdmission(t *testing.T) {
	// A check may depend only on a deployment's provider, capabilities and parameters:
	// "a" differs from "b" by its parameters, which refuseOn("a", …) refuses.
	refuseOn := func(name string, code protocol.Code) engine.EncodeCheck {
		return func(_ *protocol.Request, d *routing.Deployment) *protocol.Error {
			if name == "*" || slices.Contains(d.Parameters, name) {
				return protocol.NewError(code, "the adapter cannot take audio by uri")
			}
			return nil
		}
	}
	withCheck := func(check engine.EncodeCheck) func(*engine.Config) {
		return func(c *engine.Config) {
			p := c.Providers["fake"]
			p.CanEncode = check
			c.Providers["fake"] = p
		}
	}
	two := []routing.Deployment{
		deployment("a", withPriority(1), func(d *routing.Deployment) { d.Parameters = []string{"a"} }),
		deployment("b"),
	}

	t.Run("refused deployment is skipped", func(t *testing.T) {
		a, b := newScript(delta("a")), newScript(delta("b"))
		h := newHarness(t, two, map[string]*script{"a": a, "b": b}, withCheck(refuseOn("a", protocol.CodeUnsupportedCapability)))
		evs := h.finish(h.Submit(request()).ID)
		if sel := decode[protocol.RouteSelectedData](t, evs[1]); sel.Deployment != "ai/b" {
			t.Errorf("routed to %s, want ai/b", sel.Deployment)
		}
		if n := a.callCount(); n != 0 {
			t.Errorf("refused adapter called %d times", n)
		}
	})
	t.Run("every deployment refuses: 422", func(t *testing.T) {
		h := newHarness(t, two, map[string]*script{}, withCheck(refuseOn("*", protocol.CodeUnsupportedCapability)))
		_, _, err := h.Engine.Submit(context.Background(), engine.Principal{}, request(), engine.Idempotency{})
		pe := protocolError(t, err, protocol.CodeUnsupportedCapability)
		if !strings.Contains(pe.Message, "cannot take audio by uri") {
			t.Errorf("message %q does not say why", pe.Message)
		}
	})
	t.Run("a parameter no deployment allows: 400", func(t *testing.T) {
		h := newHarness(t, two, map[string]*script{}, withCheck(refuseOn("*", protocol.CodeInvalidRequest)))
		_, _, err := h.Engine.Submit(context.Background(), engine.Principal{}, request(), engine.Idempotency{})
		protocolError(t, err, protocol.CodeInvalidRequest)
	})
	t.Run("unmet capabilities win over a refusal", func(t *testing.T) {
		h := newHarness(t, two, map[string]*script{}, withCheck(refuseOn("*", protocol.CodeInvalidRequest)))
		_, _, err := h.Engine.Submit(context.Background(), engine.Principal{}, request(func(r *protocol.Request) {
			r.Input = append(r.Input, protocol.Part{Type: protocol.PartImage, MediaType: "image/png", Data: "AAAA"})
		}), engine.Idempotency{})
		protocolError(t, err, protocol.CodeUnsupportedCapability)
	})
	t.Run("no adapter for the provider: not eligible", func(t *testing.T) {
		h := newHarness(t, []routing.Deployment{deployment("a", withProvider("nobody"))}, map[string]*script{})
		_, _, err := h.Engine.Submit(context.Background(), engine.Principal{}, request(), engine.Idempotency{})
		protocolError(t, err, protocol.CodeUnsupportedCapability)
	})
}

// TestOutputLimits: an execution past its event or output limit ends output_too_large,
// and nothing beyond the limit is stored.
func TestOutputLimits(t *testing.T) {
	deltas := func(n int, text string) []step {
		s := make([]step, n)
		for i := range s {
			s[i] = delta(text)
		}
		return s
	}
	t.Run("event limit", func(t *testing.T) {
		s := newScript(deltas(20, "x")...)
		h := newHarness(t, []routing.Deployment{deployment("a")}, map[string]*script{"a": s},
			func(c *engine.Config) { c.MaxEvents = 8 })
		evs := h.finish(h.Submit(request()).ID)
		if len(evs) != 8 {
			t.Errorf("%d events stored, want exactly the limit of 8", len(evs))
		}
		if e := terminalError(t, evs); e.Code != protocol.CodeOutputTooLarge || e.Retryable {
			t.Errorf("terminal error %+v", e)
		}
		if errs := s.emitErrors(); !slices.ContainsFunc(errs, func(err error) bool { return errors.Is(err, engine.ErrOutputTooLarge) }) {
			t.Errorf("the adapter was never told the limit was reached: %v", errs)
		}
	})
	t.Run("output byte limit", func(t *testing.T) {
		s := newScript(deltas(5, "1234")...)
		h := newHarness(t, []routing.Deployment{deployment("a")}, map[string]*script{"a": s},
			func(c *engine.Config) { c.MaxOutputBytes = 10 })
		evs := h.finish(h.Submit(request()).ID)
		snap := protocol.Materialize(evs[0].ExecutionID, evs)
		if got := snap.Output[0].Text; got != "12341234" {
			t.Errorf("stored output %q, want the two deltas within 10 bytes", got)
		}
		if e := terminalError(t, evs); e.Code != protocol.CodeOutputTooLarge {
			t.Errorf("terminal error %+v", e)
		}
	})
	t.Run("tool arguments and results count", func(t *testing.T) {
		s := newScript(
			emit(protocol.EventToolCallStarted, protocol.ToolCallStartedData{CallID: "c1", Name: "f"}),
			emit(protocol.EventToolCallArgsDelta, protocol.ToolCallArgsDeltaData{CallID: "c1", Delta: `{"a":1}`}),
			emit(protocol.EventOutputResult, protocol.OutputResultData{Result: []byte(`"0123456789"`)}),
		)
		h := newHarness(t, []routing.Deployment{deployment("a")}, map[string]*script{"a": s},
			func(c *engine.Config) { c.MaxOutputBytes = 12 })
		evs := h.finish(h.Submit(request()).ID)
		if e := terminalError(t, evs); e.Code != protocol.CodeOutputTooLarge {
			t.Errorf("terminal error %+v", e)
		}
		for _, ev := range evs {
			if ev.Type == protocol.EventOutputResult {
				t.Errorf("output.result stored past the limit: %s", ev.Data)
			}
		}
	})
	t.Run("a large delta is split, not refused", func(t *testing.T) {
		big := strings.Repeat("é\u0001", protocol.MaxEventBytes/2) // 3 bytes of text, up to 8 encoded
		s := newScript(delta(big))
		h := newHarness(t, []routing.Deployment{deployment("a")}, map[string]*script{"a": s})
		evs := h.finish(h.Submit(request()).ID)
		pieces := 0
		for _, ev := range evs {
			if len(ev.Data) > protocol.MaxEventBytes {
				t.Errorf("event %d has %d bytes of data, over the %d limit", ev.Sequence, len(ev.Data), protocol.MaxEventBytes)
			}
			if ev.Type == protocol.EventOutputDelta {
				pieces++
			}
		}
		if pieces < 2 {
			t.Errorf("%d delta events, want the delta split", pieces)
		}
		if snap := protocol.Materialize(evs[0].ExecutionID, evs); snap.Output[0].Text != big {
			t.Error("the split pieces do not concatenate back to the delta")
		}
		if last := evs[len(evs)-1]; last.Type != protocol.EventCompleted {
			t.Errorf("last event %s %s", last.Type, last.Data)
		}
	})
	t.Run("an event that cannot be split is refused", func(t *testing.T) {
		result := []byte(`"` + strings.Repeat("r", protocol.MaxEventBytes) + `"`)
		s := newScript(emit(protocol.EventOutputResult, protocol.OutputResultData{Result: result}))
		h := newHarness(t, []routing.Deployment{deployment("a")}, map[string]*script{"a": s})
		evs := h.finish(h.Submit(request()).ID)
		if e := terminalError(t, evs); e.Code != protocol.CodeOutputTooLarge {
			t.Errorf("terminal error %+v", e)
		}
		if len(evs) != 3 {
			t.Errorf("%d events, want accepted, route.selected and the terminal event", len(evs))
		}
	})
	t.Run("no room for the next attempt", func(t *testing.T) {
		a := newScript(fail(protocol.NewError(protocol.CodeProviderUnavailable, "down")))
		b := newScript(delta("ok"))
		// accepted, route.selected, route.attempt_failed leave one event: the terminal.
		h := newHarness(t, []routing.Deployment{deployment("a", withPriority(1)), deployment("b")},
			map[string]*script{"a": a, "b": b}, func(c *engine.Config) { c.MaxEvents = 4 })
		evs := h.finish(h.Submit(request()).ID)
		if len(evs) > 4 {
			t.Errorf("%d events, over the limit of 4", len(evs))
		}
		if e := terminalError(t, evs); e.Code != protocol.CodeOutputTooLarge {
			t.Errorf("terminal error %+v", e)
		}
	})
}

// TestAttemptsUseTheRoutedSnapshot: an execution uses the routing table it was routed
// with from start to finish, the credential included: a credential rotated while it
// runs is used by the executions routed after the rotation, not by this one's fallback.
func TestAttemptsUseTheRoutedSnapshot(t *testing.T) {
	step, release := block(t)
	a := newScript(step, fail(protocol.NewError(protocol.CodeProviderUnavailable, "down")))
	b := newScript(delta("ok"))
	withCred := func(v, version string) func(*routing.Deployment) {
		return func(d *routing.Deployment) { d.Credential, d.CredentialsVersion = routing.NewCredential(v), version }
	}
	da, db := deployment("a", withPriority(1)), deployment("b", withCred("old-key", "v1"))

	var (
		mu   sync.Mutex
		seen []string // the credentials b's attempts were built with, in order
	)
	h := newHarness(t, []routing.Deployment{da, db}, map[string]*script{"a": a, "b": b}, func(c *engine.Config) {
		next := c.Providers["fake"].New
		c.Providers["fake"] = engine.Provider{New: func(d *routing.Deployment) (engine.Adapter, error) {
			if d.Ref.Name == "b" {
				mu.Lock()
				seen = append(seen, d.Credential.Reveal())
				mu.Unlock()
			}
			return next(d)
		}}
	})
	id := h.Submit(request()).ID
	h.waitFor(id, 2) // route.selected of the first attempt: the route is taken
	rotated := deployment("b", withCred("new-key", "v2"))
	h.Table.Store(routing.NewTable([]routing.Deployment{da, rotated}))
	release()
	h.finish(id)
	h.finish(h.Submit(request()).ID)
	mu.Lock()
	defer mu.Unlock()
	if want := []string{"old-key", "new-key"}; !slices.Equal(seen, want) {
		t.Errorf("b's attempts used credentials %q, want %q: the routed snapshot's, then the rotated one", seen, want)
	}
}
