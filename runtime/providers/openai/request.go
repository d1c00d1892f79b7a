package openai

import (
	"bytes"
	"encoding/json"
	"math"
	"math/big"
	"regexp"
	"strconv"
	"strings"

	"github.com/switchboard-dev/switchboard/runtime/engine"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
	"github.com/switchboard-dev/switchboard/runtime/providers/providerhttp"
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
	MaxTokens           *int64         `json:"max_tokens,omitempty"`
	Seed                *int64         `json:"seed,omitempty"`
	Stop                []string       `json:"stop,omitempty"`
	// ToolChoice is "auto", "none", "required" or a namedToolChoice.
	ToolChoice     any             `json:"tool_choice,omitempty"`
	ResponseFormat *responseFormat `json:"response_format,omitempty"`
}

// namedToolChoice forces a call of one function.
type namedToolChoice struct {
	Type     string       `json:"type"`
	Function toolFunction `json:"function"`
}

// responseFormat is JSON mode (json_object) or structured output (json_schema).
type responseFormat struct {
	Type       string      `json:"type"`
	JSONSchema *jsonSchema `json:"json_schema,omitempty"`
}

// jsonSchema is a structured output's schema. Strict is always true: structured_output
// declares schema-enforced output, which OpenAI gives only in strict mode.
type jsonSchema struct {
	Name   string          `json:"name"`
	Schema json.RawMessage `json:"schema"`
	Strict bool            `json:"strict"`
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

// Refusals of requests this adapter cannot send. Routing asks CanEncode before it
// chooses a deployment, so Execute meets them only for requests that did not go through
// routing; either way nothing is sent. A request Chat Completions cannot express, or one
// that needs a capability the deployment does not declare (so a policy that disables
// tools keeps them disabled), is unsupported_capability: another deployment may take it.
// Messages name part types and roles, a closed set from our schema, never caller content
// or positions. Each is handed out as a Clone: callers own the errors they get.
var (
	errUndeclared = func(what string) *protocol.Error {
		return unsupported(what + " input is not enabled for the deployment")
	}
	errVideo       = unsupported("video input is not supported by the openai adapter")
	errAudioForm   = unsupported("audio input must be inline wav or mp3 data for the openai adapter")
	errFileForm    = unsupported("file input must be inline data for the openai adapter")
	errMediaRole   = unsupported("media input is only supported in user parts by the openai adapter")
	errToolRole    = unsupported("role tool is only supported on tool_result parts by the openai adapter")
	errToolContent = unsupported(
		"tool_result content may only hold text and json parts for the openai adapter")
	errPartType  = unsupported("the request has a part type the openai adapter does not know")
	errExtension = protocol.NewError(protocol.CodeInvalidRequest,
		"an openai extension has a value of the wrong type or range")
	errMissing = protocol.NewError(protocol.CodeInvalidRequest, "request is missing")
)

func unsupported(msg string) *protocol.Error {
	return protocol.NewError(protocol.CodeUnsupportedCapability, msg)
}

// CanEncode is the adapter's engine.EncodeCheck, installed by Register: the refusal
// Execute would make for req on d, found without building or sending anything. It
// trusts what DecodeRequest guarantees (json parts and tool parameters are valid JSON)
// and re-checks everything else.
func CanEncode(req *protocol.Request, d *routing.Deployment) *protocol.Error {
	return providerhttp.CheckEncode(req, d, encodable)
}

var _ engine.EncodeCheck = CanEncode

// encodable is check on d's configuration, its refusal only.
func encodable(req *protocol.Request, d *routing.Deployment) *protocol.Error {
	_, err := check(req, d)
	return err
}

// check returns the first refusal of req for deployment d, or nil, and the generation
// options it sends (d's output cap applied). It is the only place refusals are decided:
// buildRequest maps only requests it admits.
func check(req *protocol.Request, d *routing.Deployment) (protocol.GenerationOptions, *protocol.Error) {
	for i := range req.Input {
		if err := checkPart(&req.Input[i], d.Capabilities); err != nil {
			return protocol.GenerationOptions{}, err
		}
	}
	// The values are small; parsing them into a scratch body is the same check
	// buildRequest's applyExtensions makes.
	return generation.Read(req, d, applyExtensions(&chatRequest{}, req.Extensions))
}

// generation is what Chat Completions takes of the generation options (README.md,
// "Generation options"): all but top_k, which is no OpenAI field (some compatible
// servers read it, others ignore it silently, so it is declined for all). Each openai.*
// key overrides the generation key of the same field; openai.max_completion_tokens is
// lowered to the deployment's output cap like the generation key (buildRequest).
var generation = providerhttp.GenerationSupport{
	Adapter: "openai",
	Honours: []string{
		protocol.GenerationMaxOutputTokens, protocol.GenerationTemperature, protocol.GenerationTopP,
		protocol.GenerationStop, protocol.GenerationSeed, protocol.GenerationToolChoice,
		protocol.GenerationResponseFormat, protocol.GenerationResponseSchema,
	},
	Overrides: map[string]string{
		"openai.temperature":           protocol.GenerationTemperature,
		"openai.top_p":                 protocol.GenerationTopP,
		"openai.max_completion_tokens": protocol.GenerationMaxOutputTokens,
		"openai.seed":                  protocol.GenerationSeed,
	},
}

// checkPart refuses a part Chat Completions cannot carry for a deployment with caps.
func checkPart(p *protocol.Part, caps routing.CapSet) *protocol.Error {
	has := func(c protocol.Capability) bool { return caps.Has(routing.CapsOf(c)) }
	switch p.Type {
	case protocol.PartTool, protocol.PartToolCall, protocol.PartToolResult:
		if !has(protocol.CapTools) {
			return errUndeclared("tool")
		}
		// Chat Completions tool messages hold a string or text parts only.
		if c := p.Content; p.Type == protocol.PartToolResult && c != nil && c.Text == nil {
			for i := range c.Parts {
				if t := c.Parts[i].Type; t != protocol.PartText && t != protocol.PartJSON {
					return errToolContent.Clone()
				}
			}
		}
		return nil
	}
	role := p.RoleOrDefault()
	if role == protocol.RoleTool {
		// A tool message needs the id of the call it answers, which only tool_result has.
		return errToolRole.Clone()
	}
	switch p.Type {
	case protocol.PartText, protocol.PartJSON:
		return nil
	case protocol.PartImage:
		if !has(protocol.CapInputImage) {
			return errUndeclared("image")
		}
	case protocol.PartAudio:
		if !has(protocol.CapInputAudio) {
			return errUndeclared("audio")
		}
		// input_audio takes base64 data and a format name, never a URL.
		if p.Data == "" || audioFormats[baseMediaType(p.MediaType)] == "" {
			return errAudioForm.Clone()
		}
	case protocol.PartFile:
		if !has(protocol.CapInputFile) {
			return errUndeclared("file")
		}
		// file_data takes inline content; a file_id is OpenAI's own, not a URI.
		if p.Data == "" {
			return errFileForm.Clone()
		}
	case protocol.PartVideo:
		if !has(protocol.CapInputVideo) {
			return errUndeclared("video")
		}
		return errVideo.Clone()
	default:
		return errPartType.Clone()
	}
	if role != protocol.RoleUser {
		return errMediaRole.Clone()
	}
	return nil
}

// buildRequest maps req onto a Chat Completions body for deployment d, or returns
// check's refusal.
func buildRequest(req *protocol.Request, d *routing.Deployment, stream bool) (*chatRequest, *protocol.Error) {
	g, err := check(req, d)
	if err != nil {
		return nil, err
	}
	body := &chatRequest{Model: d.Model}
	if stream {
		body.Stream = true
		body.StreamOptions = &streamOptions{IncludeUsage: true}
	}
	var b builder
	for i := range req.Input {
		b.add(&req.Input[i])
	}
	b.flush()
	body.Messages = b.messages
	body.Tools = b.tools
	_ = applyExtensions(body, req.Extensions) // check accepted every value
	if body.MaxCompletionTokens != nil {
		// openai.max_completion_tokens carries the output limit instead of the
		// generation key (which Read then left alone): the deployment's cap lowers it
		// the same way (spec/http-api.md, "Generation options").
		body.MaxCompletionTokens = providerhttp.OutputCap(body.MaxCompletionTokens, d.MaxOutputTokens)
	}
	applyGeneration(body, &g, d.Provider)
	return body, nil
}

// applyGeneration sets the generation options check admitted; those an openai.* key
// overrides are already gone from g. The output token cap is max_completion_tokens on
// OpenAI and Azure OpenAI, where max_tokens is deprecated and refused by reasoning
// models, and max_tokens on compatible servers, which all read it (not all read
// max_completion_tokens).
func applyGeneration(body *chatRequest, g *protocol.GenerationOptions, provider string) {
	if provider == ProviderCompatible {
		body.MaxTokens = g.MaxOutputTokens
	} else if g.MaxOutputTokens != nil {
		body.MaxCompletionTokens = g.MaxOutputTokens
	}
	if g.Temperature != nil {
		body.Temperature = g.Temperature
	}
	if g.TopP != nil {
		body.TopP = g.TopP
	}
	if g.Seed != nil {
		body.Seed = g.Seed
	}
	body.Stop = g.Stop
	switch c := g.ToolChoice; c.Mode {
	case "":
	case protocol.ToolChoiceTool:
		body.ToolChoice = namedToolChoice{Type: "function", Function: toolFunction{Name: c.Name}}
	default: // auto, none and required are OpenAI's own words
		body.ToolChoice = string(c.Mode)
	}
	switch {
	case g.ResponseSchema != nil:
		body.ResponseFormat = &responseFormat{Type: "json_schema",
			JSONSchema: &jsonSchema{Name: g.ResponseSchemaName, Schema: g.ResponseSchema, Strict: true}}
	case g.JSON:
		body.ResponseFormat = &responseFormat{Type: "json_object"}
	}
}

// builder folds input parts into messages. Consecutive parts of one role become one
// message, so a user's text and the image it talks about travel together, and an
// assistant's text and tool calls form the single assistant turn the API produced.
// It maps only parts check admitted.
type builder struct {
	messages []message
	tools    []tool

	cur     *message // the message being built, not yet in messages
	content []contentPart
}

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

func (b *builder) add(p *protocol.Part) {
	switch p.Type {
	case protocol.PartTool:
		// Tools are request-level, whatever role the part carries; they do not end a
		// message run.
		b.tools = append(b.tools, tool{Type: "function", Function: toolFunction{
			Name: p.Name, Description: p.Description, Parameters: providerhttp.CompactJSON(p.Parameters),
		}})
		return
	case protocol.PartToolCall:
		m := b.open(string(protocol.RoleAssistant))
		m.ToolCalls = append(m.ToolCalls, toolCall{ID: p.CallID, Type: "function",
			Function: callFunction{Name: p.Name, Arguments: p.Arguments}})
		return
	case protocol.PartToolResult:
		b.toolResult(p)
		return
	}
	b.open(string(p.RoleOrDefault()))
	b.content = append(b.content, mapContent(p))
}

// mapContent maps a text, json or media part. A json part is data for the model: its
// compact JSON travels as text, never as request fields.
func mapContent(p *protocol.Part) contentPart {
	switch p.Type {
	case protocol.PartJSON:
		return textPart(providerhttp.PartText(p))
	case protocol.PartImage:
		return contentPart{Type: "image_url", ImageURL: &imageURL{URL: dataOrURI(p)}}
	case protocol.PartAudio:
		return contentPart{Type: "input_audio", InputAudio: &inputAudio{Data: p.Data, Format: audioFormats[baseMediaType(p.MediaType)]}}
	case protocol.PartFile:
		return contentPart{Type: "file", File: &fileData{Filename: p.Name, FileData: dataOrURI(p)}}
	}
	return textPart(p.Text)
}

// toolResult adds a tool message answering call_id: its content a string, or text
// parts (json parts as their compact JSON).
func (b *builder) toolResult(p *protocol.Part) {
	m := message{Role: "tool", ToolCallID: p.CallID, Content: ""}
	if c := p.Content; c != nil {
		if c.Text != nil {
			m.Content = *c.Text
		} else {
			parts := make([]contentPart, 0, len(c.Parts))
			for i := range c.Parts {
				parts = append(parts, mapContent(&c.Parts[i]))
			}
			m.Content = parts
		}
	}
	b.flush()
	b.messages = append(b.messages, m)
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
			return errExtension.Clone()
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
