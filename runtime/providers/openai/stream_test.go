package openai_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/switchboard-dev/switchboard/runtime/engine/enginetest"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
)

func TestStreamText(t *testing.T) {
	up := serve(t, sseReply(testdata(t, "stream_text.sse")))
	res := execute(t, context.Background(), deployment(up.endpoint(), streaming()), request(t, hello))
	if res.err != nil {
		t.Fatalf("Execute: %v", res.err)
	}
	if res.out.FinishReason != "stop" {
		t.Errorf("FinishReason = %q, want stop", res.out.FinishReason)
	}
	delta := func(s string) enginetest.Emitted {
		b, _ := json.Marshal(s)
		return ev(protocol.EventOutputDelta, `{"index":0,"type":"text","text":`+string(b)+`}`)
	}
	diffEvents(t, res.events, []enginetest.Emitted{
		delta("Hello"), delta("!"), delta(" How"), delta(" can"), delta(" I"),
		delta(" assist"), delta(" you"), delta(" today"), delta("?"),
		ev(protocol.EventUsageReported, `{"usage":[`+
			`{"unit":"input_tokens","quantity":19,"source":"provider"},`+
			`{"unit":"output_tokens","quantity":10,"source":"provider"},`+
			`{"unit":"cache_read_tokens","quantity":0,"source":"provider"},`+
			`{"unit":"reasoning_tokens","quantity":0,"source":"provider"}]}`),
	})
	diffJSON(t, "snapshot", res.snapshot(t), `{
		"id":"exe_test","status":"completed","sequence":11,
		"output":[{"index":0,"type":"text","text":"Hello! How can I assist you today?"}],
		"tool_calls":[],"artifacts":[],
		"usage":[
			{"unit":"input_tokens","quantity":19,"source":"provider"},
			{"unit":"output_tokens","quantity":10,"source":"provider"},
			{"unit":"cache_read_tokens","quantity":0,"source":"provider"},
			{"unit":"reasoning_tokens","quantity":0,"source":"provider"}],
		"finish_reason":"stop"}`)

	got := up.only(t)
	if got.Method != http.MethodPost || got.Path != "/v1/chat/completions" {
		t.Errorf("request = %s %s, want POST /v1/chat/completions", got.Method, got.Path)
	}
	if a := got.Header.Get("Accept"); a != "text/event-stream" {
		t.Errorf("Accept = %q", a)
	}
	diffJSON(t, "request body", string(got.Body), `{
		"model":"gpt-4o-mini",
		"messages":[{"role":"user","content":"Say hello."}],
		"stream":true,"stream_options":{"include_usage":true}}`)
}

func TestStreamParallelToolCalls(t *testing.T) {
	up := serve(t, sseReply(testdata(t, "stream_tools.sse")))
	d := deployment(up.endpoint(), streaming(), with(protocol.CapTools))
	req := request(t, `{"ability":"chat","input":[
		{"type":"text","text":"What's the weather like in Paris today and in Bogotá?"},
		{"type":"tool","name":"get_weather","description":"Get current temperature for a given location.",
		 "parameters":{"type":"object","properties":{"location":{"type":"string"}},"required":["location"]}}]}`)
	res := execute(t, context.Background(), d, req)
	if res.err != nil {
		t.Fatalf("Execute: %v", res.err)
	}
	if res.out.FinishReason != "tool_calls" {
		t.Errorf("FinishReason = %q, want tool_calls", res.out.FinishReason)
	}
	const paris, bogota = "call_sbPARIS0000000000000001", "call_sbBOGOTA000000000000002"
	args := func(id, delta string) enginetest.Emitted {
		b, _ := json.Marshal(protocol.ToolCallArgsDeltaData{CallID: id, Delta: delta})
		return ev(protocol.EventToolCallArgsDelta, string(b))
	}
	diffEvents(t, res.events, []enginetest.Emitted{
		ev(protocol.EventToolCallStarted, `{"index":0,"call_id":"`+paris+`","name":"get_weather"}`),
		args(paris, `{"`), args(paris, "location"), args(paris, `":"`), args(paris, "Paris"),
		args(paris, ","), args(paris, " France"), args(paris, `"}`),
		ev(protocol.EventToolCallStarted, `{"index":1,"call_id":"`+bogota+`","name":"get_weather"}`),
		args(bogota, `{"`), args(bogota, "location"), args(bogota, `":"`), args(bogota, "Bogotá"),
		args(bogota, ","), args(bogota, " Colombia"), args(bogota, `"}`),
		ev(protocol.EventUsageReported, `{"usage":[`+
			`{"unit":"input_tokens","quantity":2006,"source":"provider"},`+
			`{"unit":"output_tokens","quantity":300,"source":"provider"},`+
			`{"unit":"cache_read_tokens","quantity":1920,"source":"provider"},`+
			`{"unit":"reasoning_tokens","quantity":0,"source":"provider"}]}`),
	})
	diffJSON(t, "snapshot", res.snapshot(t), `{
		"id":"exe_test","status":"completed","sequence":18,
		"output":[],
		"tool_calls":[
			{"index":0,"call_id":"`+paris+`","name":"get_weather","arguments":"{\"location\":\"Paris, France\"}"},
			{"index":1,"call_id":"`+bogota+`","name":"get_weather","arguments":"{\"location\":\"Bogotá, Colombia\"}"}],
		"artifacts":[],
		"usage":[
			{"unit":"input_tokens","quantity":2006,"source":"provider"},
			{"unit":"output_tokens","quantity":300,"source":"provider"},
			{"unit":"cache_read_tokens","quantity":1920,"source":"provider"},
			{"unit":"reasoning_tokens","quantity":0,"source":"provider"}],
		"finish_reason":"tool_calls"}`)

	diffJSON(t, "request body", string(up.only(t).Body), `{
		"model":"gpt-4o-mini",
		"messages":[{"role":"user","content":"What's the weather like in Paris today and in Bogotá?"}],
		"tools":[{"type":"function","function":{"name":"get_weather",
			"description":"Get current temperature for a given location.",
			"parameters":{"type":"object","properties":{"location":{"type":"string"}},"required":["location"]}}}],
		"stream":true,"stream_options":{"include_usage":true}}`)
}

