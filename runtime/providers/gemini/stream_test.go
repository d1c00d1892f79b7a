package gemini_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/switchboard-dev/switchboard/runtime/engine/enginetest"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
)

// Replay tests: each upstream answers with a documented-shape GenerateContentResponse
// (testdata/, ids adapted), and the test asserts the exact event data the adapter
// emitted and its outcome or error.

func TestReplay(t *testing.T) {
	tools := withCaps(protocol.CapTools)
	for _, tc := range []struct {
		name   string
		file   string
		stream bool
		want   []enginetest.Emitted
		finish string
		model  string
		code   protocol.Code // a failure, with retryable
		retry  bool
	}{
		{
			name: "streamed text", file: "stream_text.sse", stream: true,
			want: []enginetest.Emitted{
				enginetest.TextDelta("Hello"), enginetest.TextDelta("! How can I help you today?"),
				// usageMetadata is cumulative: the last chunk's is the answer's.
				enginetest.UsageReported(enginetest.ProviderUsage(protocol.UnitInputTokens, 8), enginetest.ProviderUsage(protocol.UnitOutputTokens, 12)),
			},
			finish: "STOP", model: "gemini-2.5-flash",
		},
		{
			name: "thoughts are skipped, thinking tokens are output and reasoning", file: "stream_thinking.sse", stream: true,
			want: []enginetest.Emitted{
				enginetest.TextDelta("Paris is the capital of France."),
				enginetest.UsageReported(enginetest.ProviderUsage(protocol.UnitInputTokens, 10), enginetest.ProviderUsage(protocol.UnitOutputTokens, 127),
					enginetest.ProviderUsage(protocol.UnitCacheReadTokens, 4), enginetest.ProviderUsage(protocol.UnitReasoningTokens, 120)),
			},
			finish: "STOP", model: "gemini-2.5-pro",
		},
		{
			name: "a function call: one start and its whole arguments", file: "stream_function_call.sse", stream: true,
			want: []enginetest.Emitted{
				enginetest.ToolStarted(0, "call_0", "get_current_temperature"), enginetest.ArgsDelta("call_0", `{"location":"London"}`),
				enginetest.UsageReported(enginetest.ProviderUsage(protocol.UnitInputTokens, 45), enginetest.ProviderUsage(protocol.UnitOutputTokens, 17)),
			},
			finish: "STOP", model: "gemini-2.5-flash",
		},
		{
			name: "parallel calls, the provider's id when it sends one", file: "stream_parallel_calls.sse", stream: true,
			want: []enginetest.Emitted{
				enginetest.TextDelta("Setting the mood."),
				enginetest.ToolStarted(0, "fc_sb_power", "power_disco_ball"), enginetest.ArgsDelta("fc_sb_power", `{"power":true}`),
				enginetest.ToolStarted(1, "call_1", "start_music"), enginetest.ArgsDelta("call_1", `{"energetic":true,"loud":true}`),
				enginetest.ToolStarted(2, "call_2", "dim_lights"), enginetest.ArgsDelta("call_2", `{}`),
				enginetest.UsageReported(enginetest.ProviderUsage(protocol.UnitInputTokens, 130), enginetest.ProviderUsage(protocol.UnitOutputTokens, 40)),
			},
			finish: "STOP", model: "gemini-2.5-flash",
		},
		{
			name: "max tokens completes with the provider's reason", file: "stream_max_tokens.sse", stream: true,
			want: []enginetest.Emitted{
				enginetest.TextDelta("Once upon a time"),
				enginetest.UsageReported(enginetest.ProviderUsage(protocol.UnitInputTokens, 6), enginetest.ProviderUsage(protocol.UnitOutputTokens, 4)),
			},
			finish: "MAX_TOKENS", model: "gemini-2.5-flash",
		},
		{
			name: "a safety stop after output is content_filtered, usage still reported", file: "stream_safety.sse", stream: true,
			want: []enginetest.Emitted{
				enginetest.TextDelta("Here is how"),
				enginetest.UsageReported(enginetest.ProviderUsage(protocol.UnitInputTokens, 9), enginetest.ProviderUsage(protocol.UnitOutputTokens, 3)),
			},
			code: protocol.CodeContentFiltered,
		},
		{
			name: "a blocked prompt is content_filtered", file: "stream_prompt_blocked.sse", stream: true,
			want: []enginetest.Emitted{enginetest.UsageReported(enginetest.ProviderUsage(protocol.UnitInputTokens, 12))},
			code: protocol.CodeContentFiltered,
		},
		{
			name: "an in-stream error after output", file: "stream_error_after_output.sse", stream: true,
			want: []enginetest.Emitted{enginetest.TextDelta("The first")},
			code: protocol.CodeProviderUnavailable, retry: false,
		},
		{
			name: "a stream without a finish reason after output", file: "stream_truncated_after_output.sse", stream: true,
			want: []enginetest.Emitted{enginetest.TextDelta("The first")},
			code: protocol.CodeProviderUnavailable, retry: false,
		},
		{
			name: "a stream without a finish reason before output", file: "stream_truncated_before_output.sse", stream: true,
			code: protocol.CodeProviderUnavailable, retry: true,
		},
		{
			name: "a whole answer is one delta", file: "generate_text.json",
			want: []enginetest.Emitted{
				enginetest.TextDelta("AI learns patterns from data to make predictions."),
				enginetest.UsageReported(enginetest.ProviderUsage(protocol.UnitInputTokens, 5), enginetest.ProviderUsage(protocol.UnitOutputTokens, 9)),
			},
			finish: "STOP", model: "gemini-2.5-flash",
		},
		{
			name: "a whole function call", file: "generate_function_call.json",
			want: []enginetest.Emitted{
				enginetest.ToolStarted(0, "call_0", "schedule_meeting"),
				enginetest.ArgsDelta("call_0", `{"attendees":["Bob","Alice"],"date":"2025-03-27","time":"10:00","topic":"Q3 planning"}`),
				enginetest.UsageReported(enginetest.ProviderUsage(protocol.UnitInputTokens, 110), enginetest.ProviderUsage(protocol.UnitOutputTokens, 30)),
			},
			finish: "STOP", model: "gemini-2.5-flash",
		},
		{
			name: "a JSON answer on a streaming deployment is read whole", file: "generate_text.json", stream: true,
			want: []enginetest.Emitted{
				enginetest.TextDelta("AI learns patterns from data to make predictions."),
				enginetest.UsageReported(enginetest.ProviderUsage(protocol.UnitInputTokens, 5), enginetest.ProviderUsage(protocol.UnitOutputTokens, 9)),
			},
			finish: "STOP", model: "gemini-2.5-flash",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up := newUpstream(t, http.StatusOK, tc.file)
			d := geminiDeployment(up.URL, tools)
			if tc.stream {
				streaming(d)
			}
			res := run(t, d, hello(t))
			diffEvents(t, res.events, tc.want)
			if tc.code != "" {
				pe := asError(t, res.err)
				if pe.Code != tc.code || pe.Retryable != tc.retry {
					t.Errorf("error %+v, want %s retryable=%v", pe, tc.code, tc.retry)
				}
				if pe.ProviderError == nil || pe.ProviderError.Provider != "gemini" {
					t.Errorf("provider_error %+v", pe.ProviderError)
				}
				return
			}
			if res.err != nil {
				t.Fatalf("Execute: %v", res.err)
			}
			if res.outcome.FinishReason != tc.finish || res.outcome.ResponseModel != tc.model {
				t.Errorf("outcome %+v, want finish %q, model %q", res.outcome, tc.finish, tc.model)
			}
		})
	}
}

