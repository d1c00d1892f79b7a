package anthropic_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/switchboard-dev/switchboard/runtime/engine/enginetest"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
)

// Replay tests: each upstream answers with one of Anthropic's documented stream examples
// (testdata/*.sse, ids adapted), and the test asserts the exact event data the adapter
// emitted and the snapshot those events materialize to.

func TestStreamText(t *testing.T) {
	up := newUpstream(t, http.StatusOK, "stream_text.sse", "request-id", "req_01SwbdStreamText000001")
	d := deployment(up.URL, streaming)
	res := run(t, d, hello(t))
	if res.err != nil {
		t.Fatalf("Execute: %v", res.err)
	}

	diffEvents(t, res.events, []enginetest.Emitted{
		enginetest.TextDelta("Hello"),
		enginetest.TextDelta("!"),
		enginetest.UsageReported(enginetest.ProviderUsage(protocol.UnitInputTokens, 25), enginetest.ProviderUsage(protocol.UnitOutputTokens, 15)),
	})
	diffSnapshot(t, materialize(t, res), protocol.Snapshot{
		ID:           "exe_test",
		Status:       protocol.StatusCompleted,
		Sequence:     6,
		Output:       []protocol.OutputPart{{Index: 0, Type: "text", Text: "Hello!"}},
		ToolCalls:    []protocol.ToolCall{},
		Artifacts:    []protocol.Artifact{},
		Usage:        []protocol.Usage{enginetest.ProviderUsage(protocol.UnitInputTokens, 25), enginetest.ProviderUsage(protocol.UnitOutputTokens, 15)},
		FinishReason: "end_turn",
	})

	c := up.only(t)
	checkCredentialPlacement(t, c)
	if c.Method != http.MethodPost || c.Path != "/v1/messages" {
		t.Errorf("request = %s %s, want POST /v1/messages", c.Method, c.Path)
	}
	for k, want := range map[string]string{
		"anthropic-version": "2023-06-01",
		"content-type":      "application/json",
		"accept":            "text/event-stream",
	} {
		if got := c.Header.Get(k); got != want {
			t.Errorf("header %s = %q, want %q", k, got, want)
		}
	}
	jsonEqual(t, c.Body, `{
		"model": "claude-sonnet-4-5",
		"max_tokens": 4096,
		"messages": [{"role": "user", "content": [{"type": "text", "text": "Hello"}]}],
		"stream": true
	}`)
}

func TestStreamToolUse(t *testing.T) {
	up := newUpstream(t, http.StatusOK, "stream_tool_use.sse")
	d := deployment(up.URL, streaming, withCaps(protocol.CapTools))
	req := decode(t, `{"ability":"chat","input":[
		{"type":"text","text":"What is the weather like in San Francisco?"},
		{"type":"tool","name":"get_weather","description":"Get the current weather in a given location",
		 "parameters":{"type":"object","properties":{"location":{"type":"string"}},"required":["location"]}}
	]}`)
	res := run(t, d, req)
	if res.err != nil {
		t.Fatalf("Execute: %v", res.err)
	}

	const id = "toolu_01SwbdWeatherCall0001"
	var want []enginetest.Emitted
	for _, s := range []string{"Okay", ",", " let", "'s", " check", " the", " weather", " for", " San", " Francisco", ",", " CA", ":"} {
		want = append(want, enginetest.TextDelta(s))
	}
	want = append(want, enginetest.ToolStarted(0, id, "get_weather"))
	// The documented stream opens with an empty fragment; it carries nothing and is skipped.
	for _, s := range []string{`{"location":`, ` "San`, ` Francisc`, `o,`, ` CA"`, `, `, `"unit": "fah`, `renheit"}`} {
		want = append(want, enginetest.ArgsDelta(id, s))
	}
	want = append(want, enginetest.UsageReported(enginetest.ProviderUsage(protocol.UnitInputTokens, 472), enginetest.ProviderUsage(protocol.UnitOutputTokens, 89)))
	diffEvents(t, res.events, want)

	diffSnapshot(t, materialize(t, res), protocol.Snapshot{
		ID:        "exe_test",
		Status:    protocol.StatusCompleted,
		Sequence:  uint64(2 + len(want) + 1),
		Output:    []protocol.OutputPart{{Index: 0, Type: "text", Text: "Okay, let's check the weather for San Francisco, CA:"}},
		ToolCalls: []protocol.ToolCall{{Index: 0, CallID: id, Name: "get_weather", Arguments: `{"location": "San Francisco, CA", "unit": "fahrenheit"}`}},
		Artifacts: []protocol.Artifact{},
		Usage:     []protocol.Usage{enginetest.ProviderUsage(protocol.UnitInputTokens, 472), enginetest.ProviderUsage(protocol.UnitOutputTokens, 89)},
		// tool_use is the provider's stop reason, passed through as it is.
		FinishReason: "tool_use",
	})
	checkCredentialPlacement(t, up.only(t))
}

