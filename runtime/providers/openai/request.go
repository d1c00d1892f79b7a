package openai

import (
	"bytes"
	"encoding/json"
	"math"
	"math/big"
	"regexp"
	"strconv"
	"strings"

	"github.com/switchboard-dev/switchboard/runtime/protocol"
	"github.com/switchboard-dev/switchboard/runtime/routing"
)

// chatRequest is the Chat Completions request body. Only fields this adapter sets exist,
// so nothing from a request (an extension included) can add messages, tools, a model or
// a credential: those come from the input parts and the deployment only.
type chatRequest struct {
	Model               string         `json:"model"`
	Messages            []message      `json:"messages"`
	Tools               []tool         `json:"tools,omitempty"`
	Stream              bool           `json:"stream,omitempty"`
	StreamOptions       *streamOptions `json:"stream_options,omitempty"`
	ReasoningEffort     string         `json:"reasoning_effort,omitempty"`
	Temperature         *float64       `json:"temperature,omitempty"`
	TopP                *float64       `json:"top_p,omitempty"`
	MaxCompletionTokens *int64         `json:"max_completion_tokens,omitempty"`
	Seed                *int64         `json:"seed,omitempty"`
}

type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// message is one chat message. Content is a string, a []contentPart, or nil (omitted) for
// an assistant message that only carries tool calls.
type message struct {
	Role       string     `json:"role"`
	Content    any        `json:"content,omitempty"`
	ToolCalls  []toolCall `json:"tool_calls,omitempty"`
	ToolCallID string     `json:"tool_call_id,omitempty"`
}

// contentPart is one element of an array content: text, image_url, input_audio or file.
type contentPart struct {
	Type       string      `json:"type"`
	Text       *string     `json:"text,omitempty"`
	ImageURL   *imageURL   `json:"image_url,omitempty"`
	InputAudio *inputAudio `json:"input_audio,omitempty"`
	File       *fileData   `json:"file,omitempty"`
}

type imageURL struct {
	URL string `json:"url"`
}

type inputAudio struct {
	Data   string `json:"data"`
	Format string `json:"format"`
}

type fileData struct {
	Filename string `json:"filename,omitempty"`
	FileData string `json:"file_data"`
}

type tool struct {
	Type     string       `json:"type"`
	Function toolFunction `json:"function"`
}

type toolFunction struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters,omitempty"`
}

type toolCall struct {
	ID       string       `json:"id"`
	Type     string       `json:"type"`
	Function callFunction `json:"function"`
}

type callFunction struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// Refusals of input this adapter cannot send. The router only routes a request to a
// deployment whose capabilities cover its input, so these are defence in depth (and the
// cases Chat Completions itself cannot express). Messages name part types, a closed set
// from our schema, never caller content or positions.
var (
	errUndeclared = func(what string) *protocol.Error {
		return protocol.NewError(protocol.CodeInvalidRequest, what+" input is not enabled for the deployment")
	}
	errVideo = protocol.NewError(protocol.CodeInvalidRequest,
		"video input is not supported by the openai adapter")
	errAudioForm = protocol.NewError(protocol.CodeInvalidRequest,
		"audio input must be inline wav or mp3 data for the openai adapter")
	errFileForm = protocol.NewError(protocol.CodeInvalidRequest,
		"file input must be inline data for the openai adapter")
	errMediaRole = protocol.NewError(protocol.CodeInvalidRequest,
		"media input is only supported in user parts by the openai adapter")
	errToolRole = protocol.NewError(protocol.CodeInvalidRequest,
		"role tool is only supported on tool_result parts by the openai adapter")
	errToolContent = protocol.NewError(protocol.CodeInvalidRequest,
		"tool_result content may only hold text and json parts for the openai adapter")
	errPartType = protocol.NewError(protocol.CodeInvalidRequest,
		"the request has a part type the openai adapter does not know")
	errExtension = protocol.NewError(protocol.CodeInvalidRequest,
		"an openai extension has a value of the wrong type or range")
)

// refuse returns a fresh copy of a shared refusal, since callers own the errors they get.
func refuse(e *protocol.Error) *protocol.Error {
	c := *e
	return &c
}

// buildRequest maps req onto a Chat Completions body for a deployment with caps.
func buildRequest(req *protocol.Request, model string, caps routing.CapSet, stream bool) (*chatRequest, *protocol.Error) {
	body := &chatRequest{Model: model}
	if stream {
		body.Stream = true
		body.StreamOptions = &streamOptions{IncludeUsage: true}
	}
	b := builder{caps: caps}
	for i := range req.Input {
		if err := b.add(&req.Input[i]); err != nil {
			return nil, err
		}
	}
	b.flush()
	body.Messages = b.messages
	body.Tools = b.tools
	if err := applyExtensions(body, req.Extensions); err != nil {
		return nil, err
	}
	return body, nil
}

