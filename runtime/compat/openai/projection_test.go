package openai

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/switchboard-dev/switchboard/runtime/protocol"
)

func TestFinishReason(t *testing.T) {
	for _, tc := range []struct {
		provider  string
		err       protocol.Code
		toolCalls bool
		want      string
	}{
		{"stop", "", false, "stop"},
		{"", "", false, "stop"},
		{"end_turn", "", false, "stop"},
		{"STOP", "", false, "stop"},
		{"stop_sequence", "", false, "stop"},
		{"length", "", false, "length"},
		{"max_tokens", "", false, "length"},
		{"MAX_TOKENS", "", false, "length"},
		{"tool_calls", "", true, "tool_calls"},
		{"tool_use", "", true, "tool_calls"},
		{"STOP", "", true, "tool_calls"},
		{"succeeded", "", false, "stop"},
		{"SAFETY", "", false, "content_filter"},
		{"guardrail_intervened", "", false, "content_filter"},
		{"", protocol.CodeContentFiltered, false, "content_filter"},
	} {
		s := served{terminal: true, finish: tc.provider}
		if tc.err != "" {
			s.err = protocol.NewError(tc.err, "x")
		}
		if got := s.finishReason(tc.toolCalls); got != tc.want {
			t.Errorf("%q (err %q, tool calls %v): %q, want %q", tc.provider, tc.err, tc.toolCalls, got, tc.want)
		}
	}
}