func TestStreamToolWithoutInput(t *testing.T) {
	up := newUpstream(t, http.StatusOK, "stream_tool_no_input.sse")
	d := deployment(up.URL, streaming, withCaps(protocol.CapTools))
	req := decode(t, `{"ability":"chat","input":[
		{"type":"text","text":"What time is it?"},
		{"type":"tool","name":"get_time","parameters":{"type":"object"}}
	]}`)
	res := run(t, d, req)
	if res.err != nil {
		t.Fatalf("Execute: %v", res.err)
	}
	const id = "toolu_01SwbdGetTimeCall00001"
	// No fragment arrived, so the arguments are the empty object the block opened with.
	diffEvents(t, res.events, []enginetest.Emitted{
		enginetest.ToolStarted(0, id, "get_time"),
		enginetest.ArgsDelta(id, "{}"),
		enginetest.UsageReported(enginetest.ProviderUsage(protocol.UnitInputTokens, 310), enginetest.ProviderUsage(protocol.UnitOutputTokens, 31)),
	})
}

func TestStreamUsageWithCache(t *testing.T) {
	up := newUpstream(t, http.StatusOK, "stream_cache_usage.sse")
	d := deployment(up.URL, streaming)
	res := run(t, d, hello(t))
	if res.err != nil {
		t.Fatalf("Execute: %v", res.err)
	}
	// message_start reported output 3 and cache reads 0; message_delta's cumulative
	// values replace them, and exactly one usage.reported follows message_stop.
	wantUsage := []protocol.Usage{
		enginetest.ProviderUsage(protocol.UnitInputTokens, 21),
		enginetest.ProviderUsage(protocol.UnitOutputTokens, 393),
		enginetest.ProviderUsage(protocol.UnitCacheReadTokens, 2048),
		enginetest.ProviderUsage(protocol.UnitCacheWriteTokens, 188086),
	}
	diffEvents(t, res.events, []enginetest.Emitted{
		enginetest.TextDelta("The major themes"),
		enginetest.TextDelta(" are pride and prejudice."),
		enginetest.UsageReported(wantUsage...),
	})
	diffSnapshot(t, materialize(t, res), protocol.Snapshot{
		ID:           "exe_test",
		Status:       protocol.StatusCompleted,
		Sequence:     6,
		Output:       []protocol.OutputPart{{Index: 0, Type: "text", Text: "The major themes are pride and prejudice."}},
		ToolCalls:    []protocol.ToolCall{},
		Artifacts:    []protocol.Artifact{},
		Usage:        wantUsage,
		FinishReason: "end_turn",
	})
}

func TestStreamRefusal(t *testing.T) {
	up := newUpstream(t, http.StatusOK, "stream_refusal.sse", "request-id", "req_01SwbdRefusal000000001")
	res := run(t, deployment(up.URL, streaming), hello(t))

	diffEvents(t, res.events, []enginetest.Emitted{
		enginetest.TextDelta("I can"),
		enginetest.UsageReported(enginetest.ProviderUsage(protocol.UnitInputTokens, 25), enginetest.ProviderUsage(protocol.UnitOutputTokens, 2)),
	})
	got := asError(t, res.err)
	want := &protocol.Error{
		Code:      protocol.CodeContentFiltered,
		Message:   got.Message,
		Retryable: false,
		ProviderError: &protocol.ProviderError{
			Provider: "anthropic", Code: "refusal", RequestID: "req_01SwbdRefusal000000001",
		},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("error mismatch (-want +got):\n%s", d)
	}
	snap := materialize(t, res)
	if snap.Status != protocol.StatusFailed || snap.Error == nil || snap.Error.Code != protocol.CodeContentFiltered {
		t.Errorf("snapshot status %s error %+v, want failed content_filtered", snap.Status, snap.Error)
	}
	if len(snap.Output) != 1 || snap.Output[0].Text != "I can" {
		t.Errorf("snapshot output = %+v, want the partial text kept", snap.Output)
	}
}