// builder folds input parts into messages. Consecutive parts of one role become one
// message, so a user's text and the image it talks about travel together, and an
// assistant's text and tool calls form the single assistant turn the API produced.
type builder struct {
	caps     routing.CapSet
	messages []message
	tools    []tool

	cur     *message // the message being built, not yet in messages
	content []contentPart
}

func (b *builder) has(c protocol.Capability) bool { return b.caps.Has(routing.CapsOf(c)) }

// open returns the current message if it has role, else flushes it and starts one.
func (b *builder) open(role string) *message {
	if b.cur != nil && b.cur.Role == role {
		return b.cur
	}
	b.flush()
	b.cur = &message{Role: role}
	return b.cur
}

// flush finishes the current message: a single text part is sent as a plain string (the
// form every compatible server accepts), anything else as a content array.
func (b *builder) flush() {
	if b.cur == nil {
		return
	}
	switch {
	case len(b.content) == 1 && b.content[0].Type == "text":
		b.cur.Content = *b.content[0].Text
	case len(b.content) > 0:
		b.cur.Content = b.content
	}
	b.messages = append(b.messages, *b.cur)
	b.cur, b.content = nil, nil
}

func (b *builder) add(p *protocol.Part) *protocol.Error {
	if p.Type == protocol.PartTool || p.Type == protocol.PartToolCall || p.Type == protocol.PartToolResult {
		if !b.has(protocol.CapTools) {
			return errUndeclared("tool")
		}
	}
	role := p.RoleOrDefault()
	switch p.Type {
	case protocol.PartTool:
		// Tools are request-level, whatever role the part carries; they do not end a
		// message run.
		b.tools = append(b.tools, tool{Type: "function", Function: toolFunction{
			Name: p.Name, Description: p.Description, Parameters: compact(p.Parameters),
		}})
		return nil
	case protocol.PartToolCall:
		m := b.open(string(protocol.RoleAssistant))
		m.ToolCalls = append(m.ToolCalls, toolCall{ID: p.CallID, Type: "function",
			Function: callFunction{Name: p.Name, Arguments: p.Arguments}})
		return nil
	case protocol.PartToolResult:
		return b.toolResult(p)
	}
	if role == protocol.RoleTool {
		// A tool message needs the id of the call it answers, which only tool_result has.
		return refuse(errToolRole)
	}
	c, err := b.contentPart(p)
	if err != nil {
		return err
	}
	if c.Type != "text" && role != protocol.RoleUser {
		return refuse(errMediaRole)
	}
	b.open(string(role))
	b.content = append(b.content, c)
	return nil
}

// contentPart maps a text, json or media part, checking the deployment declares it.
func (b *builder) contentPart(p *protocol.Part) (contentPart, *protocol.Error) {
	switch p.Type {
	case protocol.PartText:
		return textPart(p.Text), nil
	case protocol.PartJSON:
		return textPart(string(compact(p.JSON))), nil
	case protocol.PartImage:
		if !b.has(protocol.CapInputImage) {
			return contentPart{}, errUndeclared("image")
		}
		return contentPart{Type: "image_url", ImageURL: &imageURL{URL: dataOrURI(p)}}, nil
	case protocol.PartAudio:
		if !b.has(protocol.CapInputAudio) {
			return contentPart{}, errUndeclared("audio")
		}
		// input_audio takes base64 data and a format name, never a URL.
		format := audioFormats[baseMediaType(p.MediaType)]
		if p.Data == "" || format == "" {
			return contentPart{}, refuse(errAudioForm)
		}
		return contentPart{Type: "input_audio", InputAudio: &inputAudio{Data: p.Data, Format: format}}, nil
	case protocol.PartFile:
		if !b.has(protocol.CapInputFile) {
			return contentPart{}, errUndeclared("file")
		}
		// file_data takes inline content; a file_id is OpenAI's own, not a URI.
		if p.Data == "" {
			return contentPart{}, refuse(errFileForm)
		}
		return contentPart{Type: "file", File: &fileData{Filename: p.Name, FileData: dataOrURI(p)}}, nil
	case protocol.PartVideo:
		if !b.has(protocol.CapInputVideo) {
			return contentPart{}, errUndeclared("video")
		}
		return contentPart{}, refuse(errVideo)
	}
	return contentPart{}, refuse(errPartType)
}