// Fragments of two calls may interleave; they are assembled by index, and a call is
// announced only once its id and name are known.
func TestStreamInterleavedToolFragments(t *testing.T) {
	body := []byte(`data: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"f","arguments":""}},{"index":1,"id":"call_b","type":"function","function":{"name":"g","arguments":"{\"x\""}}]},"finish_reason":null}]}

data: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"function":{"arguments":":1}"}},{"index":0,"function":{"arguments":"{}"}}]},"finish_reason":null}]}

data: {"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}

data: [DONE]

`)
	up := serve(t, sseReply(body))
	res := execute(t, context.Background(), deployment(up.endpoint(), streaming(), with(protocol.CapTools)), request(t, hello))
	if res.err != nil {
		t.Fatalf("Execute: %v", res.err)
	}
	diffEvents(t, res.events, []enginetest.Emitted{
		ev(protocol.EventToolCallStarted, `{"index":0,"call_id":"call_a","name":"f"}`),
		ev(protocol.EventToolCallStarted, `{"index":1,"call_id":"call_b","name":"g"}`),
		ev(protocol.EventToolCallArgsDelta, `{"call_id":"call_b","delta":"{\"x\""}`),
		ev(protocol.EventToolCallArgsDelta, `{"call_id":"call_b","delta":":1}"}`),
		ev(protocol.EventToolCallArgsDelta, `{"call_id":"call_a","delta":"{}"}`),
	})
}

// A call whose id never arrives cannot be reported: the stream is malformed.
func TestStreamToolCallWithoutID(t *testing.T) {
	body := []byte("data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}}]},\"finish_reason\":\"tool_calls\"}]}\n\ndata: [DONE]\n\n")
	up := serve(t, sseReply(body))
	res := execute(t, context.Background(), deployment(up.endpoint(), streaming(), with(protocol.CapTools)), request(t, hello))
	pe := res.protoErr(t)
	if pe.Code != protocol.CodeProviderUnavailable || !pe.Retryable {
		t.Errorf("error = %+v, want retryable provider_unavailable", pe)
	}
	diffEvents(t, res.events, nil)
}

func TestStreamInStreamError(t *testing.T) {
	up := serve(t, sseReply(testdata(t, "stream_error.sse")))
	res := execute(t, context.Background(), deployment(up.endpoint(), streaming()), request(t, hello))
	diffEvents(t, res.events, []enginetest.Emitted{
		ev(protocol.EventOutputDelta, `{"index":0,"type":"text","text":"The"}`),
		ev(protocol.EventOutputDelta, `{"index":0,"type":"text","text":" answer"}`),
	})
	want := &protocol.Error{
		Code: protocol.CodeProviderUnavailable, Message: "the provider is unavailable", Retryable: false,
		ProviderError: &protocol.ProviderError{Provider: "openai", Type: "server_error", RequestID: "req_sb0123456789abcdef"},
	}
	if d := cmp.Diff(want, res.protoErr(t)); d != "" {
		t.Errorf("error (-want +got):\n%s", d)
	}
	diffJSON(t, "snapshot", res.snapshot(t), `{
		"id":"exe_test","status":"failed","sequence":3,
		"output":[{"index":0,"type":"text","text":"The answer"}],
		"tool_calls":[],"artifacts":[],"usage":[],
		"error":{"code":"provider_unavailable","message":"the provider is unavailable","retryable":false,
			"provider_error":{"provider":"openai","type":"server_error","request_id":"req_sb0123456789abcdef"}}}`)
}

