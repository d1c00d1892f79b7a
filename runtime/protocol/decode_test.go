package protocol_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/switchboard-dev/switchboard/runtime/protocol"
)

func ptr[T any](v T) *T { return &v }

func TestDecodeRequestContractExample(t *testing.T) {
	body := `{
	  "ability": "chat",
	  "input": [
	    {"type": "text", "role": "system", "text": "Answer briefly."},
	    {"type": "text", "text": "What is in this picture?"},
	    {"type": "image", "media_type": "image/png", "data": "iVBORw0KGgo="},
	    {"type": "tool", "name": "get_weather", "description": "...", "parameters": {"type": "object"}},
	    {"type": "tool_result", "call_id": "c1", "content": [{"type": "json", "json": [1, {"a": null}]}]}
	  ],
	  "requirements": ["output.text", "streaming"],
	  "routing": {"prefer": ["ai/gpt-4o-mini"], "max_attempts": 2},
	  "deadline_ms": 60000,
	  "metadata": {"team": "search"},
	  "extensions": {"openai.reasoning_effort": "low"}
	}`
	got, err := protocol.DecodeRequest([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	want := &protocol.Request{
		Ability: "chat",
		Input: []protocol.Part{
			{Type: protocol.PartText, Role: protocol.RoleSystem, Text: "Answer briefly."},
			{Type: protocol.PartText, Text: "What is in this picture?"},
			{Type: protocol.PartImage, MediaType: "image/png", Data: "iVBORw0KGgo="},
			{Type: protocol.PartTool, Name: "get_weather", Description: "...", Parameters: json.RawMessage(`{"type": "object"}`)},
			{Type: protocol.PartToolResult, CallID: "c1", Content: &protocol.ToolContent{Parts: []protocol.Part{
				{Type: protocol.PartJSON, JSON: json.RawMessage(`[1, {"a": null}]`)},
			}}},
		},
		Requirements: []protocol.Capability{protocol.CapOutputText, protocol.CapStreaming},
		Routing:      &protocol.Routing{Prefer: []string{"ai/gpt-4o-mini"}, MaxAttempts: ptr(2)},
		DeadlineMs:   ptr[int64](60000),
		Metadata:     map[string]string{"team": "search"},
		Extensions:   map[string]json.RawMessage{"openai.reasoning_effort": json.RawMessage(`"low"`)},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("DecodeRequest (-want +got):\n%s", diff)
	}
	if got.DeadlineOrDefault() != 60000 || got.MaxAttemptsOrDefault() != 2 {
		t.Errorf("explicit deadline/attempts not used")
	}
	if got.Input[1].RoleOrDefault() != protocol.RoleUser {
		t.Errorf("RoleOrDefault = %q, want user", got.Input[1].RoleOrDefault())
	}
}

func TestDecodeRequestDefaults(t *testing.T) {
	r, err := protocol.DecodeRequest([]byte(`{"ability":"chat","input":[{"type":"text","text":""}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if r.Routing != nil || r.DeadlineMs != nil {
		t.Errorf("absent optional fields must stay nil: %+v", r)
	}
	if r.DeadlineOrDefault() != protocol.DefaultDeadlineMs || r.MaxAttemptsOrDefault() != protocol.DefaultMaxAttempts {
		t.Errorf("defaults not applied")
	}
}

// TestDecodedValuesAreCopies guards against aliasing the caller's buffer, which an HTTP
// server reuses.
func TestDecodedValuesAreCopies(t *testing.T) {
	body := []byte(`{"ability":"chat","input":[{"type":"json","json":{"k":"v"}}],"extensions":{"openai.seed":7}}`)
	r, err := protocol.DecodeRequest(body)
	if err != nil {
		t.Fatal(err)
	}
	for i := range body {
		body[i] = ' '
	}
	if string(r.Input[0].JSON) != `{"k":"v"}` || string(r.Extensions["openai.seed"]) != "7" {
		t.Errorf("decoded raw values alias the body: %s %s", r.Input[0].JSON, r.Extensions["openai.seed"])
	}
}

func TestDecodeRequestErrors(t *testing.T) {
	for _, tc := range []struct {
		name, body, want string
	}{
		{"syntax", `{"ability":`, "body: not valid JSON"},
		{"media type required", `{"ability":"chat","input":[{"type":"image","data":"AAAA"}]}`,
			"input[].media_type: required for image, audio, video and file parts"},
		{"nested path", `{"ability":"chat","input":[{"type":"tool_result","call_id":"c","content":[{"type":"text"}]}]}`,
			"input[].content[].text: required for text parts"},
		{"foreign field before type", `{"ability":"chat","input":[{"data":"AAAA","type":"text","text":"x"}]}`,
			"input[].data: not allowed for this part type"},
		{"tool_call role", `{"ability":"chat","input":[{"type":"tool_call","role":"user","call_id":"c","name":"f","arguments":""}]}`,
			"input[].role: tool_call parts require role assistant"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := protocol.DecodeRequest([]byte(tc.body))
			var pe *protocol.Error
			if !errors.As(err, &pe) {
				t.Fatalf("error %v is not a *protocol.Error", err)
			}
			if pe.Code != protocol.CodeInvalidRequest || pe.Message != tc.want || pe.Retryable {
				t.Errorf("got %+v, want invalid_request %q", pe, tc.want)
			}
		})
	}
}

// TestPartMarshalJSON checks that encoding writes exactly the fields of the part's type,
// required ones even when empty, so what a client builds decodes on the server.
func TestPartMarshalJSON(t *testing.T) {
	for _, tc := range []struct {
		part protocol.Part
		want string
	}{
		{protocol.Part{Type: protocol.PartText}, `{"type":"text","text":""}`},
		{protocol.Part{Type: protocol.PartText, Text: "hi", Name: "dropped"}, `{"type":"text","text":"hi"}`},
		{protocol.Part{Type: protocol.PartJSON}, `{"type":"json","json":null}`},
		{protocol.Part{Type: protocol.PartToolCall, Role: protocol.RoleAssistant, CallID: "c", Name: "f"},
			`{"type":"tool_call","role":"assistant","name":"f","call_id":"c","arguments":""}`},
		{protocol.Part{Type: protocol.PartToolResult, CallID: "c"}, `{"type":"tool_result","call_id":"c","content":""}`},
		{protocol.Part{Type: protocol.PartToolResult, CallID: "c", Content: &protocol.ToolContent{}},
			`{"type":"tool_result","call_id":"c","content":[]}`},
		{protocol.Part{Type: protocol.PartFile, MediaType: "text/plain", URI: "s3://b/k"},
			`{"type":"file","media_type":"text/plain","uri":"s3://b/k"}`},
	} {
		got, err := json.Marshal(tc.part)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != tc.want {
			t.Errorf("Marshal(%+v) = %s, want %s", tc.part, got, tc.want)
		}
	}
}

func TestToolContentUnmarshalJSON(t *testing.T) {
	var p protocol.Part
	if err := json.Unmarshal([]byte(`{"type":"tool_result","call_id":"c","content":"ok"}`), &p); err != nil {
		t.Fatal(err)
	}
	if p.Content == nil || p.Content.Text == nil || *p.Content.Text != "ok" {
		t.Errorf("string content: got %+v", p.Content)
	}
	if err := json.Unmarshal([]byte(`{"type":"tool_result","call_id":"c","content":[{"type":"text","text":"a"}]}`), &p); err != nil {
		t.Fatal(err)
	}
	if p.Content.Text != nil || len(p.Content.Parts) != 1 || p.Content.Parts[0].Text != "a" {
		t.Errorf("parts content: got %+v", p.Content)
	}
	for _, bad := range []string{`{"content":5}`, `{"content":{}}`, `{"content":[{"type":"text","bogus":1}]}`} {
		if err := json.Unmarshal([]byte(bad), &p); err == nil {
			t.Errorf("Unmarshal(%s) succeeded", bad)
		}
	}
}

func TestRequestValidate(t *testing.T) {
	r := &protocol.Request{Ability: "chat", Input: []protocol.Part{{Type: protocol.PartText}}}
	if err := r.Validate(); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	r.Input = append(r.Input, protocol.Part{Type: protocol.PartToolCall, CallID: "c", Name: "f"})
	err := r.Validate()
	if err == nil || !strings.Contains(err.Error(), "input[].role") {
		t.Fatalf("Validate of a tool_call without role: %v", err)
	}
}

func TestExtensionRegistry(t *testing.T) {
	keys := map[string]bool{}
	for _, s := range protocol.DocumentedExtensions() {
		keys[s.Key] = true
		if got, ok := protocol.LookupExtension(s.Key); !ok || got.Key != s.Key {
			t.Errorf("LookupExtension(%q) = %+v, %v", s.Key, got, ok)
		}
	}
	for _, k := range []string{
		"openai.reasoning_effort", "openai.temperature", "openai.top_p", "openai.max_completion_tokens",
		"openai.seed", "anthropic.max_tokens", "anthropic.temperature", "anthropic.top_k", "anthropic.cache_control", "replicate.input",
		"gemini.temperature", "gemini.top_p", "gemini.top_k", "gemini.max_output_tokens", "gemini.seed",
		"gemini.stop_sequences", "gemini.thinking_budget", "gemini.thinking_level",
		"bedrock.max_tokens", "bedrock.temperature", "bedrock.top_p", "bedrock.stop_sequences",
	} {
		if !keys[k] {
			t.Errorf("%s is not documented", k)
		}
	}
	// The webhook settings would carry URLs, and no request may choose the model or
	// version: these must stay out of the registry.
	for _, k := range []string{"replicate.webhook_events_filter", "replicate.version"} {
		if _, ok := protocol.LookupExtension(k); ok {
			t.Errorf("%s is documented", k)
		}
	}
}

// benchmarkBody is a typical request: system prompt, user question, a small inline
// image, a tool definition and a json context part.
var benchmarkBody = []byte(`{
  "ability": "chat",
  "input": [
    {"type": "text", "role": "system", "text": "You are a helpful assistant. Answer briefly and cite the tool output when you use it."},
    {"type": "text", "text": "What is the weather like in the city shown in this photo, and should I take an umbrella?"},
    {"type": "image", "media_type": "image/png", "data": "` + strings.Repeat("iVBORw0KGgoAAAANSUhEUgAA", 64) + `"},
    {"type": "tool", "name": "get_weather", "description": "Current weather for a city.",
     "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "unit": {"enum": ["c", "f"]}}, "required": ["city"]}},
    {"type": "json", "json": {"user": {"locale": "fr-FR", "units": "metric"}, "history": [1, 2, 3]}}
  ],
  "requirements": ["output.text"],
  "routing": {"max_attempts": 2},
  "deadline_ms": 60000,
  "metadata": {"team": "search", "trace": "abc123"},
  "extensions": {"openai.temperature": 0.2}
}`)

func BenchmarkDecodeRequest(b *testing.B) {
	b.ReportAllocs()
	b.SetBytes(int64(len(benchmarkBody)))
	for b.Loop() {
		if _, err := protocol.DecodeRequest(benchmarkBody); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkFingerprint(b *testing.B) {
	b.ReportAllocs()
	b.SetBytes(int64(len(benchmarkBody)))
	for b.Loop() {
		if _, err := protocol.Fingerprint(benchmarkBody); err != nil {
			b.Fatal(err)
		}
	}
}

func TestArgumentsObject(t *testing.T) {
	for args, want := range map[string]string{
		"":                       "{}",
		"  ":                     "{}",
		` { "city" : "Paris" } `: `{"city":"Paris"}`,
		"[1]":                    "",
		`"s"`:                    "",
		"null":                   "",
		"{":                      "",
	} {
		got, ok := protocol.Part{Type: protocol.PartToolCall, Arguments: args}.ArgumentsObject()
		if ok != (want != "") || string(got) != want {
			t.Errorf("ArgumentsObject(%q) = %s, %v; want %q", args, got, ok, want)
		}
	}
}
