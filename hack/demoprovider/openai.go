package main

import (
	"encoding/json"
	"net/http"
)

// OpenAI Chat Completions: POST /openai/v1/chat/completions. Only the request fields the
// script needs are read; every other field is accepted and ignored.

// openAIRequest is the part of a chat completion request the demo reads.
type openAIRequest struct {
	Model         string          `json:"model"`
	Messages      []openAIMessage `json:"messages"`
	Stream        bool            `json:"stream"`
	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	Tools []struct {
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	} `json:"tools"`
}

// openAIMessage is one input message; content is a string, an array of parts, or null.
type openAIMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

// text returns the message's text: the string content, or its text parts concatenated.
func (m openAIMessage) text() string {
	var s string
	if json.Unmarshal(m.Content, &s) == nil {
		return s
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if json.Unmarshal(m.Content, &parts) != nil {
		return ""
	}
	for _, p := range parts {
		if p.Type == "text" {
			s += p.Text
		}
	}
	return s
}

// openAIUsage is the token usage of a completion.
type openAIUsage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

// openAIToolCall is a tool call, whole (non-streaming) or as a fragment (streaming, where
// Index is set and id, type and name appear only in the first fragment).
type openAIToolCall struct {
	Index    *int           `json:"index,omitempty"`
	ID       string         `json:"id,omitempty"`
	Type     string         `json:"type,omitempty"`
	Function openAIFunction `json:"function"`
}

// openAIFunction is a tool call's function name and (partial) JSON arguments.
type openAIFunction struct {
	Name      string `json:"name,omitempty"`
	Arguments string `json:"arguments"`
}

// openAIDelta is the incremental message of a streamed chunk.
type openAIDelta struct {
	Role      string           `json:"role,omitempty"`
	Content   *string          `json:"content,omitempty"`
	ToolCalls []openAIToolCall `json:"tool_calls,omitempty"`
}

// openAIChunkChoice is one choice of a chat.completion.chunk.
type openAIChunkChoice struct {
	Index        int         `json:"index"`
	Delta        openAIDelta `json:"delta"`
	Logprobs     *struct{}   `json:"logprobs"`
	FinishReason *string     `json:"finish_reason"`
}

// openAIChunk is one chat.completion.chunk frame.
type openAIChunk struct {
	ID                string              `json:"id"`
	Object            string              `json:"object"`
	Created           int64               `json:"created"`
	Model             string              `json:"model"`
	SystemFingerprint string              `json:"system_fingerprint"`
	Choices           []openAIChunkChoice `json:"choices"`
	Usage             *openAIUsage        `json:"usage,omitempty"`
}

// openAIOutputMessage is the assistant message of a non-streaming completion.
type openAIOutputMessage struct {
	Role      string           `json:"role"`
	Content   *string          `json:"content"`
	Refusal   *string          `json:"refusal"`
	ToolCalls []openAIToolCall `json:"tool_calls,omitempty"`
}

// openAIChoice is one choice of a non-streaming completion.
type openAIChoice struct {
	Index        int                 `json:"index"`
	Message      openAIOutputMessage `json:"message"`
	Logprobs     *struct{}           `json:"logprobs"`
	FinishReason string              `json:"finish_reason"`
}

// openAICompletion is a non-streaming chat.completion.
type openAICompletion struct {
	ID                string         `json:"id"`
	Object            string         `json:"object"`
	Created           int64          `json:"created"`
	Model             string         `json:"model"`
	SystemFingerprint string         `json:"system_fingerprint"`
	Choices           []openAIChoice `json:"choices"`
	Usage             openAIUsage    `json:"usage"`
}

// openAIChat serves POST /openai/v1/chat/completions.
func (s *server) openAIChat(w http.ResponseWriter, r *http.Request) {
	s.stats.openAIRequests.Add(1)
	if !s.authorized(r, "Authorization", "Bearer ") {
		openAIError(w, http.StatusUnauthorized, "")
		return
	}
	var req openAIRequest
	if err := decodeBody(w, r, &req); err != nil {
		openAIError(w, http.StatusBadRequest, "We could not parse the JSON body of your request.")
		return
	}
	switch {
	case req.Model == "":
		openAIError(w, http.StatusBadRequest, "you must provide a model parameter")
		return
	case len(req.Messages) == 0:
		openAIError(w, http.StatusBadRequest, "messages must be a non-empty array")
		return
	}
	sn := scenarioFor(req.Model)
	if sn.status != 0 {
		openAIError(w, sn.status, "")
		return
	}
	w.Header().Set("X-Request-Id", s.nextID("req_demo"))

	a := s.openAIAnswer(req)
	id := s.nextID("chatcmpl-demo")
	created := s.cfg.Now().Unix()
	finish := "stop"
	if a.tool != "" {
		finish = "tool_calls"
	}
	usage := openAIUsage{
		PromptTokens:     a.promptTokens,
		CompletionTokens: a.completionTokens(),
		TotalTokens:      a.promptTokens + a.completionTokens(),
	}
	callID := s.nextID("call_demo")

	if !req.Stream {
		msg := openAIOutputMessage{Role: "assistant"}
		if a.tool == "" {
			msg.Content = ptr(a.text())
		} else {
			msg.ToolCalls = []openAIToolCall{{
				ID: callID, Type: "function",
				Function: openAIFunction{Name: a.tool, Arguments: a.text()},
			}}
		}
		respondJSON(w, r, openAICompletion{
			ID: id, Object: "chat.completion", Created: created, Model: req.Model,
			SystemFingerprint: "fp_demo",
			Choices:           []openAIChoice{{Message: msg, FinishReason: finish}},
			Usage:             usage,
		}, sn, s.pacing(sn), len(a.pieces))
		return
	}

	chunk := func(delta openAIDelta, finish *string) frame {
		return frame{data: openAIChunk{
			ID: id, Object: "chat.completion.chunk", Created: created, Model: req.Model,
			SystemFingerprint: "fp_demo",
			Choices:           []openAIChunkChoice{{Delta: delta, FinishReason: finish}},
		}}
	}
	var sc script
	if a.tool == "" {
		sc.prelude = []frame{chunk(openAIDelta{Role: "assistant", Content: ptr("")}, nil)}
		for _, p := range a.pieces {
			sc.pieces = append(sc.pieces, chunk(openAIDelta{Content: ptr(p)}, nil))
		}
	} else {
		sc.prelude = []frame{chunk(openAIDelta{Role: "assistant", ToolCalls: []openAIToolCall{{
			Index: ptr(0), ID: callID, Type: "function",
			Function: openAIFunction{Name: a.tool},
		}}}, nil)}
		for _, p := range a.pieces {
			sc.pieces = append(sc.pieces, chunk(openAIDelta{ToolCalls: []openAIToolCall{{
				Index: ptr(0), Function: openAIFunction{Arguments: p},
			}}}, nil))
		}
	}
	sc.epilogue = []frame{chunk(openAIDelta{}, &finish)}
	if req.StreamOptions != nil && req.StreamOptions.IncludeUsage {
		sc.epilogue = append(sc.epilogue, frame{data: openAIChunk{
			ID: id, Object: "chat.completion.chunk", Created: created, Model: req.Model,
			SystemFingerprint: "fp_demo", Choices: []openAIChunkChoice{}, Usage: &usage,
		}})
	}
	sc.epilogue = append(sc.epilogue, frame{data: rawData("[DONE]")})
	play(w, r, sseLF, sc, sn, s.pacing(sn))
}

// openAIAnswer scripts the answer to req: a conversation ending with a "tool" message
// has that result echoed; otherwise the last user message is echoed, or the first tool
// is called when tools are offered.
func (s *server) openAIAnswer(req openAIRequest) answer {
	var prompt []string
	var last string
	var lastContent json.RawMessage
	for _, m := range req.Messages {
		t := m.text()
		prompt = append(prompt, t)
		if m.Role == "user" {
			last, lastContent = t, m.Content
		}
	}
	if media := openAIMedia(lastContent); media != "" && scenarioFor(req.Model).describe {
		last = media
	}
	final := req.Messages[len(req.Messages)-1]
	endsWithToolResult := final.Role == "tool"
	if endsWithToolResult {
		last = final.text()
	}
	var firstTool string
	if len(req.Tools) > 0 {
		firstTool = req.Tools[0].Function.Name
	}
	return s.newAnswer(prompt, last, endsWithToolResult, firstTool)
}

// ptr returns a pointer to v.
func ptr[T any](v T) *T { return &v }