func TestStreamErrorEvent(t *testing.T) {
	for _, tc := range []struct {
		name          string
		file          string
		events        []enginetest.Emitted
		wantRetryable bool
	}{
		// Before any output the engine may fall back to another deployment.
		{name: "before output", file: "stream_overloaded.sse", wantRetryable: true},
		// After output the failure is terminal, and the flag says so (as for truncation).
		{name: "after output", file: "stream_overloaded_after_output.sse", events: []enginetest.Emitted{enginetest.TextDelta("Hello")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up := newUpstream(t, http.StatusOK, tc.file, "request-id", "req_01SwbdOverloaded000001")
			res := run(t, deployment(up.URL, streaming), hello(t))
			diffEvents(t, res.events, tc.events)
			got := asError(t, res.err)
			want := &protocol.Error{
				Code:      protocol.CodeProviderUnavailable,
				Message:   got.Message,
				Retryable: tc.wantRetryable,
				ProviderError: &protocol.ProviderError{
					Provider: "anthropic", Type: "overloaded_error", RequestID: "req_01SwbdOverloaded000001",
				},
			}
			if d := cmp.Diff(want, got); d != "" {
				t.Errorf("error mismatch (-want +got):\n%s", d)
			}
			if got.Message == "" {
				t.Error("error has no message")
			}
		})
	}
}

func TestStreamTruncated(t *testing.T) {
	for _, tc := range []struct {
		name          string
		file          string
		events        []enginetest.Emitted
		wantRetryable bool
	}{
		{name: "before output", file: "stream_truncated_before_output.sse", wantRetryable: true},
		// The file is also cut mid-frame: the incomplete frame is discarded, not applied.
		{name: "after output", file: "stream_truncated_after_output.sse", events: []enginetest.Emitted{enginetest.TextDelta("Hello")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up := newUpstream(t, http.StatusOK, tc.file)
			res := run(t, deployment(up.URL, streaming), hello(t))
			diffEvents(t, res.events, tc.events)
			got := asError(t, res.err)
			if got.Code != protocol.CodeProviderUnavailable || got.Retryable != tc.wantRetryable {
				t.Errorf("error = %s retryable %v, want provider_unavailable retryable %v", got.Code, got.Retryable, tc.wantRetryable)
			}
			if got.ProviderError == nil || got.ProviderError.Provider != "anthropic" {
				t.Errorf("provider_error = %+v, want provider anthropic", got.ProviderError)
			}
			// No usage.reported: the terminal marker never came.
			for _, e := range res.events {
				if e.Type == protocol.EventUsageReported {
					t.Error("usage reported for a truncated stream")
				}
			}
		})
	}
}

func TestStreamStalled(t *testing.T) {
	up := newUpstream(t, http.StatusOK, "")
	release := make(chan struct{})
	t.Cleanup(func() { close(release) }) // runs before the server closes
	up.handler = func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte("event: message_start\n" +
			`data: {"type": "message_start", "message": {"id": "msg_01SwbdStalled0000000001", "type": "message", "role": "assistant", "content": [], "model": "claude-sonnet-4-5-20250929", "stop_reason": null, "stop_sequence": null, "usage": {"input_tokens": 25, "output_tokens": 1}}}` + "\n\n" +
			"event: content_block_start\n" +
			`data: {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}` + "\n\n" +
			"event: content_block_delta\n" +
			`data: {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hello"}}` + "\n\n"))
		http.NewResponseController(w).Flush()
		select { // stall: no more bytes, connection kept open
		case <-r.Context().Done():
		case <-release:
		}
	}

	const deadline = 300 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	res := runCtx(t, ctx, deployment(up.URL, streaming), hello(t))

	diffEvents(t, res.events, []enginetest.Emitted{enginetest.TextDelta("Hello")})
	got := asError(t, res.err)
	if got.Code != protocol.CodeProviderTimeout {
		t.Errorf("error code = %s, want provider_timeout", got.Code)
	}
	// Generous: the point is that Execute returns once the deadline passes instead of
	// waiting for a provider that never finishes.
	if res.elapsed > deadline+5*time.Second {
		t.Errorf("Execute returned after %v, long after the %v deadline", res.elapsed, deadline)
	}
}