// An in-stream error before any output stays retryable, and its type decides quota.
func TestStreamInStreamErrorBeforeOutput(t *testing.T) {
	body := []byte(`data: {"error":{"message":"You exceeded your current quota.","type":"insufficient_quota","param":null,"code":"insufficient_quota"}}` + "\n\n")
	up := serve(t, sseReply(body))
	res := execute(t, context.Background(), deployment(up.endpoint(), streaming()), request(t, hello))
	pe := res.protoErr(t)
	if pe.Code != protocol.CodeQuotaExhausted || pe.Retryable {
		t.Errorf("error = %+v, want quota_exhausted", pe)
	}
	body = []byte(`data: {"error":{"message":"boom","type":"server_error","param":null,"code":null}}` + "\n\n")
	up = serve(t, sseReply(body))
	res = execute(t, context.Background(), deployment(up.endpoint(), streaming()), request(t, hello))
	if pe := res.protoErr(t); pe.Code != protocol.CodeProviderUnavailable || !pe.Retryable {
		t.Errorf("error = %+v, want retryable provider_unavailable", pe)
	}
}

func TestStreamTruncated(t *testing.T) {
	fs := frames(testdata(t, "stream_text.sse"))
	cut := func(n int) []byte {
		var b []byte
		for _, f := range fs[:n] {
			b = append(b, f...)
		}
		return b
	}
	tests := []struct {
		name      string
		body      []byte
		events    int
		retryable bool
	}{
		// Only the role chunk (empty content): nothing emitted, another route may run.
		{"before output", cut(1), 0, true},
		// Two text deltas, then the connection ends.
		{"after output", cut(3), 2, false},
		// Everything but [DONE]: output and usage, still cut.
		{"without done", cut(len(fs) - 1), 10, false},
		// A partial frame at the end is discarded, never half-parsed.
		{"mid frame", append(cut(2), fs[2][:40]...), 1, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			up := serve(t, sseReply(tt.body))
			res := execute(t, context.Background(), deployment(up.endpoint(), streaming()), request(t, hello))
			want := &protocol.Error{
				Code: protocol.CodeProviderUnavailable, Message: "the provider's stream ended early", Retryable: tt.retryable,
				ProviderError: &protocol.ProviderError{Provider: "openai", RequestID: "req_sb0123456789abcdef"},
			}
			if d := cmp.Diff(want, res.protoErr(t)); d != "" {
				t.Errorf("error (-want +got):\n%s", d)
			}
			if len(res.events) != tt.events {
				t.Errorf("emitted %d events, want %d: %v", len(res.events), tt.events, res.events)
			}
		})
	}
}

// A provider that stops sending without closing: the attempt ends when its context does,
// promptly, with a portable timeout error.
func TestStreamStalled(t *testing.T) {
	fs := frames(testdata(t, "stream_text.sse"))
	up := serve(t, stallReply(append(append([]byte{}, fs[0]...), fs[1]...)))
	const deadline = 300 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	start := time.Now()
	res := execute(t, ctx, deployment(up.endpoint(), streaming()), request(t, hello))
	took := time.Since(start)

	want := &protocol.Error{
		Code: protocol.CodeProviderTimeout, Message: "the provider did not answer in time", Retryable: true,
		ProviderError: &protocol.ProviderError{Provider: "openai"},
	}
	if d := cmp.Diff(want, res.protoErr(t)); d != "" {
		t.Errorf("error (-want +got):\n%s", d)
	}
	diffEvents(t, res.events, []enginetest.Emitted{ev(protocol.EventOutputDelta, `{"index":0,"type":"text","text":"Hello"}`)})
	// Generous bound: only an adapter that ignores its context misses it.
	if took < deadline || took > deadline+2*time.Second {
		t.Errorf("Execute returned after %s, want just after the %s deadline", took, deadline)
	}
}

// A cancelled attempt ends the same way, without waiting for the provider.
func TestStreamCancelled(t *testing.T) {
	up := serve(t, stallReply(nil))
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	res := execute(t, ctx, deployment(up.endpoint(), streaming()), request(t, hello))
	if pe := res.protoErr(t); pe.Code != protocol.CodeProviderTimeout {
		t.Errorf("error = %+v, want provider_timeout", pe)
	}
}