func TestReplayFilterReasons(t *testing.T) {
	up := newUpstream(t, http.StatusOK, "stream_safety.sse")
	res := run(t, geminiDeployment(up.URL, streaming), hello(t))
	pe := asError(t, res.err)
	if pe.ProviderError.Code != "SAFETY" || pe.ProviderError.RequestID != "sbGmSafetyResp01" {
		t.Errorf("provider_error %+v, want code SAFETY and the response id", pe.ProviderError)
	}
	up = newUpstream(t, http.StatusOK, "stream_prompt_blocked.sse")
	res = run(t, geminiDeployment(up.URL, streaming), hello(t))
	if pe := asError(t, res.err); pe.ProviderError.Code != "PROHIBITED_CONTENT" {
		t.Errorf("provider_error %+v, want code PROHIBITED_CONTENT", pe.ProviderError)
	}
}

// TestStreamChunksAsTheyArrive checks that each chunk's text is emitted when it arrives,
// not when the stream ends.
func TestStreamChunksAsTheyArrive(t *testing.T) {
	release := make(chan struct{})
	up := newUpstream(t, 0, "")
	up.handler = func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"first\"}],\"role\":\"model\"},\"index\":0}]}\r\n\r\n")
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		_, _ = io.WriteString(w, "data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\" second\"}],\"role\":\"model\"},\"finishReason\":\"STOP\",\"index\":0}]}\r\n\r\n")
	}
	rec := &watchingRecorder{first: make(chan struct{})}
	go func() {
		select {
		case <-rec.first:
		case <-time.After(testTimeout):
		}
		close(release)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	out, err := execute(t, ctx, geminiDeployment(up.URL, streaming), rec)
	if err != nil || out.FinishReason != "STOP" {
		t.Fatalf("Execute: %+v %v", out, err)
	}
	if got := rec.Recorded(); len(got) != 2 {
		t.Errorf("recorded %d events, want 2", len(got))
	}
}

