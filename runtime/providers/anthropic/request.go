package anthropic

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"
	"strings"

	"github.com/switchboard-dev/switchboard/runtime/protocol"
	"github.com/switchboard-dev/switchboard/runtime/routing"
)

// messagesRequest is the body of POST /v1/messages. Only the fields the adapter sets
// exist here, so nothing else can reach the provider — in particular no extension can
// add tools, messages, a model or credentials.
type messagesRequest struct {
	Model       string         `json:"model"`
	MaxTokens   int64          `json:"max_tokens"`
	System      []contentBlock `json:"system,omitempty"`
	Messages    []message      `json:"messages"`
	Tools       []tool         `json:"tools,omitempty"`
	Temperature *float64       `json:"temperature,omitempty"`
	TopK        *int64         `json:"top_k,omitempty"`
	Stream      bool           `json:"stream,omitempty"`
}

// message is one conversation turn.
type message struct {
	Role    string         `json:"role"`
	Content []contentBlock `json:"content"`
}

// contentBlock is a request content block: text, image, tool_use or tool_result. Fields of
// other block types stay empty and are omitted.
type contentBlock struct {
	Type      string          `json:"type"`
	Text      string          `json:"text,omitempty"`
	Source    *imageSource    `json:"source,omitempty"`
	ID        string          `json:"id,omitempty"`
	Name      string          `json:"name,omitempty"`
	Input     json.RawMessage `json:"input,omitempty"`
	ToolUseID string          `json:"tool_use_id,omitempty"`
	// Content is a tool_result's content: a string or a list of text and image blocks.
	Content any `json:"content,omitempty"`
}

// imageSource is an image block's source: base64 data with its media type, or a URL.
type imageSource struct {
	Type      string `json:"type"`
	MediaType string `json:"media_type,omitempty"`
	Data      string `json:"data,omitempty"`
	URL       string `json:"url,omitempty"`
}

// tool is a client tool definition.
type tool struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	InputSchema json.RawMessage `json:"input_schema"`
}

// Wire roles. Anthropic has no system or tool role inside messages: system text goes to
// the top-level system field, tool results travel in user turns.
const (
	roleUser      = "user"
	roleAssistant = "assistant"
)

// Extension keys read by the adapter (README.md lists them with their API fields).
const (
	extMaxTokens   = "anthropic.max_tokens"
	extTemperature = "anthropic.temperature"
	extTopK        = "anthropic.top_k"
)

// emptySchema is the input schema of a tool that declares none: the API requires an
// object schema.
var emptySchema = json.RawMessage(`{"type":"object"}`)

// Refusals of requests the adapter cannot send. Messages are fixed: they never echo the
// caller's content or extension keys.
func invalid(msg string) *protocol.Error {
	return protocol.NewError(protocol.CodeInvalidRequest, msg)
}

const (
	msgImageNotDeclared = "the deployment does not accept image input"
	msgToolsNotDeclared = "the deployment does not accept tools"
	msgSystemPart       = "system parts must be text or json for this provider"
	msgToolArguments    = "a tool_call's arguments must be a JSON object"
	msgNoMessages       = "the request has no user or assistant content"
	msgExtension        = "an anthropic extension has a value of the wrong type or range"
)