// finish_reason content_filter fails the attempt with content_filtered after the output
// already emitted (which stays recorded) and the usage.
func TestStreamContentFilter(t *testing.T) {
	up := serve(t, sseReply(testdata(t, "stream_content_filter.sse")))
	res := execute(t, context.Background(), deployment(up.endpoint(), streaming()), request(t, hello))
	diffEvents(t, res.events, []enginetest.Emitted{
		ev(protocol.EventOutputDelta, `{"index":0,"type":"text","text":"Once upon"}`),
		ev(protocol.EventUsageReported, `{"usage":[{"unit":"input_tokens","quantity":12,"source":"provider"},{"unit":"output_tokens","quantity":3,"source":"provider"}]}`),
	})
	want := &protocol.Error{
		Code: protocol.CodeContentFiltered, Message: "the provider refused the content", Retryable: false,
		ProviderError: &protocol.ProviderError{Provider: "openai", RequestID: "req_sb0123456789abcdef"},
	}
	if d := cmp.Diff(want, res.protoErr(t)); d != "" {
		t.Errorf("error (-want +got):\n%s", d)
	}
}

func TestStreamMalformedChunk(t *testing.T) {
	up := serve(t, sseReply([]byte("data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"}}]}\n\ndata: {not json\n\n")))
	res := execute(t, context.Background(), deployment(up.endpoint(), streaming()), request(t, hello))
	pe := res.protoErr(t)
	if pe.Code != protocol.CodeProviderUnavailable || pe.Retryable || pe.Message != "the provider's response could not be read" {
		t.Errorf("error = %+v, want non-retryable provider_unavailable (malformed)", pe)
	}
}

// Some compatible servers put cumulative usage on every chunk instead of a final
// choices-less chunk: only the last is reported, once, at [DONE].
func TestStreamUsageOnContentChunks(t *testing.T) {
	body := []byte(`data: {"choices":[{"index":0,"delta":{"role":"assistant","content":"Hi"},"finish_reason":null}],"usage":{"prompt_tokens":9,"completion_tokens":1,"total_tokens":10}}

data: {"choices":[{"index":0,"delta":{},"finish_reason":"length"}],"usage":{"prompt_tokens":9,"completion_tokens":1100,"total_tokens":1109,"completion_tokens_details":{"reasoning_tokens":1024}}}

data: [DONE]

`)
	up := serve(t, sseReply(body))
	res := execute(t, context.Background(), deployment(up.endpoint(), streaming()), request(t, hello))
	if res.err != nil || res.out.FinishReason != "length" {
		t.Fatalf("Execute = %+v, %v; want finish reason length", res.out, res.err)
	}
	diffEvents(t, res.events, []enginetest.Emitted{
		ev(protocol.EventOutputDelta, `{"index":0,"type":"text","text":"Hi"}`),
		ev(protocol.EventUsageReported, `{"usage":[`+
			`{"unit":"input_tokens","quantity":9,"source":"provider"},`+
			`{"unit":"output_tokens","quantity":1100,"source":"provider"},`+
			`{"unit":"reasoning_tokens","quantity":1024,"source":"provider"}]}`),
	})
}

// Servers that omit index, or number every call 0, still yield one call per id.
func TestStreamToolCallIndexVariants(t *testing.T) {
	body := []byte(`data: {"choices":[{"index":0,"delta":{"tool_calls":[{"id":"call_a","type":"function","function":{"name":"f","arguments":"{}"}},{"id":"call_b","type":"function","function":{"name":"g","arguments":"{}"}}]}}]}

data: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_c","type":"function","function":{"name":"h","arguments":"{\"k\":1}"}}]},"finish_reason":"tool_calls"}]}

data: [DONE]

`)
	up := serve(t, sseReply(body))
	res := execute(t, context.Background(), deployment(up.endpoint(), streaming(), with(protocol.CapTools)), request(t, hello))
	if res.err != nil {
		t.Fatalf("Execute: %v", res.err)
	}
	diffEvents(t, res.events, []enginetest.Emitted{
		ev(protocol.EventToolCallStarted, `{"index":0,"call_id":"call_a","name":"f"}`),
		ev(protocol.EventToolCallArgsDelta, `{"call_id":"call_a","delta":"{}"}`),
		ev(protocol.EventToolCallStarted, `{"index":1,"call_id":"call_b","name":"g"}`),
		ev(protocol.EventToolCallArgsDelta, `{"call_id":"call_b","delta":"{}"}`),
		ev(protocol.EventToolCallStarted, `{"index":2,"call_id":"call_c","name":"h"}`),
		ev(protocol.EventToolCallArgsDelta, `{"call_id":"call_c","delta":"{\"k\":1}"}`),
	})
}
