package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
)

// anthropicEventView is what the tests read from a Messages stream event.
type anthropicEventView struct {
	Type    string `json:"type"`
	Index   *int   `json:"index"`
	Message *struct {
		ID    string `json:"id"`
		Role  string `json:"role"`
		Model string `json:"model"`
		Usage struct {
			InputTokens int `json:"input_tokens"`
		} `json:"usage"`
	} `json:"message"`
	ContentBlock *struct {
		Type string `json:"type"`
		ID   string `json:"id"`
		Name string `json:"name"`
	} `json:"content_block"`
	Delta *struct {
		Type        string `json:"type"`
		Text        string `json:"text"`
		PartialJSON string `json:"partial_json"`
		StopReason  string `json:"stop_reason"`
	} `json:"delta"`
	Usage *struct {
		OutputTokens int `json:"output_tokens"`
	} `json:"usage"`
}

// describeAnthropic reduces the events to one comparable line each, checking that each
// frame's event field matches its data's type.
func describeAnthropic(t *testing.T, frames []sseFrame) []string {
	t.Helper()
	var lines []string
	for _, f := range frames {
		var e anthropicEventView
		if err := json.Unmarshal([]byte(f.data), &e); err != nil {
			t.Fatalf("event %s: %v", f.data, err)
		}
		if e.Type != f.event {
			t.Fatalf("event field %q but data type %q", f.event, e.Type)
		}
		line := e.Type
		switch {
		case e.Message != nil:
			line += fmt.Sprintf(" id=%t role=%s model=%s in=%d", e.Message.ID != "", e.Message.Role, e.Message.Model, e.Message.Usage.InputTokens)
		case e.ContentBlock != nil:
			line += fmt.Sprintf(" %d %s id=%t name=%q", *e.Index, e.ContentBlock.Type, e.ContentBlock.ID != "", e.ContentBlock.Name)
		case e.Delta != nil && e.Delta.Type == "text_delta":
			line += fmt.Sprintf(" %d text %q", *e.Index, e.Delta.Text)
		case e.Delta != nil && e.Delta.Type == "input_json_delta":
			line += fmt.Sprintf(" %d json %q", *e.Index, e.Delta.PartialJSON)
		case e.Delta != nil:
			line += fmt.Sprintf(" %s out=%d", e.Delta.StopReason, e.Usage.OutputTokens)
		case e.Index != nil:
			line += fmt.Sprintf(" %d", *e.Index)
		}
		lines = append(lines, line)
	}
	return lines
}

func TestAnthropicStream(t *testing.T) {
	ts := startServer(t, config{})
	resp := ts.do(t, "POST", "/anthropic/v1/messages", anthropicBody("claude-demo", true, nil), anthropicVersion...)
	checkSSEHeaders(t, resp)
	frames, complete := readFrames(t, resp.Body)
	if !complete {
		t.Fatal("stream ended inside a frame")
	}
	equalLines(t, describeAnthropic(t, frames), []string{
		`message_start id=true role=assistant model=claude-demo in=4`,
		`content_block_start 0 text id=false name=""`,
		`ping`,
		`content_block_delta 0 text "Hel"`,
		`content_block_delta 0 text "lo,"`,
		`content_block_delta 0 text " wo"`,
		`content_block_delta 0 text "rl"`,
		`content_block_delta 0 text "d!"`,
		`content_block_stop 0`,
		`message_delta end_turn out=5`,
		`message_stop`,
	})
	if resp.Header.Get("Request-Id") == "" {
		t.Error("no request-id header")
	}
}

func TestAnthropicStreamToolUse(t *testing.T) {
	ts := startServer(t, config{})
	tools := []any{map[string]any{"name": "get_weather", "input_schema": map[string]any{"type": "object"}}}
	resp := ts.do(t, "POST", "/anthropic/v1/messages", anthropicBody("claude-demo", true, map[string]any{"tools": tools}), anthropicVersion...)
	checkSSEHeaders(t, resp)
	frames, _ := readFrames(t, resp.Body)
	equalLines(t, describeAnthropic(t, frames), []string{
		`message_start id=true role=assistant model=claude-demo in=4`,
		`content_block_start 0 tool_use id=true name="get_weather"`,
		`ping`,
		`content_block_delta 0 json "{\""`,
		`content_block_delta 0 json "city"`,
		`content_block_delta 0 json "\":\""`,
		`content_block_delta 0 json "Paris"`,
		`content_block_delta 0 json "\"}"`,
		`content_block_stop 0`,
		`message_delta tool_use out=5`,
		`message_stop`,
	})
}

