package main

import (
	"net/http"
	"testing"
)

// A 1x1 PNG (70 bytes) and a tiny PDF (82 bytes), base64.
const (
	tinyPNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR4nGNgYGD4DwABBAEAwS2OUAAAAABJRU5ErkJggg=="
	tinyPDF = "JVBERi0xLjQKJcOkw7zDtsOfCjEgMCBvYmoKPDwvVHlwZS9DYXRhbG9nPj4KZW5kb2JqCnRyYWlsZXIKPDwvUm9vdCAxIDAgUj4+CiUlRU9GCg=="
)

func TestDescribeOpenAI(t *testing.T) {
	ts := startServer(t, config{Chunks: 1})
	body := openAIBody("demo-describe", false, map[string]any{"messages": []any{map[string]any{"role": "user", "content": []any{
		map[string]any{"type": "text", "text": "What are these?"},
		map[string]any{"type": "image_url", "image_url": map[string]any{"url": "data:image/png;base64," + tinyPNG}},
		map[string]any{"type": "image_url", "image_url": map[string]any{"url": "https://example.com/cat.jpg"}},
		map[string]any{"type": "file", "file": map[string]any{"filename": "report.pdf", "file_data": "data:application/pdf;base64," + tinyPDF}},
	}}}})
	var got struct {
		Choices []struct {
			Message struct {
				Content string `json:"content"`
			} `json:"message"`
		} `json:"choices"`
	}
	decodeJSON(t, ts.do(t, "POST", "/openai/v1/chat/completions", body), http.StatusOK, &got)
	want := "image image/png 70 bytes; image url; file application/pdf 82 bytes report.pdf"
	if len(got.Choices) != 1 || got.Choices[0].Message.Content != want {
		t.Errorf("answer %+v, want %q", got, want)
	}
	// Without media, describe echoes.
	decodeJSON(t, ts.do(t, "POST", "/openai/v1/chat/completions", openAIBody("demo-describe", false, nil)), http.StatusOK, &got)
	if got.Choices[0].Message.Content != "Hello, world!" {
		t.Errorf("answer without media %+v", got)
	}
}

func TestDescribeAnthropicAndCacheMarks(t *testing.T) {
	ts := startServer(t, config{Chunks: 1})
	ephemeral := map[string]any{"type": "ephemeral"}
	body := anthropicBody("claude-describe", false, map[string]any{
		"system": []any{map[string]any{"type": "text", "text": "Be brief.", "cache_control": ephemeral}},
		"tools":  []any{map[string]any{"name": "get_weather", "cache_control": ephemeral}},
		"messages": []any{
			map[string]any{"role": "assistant", "content": []any{map[string]any{
				"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": map[string]any{}}}},
			map[string]any{"role": "user", "content": []any{
				map[string]any{"type": "tool_result", "tool_use_id": "toolu_1", "content": []any{
					map[string]any{"type": "text", "text": "Sunny", "cache_control": ephemeral}}},
				map[string]any{"type": "image", "source": map[string]any{"type": "base64", "media_type": "image/png", "data": tinyPNG}},
				map[string]any{"type": "document", "title": "report.pdf", "source": map[string]any{"type": "base64", "media_type": "application/pdf", "data": tinyPDF}},
				map[string]any{"type": "image", "source": map[string]any{"type": "url", "url": "https://example.com/cat.jpg"}, "cache_control": ephemeral},
			}},
		},
	})
	var got struct {
		Content []struct {
			Text string `json:"text"`
		} `json:"content"`
		Usage map[string]int `json:"usage"`
	}
	decodeJSON(t, ts.do(t, "POST", "/anthropic/v1/messages", body, anthropicVersion...), http.StatusOK, &got)
	want := "image image/png 70 bytes; document application/pdf 82 bytes report.pdf; image url"
	if len(got.Content) != 1 || got.Content[0].Text != want {
		t.Errorf("answer %+v, want %q", got.Content, want)
	}
	if got.Usage["cache_creation_input_tokens"] != 4 {
		t.Errorf("usage %v, want 4 cache breakpoints counted", got.Usage)
	}
	// Without breakpoints the count is absent.
	resp := ts.do(t, "POST", "/anthropic/v1/messages", anthropicBody("claude-demo", false, nil), anthropicVersion...)
	var plain struct {
		Usage map[string]int `json:"usage"`
	}
	decodeJSON(t, resp, http.StatusOK, &plain)
	if _, ok := plain.Usage["cache_creation_input_tokens"]; ok {
		t.Errorf("usage without breakpoints %v", plain.Usage)
	}
}

func TestAnthropicRefusal(t *testing.T) {
	ts := startServer(t, config{})
	var got struct {
		StopReason string `json:"stop_reason"`
	}
	decodeJSON(t, ts.do(t, "POST", "/anthropic/v1/messages", anthropicBody("claude-refuse", false, nil), anthropicVersion...), http.StatusOK, &got)
	if got.StopReason != "refusal" {
		t.Errorf("stop_reason %q", got.StopReason)
	}
	resp := ts.do(t, "POST", "/anthropic/v1/messages", anthropicBody("claude-refuse", true, nil), anthropicVersion...)
	frames, _ := readFrames(t, resp.Body)
	lines := describeAnthropic(t, frames)
	if lines[len(lines)-2] != "message_delta refusal out=5" {
		t.Errorf("stream %v", lines)
	}
}