// toolResult adds a tool message answering call_id. Chat Completions tool messages hold
// a string or text parts only.
func (b *builder) toolResult(p *protocol.Part) *protocol.Error {
	m := message{Role: "tool", ToolCallID: p.CallID, Content: ""}
	if c := p.Content; c != nil {
		if c.Text != nil {
			m.Content = *c.Text
		} else {
			parts := make([]contentPart, 0, len(c.Parts))
			for i := range c.Parts {
				switch q := &c.Parts[i]; q.Type {
				case protocol.PartText:
					parts = append(parts, textPart(q.Text))
				case protocol.PartJSON:
					parts = append(parts, textPart(string(compact(q.JSON))))
				default:
					return refuse(errToolContent)
				}
			}
			m.Content = parts
		}
	}
	b.flush()
	b.messages = append(b.messages, m)
	return nil
}

func textPart(s string) contentPart { return contentPart{Type: "text", Text: &s} }

// dataOrURI is the part's content as a URL: a data URL for inline data, else its uri.
func dataOrURI(p *protocol.Part) string {
	if p.Data != "" {
		return "data:" + p.MediaType + ";base64," + p.Data
	}
	return p.URI
}

// audioFormats maps audio media types to the input_audio formats the API documents.
var audioFormats = map[string]string{
	"audio/wav": "wav", "audio/x-wav": "wav", "audio/wave": "wav",
	"audio/mpeg": "mp3", "audio/mp3": "mp3",
}

// baseMediaType drops media type parameters ("audio/wav; rate=16000" → "audio/wav").
func baseMediaType(mt string) string {
	for i := 0; i < len(mt); i++ {
		if mt[i] == ';' {
			return mt[:i]
		}
	}
	return mt
}

// compact removes insignificant whitespace from validated JSON; it keeps the input as is
// in the (impossible after DecodeRequest) case that it is not valid JSON.
func compact(raw json.RawMessage) json.RawMessage {
	if len(raw) == 0 {
		return nil
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		return raw
	}
	return buf.Bytes()
}

// reasoningEffort is the documented grammar of openai.reasoning_effort (protocol
// registry): a pattern, not a list, as OpenAI adds values.
var reasoningEffort = regexp.MustCompile(`^[a-z]{1,16}$`)

// applyExtensions reads the documented openai.* extensions into body. DecodeRequest has
// checked them already; the checks are repeated so an adapter never sends a value of the
// wrong type whoever built the request. Other keys are ignored: they belong to other
// providers, and no extension can touch messages, tools, the model or credentials.
func applyExtensions(body *chatRequest, ext map[string]json.RawMessage) *protocol.Error {
	for key, raw := range ext {
		var ok bool
		switch key {
		case "openai.reasoning_effort":
			var s string
			if ok = json.Unmarshal(raw, &s) == nil && reasoningEffort.MatchString(s); ok {
				body.ReasoningEffort = s
			}
		case "openai.temperature":
			body.Temperature, ok = number(raw, 0, 2)
		case "openai.top_p":
			body.TopP, ok = number(raw, 0, 1)
		case "openai.max_completion_tokens":
			body.MaxCompletionTokens, ok = integer(raw, 1, math.MaxInt32)
		case "openai.seed":
			body.Seed, ok = integer(raw, math.MinInt64, math.MaxInt64)
		default:
			continue
		}
		if !ok {
			return refuse(errExtension)
		}
	}
	return nil
}

// jsonNumber returns raw as a JSON number's text, or false for any other value.
func jsonNumber(raw json.RawMessage) (string, bool) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil || dec.More() {
		return "", false
	}
	n, ok := v.(json.Number)
	return string(n), ok
}

// number parses a JSON number within [lo, hi].
func number(raw json.RawMessage, lo, hi float64) (*float64, bool) {
	s, ok := jsonNumber(raw)
	if !ok {
		return nil, false
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || !(f >= lo && f <= hi) {
		return nil, false
	}
	return &f, true
}

// integer parses a JSON number with an integral value within [lo, hi]. Exponent forms
// such as 1e3 are integers too, as the request decoder accepts them.
func integer(raw json.RawMessage, lo, hi int64) (*int64, bool) {
	s, ok := jsonNumber(raw)
	if !ok {
		return nil, false
	}
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		return &n, n >= lo && n <= hi
	}
	// Bound the text and its exponent before exact parsing, whose cost grows with both;
	// no int64 needs more than 19 significant digits.
	if len(s) > 100 {
		return nil, false
	}
	if i := strings.IndexAny(s, "eE"); i >= 0 {
		if e, err := strconv.Atoi(s[i+1:]); err != nil || e < -64 || e > 64 {
			return nil, false
		}
	}
	f, _, err := big.ParseFloat(s, 10, 256, big.ToNearestEven)
	if err != nil || !f.IsInt() {
		return nil, false
	}
	n, acc := f.Int64()
	if acc != big.Exact || n < lo || n > hi {
		return nil, false
	}
	return &n, true
}
