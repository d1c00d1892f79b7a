package anthropic

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	sdk "github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/google/go-cmp/cmp"

	"github.com/switchboard-dev/switchboard/runtime/protocol"
)

// events numbers data into an execution's log: each item is a type and its data.
func events(items ...any) []protocol.Event {
	var out []protocol.Event
	for i := 0; i+1 < len(items); i += 2 {
		data, err := json.Marshal(items[i+1])
		if err != nil {
			panic(err)
		}
		out = append(out, protocol.Event{ExecutionID: "exe_1", Sequence: uint64(len(out) + 1), Type: items[i].(protocol.EventType), Data: data})
	}
	return out
}

func selected(model string) (protocol.EventType, any) {
	return protocol.EventRouteSelected, protocol.RouteSelectedData{Attempt: 1, Deployment: "ai/x", Provider: "anthropic", Model: model}
}

func text(index int, s string) (protocol.EventType, any) {
	return protocol.EventOutputDelta, protocol.OutputDeltaData{Index: index, Type: "text", Text: s}
}

func started(id, name string) (protocol.EventType, any) {
	return protocol.EventToolCallStarted, protocol.ToolCallStartedData{CallID: id, Name: name}
}

func args(id, delta string) (protocol.EventType, any) {
	return protocol.EventToolCallArgsDelta, protocol.ToolCallArgsDeltaData{CallID: id, Delta: delta}
}

func usage(source string, units ...any) (protocol.EventType, any) {
	var u []protocol.Usage
	for i := 0; i+1 < len(units); i += 2 {
		u = append(u, protocol.Usage{Unit: units[i].(string), Quantity: units[i+1].(float64), Source: source})
	}
	return protocol.EventUsageReported, protocol.UsageReportedData{Usage: u}
}

func completed(reason string) (protocol.EventType, any) {
	return protocol.EventCompleted, protocol.CompletedData{FinishReason: reason}
}

func failed(code protocol.Code, msg string) (protocol.EventType, any) {
	return protocol.EventFailed, protocol.FailedData{Error: protocol.NewError(code, msg)}
}

func flat(pairs ...func() (protocol.EventType, any)) []any {
	var out []any
	for _, p := range pairs {
		t, d := p()
		out = append(out, t, d)
	}
	return out
}

// fold runs the events through a projection and returns it with the frames it wrote.
func fold(t *testing.T, evs []protocol.Event, stream bool) (*projection, []byte) {
	t.Helper()
	p := newProjection("exe_1", "chat", stream)
	var out []byte
	for i := range evs {
		var err error
		if out, err = p.apply(&evs[i], out); err != nil {
			t.Fatalf("apply %s: %v", evs[i].Type, err)
		}
	}
	return p, out
}

// sseFrame is one parsed frame.
type sseFrame struct{ event, data string }

func frames(t *testing.T, stream []byte) []sseFrame {
	t.Helper()
	var out []sseFrame
	for _, raw := range strings.Split(strings.TrimSuffix(string(stream), "\n\n"), "\n\n") {
		if raw == "" {
			continue
		}
		event, data, ok := strings.Cut(raw, "\ndata: ")
		if !ok || !strings.HasPrefix(event, "event: ") || strings.Contains(data, "\n") {
			t.Fatalf("malformed frame %q", raw)
		}
		if !json.Valid([]byte(data)) {
			t.Fatalf("frame data is not JSON: %s", data)
		}
		out = append(out, sseFrame{strings.TrimPrefix(event, "event: "), data})
	}
	return out
}

// accumulate is what the official Go SDK makes of a stream: Message.Accumulate over its
// events, as a client that streams does.
func accumulate(t *testing.T, stream []byte) sdk.Message {
	t.Helper()
	var m sdk.Message
	for _, f := range frames(t, stream) {
		var ev sdk.MessageStreamEventUnion
		if err := json.Unmarshal([]byte(f.data), &ev); err != nil {
			t.Fatalf("SDK decode of %s: %v", f.data, err)
		}
		if ev.Type != f.event {
			t.Errorf("frame named %s carries %s", f.event, ev.Type)
		}
		if err := m.Accumulate(ev); err != nil {
			t.Fatalf("SDK accumulate: %v", err)
		}
	}
	return m
}

// summary is what a client reads of a message.
type summary struct {
	ID, Model, Role, Type, StopReason, StopSequence string
	Usage                                           [4]int64
	Content                                         []blockSummary
}