// buildRequest maps r to the Messages API body for a deployment with capabilities caps.
//
// Parts are taken in order. System parts (text or json) become the top-level system
// blocks; every other part becomes a content block of a user or assistant turn, and
// consecutive blocks of the same role are merged into one turn, so the turns alternate as
// the API requires. Nothing is invented: a conversation that starts with an assistant
// turn is sent as it is, and the API's verdict applies. Image parts and anything
// tool-related are sent only when the deployment declares input.image or tools;
// otherwise the request is refused (the router never sends such a request; this is
// defence in depth).
func buildRequest(r *protocol.Request, model string, caps routing.CapSet, stream bool) (*messagesRequest, *protocol.Error) {
	mr := &messagesRequest{Model: model, MaxTokens: DefaultMaxTokens, Stream: stream, Messages: []message{}}
	if err := applyExtensions(mr, r.Extensions); err != nil {
		return nil, err
	}
	m := mapper{
		tools:  caps.Has(routing.CapsOf(protocol.CapTools)),
		images: caps.Has(routing.CapsOf(protocol.CapInputImage)),
	}
	for i := range r.Input {
		p := &r.Input[i]
		switch {
		case p.Type == protocol.PartTool:
			if !m.tools {
				return nil, invalid(msgToolsNotDeclared)
			}
			schema := p.Parameters
			if len(bytes.TrimSpace(schema)) == 0 {
				schema = emptySchema
			}
			mr.Tools = append(mr.Tools, tool{Name: p.Name, Description: p.Description, InputSchema: schema})
		case p.Role == protocol.RoleSystem && p.Type != protocol.PartToolResult:
			if p.Type != protocol.PartText && p.Type != protocol.PartJSON {
				return nil, invalid(msgSystemPart)
			}
			if b, ok := textOf(p); ok {
				mr.System = append(mr.System, b)
			}
		default:
			role, b, ok, err := m.block(p)
			if err != nil {
				return nil, err
			}
			if ok {
				mr.Messages = appendBlock(mr.Messages, role, b)
			}
		}
	}
	if len(mr.Messages) == 0 {
		return nil, invalid(msgNoMessages)
	}
	for i := range mr.Messages {
		if mr.Messages[i].Role == roleUser {
			toolResultsFirst(mr.Messages[i].Content)
		}
	}
	return mr, nil
}

// mapper maps conversation parts to content blocks for one deployment.
type mapper struct {
	tools, images bool
}

// block maps a non-system part to its turn's role and content block. ok is false for a
// part that maps to nothing (an empty text: the API rejects empty text blocks).
func (m mapper) block(p *protocol.Part) (role string, b contentBlock, ok bool, err *protocol.Error) {
	role = roleUser
	if p.Role == protocol.RoleAssistant {
		role = roleAssistant
	}
	switch p.Type {
	case protocol.PartToolCall:
		if !m.tools {
			return "", b, false, invalid(msgToolsNotDeclared)
		}
		input, valid := argumentsObject(p.Arguments)
		if !valid {
			return "", b, false, invalid(msgToolArguments)
		}
		// The decoder only accepts tool_call from the assistant; it is the model's turn.
		return roleAssistant, contentBlock{Type: "tool_use", ID: p.CallID, Name: p.Name, Input: input}, true, nil
	case protocol.PartToolResult:
		if !m.tools {
			return "", b, false, invalid(msgToolsNotDeclared)
		}
		content, err := m.toolContent(p.Content)
		if err != nil {
			return "", b, false, err
		}
		// Tool results answer the model, so they are always a user turn whatever role
		// the part carries.
		return roleUser, contentBlock{Type: "tool_result", ToolUseID: p.CallID, Content: content}, true, nil
	}
	b, ok, err = m.content(p)
	return role, b, ok, err
}

// content maps a text, json or image part.
func (m mapper) content(p *protocol.Part) (contentBlock, bool, *protocol.Error) {
	switch p.Type {
	case protocol.PartText, protocol.PartJSON:
		b, ok := textOf(p)
		return b, ok, nil
	case protocol.PartImage:
		if !m.images {
			return contentBlock{}, false, invalid(msgImageNotDeclared)
		}
		src := &imageSource{Type: "base64", MediaType: p.MediaType, Data: p.Data}
		if p.URI != "" {
			src = &imageSource{Type: "url", URL: p.URI}
		}
		return contentBlock{Type: "image", Source: src}, true, nil
	}
	// audio, video and file have no mapping here; the type names come from the
	// protocol's closed set, never from caller data.
	return contentBlock{}, false, invalid("input part type " + string(p.Type) + " is not supported by the anthropic adapter")
}

// toolContent maps a tool_result's content: a string stays a string, parts become text
// and image blocks.
func (m mapper) toolContent(c *protocol.ToolContent) (any, *protocol.Error) {
	if c == nil {
		return "", nil
	}
	if c.Text != nil {
		return *c.Text, nil
	}
	blocks := []contentBlock{}
	for i := range c.Parts {
		b, ok, err := m.content(&c.Parts[i])
		if err != nil {
			return nil, err
		}
		if ok {
			blocks = append(blocks, b)
		}
	}
	return blocks, nil
}