func TestStreamStallEndsWithTheContext(t *testing.T) {
	up := newUpstream(t, 0, "")
	up.handler = func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	res := runCtx(t, ctx, geminiDeployment(up.URL, streaming), hello(t))
	if pe := asError(t, res.err); pe.Code != protocol.CodeProviderTimeout {
		t.Errorf("error %+v, want provider_timeout", pe)
	}
	if time.Since(start) > 5*time.Second {
		t.Error("Execute did not return when its context ended")
	}
}

func TestStreamCutAfterFinishCompletes(t *testing.T) {
	up := newUpstream(t, 0, "")
	up.handler = func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"done\"}],\"role\":\"model\"},\"finishReason\":\"STOP\",\"index\":0}]}\r\n\r\n")
		w.(http.Flusher).Flush()
		// A broken connection after the answer: hijack and close mid-frame.
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			_ = conn.Close()
		}
	}
	res := run(t, geminiDeployment(up.URL, streaming), hello(t))
	if res.err != nil || res.outcome.FinishReason != "STOP" {
		t.Fatalf("Execute: %+v %v, want a completed answer", res.outcome, res.err)
	}
}

func TestStreamOtherCandidatesAndUnknownPartsAreSkipped(t *testing.T) {
	up := newUpstream(t, 0, "")
	up.handler = func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, ": keep-alive\n\n"+
			"event: ping\ndata: {}\n\n"+
			`data: {"candidates":[{"content":{"parts":[{"text":"other"}]},"index":1},{"content":{"parts":[`+
			`{"executableCode":{"language":"PYTHON","code":"print(1)"}},{"codeExecutionResult":{"outcome":"OUTCOME_OK","output":"1"}},`+
			`{"inlineData":{"mimeType":"image/png","data":"iVBORw0KGgo="}},{"thoughtSignature":"c2ln"},{"text":"mine"}],"role":"model"},"finishReason":"STOP","index":0}]}`+"\n\n")
	}
	res := run(t, geminiDeployment(up.URL, streaming), hello(t))
	if res.err != nil {
		t.Fatal(res.err)
	}
	diffEvents(t, res.events, []enginetest.Emitted{enginetest.TextDelta("mine")})
}

func TestStreamMalformedChunk(t *testing.T) {
	up := newUpstream(t, 0, "")
	up.handler = func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"a\"}]},\"index\":0}]}\n\ndata: {not json\n\n")
	}
	res := run(t, geminiDeployment(up.URL, streaming), hello(t))
	if pe := asError(t, res.err); pe.Code != protocol.CodeProviderUnavailable || pe.Retryable {
		t.Errorf("error %+v, want provider_unavailable, not retryable after output", pe)
	}
}