type blockSummary struct{ Type, Text, ID, Name, Input string }

func summarize(m sdk.Message) summary {
	s := summary{ID: m.ID, Model: m.Model, Role: string(m.Role), Type: string(m.Type),
		StopReason: string(m.StopReason), StopSequence: m.StopSequence,
		Usage: [4]int64{m.Usage.InputTokens, m.Usage.OutputTokens, m.Usage.CacheReadInputTokens, m.Usage.CacheCreationInputTokens}}
	for _, b := range m.Content {
		var input bytes.Buffer
		if len(b.Input) > 0 {
			_ = json.Compact(&input, b.Input)
		}
		s.Content = append(s.Content, blockSummary{b.Type, b.Text, b.ID, b.Name, input.String()})
	}
	return s
}

// TestProjection: the non-streamed message, and that the official SDK accumulates the
// stream of the same events into the same message.
func TestProjection(t *testing.T) {
	for _, tc := range []struct {
		name   string
		events []protocol.Event
		want   string // the non-streamed message
	}{
		{
			name: "text",
			events: events(flat(
				func() (protocol.EventType, any) { return selected("claude-sonnet-4-5") },
				func() (protocol.EventType, any) { return text(0, "Hel") },
				func() (protocol.EventType, any) { return text(0, "") },
				func() (protocol.EventType, any) { return text(0, "lo \"<b>\"") },
				func() (protocol.EventType, any) {
					return usage("provider", "input_tokens", 12.0, "output_tokens", 3.0, "cache_read_tokens", 4.0, "cache_write_tokens", 5.0)
				},
				func() (protocol.EventType, any) { return completed("end_turn") },
			)...),
			want: `{"id":"exe_1","type":"message","role":"assistant","model":"claude-sonnet-4-5",
				"content":[{"type":"text","text":"Hello \"<b>\""}],"stop_reason":"end_turn","stop_sequence":null,"stop_details":null,
				"usage":{"input_tokens":12,"cache_creation_input_tokens":5,"cache_read_input_tokens":4,"output_tokens":3}}`,
		},
		{
			name: "a provider that counts cached input in input_tokens",
			events: events(flat(
				func() (protocol.EventType, any) {
					return protocol.EventRouteSelected, protocol.RouteSelectedData{Attempt: 1, Deployment: "ai/gpt", Provider: "openai", Model: "gpt-x"}
				},
				func() (protocol.EventType, any) { return text(0, "Hi") },
				func() (protocol.EventType, any) {
					return usage("provider", "input_tokens", 100.0, "cache_read_tokens", 60.0, "output_tokens", 2.0)
				},
				func() (protocol.EventType, any) { return completed("stop") },
			)...),
			want: `{"id":"exe_1","type":"message","role":"assistant","model":"gpt-x",
				"content":[{"type":"text","text":"Hi"}],"stop_reason":"end_turn","stop_sequence":null,"stop_details":null,
				"usage":{"input_tokens":40,"cache_creation_input_tokens":0,"cache_read_input_tokens":60,"output_tokens":2}}`,
		},
		{
			name: "text then tool calls, fallback after a failed attempt",
			events: events(flat(
				func() (protocol.EventType, any) { return selected("gpt-x") },
				func() (protocol.EventType, any) { return usage("provider", "input_tokens", 99.0) },
				func() (protocol.EventType, any) {
					return protocol.EventAttemptFailed, protocol.AttemptFailedData{Attempt: 1, Deployment: "ai/x", Error: protocol.NewError(protocol.CodeProviderUnavailable, "the provider is unavailable")}
				},
				func() (protocol.EventType, any) { return selected("echo") },
				func() (protocol.EventType, any) { return text(0, "Checking.") },
				func() (protocol.EventType, any) { return started("call_1", "get_weather") },
				func() (protocol.EventType, any) { return args("call_1", `{"city"`) },
				func() (protocol.EventType, any) { return args("call_1", `: "Paris"}`) },
				func() (protocol.EventType, any) { return started("call_2", "get_time") },
				func() (protocol.EventType, any) { return usage("runtime", "input_tokens", 7.0, "requests", 1.0) },
				func() (protocol.EventType, any) { return completed("tool_calls") },
			)...),
			want: `{"id":"exe_1","type":"message","role":"assistant","model":"echo",
				"content":[{"type":"text","text":"Checking."},
					{"type":"tool_use","id":"call_1","name":"get_weather","input":{"city":"Paris"}},
					{"type":"tool_use","id":"call_2","name":"get_time","input":{}}],
				"stop_reason":"tool_use","stop_sequence":null,"stop_details":null,
				"usage":{"input_tokens":7,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":0}}`,
		},
		{
			name: "interleaved output keeps each block's index",
			events: events(flat(
				func() (protocol.EventType, any) { return args("call_b", `{"b":`) }, // before its start
				func() (protocol.EventType, any) { return started("call_a", "a") },
				func() (protocol.EventType, any) { return started("call_b", "b") },
				func() (protocol.EventType, any) { return args("call_a", `{"a":1}`) },
				func() (protocol.EventType, any) { return args("call_b", `2}`) },
				func() (protocol.EventType, any) { return text(1, "after") },
				func() (protocol.EventType, any) { return completed("") },
			)...),
			want: `{"id":"exe_1","type":"message","role":"assistant","model":"chat",
				"content":[{"type":"tool_use","id":"call_a","name":"a","input":{"a":1}},
					{"type":"tool_use","id":"call_b","name":"b","input":{"b":2}},
					{"type":"text","text":"after"}],
				"stop_reason":"tool_use","stop_sequence":null,"stop_details":null,
				"usage":{"input_tokens":0,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":0}}`,
		},
		{
			name: "text after a finished block opens a new text block",
			events: events(flat(
				func() (protocol.EventType, any) { return text(0, "Let me check. ") },
				func() (protocol.EventType, any) { return started("c", "t") },
				func() (protocol.EventType, any) { return args("c", `{}`) },
				func() (protocol.EventType, any) { return text(0, "Done.") },
				func() (protocol.EventType, any) { return completed("stop") },
			)...),
			want: `{"id":"exe_1","type":"message","role":"assistant","model":"chat",
				"content":[{"type":"text","text":"Let me check. "},{"type":"tool_use","id":"c","name":"t","input":{}},{"type":"text","text":"Done."}],
				"stop_reason":"tool_use","stop_sequence":null,"stop_details":null,
				"usage":{"input_tokens":0,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":0}}`,
		},
		{
			name: "a refusal is an answer",
			events: events(flat(
				func() (protocol.EventType, any) { return text(0, "I can") },
				func() (protocol.EventType, any) {
					return failed(protocol.CodeContentFiltered, "the provider filtered the content")
				},
			)...),
			want: `{"id":"exe_1","type":"message","role":"assistant","model":"chat",
				"content":[{"type":"text","text":"I can"}],"stop_reason":"refusal","stop_sequence":null,"stop_details":null,
				"usage":{"input_tokens":0,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":0}}`,
		},
		{
			name: "an async result is a text block of its JSON, arguments that are no object an empty input",
			events: events(flat(
				func() (protocol.EventType, any) {
					return protocol.EventOutputResult, protocol.OutputResultData{Result: json.RawMessage(`{ "url" : "https://x/a.png" }`), Artifacts: []protocol.Artifact{}}
				},
				func() (protocol.EventType, any) { return started("c", "t") },
				func() (protocol.EventType, any) { return args("c", `[1`) },
				func() (protocol.EventType, any) { return completed("length") },
			)...),
			want: `{"id":"exe_1","type":"message","role":"assistant","model":"chat",
				"content":[{"type":"text","text":"{\"url\":\"https://x/a.png\"}"},{"type":"tool_use","id":"c","name":"t","input":{}}],
				"stop_reason":"max_tokens","stop_sequence":null,"stop_details":null,
				"usage":{"input_tokens":0,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":0}}`,
		},
		{
			name:   "no output",
			events: events(flat(func() (protocol.EventType, any) { return completed("STOP") })...),
			want: `{"id":"exe_1","type":"message","role":"assistant","model":"chat","content":[],"stop_reason":"end_turn",
				"stop_sequence":null,"stop_details":null,"usage":{"input_tokens":0,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":0}}`,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			whole, none := fold(t, tc.events, false)
			if len(none) != 0 {
				t.Errorf("a non-streamed fold wrote frames: %s", none)
			}
			if whole.failure != nil {
				t.Fatalf("failure = %v", whole.failure)
			}
			body := whole.appendMessage(nil)
			if diff := cmp.Diff(parse(t, tc.want), parse(t, string(body))); diff != "" {
				t.Errorf("message (-want +got):\n%s", diff)
			}
			_, stream := fold(t, tc.events, true)
			var want sdk.Message
			if err := json.Unmarshal(body, &want); err != nil {
				t.Fatal(err)
			}
			got := accumulate(t, stream)
			if diff := cmp.Diff(summarize(want), summarize(got)); diff != "" {
				t.Errorf("the SDK's accumulated stream differs from the message (-message +stream):\n%s\nstream:\n%s", diff, stream)
			}
			fs := frames(t, stream)
			if fs[0].event != "message_start" || fs[len(fs)-2].event != "message_delta" || fs[len(fs)-1].event != "message_stop" {
				t.Errorf("stream does not run message_start … message_delta, message_stop:\n%s", stream)
			}
		})
	}
}