// textOf is the text block of a text part, or of a json part as its JSON text (compact,
// so the same value always reads the same).
func textOf(p *protocol.Part) (contentBlock, bool) {
	text := p.Text
	if p.Type == protocol.PartJSON {
		var buf bytes.Buffer
		if err := json.Compact(&buf, p.JSON); err == nil {
			text = buf.String()
		} else {
			text = string(p.JSON)
		}
	}
	if text == "" {
		return contentBlock{}, false
	}
	return contentBlock{Type: "text", Text: text}, true
}

// argumentsObject parses a tool_call's arguments, which the API needs as an object. An
// empty string means no arguments.
func argumentsObject(args string) (json.RawMessage, bool) {
	trimmed := strings.TrimSpace(args)
	if trimmed == "" {
		return json.RawMessage("{}"), true
	}
	if trimmed[0] != '{' || !json.Valid([]byte(trimmed)) {
		return nil, false
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, []byte(trimmed)); err != nil {
		return nil, false
	}
	return buf.Bytes(), true
}

// appendBlock adds b to the last turn when it has the same role, else starts a new turn.
func appendBlock(msgs []message, role string, b contentBlock) []message {
	if n := len(msgs); n > 0 && msgs[n-1].Role == role {
		msgs[n-1].Content = append(msgs[n-1].Content, b)
		return msgs
	}
	return append(msgs, message{Role: role, Content: []contentBlock{b}})
}

// toolResultsFirst moves a user turn's tool_result blocks before its other blocks, keeping
// each group's order: the API requires tool results to open the turn that answers a
// tool use, and a merged turn may have had text first.
func toolResultsFirst(blocks []contentBlock) {
	out := make([]contentBlock, 0, len(blocks))
	for _, b := range blocks {
		if b.Type == "tool_result" {
			out = append(out, b)
		}
	}
	if len(out) == 0 || len(out) == len(blocks) {
		return
	}
	for _, b := range blocks {
		if b.Type != "tool_result" {
			out = append(out, b)
		}
	}
	copy(blocks, out)
}

// applyExtensions reads the documented anthropic.* extensions into mr. Other keys —
// another provider's, or anthropic keys this adapter does not document — are ignored, so
// no extension can add tools, messages, a model or credentials. The request decoder has
// already checked types and ranges; they are checked again here because an adapter must
// not trust that every caller went through it.
func applyExtensions(mr *messagesRequest, ext map[string]json.RawMessage) *protocol.Error {
	if raw, ok := ext[extMaxTokens]; ok {
		n, valid := integer(raw, 1, math.MaxInt32)
		if !valid {
			return invalid(msgExtension)
		}
		mr.MaxTokens = n
	}
	if raw, ok := ext[extTemperature]; ok {
		f, valid := number(raw, 0, 1)
		if !valid {
			return invalid(msgExtension)
		}
		mr.Temperature = &f
	}
	if raw, ok := ext[extTopK]; ok {
		n, valid := integer(raw, 0, math.MaxInt32)
		if !valid {
			return invalid(msgExtension)
		}
		mr.TopK = &n
	}
	return nil
}

// jsonNumber returns raw as a JSON number literal, or false for any other JSON value.
func jsonNumber(raw json.RawMessage) (json.Number, bool) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil || dec.More() {
		return "", false
	}
	n, ok := v.(json.Number)
	return n, ok
}

// number reads a finite JSON number within [lo, hi].
func number(raw json.RawMessage, lo, hi float64) (float64, bool) {
	n, ok := jsonNumber(raw)
	if !ok {
		return 0, false
	}
	f, err := n.Float64()
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) || f < lo || f > hi {
		return 0, false
	}
	return f, true
}

// integer reads an integral JSON number within [lo, hi]; 1e3 counts as an integer, as it
// does for the request decoder.
func integer(raw json.RawMessage, lo, hi int64) (int64, bool) {
	n, ok := jsonNumber(raw)
	if !ok {
		return 0, false
	}
	if i, err := strconv.ParseInt(n.String(), 10, 64); err == nil {
		return i, i >= lo && i <= hi
	}
	f, err := n.Float64()
	if err != nil || f != math.Trunc(f) || f < float64(lo) || f > float64(hi) {
		return 0, false
	}
	return int64(f), true
}
