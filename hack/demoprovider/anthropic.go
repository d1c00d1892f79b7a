package main

import (
	"encoding/json"
	"net/http"
)

// Anthropic Messages: POST /anthropic/v1/messages. Like the real API it requires the
// anthropic-version header and max_tokens, so an adapter that forgets them fails here
// rather than in production.

// obj is a JSON object; the Anthropic events are small enough to spell out inline.
type obj = map[string]any

// anthropicRequest is the part of a Messages request the demo reads.
type anthropicRequest struct {
	Model     string             `json:"model"`
	MaxTokens int                `json:"max_tokens"`
	System    json.RawMessage    `json:"system"`
	Messages  []anthropicMessage `json:"messages"`
	Stream    bool               `json:"stream"`
	Tools     []struct {
		Name         string          `json:"name"`
		CacheControl json.RawMessage `json:"cache_control"`
	} `json:"tools"`
}

// anthropicMessage is one input message; content is a string or an array of blocks.
type anthropicMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

// anthropicBlock is the part of a content block the demo reads.
type anthropicBlock struct {
	Type string `json:"type"`
	Text string `json:"text"`
	// Content is a tool_result's content: a string or an array of blocks.
	Content json.RawMessage `json:"content"`
}

// anthropicBlocks decodes content (a string or an array of blocks) into blocks.
func anthropicBlocks(content json.RawMessage) []anthropicBlock {
	var s string
	if json.Unmarshal(content, &s) == nil {
		return []anthropicBlock{{Type: "text", Text: s}}
	}
	var blocks []anthropicBlock
	if json.Unmarshal(content, &blocks) != nil {
		return nil
	}
	return blocks
}

// anthropicText concatenates the text blocks of content.
func anthropicText(content json.RawMessage) string {
	var s string
	for _, b := range anthropicBlocks(content) {
		if b.Type == "text" {
			s += b.Text
		}
	}
	return s
}

// lastUser is the content of the last user message.
func lastUser(messages []anthropicMessage) json.RawMessage {
	for i := len(messages) - 1; i >= 0; i-- {
		if messages[i].Role == "user" {
			return messages[i].Content
		}
	}
	return nil
}

// anthropicMessages serves POST /anthropic/v1/messages.
func (s *server) anthropicMessages(w http.ResponseWriter, r *http.Request) {
	s.stats.anthropicRequests.Add(1)
	if !s.authorized(r, "X-Api-Key") {
		anthropicError(w, http.StatusUnauthorized, "")
		return
	}
	if r.Header.Get("Anthropic-Version") == "" {
		anthropicError(w, http.StatusBadRequest, "anthropic-version: header is required")
		return
	}
	var req anthropicRequest
	if err := decodeBody(w, r, &req); err != nil {
		anthropicError(w, http.StatusBadRequest, "The request body is not valid JSON.")
		return
	}
	switch {
	case req.Model == "":
		anthropicError(w, http.StatusBadRequest, "model: Field required")
		return
	case req.MaxTokens <= 0:
		anthropicError(w, http.StatusBadRequest, "max_tokens: Field required")
		return
	case len(req.Messages) == 0:
		anthropicError(w, http.StatusBadRequest, "messages: at least one message is required")
		return
	}
	sn := scenarioFor(req.Model)
	if sn.status != 0 {
		anthropicError(w, sn.status, "")
		return
	}
	w.Header().Set("Request-Id", s.nextID("req_demo"))

	a := s.anthropicAnswer(req)
	id := s.nextID("msg_demo")
	toolID := s.nextID("toolu_demo")
	stop := "end_turn"
	if a.tool != "" {
		stop = "tool_use"
	}
	if sn.refuse {
		stop = "refusal"
	}
	usage := obj{"input_tokens": a.promptTokens, "output_tokens": a.completionTokens()}
	deltaUsage := obj{"output_tokens": a.completionTokens()}
	if marks := anthropicCacheMarks(req); marks > 0 {
		usage["cache_creation_input_tokens"] = marks
		deltaUsage["cache_creation_input_tokens"] = marks
	}

	if !req.Stream {
		block := obj{"type": "text", "text": a.text()}
		if a.tool != "" {
			block = obj{"type": "tool_use", "id": toolID, "name": a.tool, "input": json.RawMessage(toolArguments)}
		}
		respondJSON(w, r, obj{
			"id": id, "type": "message", "role": "assistant", "model": req.Model,
			"content":     []obj{block},
			"stop_reason": stop, "stop_sequence": nil,
			"usage": usage,
		}, sn, s.pacing(sn), len(a.pieces))
		return
	}

	event := func(typ string, fields obj) frame {
		fields["type"] = typ
		return frame{event: typ, data: fields}
	}
	block := obj{"type": "text", "text": ""}
	deltaType, deltaField := "text_delta", "text"
	if a.tool != "" {
		block = obj{"type": "tool_use", "id": toolID, "name": a.tool, "input": obj{}}
		deltaType, deltaField = "input_json_delta", "partial_json"
	}
	sc := script{prelude: []frame{
		event("message_start", obj{"message": obj{
			"id": id, "type": "message", "role": "assistant", "model": req.Model,
			"content": []obj{}, "stop_reason": nil, "stop_sequence": nil,
			"usage": obj{"input_tokens": a.promptTokens, "output_tokens": 1},
		}}),
		event("content_block_start", obj{"index": 0, "content_block": block}),
		event("ping", obj{}),
	}}
	for _, p := range a.pieces {
		sc.pieces = append(sc.pieces, event("content_block_delta", obj{
			"index": 0, "delta": obj{"type": deltaType, deltaField: p},
		}))
	}
	sc.epilogue = []frame{
		event("content_block_stop", obj{"index": 0}),
		event("message_delta", obj{
			"delta": obj{"stop_reason": stop, "stop_sequence": nil},
			"usage": deltaUsage,
		}),
		event("message_stop", obj{}),
	}
	play(w, r, sseLF, sc, sn, s.pacing(sn))
}

// anthropicAnswer scripts the answer to req: a conversation whose last message carries
// tool_result blocks has their text echoed; otherwise the last user text is echoed, or
// the first tool is called when tools are offered.
func (s *server) anthropicAnswer(req anthropicRequest) answer {
	prompt := []string{anthropicText(req.System)}
	var last string
	for _, m := range req.Messages {
		t := anthropicText(m.Content)
		prompt = append(prompt, t)
		if m.Role == "user" {
			last = t
		}
	}
	final := req.Messages[len(req.Messages)-1]
	var endsWithToolResult bool
	if final.Role == "user" {
		var results string
		for _, b := range anthropicBlocks(final.Content) {
			if b.Type == "tool_result" {
				endsWithToolResult = true
				results += anthropicText(b.Content)
			}
		}
		if endsWithToolResult {
			last = results
		}
	}
	if media := anthropicMedia(lastUser(req.Messages)); media != "" && scenarioFor(req.Model).describe {
		last = media
	}
	var firstTool string
	if len(req.Tools) > 0 {
		firstTool = req.Tools[0].Name
	}
	return s.newAnswer(prompt, last, endsWithToolResult, firstTool)
}