func TestWholeAnswerWithoutFinishReason(t *testing.T) {
	up := newUpstream(t, 0, "")
	up.handler = func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"candidates":[{"content":{"parts":[{"text":"a"}]},"index":0}]}`)
	}
	res := run(t, geminiDeployment(up.URL), hello(t))
	if pe := asError(t, res.err); pe.Code != protocol.CodeProviderUnavailable || pe.Retryable {
		t.Errorf("error %+v, want provider_unavailable, not retryable after output", pe)
	}
}

func TestWholeAnswerTooLarge(t *testing.T) {
	up := newUpstream(t, 0, "")
	up.handler = func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"candidates":[{"content":{"parts":[{"text":"`)
		chunk := strings.Repeat("a", 1<<20)
		for range 17 {
			if _, err := io.WriteString(w, chunk); err != nil {
				return
			}
		}
		_, _ = io.WriteString(w, `"}]},"finishReason":"STOP"}]}`)
	}
	res := run(t, geminiDeployment(up.URL), hello(t))
	if pe := asError(t, res.err); pe.Code != protocol.CodeProviderUnavailable || !pe.Retryable {
		t.Errorf("error %+v, want provider_unavailable, retryable", pe)
	}
	if len(res.events) != 0 {
		t.Errorf("%d events", len(res.events))
	}
}

func TestJSONArrayOnAStreamingDeployment(t *testing.T) {
	up := newUpstream(t, 0, "")
	up.handler = func(w http.ResponseWriter, r *http.Request) {
		// streamGenerateContent without alt=sse, as a proxy that drops the query answers.
		w.Header().Set("Content-Type", "application/json; charset=UTF-8")
		_, _ = io.WriteString(w, `[{"candidates":[{"content":{"parts":[{"text":"Hello"}],"role":"model"},"index":0}]},`+
			`{"candidates":[{"content":{"parts":[{"text":", world"}],"role":"model"},"finishReason":"STOP","index":0}],`+
			`"usageMetadata":{"promptTokenCount":2,"candidatesTokenCount":3,"totalTokenCount":5}}]`)
	}
	res := run(t, geminiDeployment(up.URL, streaming), hello(t))
	if res.err != nil || res.outcome.FinishReason != "STOP" {
		t.Fatalf("Execute: %+v %v", res.outcome, res.err)
	}
	diffEvents(t, res.events, []enginetest.Emitted{enginetest.TextDelta("Hello"), enginetest.TextDelta(", world"),
		enginetest.UsageReported(enginetest.ProviderUsage(protocol.UnitInputTokens, 2), enginetest.ProviderUsage(protocol.UnitOutputTokens, 3))})
}

// TestStreamHeldOpenAfterFinishCompletes: Google's stream has no end marker, so a proxy
// that keeps the connection open after the last chunk must not hold a complete answer
// until the attempt's context ends. Usage that trails the finish reason within the grace
// is still reported.
func TestStreamHeldOpenAfterFinishCompletes(t *testing.T) {
	up := newUpstream(t, 0, "")
	up.handler = func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, `data: {"candidates":[{"content":{"parts":[{"text":"done"}],"role":"model"},"finishReason":"STOP","index":0}],"modelVersion":"gemini-2.5-flash"}`+"\r\n\r\n")
		w.(http.Flusher).Flush()
		time.Sleep(100 * time.Millisecond)
		_, _ = io.WriteString(w, `data: {"usageMetadata":{"promptTokenCount":3,"candidatesTokenCount":1,"totalTokenCount":4}}`+"\r\n\r\n")
		w.(http.Flusher).Flush()
		<-r.Context().Done() // the connection stays open until the client closes it
	}
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	start := time.Now()
	res := runCtx(t, ctx, geminiDeployment(up.URL, streaming), hello(t))
	if res.err != nil || res.outcome.FinishReason != "STOP" {
		t.Fatalf("Execute: %+v %v, want a completed answer", res.outcome, res.err)
	}
	if d := time.Since(start); d > testTimeout/2 {
		t.Errorf("Execute returned after %s, want soon after the finish reason", d)
	}
	diffEvents(t, res.events, []enginetest.Emitted{enginetest.TextDelta("done"),
		enginetest.UsageReported(enginetest.ProviderUsage(protocol.UnitInputTokens, 3), enginetest.ProviderUsage(protocol.UnitOutputTokens, 1))})
}