// TestStreamShape: Claude streams one block at a time — start, deltas, stop — and the
// frames are exactly Anthropic's.
func TestStreamShape(t *testing.T) {
	evs := events(flat(
		func() (protocol.EventType, any) { return selected("claude-x") },
		func() (protocol.EventType, any) { return text(0, "Hi") },
		func() (protocol.EventType, any) { return started("toolu_1", "get") },
		func() (protocol.EventType, any) { return args("toolu_1", `{"a":"\n"}`) },
		func() (protocol.EventType, any) { return usage("provider", "input_tokens", 3.0, "output_tokens", 2.0) },
		func() (protocol.EventType, any) { return completed("tool_use") },
	)...)
	_, stream := fold(t, evs, true)
	want := `event: message_start
data: {"type":"message_start","message":{"id":"exe_1","type":"message","role":"assistant","model":"claude-x","content":[],"stop_reason":null,"stop_sequence":null,"stop_details":null,"usage":{"input_tokens":0,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":0}}}

event: content_block_start
data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hi"}}

event: content_block_stop
data: {"type":"content_block_stop","index":0}

event: content_block_start
data: {"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_1","name":"get","input":{}}}

event: content_block_delta
data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"a\":\"\\n\"}"}}

event: content_block_stop
data: {"type":"content_block_stop","index":1}

event: message_delta
data: {"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null,"stop_details":null},"usage":{"input_tokens":3,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":2}}

event: message_stop
data: {"type":"message_stop"}

`
	if diff := cmp.Diff(want, string(stream)); diff != "" {
		t.Errorf("stream (-want +got):\n%s", diff)
	}
}

