package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
)

// openAIChunkView is what the tests read from a chat.completion.chunk.
type openAIChunkView struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Model   string `json:"model"`
	Choices []struct {
		Delta struct {
			Role      string  `json:"role"`
			Content   *string `json:"content"`
			ToolCalls []struct {
				Index    *int   `json:"index"`
				ID       string `json:"id"`
				Type     string `json:"type"`
				Function struct {
					Name      string `json:"name"`
					Arguments string `json:"arguments"`
				} `json:"function"`
			} `json:"tool_calls"`
		} `json:"delta"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage *openAIUsage `json:"usage"`
}

// describeOpenAI reduces the frames to one comparable line each, checking on the way
// that every chunk belongs to the same completion.
func describeOpenAI(t *testing.T, frames []sseFrame) []string {
	t.Helper()
	var lines []string
	var id string
	for _, f := range frames {
		if f.event != "" {
			t.Fatalf("OpenAI frames have no event field, got %q", f.event)
		}
		if f.data == "[DONE]" {
			lines = append(lines, "[DONE]")
			continue
		}
		var c openAIChunkView
		if err := json.Unmarshal([]byte(f.data), &c); err != nil {
			t.Fatalf("chunk %s: %v", f.data, err)
		}
		if id == "" {
			id = c.ID
		}
		if c.ID != id || c.Object != "chat.completion.chunk" {
			t.Fatalf("chunk id/object = %q/%q, want %q/chat.completion.chunk", c.ID, c.Object, id)
		}
		if c.Usage != nil {
			if len(c.Choices) != 0 {
				t.Fatalf("usage chunk has choices: %s", f.data)
			}
			lines = append(lines, fmt.Sprintf("usage %d+%d=%d", c.Usage.PromptTokens, c.Usage.CompletionTokens, c.Usage.TotalTokens))
			continue
		}
		if len(c.Choices) != 1 {
			t.Fatalf("chunk has %d choices: %s", len(c.Choices), f.data)
		}
		ch := c.Choices[0]
		line := ""
		if ch.Delta.Role != "" {
			line += "role=" + ch.Delta.Role + " "
		}
		if ch.Delta.Content != nil {
			line += fmt.Sprintf("content=%q ", *ch.Delta.Content)
		}
		for _, tc := range ch.Delta.ToolCalls {
			if tc.Index == nil || *tc.Index != 0 {
				t.Fatalf("tool call fragment without index 0: %s", f.data)
			}
			line += fmt.Sprintf("tool(id=%t type=%q name=%q args=%q) ", tc.ID != "", tc.Type, tc.Function.Name, tc.Function.Arguments)
		}
		if ch.FinishReason != nil {
			line += "finish=" + *ch.FinishReason
		}
		lines = append(lines, line)
	}
	return lines
}

func TestOpenAIStreamWithUsage(t *testing.T) {
	ts := startServer(t, config{})
	resp := ts.do(t, "POST", "/openai/v1/chat/completions",
		openAIBody("gpt-demo", true, map[string]any{"stream_options": map[string]any{"include_usage": true}}))
	checkSSEHeaders(t, resp)
	frames, complete := readFrames(t, resp.Body)
	if !complete {
		t.Fatal("stream ended inside a frame")
	}
	equalLines(t, describeOpenAI(t, frames), []string{
		`role=assistant content="" `,
		`content="Hel" `,
		`content="lo," `,
		`content=" wo" `,
		`content="rl" `,
		`content="d!" `,
		`finish=stop`,
		`usage 4+5=9`,
		`[DONE]`,
	})
	if resp.Header.Get("X-Request-Id") == "" {
		t.Error("no x-request-id header")
	}
}

func TestOpenAIStreamWithoutUsage(t *testing.T) {
	ts := startServer(t, config{Chunks: 2})
	resp := ts.do(t, "POST", "/openai/v1/chat/completions", openAIBody("gpt-demo", true, nil))
	checkSSEHeaders(t, resp)
	frames, _ := readFrames(t, resp.Body)
	equalLines(t, describeOpenAI(t, frames), []string{
		`role=assistant content="" `,
		`content="Hello, " `,
		`content="world!" `,
		`finish=stop`,
		`[DONE]`,
	})
}

func TestOpenAIStreamToolCall(t *testing.T) {
	ts := startServer(t, config{})
	tools := []any{
		map[string]any{"type": "function", "function": map[string]any{"name": "get_weather", "parameters": map[string]any{"type": "object"}}},
		map[string]any{"type": "function", "function": map[string]any{"name": "other"}},
	}
	resp := ts.do(t, "POST", "/openai/v1/chat/completions", openAIBody("gpt-demo", true, map[string]any{
		"tools": tools, "stream_options": map[string]any{"include_usage": true},
	}))
	checkSSEHeaders(t, resp)
	frames, _ := readFrames(t, resp.Body)
	equalLines(t, describeOpenAI(t, frames), []string{
		`role=assistant tool(id=true type="function" name="get_weather" args="") `,
		`tool(id=false type="" name="" args="{\"") `,
		`tool(id=false type="" name="" args="city") `,
		`tool(id=false type="" name="" args="\":\"") `,
		`tool(id=false type="" name="" args="Paris") `,
		`tool(id=false type="" name="" args="\"}") `,
		`finish=tool_calls`,
		`usage 4+5=9`,
		`[DONE]`,
	})
}

func TestOpenAIToolResultIsEchoed(t *testing.T) {
	ts := startServer(t, config{Chunks: 1})
	body := map[string]any{
		"model":  "gpt-demo",
		"stream": true,
		"tools":  []any{map[string]any{"type": "function", "function": map[string]any{"name": "get_weather"}}},
		"messages": []any{
			map[string]any{"role": "user", "content": "Weather?"},
			map[string]any{"role": "assistant", "content": nil, "tool_calls": []any{map[string]any{
				"id": "call_1", "type": "function", "function": map[string]any{"name": "get_weather", "arguments": `{"city":"Paris"}`},
			}}},
			map[string]any{"role": "tool", "tool_call_id": "call_1", "content": "Sunny, 21C"},
		},
	}
	resp := ts.do(t, "POST", "/openai/v1/chat/completions", body)
	frames, _ := readFrames(t, resp.Body)
	equalLines(t, describeOpenAI(t, frames), []string{
		`role=assistant content="" `,
		`content="Sunny, 21C" `,
		`finish=stop`,
		`[DONE]`,
	})
}

func TestOpenAINonStreaming(t *testing.T) {
	ts := startServer(t, config{})
	var got struct {
		Object  string `json:"object"`
		Model   string `json:"model"`
		Choices []struct {
			Message struct {
				Role      string  `json:"role"`
				Content   *string `json:"content"`
				ToolCalls []struct {
					ID       string `json:"id"`
					Type     string `json:"type"`
					Function struct {
						Name      string `json:"name"`
						Arguments string `json:"arguments"`
					} `json:"function"`
				} `json:"tool_calls"`
			} `json:"message"`
			FinishReason string `json:"finish_reason"`
		} `json:"choices"`
		Usage openAIUsage `json:"usage"`
	}
	// Content given as an array of parts is echoed too.
	body := openAIBody("gpt-demo", false, nil)
	body["messages"] = []any{map[string]any{"role": "user", "content": []any{
		map[string]any{"type": "text", "text": "Hello, "},
		map[string]any{"type": "image_url", "image_url": map[string]any{"url": "data:image/png;base64,AA=="}},
		map[string]any{"type": "text", "text": "world!"},
	}}}
	decodeJSON(t, ts.do(t, "POST", "/openai/v1/chat/completions", body), http.StatusOK, &got)
	if got.Object != "chat.completion" || got.Model != "gpt-demo" || len(got.Choices) != 1 {
		t.Fatalf("completion = %+v", got)
	}
	msg := got.Choices[0].Message
	if msg.Role != "assistant" || msg.Content == nil || *msg.Content != testText || got.Choices[0].FinishReason != "stop" {
		t.Errorf("message = %+v finish %q", msg, got.Choices[0].FinishReason)
	}
	if got.Usage != (openAIUsage{PromptTokens: 2, CompletionTokens: 5, TotalTokens: 7}) {
		t.Errorf("usage = %+v", got.Usage)
	}

	got.Choices = nil
	tools := []any{map[string]any{"type": "function", "function": map[string]any{"name": "get_weather"}}}
	decodeJSON(t, ts.do(t, "POST", "/openai/v1/chat/completions", openAIBody("gpt-demo", false, map[string]any{"tools": tools})), http.StatusOK, &got)
	msg = got.Choices[0].Message
	if msg.Content != nil || len(msg.ToolCalls) != 1 || got.Choices[0].FinishReason != "tool_calls" {
		t.Fatalf("message = %+v finish %q", msg, got.Choices[0].FinishReason)
	}
	tc := msg.ToolCalls[0]
	if tc.ID == "" || tc.Type != "function" || tc.Function.Name != "get_weather" || tc.Function.Arguments != `{"city":"Paris"}` {
		t.Errorf("tool call = %+v", tc)
	}
}

func TestOpenAIBadRequests(t *testing.T) {
	ts := startServer(t, config{})
	for name, body := range map[string]any{
		"not an object": []int{1},
		"no model":      map[string]any{"messages": []any{map[string]any{"role": "user", "content": "hi"}}},
		"no messages":   map[string]any{"model": "gpt-demo"},
	} {
		t.Run(name, func(t *testing.T) {
			var got struct {
				Error struct {
					Type    string `json:"type"`
					Message string `json:"message"`
				} `json:"error"`
			}
			decodeJSON(t, ts.do(t, "POST", "/openai/v1/chat/completions", body), http.StatusBadRequest, &got)
			if got.Error.Type != "invalid_request_error" || got.Error.Message == "" {
				t.Errorf("error = %+v", got.Error)
			}
		})
	}
}