// TestFunctionCallValidation: a functionCall whose name is not a tool name, or whose args
// are not an object, is not the documented format: the answer is unreadable,
// retryable only while nothing was emitted. Absent args are the empty object.
func TestFunctionCallValidation(t *testing.T) {
	for _, tc := range []struct {
		name   string
		call   string // the functionCall object
		before string // parts before it
		ok     bool
		retry  bool
	}{
		{name: "absent args", call: `{"name":"dim_lights"}`, ok: true},
		{name: "empty args", call: `{"name":"dim_lights","args":{}}`, ok: true},
		{name: "no name", call: `{"args":{}}`, retry: true},
		{name: "empty name", call: `{"name":"","args":{}}`, retry: true},
		{name: "a name with a space", call: `{"name":"dim lights","args":{}}`, retry: true},
		{name: "a name with a slash", call: `{"name":"tools/dim","args":{}}`, retry: true},
		{name: "a name over 64 characters", call: `{"name":"` + strings.Repeat("a", 65) + `","args":{}}`, retry: true},
		{name: "array args", call: `{"name":"dim_lights","args":[1]}`, retry: true},
		{name: "string args", call: `{"name":"dim_lights","args":"{}"}`, retry: true},
		{name: "number args", call: `{"name":"dim_lights","args":3}`, retry: true},
		{name: "null args", call: `{"name":"dim_lights","args":null}`, retry: true},
		{name: "a bad name after output", call: `{"name":"dim lights","args":{}}`, before: `{"text":"Sure."},`, retry: false},
		{name: "bad args after output", call: `{"name":"dim_lights","args":[]}`, before: `{"text":"Sure."},`, retry: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up := newUpstream(t, 0, "")
			up.handler = func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/event-stream")
				_, _ = io.WriteString(w, `data: {"candidates":[{"content":{"parts":[`+tc.before+`{"functionCall":`+tc.call+`}],"role":"model"},"finishReason":"STOP","index":0}]}`+"\r\n\r\n")
			}
			res := run(t, geminiDeployment(up.URL, streaming, withCaps(protocol.CapTools)), hello(t))
			if tc.ok {
				if res.err != nil {
					t.Fatalf("Execute: %v", res.err)
				}
				diffEvents(t, res.events, []enginetest.Emitted{enginetest.ToolStarted(0, "call_0", "dim_lights"), enginetest.ArgsDelta("call_0", "{}")})
				return
			}
			pe := asError(t, res.err)
			if pe.Code != protocol.CodeProviderUnavailable || pe.Retryable != tc.retry {
				t.Errorf("error %+v, want provider_unavailable retryable=%v", pe, tc.retry)
			}
			for _, e := range res.events {
				if e.Type == protocol.EventToolCallStarted {
					t.Errorf("a malformed call was started: %s", e.Data)
				}
			}
		})
	}
}

// TestCallIDsAreUnique: ids minted for calls without one never repeat an id the provider
// gave another call of the answer, and a repeated provider id is replaced.
func TestCallIDsAreUnique(t *testing.T) {
	up := newUpstream(t, 0, "")
	up.handler = func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, `data: {"candidates":[{"content":{"parts":[`+
			`{"functionCall":{"id":"call_1","name":"a"}},{"functionCall":{"name":"b"}},`+
			`{"functionCall":{"id":"call_2","name":"c"}},{"functionCall":{"id":"call_1","name":"d"}}`+
			`],"role":"model"},"finishReason":"STOP","index":0}]}`+"\r\n\r\n")
	}
	res := run(t, geminiDeployment(up.URL, streaming, withCaps(protocol.CapTools)), hello(t))
	if res.err != nil {
		t.Fatal(res.err)
	}
	diffEvents(t, res.events, []enginetest.Emitted{
		enginetest.ToolStarted(0, "call_1", "a"), enginetest.ArgsDelta("call_1", "{}"),
		enginetest.ToolStarted(1, "call_2", "b"), enginetest.ArgsDelta("call_2", "{}"),
		enginetest.ToolStarted(2, "call_3", "c"), enginetest.ArgsDelta("call_3", "{}"),
		enginetest.ToolStarted(3, "call_4", "d"), enginetest.ArgsDelta("call_4", "{}"),
	})
}