// TestStreamFailure: a failure before any output writes nothing (the handler answers an
// HTTP error); after output it is one error event, and no message_stop follows.
func TestStreamFailure(t *testing.T) {
	early := events(flat(
		func() (protocol.EventType, any) { return selected("x") },
		func() (protocol.EventType, any) {
			return protocol.EventFailed, protocol.FailedData{Error: &protocol.Error{Code: protocol.CodeRateLimited, Message: "the provider is rate limiting", Retryable: true, RetryAfterMs: 1500}}
		},
	)...)
	p, stream := fold(t, early, true)
	if len(stream) != 0 || p.failure == nil || p.failure.Code != protocol.CodeRateLimited {
		t.Errorf("early failure: frames %q, failure %v", stream, p.failure)
	}

	late := events(flat(
		func() (protocol.EventType, any) { return text(0, "par") },
		func() (protocol.EventType, any) {
			return protocol.EventFailed, protocol.FailedData{Error: &protocol.Error{Code: protocol.CodeProviderUnavailable, Message: "the provider's stream was cut", Retryable: false}}
		},
	)...)
	p, stream = fold(t, late, true)
	fs := frames(t, stream)
	last := fs[len(fs)-1]
	if last.event != "error" || p.failure == nil {
		t.Fatalf("late failure: last frame %+v, failure %v", last, p.failure)
	}
	for _, f := range fs {
		if f.event == "message_stop" || f.event == "message_delta" {
			t.Errorf("a failed stream has %s", f.event)
		}
	}
	want := `{"type":"error","error":{"type":"overloaded_error","message":"the provider's stream was cut","switchboard":{"code":"provider_unavailable","retryable":false}}}`
	if last.data != want {
		t.Errorf("error event = %s\nwant %s", last.data, want)
	}
}