func TestNonStreaming(t *testing.T) {
	t.Run("text", func(t *testing.T) {
		up := newUpstream(t, http.StatusOK, "message_text.json")
		res := run(t, deployment(up.URL), hello(t))
		if res.err != nil {
			t.Fatalf("Execute: %v", res.err)
		}
		diffEvents(t, res.events, []enginetest.Emitted{
			enginetest.TextDelta("Hi! My name is Claude."),
			enginetest.UsageReported(enginetest.ProviderUsage(protocol.UnitInputTokens, 2095), enginetest.ProviderUsage(protocol.UnitOutputTokens, 503)),
		})
		diffSnapshot(t, materialize(t, res), protocol.Snapshot{
			ID:           "exe_test",
			Status:       protocol.StatusCompleted,
			Sequence:     5,
			Output:       []protocol.OutputPart{{Index: 0, Type: "text", Text: "Hi! My name is Claude."}},
			ToolCalls:    []protocol.ToolCall{},
			Artifacts:    []protocol.Artifact{},
			Usage:        []protocol.Usage{enginetest.ProviderUsage(protocol.UnitInputTokens, 2095), enginetest.ProviderUsage(protocol.UnitOutputTokens, 503)},
			FinishReason: "end_turn",
		})
		c := up.only(t)
		checkCredentialPlacement(t, c)
		if got := c.Header.Get("accept"); got != "application/json" {
			t.Errorf("accept = %q, want application/json", got)
		}
		// No "stream" member: the deployment does not declare streaming.
		jsonEqual(t, c.Body, `{
			"model": "claude-sonnet-4-5",
			"max_tokens": 4096,
			"messages": [{"role": "user", "content": [{"type": "text", "text": "Hello"}]}]
		}`)
	})

	t.Run("tool use", func(t *testing.T) {
		up := newUpstream(t, http.StatusOK, "message_tool_use.json")
		d := deployment(up.URL, withCaps(protocol.CapTools))
		req := decode(t, `{"ability":"chat","input":[
			{"type":"text","text":"What is the weather like in San Francisco?"},
			{"type":"tool","name":"get_weather","parameters":{"type":"object"}}
		]}`)
		res := run(t, d, req)
		if res.err != nil {
			t.Fatalf("Execute: %v", res.err)
		}
		const id = "toolu_01SwbdWeatherCall0002"
		diffEvents(t, res.events, []enginetest.Emitted{
			enginetest.TextDelta("I'll check the current weather in San Francisco for you."),
			enginetest.ToolStarted(0, id, "get_weather"),
			enginetest.ArgsDelta(id, `{"location":"San Francisco, CA","unit":"celsius"}`),
			enginetest.UsageReported(enginetest.ProviderUsage(protocol.UnitInputTokens, 384), enginetest.ProviderUsage(protocol.UnitOutputTokens, 77)),
		})
		diffSnapshot(t, materialize(t, res), protocol.Snapshot{
			ID:           "exe_test",
			Status:       protocol.StatusCompleted,
			Sequence:     7,
			Output:       []protocol.OutputPart{{Index: 0, Type: "text", Text: "I'll check the current weather in San Francisco for you."}},
			ToolCalls:    []protocol.ToolCall{{Index: 0, CallID: id, Name: "get_weather", Arguments: `{"location":"San Francisco, CA","unit":"celsius"}`}},
			Artifacts:    []protocol.Artifact{},
			Usage:        []protocol.Usage{enginetest.ProviderUsage(protocol.UnitInputTokens, 384), enginetest.ProviderUsage(protocol.UnitOutputTokens, 77)},
			FinishReason: "tool_use",
		})
	})

	t.Run("unreadable body", func(t *testing.T) {
		up := newUpstream(t, http.StatusOK, "stream_text.sse") // an SSE body where JSON is expected
		res := run(t, deployment(up.URL), hello(t))
		diffEvents(t, res.events, nil)
		got := asError(t, res.err)
		if got.Code != protocol.CodeProviderUnavailable || !got.Retryable {
			t.Errorf("error = %s retryable %v, want provider_unavailable retryable", got.Code, got.Retryable)
		}
	})
}