func TestAnthropicToolResultIsEchoed(t *testing.T) {
	ts := startServer(t, config{Chunks: 1})
	body := anthropicBody("claude-demo", false, map[string]any{
		"tools": []any{map[string]any{"name": "get_weather"}},
		"messages": []any{
			map[string]any{"role": "user", "content": "Weather?"},
			map[string]any{"role": "assistant", "content": []any{map[string]any{
				"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": map[string]any{"city": "Paris"},
			}}},
			map[string]any{"role": "user", "content": []any{map[string]any{
				"type": "tool_result", "tool_use_id": "toolu_1",
				"content": []any{map[string]any{"type": "text", "text": "Sunny, 21C"}},
			}}},
		},
	})
	var got struct {
		Content []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		} `json:"content"`
		StopReason string `json:"stop_reason"`
	}
	decodeJSON(t, ts.do(t, "POST", "/anthropic/v1/messages", body, anthropicVersion...), http.StatusOK, &got)
	if len(got.Content) != 1 || got.Content[0].Text != "Sunny, 21C" || got.StopReason != "end_turn" {
		t.Errorf("message = %+v", got)
	}
}

func TestAnthropicNonStreaming(t *testing.T) {
	ts := startServer(t, config{})
	type message struct {
		ID      string `json:"id"`
		Type    string `json:"type"`
		Role    string `json:"role"`
		Content []struct {
			Type  string          `json:"type"`
			Text  string          `json:"text"`
			ID    string          `json:"id"`
			Name  string          `json:"name"`
			Input json.RawMessage `json:"input"`
		} `json:"content"`
		StopReason string `json:"stop_reason"`
		Usage      struct {
			InputTokens  int `json:"input_tokens"`
			OutputTokens int `json:"output_tokens"`
		} `json:"usage"`
	}
	var got message
	decodeJSON(t, ts.do(t, "POST", "/anthropic/v1/messages", anthropicBody("claude-demo", false, nil), anthropicVersion...), http.StatusOK, &got)
	if got.ID == "" || got.Type != "message" || got.Role != "assistant" || got.StopReason != "end_turn" ||
		len(got.Content) != 1 || got.Content[0].Type != "text" || got.Content[0].Text != testText {
		t.Errorf("message = %+v", got)
	}
	if got.Usage.InputTokens != 4 || got.Usage.OutputTokens != 5 {
		t.Errorf("usage = %+v", got.Usage)
	}

	got = message{}
	tools := []any{map[string]any{"name": "get_weather"}}
	decodeJSON(t, ts.do(t, "POST", "/anthropic/v1/messages", anthropicBody("claude-demo", false, map[string]any{"tools": tools}), anthropicVersion...), http.StatusOK, &got)
	if got.StopReason != "tool_use" || len(got.Content) != 1 {
		t.Fatalf("message = %+v", got)
	}
	b := got.Content[0]
	if b.Type != "tool_use" || b.ID == "" || b.Name != "get_weather" || string(b.Input) != `{"city":"Paris"}` {
		t.Errorf("tool_use block = %+v (input %s)", b, b.Input)
	}
}

func TestAnthropicBadRequests(t *testing.T) {
	ts := startServer(t, config{})
	tests := []struct {
		name    string
		body    any
		headers []string
		message string
	}{
		{"no anthropic-version", anthropicBody("claude-demo", false, nil), nil, "anthropic-version: header is required"},
		{"not JSON object", "text", anthropicVersion, "The request body is not valid JSON."},
		{"no max_tokens", map[string]any{"model": "claude-demo", "messages": []any{map[string]any{"role": "user", "content": "hi"}}}, anthropicVersion, "max_tokens: Field required"},
		{"no messages", map[string]any{"model": "claude-demo", "max_tokens": 5}, anthropicVersion, "messages: at least one message is required"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got struct {
				Type  string `json:"type"`
				Error struct {
					Type    string `json:"type"`
					Message string `json:"message"`
				} `json:"error"`
			}
			decodeJSON(t, ts.do(t, "POST", "/anthropic/v1/messages", tt.body, tt.headers...), http.StatusBadRequest, &got)
			if got.Type != "error" || got.Error.Type != "invalid_request_error" || got.Error.Message != tt.message {
				t.Errorf("error = %+v", got)
			}
		})
	}
}