func TestUsage(t *testing.T) {
	type unit struct {
		name string
		n    float64
	}
	entries := func(units ...unit) []protocol.Usage {
		var out []protocol.Usage
		for _, u := range units {
			out = append(out, protocol.Usage{Unit: u.name, Quantity: u.n, Source: protocol.SourceProvider})
		}
		return out
	}
	route := func(provider string) protocol.Event {
		b, _ := json.Marshal(protocol.RouteSelectedData{Attempt: 1, Deployment: "a/b", Provider: provider, Model: "m"})
		return protocol.Event{Type: protocol.EventRouteSelected, Data: b}
	}
	usage := func(u []protocol.Usage) protocol.Event {
		b, _ := json.Marshal(protocol.UsageReportedData{Usage: u})
		return protocol.Event{Type: protocol.EventUsageReported, Data: b}
	}
	for _, tc := range []struct {
		name   string
		events []protocol.Event
		want   string
	}{
		{"none", []protocol.Event{route("openai")}, "null"},
		{"only runtime units", []protocol.Event{route("openai"), usage(entries(unit{"requests", 1.0}))}, "null"},
		{"openai counts cached input in input", []protocol.Event{route("openai"), usage(entries(unit{"input_tokens", 10.0}, unit{"output_tokens", 4.0}, unit{"cache_read_tokens", 6.0}, unit{"reasoning_tokens", 2.0}))},
			`{"prompt_tokens":10,"completion_tokens":4,"total_tokens":14,"prompt_tokens_details":{"cached_tokens":6},"completion_tokens_details":{"reasoning_tokens":2}}`},
		{"anthropic reports it apart", []protocol.Event{route("anthropic"), usage(entries(unit{"input_tokens", 10.0}, unit{"output_tokens", 4.0}, unit{"cache_read_tokens", 6.0}, unit{"cache_write_tokens", 3.0}))},
			`{"prompt_tokens":19,"completion_tokens":4,"total_tokens":23,"prompt_tokens_details":{"cached_tokens":6}}`},
		{"only the served attempt", []protocol.Event{route("openai"), usage(entries(unit{"input_tokens", 99.0})), route("gemini"), usage(entries(unit{"input_tokens", 5.0})), usage(entries(unit{"output_tokens", 1.0}))},
			`{"prompt_tokens":5,"completion_tokens":1,"total_tokens":6}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var s served
			for i := range tc.events {
				if err := s.apply(&tc.events[i]); err != nil {
					t.Fatal(err)
				}
			}
			b, _ := json.Marshal(s.usageBody())
			if string(b) != tc.want {
				t.Errorf("usage %s, want %s", b, tc.want)
			}
		})
	}
}

// The chunk encoder writes exactly OpenAI's frames, and text that round-trips.
func TestChunks(t *testing.T) {
	c := newChunks("exe_1", 1700000000, "gpt-x")
	c.role()
	c.text("Hel")
	c.text("lo \"</script>\"\n\u2028")
	c.toolStart(0, "call_1", "f")
	c.toolArgs(0, `{"a":`)
	c.toolArgs(0, `1}`)
	c.toolArgs(1, `{}`)
	c.finish("tool_calls")
	c.usage(&usageBody{PromptTokens: 1, CompletionTokens: 2, TotalTokens: 3})
	c.done()
	head := `data: {"id":"exe_1","object":"chat.completion.chunk","created":1700000000,"model":"gpt-x","choices":[`
	tail := `,"logprobs":null,"finish_reason":null}]}` + "\n\n"
	want := head + `{"index":0,"delta":{"role":"assistant","content":""}` + tail +
		head + `{"index":0,"delta":{"content":"Hello \"\u003c/script\u003e\"\n\u2028"}` + tail +
		head + `{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"f","arguments":""}}]}` + tail +
		head + `{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"a\":1}"}}]}` + tail +
		head + `{"index":0,"delta":{"tool_calls":[{"index":1,"function":{"arguments":"{}"}}]}` + tail +
		head + `{"index":0,"delta":{},"logprobs":null,"finish_reason":"tool_calls"}]}` + "\n\n" +
		head + `],"usage":{"prompt_tokens":1,"completion_tokens":2,"total_tokens":3}}` + "\n\n" +
		"data: [DONE]\n\n"
	got := string(c.take())
	if got != want {
		t.Errorf("frames:\n%s\nwant:\n%s", got, want)
	}
	var text string
	for _, frame := range strings.Split(strings.TrimSuffix(got, "\n\n"), "\n\n") {
		data := strings.TrimPrefix(frame, "data: ")
		if data == "[DONE]" {
			continue
		}
		var v struct {
			Choices []struct {
				Delta struct {
					Content string `json:"content"`
				} `json:"delta"`
			} `json:"choices"`
		}
		if err := json.Unmarshal([]byte(data), &v); err != nil {
			t.Fatalf("frame is not JSON: %v: %s", err, data)
		}
		if len(v.Choices) > 0 {
			text += v.Choices[0].Delta.Content
		}
	}
	if text != "Hello \"</script>\"\n\u2028" {
		t.Errorf("text %q", text)
	}
	if len(c.take()) != 0 {
		t.Error("take returned frames twice")
	}

	c.failure(protocol.NewError(protocol.CodeProviderUnavailable, "gone"))
	var frame struct{ Error openAIErrorObject }
	if err := json.Unmarshal([]byte(strings.TrimPrefix(string(c.take()), "data: ")), &frame); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(openAIErrorObject{Message: "gone", Type: "server_error", Code: "provider_unavailable", Switchboard: struct{ Retryable bool }{true}}, frame.Error); diff != "" {
		t.Errorf("error frame (-want +got):\n%s", diff)
	}
}

type openAIErrorObject struct {
	Message, Type, Code string
	Param               *string
	Switchboard         struct{ Retryable bool }
}

func TestParseDataURL(t *testing.T) {
	for _, tc := range []struct {
		in       string
		mt, data string
		ok       bool
	}{
		{"data:image/png;base64,AAAA", "image/png", "AAAA", true},
		{"DATA:Image/PNG;BASE64,AAAA", "image/png", "AAAA", true},
		{"data:application/pdf;name=a.pdf;base64,AA==", "application/pdf", "AA==", true},
		{"data:;base64,AAAA", "", "AAAA", true},
		{"data:image/png,AAAA", "", "", false},
		{"data:image/png;base64", "", "", false},
		{"https://a/b.png", "", "", false},
	} {
		mt, data, ok := parseDataURL(tc.in)
		if mt != tc.mt || data != tc.data || ok != tc.ok {
			t.Errorf("%q: %q %q %v", tc.in, mt, data, ok)
		}
	}
}

// A run of large deltas is cut into chunks of bounded size.
func TestChunksBounded(t *testing.T) {
	c := newChunks("exe_1", 1, "m")
	piece := strings.Repeat("a", 10<<10)
	for range 20 {
		c.text(piece)
	}
	if !c.full() {
		t.Fatal("20 pieces of 10 KiB do not fill the buffer")
	}
	frames := strings.Split(strings.TrimSuffix(string(c.take()), "\n\n"), "\n\n")
	text := 0
	for _, f := range frames {
		if len(f) > flushBytes+len(piece)+256 {
			t.Errorf("a chunk of %d bytes", len(f))
		}
		var v struct {
			Choices []struct{ Delta struct{ Content string } }
		}
		if err := json.Unmarshal([]byte(strings.TrimPrefix(f, "data: ")), &v); err != nil {
			t.Fatal(err)
		}
		text += len(v.Choices[0].Delta.Content)
	}
	if len(frames) < 3 || text != 20*len(piece) {
		t.Errorf("%d frames holding %d bytes of text", len(frames), text)
	}
}