func TestStopReasons(t *testing.T) {
	for finish, want := range map[string]string{
		"end_turn": "end_turn", "stop": "end_turn", "STOP": "end_turn", "": "end_turn", "pause_turn": "end_turn",
		"max_tokens": "max_tokens", "length": "max_tokens", "MAX_TOKENS": "max_tokens", "model_context_window_exceeded": "max_tokens",
		"stop_sequence": "stop_sequence", "tool_use": "tool_use", "tool_calls": "tool_use", "refusal": "refusal",
		"content_filter": "refusal", "guardrail_intervened": "refusal", "SAFETY": "refusal", "OTHER": "end_turn",
	} {
		p := newProjection("exe_1", "m", false)
		p.finish = finish
		if got := p.stopReason(); got != want {
			t.Errorf("finish %q: stop_reason %q, want %q", finish, got, want)
		}
	}
}

func TestErrorShape(t *testing.T) {
	for _, tc := range []struct {
		status int
		e      *protocol.Error
		want   string
	}{
		{400, protocol.NewError(protocol.CodeInvalidRequest, "model: required"),
			`{"type":"error","error":{"type":"invalid_request_error","message":"model: required","switchboard":{"code":"invalid_request","retryable":false}}}`},
		{401, protocol.NewError(protocol.CodeUnauthenticated, "no"), `{"type":"error","error":{"type":"authentication_error","message":"no","switchboard":{"code":"unauthenticated","retryable":false}}}`},
		{403, protocol.NewError(protocol.CodePermissionDenied, "no"), `{"type":"error","error":{"type":"permission_error","message":"no","switchboard":{"code":"permission_denied","retryable":false}}}`},
		{404, protocol.NewError(protocol.CodeNotFound, "no"), `{"type":"error","error":{"type":"not_found_error","message":"no","switchboard":{"code":"not_found","retryable":false}}}`},
		{409, protocol.NewError(protocol.CodeConflict, "no"), `{"type":"error","error":{"type":"invalid_request_error","message":"no","switchboard":{"code":"conflict","retryable":true}}}`},
		{413, protocol.RequestTooLarge(), `{"type":"error","error":{"type":"invalid_request_error","message":"body: exceeds the request size limit","switchboard":{"code":"request_too_large","retryable":false}}}`},
		{415, protocol.NewError(protocol.CodeInvalidRequest, "no"), `{"type":"error","error":{"type":"invalid_request_error","message":"no","switchboard":{"code":"invalid_request","retryable":false}}}`},
		{422, protocol.NewError(protocol.CodeUnsupportedCapability, "no"), `{"type":"error","error":{"type":"invalid_request_error","message":"no","switchboard":{"code":"unsupported_capability","retryable":false}}}`},
		{429, &protocol.Error{Code: protocol.CodeRateLimited, Message: "slow", Retryable: true, RetryAfterMs: 1200},
			`{"type":"error","error":{"type":"rate_limit_error","message":"slow","switchboard":{"code":"rate_limited","retryable":true,"retry_after_ms":1200}}}`},
		{429, protocol.NewError(protocol.CodeQuotaExhausted, "spent"), `{"type":"error","error":{"type":"rate_limit_error","message":"spent","switchboard":{"code":"quota_exhausted","retryable":false}}}`},
		{500, protocol.NewError(protocol.CodeInternal, "internal error"), `{"type":"error","error":{"type":"api_error","message":"internal error","switchboard":{"code":"internal","retryable":false}}}`},
		{502, protocol.NewError(protocol.CodeProviderRejected, "no"), `{"type":"error","error":{"type":"api_error","message":"no","switchboard":{"code":"provider_rejected","retryable":false}}}`},
		{503, protocol.NewError(protocol.CodeProviderUnavailable, "down"), `{"type":"error","error":{"type":"overloaded_error","message":"down","switchboard":{"code":"provider_unavailable","retryable":true}}}`},
		{504, protocol.NewError(protocol.CodeDeadlineExceeded, "late"), `{"type":"error","error":{"type":"api_error","message":"late","switchboard":{"code":"deadline_exceeded","retryable":false}}}`},
	} {
		if got := string(appendError(nil, tc.status, tc.e)); got != tc.want {
			t.Errorf("%d: %s\nwant %s", tc.status, got, tc.want)
		}
		var sdkErr struct {
			Type  string `json:"type"`
			Error struct {
				Type, Message string
			} `json:"error"`
		}
		if err := json.Unmarshal([]byte(tc.want), &sdkErr); err != nil || sdkErr.Type != "error" {
			t.Errorf("%d: not Anthropic's shape: %v", tc.status, err)
		}
	}
}
