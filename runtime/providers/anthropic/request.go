package anthropic

import (
	"bytes"
	"encoding/json"
	"math"
	"slices"
	"strconv"

	"github.com/switchboard-dev/switchboard/runtime/engine"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
	"github.com/switchboard-dev/switchboard/runtime/providers/providerhttp"
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
	TopP        *float64       `json:"top_p,omitempty"`
	TopK        *int64         `json:"top_k,omitempty"`
	Stop        []string       `json:"stop_sequences,omitempty"`
	ToolChoice  *toolChoice    `json:"tool_choice,omitempty"`
	Stream      bool           `json:"stream,omitempty"`
}

// toolChoice is the tool_choice object: type auto, any, tool (with name) or none.
type toolChoice struct {
	Type string `json:"type"`
	Name string `json:"name,omitempty"`
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
	// CacheControl marks a cache breakpoint (cache.go).
	CacheControl *cacheControl `json:"cache_control,omitempty"`
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
	// CacheControl marks a cache breakpoint (cache.go).
	CacheControl *cacheControl `json:"cache_control,omitempty"`
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

// generation is what the Messages API takes of the generation options (README.md,
// "Generation options"): temperatures up to 1, and neither a seed nor JSON or
// structured output. Each anthropic.* key overrides the generation key of its field;
// anthropic.max_tokens is lowered to the deployment's output cap like the generation key
// (buildRequest).
var generation = providerhttp.GenerationSupport{
	Adapter: "anthropic",
	Honours: []string{
		protocol.GenerationMaxOutputTokens, protocol.GenerationTemperature, protocol.GenerationTopP,
		protocol.GenerationTopK, protocol.GenerationStop, protocol.GenerationToolChoice,
	},
	MaxTemperature: 1,
	Overrides: map[string]string{
		extMaxTokens:   protocol.GenerationMaxOutputTokens,
		extTemperature: protocol.GenerationTemperature,
		extTopK:        protocol.GenerationTopK,
	},
}

// toolChoiceTypes maps the generation tool choices to Anthropic's types.
var toolChoiceTypes = map[protocol.ToolChoiceMode]string{
	protocol.ToolChoiceAuto: "auto", protocol.ToolChoiceNone: "none",
	protocol.ToolChoiceRequired: "any", protocol.ToolChoiceTool: "tool",
}

// emptySchema is the input schema of a tool that declares none: the API requires an
// object schema.
var emptySchema = json.RawMessage(`{"type":"object"}`)

// Refusals of requests the adapter cannot send. Routing asks CanEncode before it chooses
// a deployment, so Execute meets them only for requests that did not go through routing;
// either way nothing is sent. A request the Messages API cannot express, or one that
// needs a capability the deployment does not declare (so a policy that disables tools
// keeps them disabled), is unsupported_capability: another deployment may take it.
// Messages are fixed: they never echo the caller's content or extension keys.
func unsupported(msg string) *protocol.Error {
	return protocol.NewError(protocol.CodeUnsupportedCapability, msg)
}

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
	msgMissing          = "request is missing"
)

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

// check returns the first refusal of r for deployment d, or nil, and the generation
// options it sends (d's output cap applied). It is the only place refusals are decided:
// buildRequest maps only requests it admits.
func check(r *protocol.Request, d *routing.Deployment) (protocol.GenerationOptions, *protocol.Error) {
	_, marks := breakpoints(r.Extensions, len(r.Input))
	return generation.Read(r, d, applyExtensions(&messagesRequest{}, r.Extensions), marks, checkParts(r, d.Capabilities))
}

// checkParts refuses the parts a deployment with caps cannot take.
func checkParts(r *protocol.Request, caps routing.CapSet) *protocol.Error {
	m := mapper{
		tools:  caps.Has(routing.CapsOf(protocol.CapTools)),
		images: caps.Has(routing.CapsOf(protocol.CapInputImage)),
	}
	content := false // a part becomes a block of a user or assistant turn
	for i := range r.Input {
		p := &r.Input[i]
		switch {
		case p.Type == protocol.PartTool:
			if !m.tools {
				return unsupported(msgToolsNotDeclared)
			}
		case isSystem(p):
			if p.Type != protocol.PartText && p.Type != protocol.PartJSON {
				return unsupported(msgSystemPart)
			}
		default:
			if err := m.check(p); err != nil {
				return err
			}
			content = content || hasBlock(p)
		}
	}
	if !content {
		return unsupported(msgNoMessages)
	}
	return nil
}

// isSystem reports whether p goes to the top-level system field. Tool results answer the
// model whatever role they carry, so they never do.
func isSystem(p *protocol.Part) bool {
	return p.Role == protocol.RoleSystem && p.Type != protocol.PartToolResult
}

// hasBlock reports whether a conversation part maps to a content block (see textOf): an
// empty text maps to none, as the API rejects empty text blocks.
func hasBlock(p *protocol.Part) bool {
	switch p.Type {
	case protocol.PartText:
		return p.Text != ""
	case protocol.PartJSON:
		return len(p.JSON) > 0
	}
	return true
}

// mapper checks conversation parts against one deployment's capabilities.
type mapper struct {
	tools, images bool
}

// check refuses a conversation part (neither a tool nor a system part).
func (m mapper) check(p *protocol.Part) *protocol.Error {
	switch p.Type {
	case protocol.PartToolCall:
		if !m.tools {
			return unsupported(msgToolsNotDeclared)
		}
		if _, ok := p.ArgumentsObject(); !ok {
			return unsupported(msgToolArguments)
		}
		return nil
	case protocol.PartToolResult:
		if !m.tools {
			return unsupported(msgToolsNotDeclared)
		}
		if c := p.Content; c != nil && c.Text == nil {
			for i := range c.Parts {
				if err := m.checkContent(&c.Parts[i]); err != nil {
					return err
				}
			}
		}
		return nil
	}
	return m.checkContent(p)
}

// checkContent refuses a text, json or media part the deployment cannot take.
func (m mapper) checkContent(p *protocol.Part) *protocol.Error {
	switch p.Type {
	case protocol.PartText, protocol.PartJSON:
		return nil
	case protocol.PartImage:
		if !m.images {
			return unsupported(msgImageNotDeclared)
		}
		return nil
	}
	// audio, video and file have no mapping here; the type names come from the
	// protocol's closed set, never from caller data.
	return unsupported("input part type " + string(p.Type) + " is not supported by the anthropic adapter")
}

// buildRequest maps r to the Messages API body for deployment d, or returns check's
// refusal. max_tokens, which the API requires, is the request's limit lowered to d's
// output cap, else the cap, else DefaultMaxTokens.
//
// Parts are taken in order. System parts (text or json) become the top-level system
// blocks; every other part becomes a content block of a user or assistant turn, and
// consecutive blocks of the same role are merged into one turn, so the turns alternate as
// the API requires. Nothing is invented: a conversation that starts with an assistant
// turn is sent as it is, and the API's verdict applies. A json part is data for the
// model: its compact JSON travels as a text block, never as request fields.
func buildRequest(r *protocol.Request, d *routing.Deployment, stream bool) (*messagesRequest, *protocol.Error) {
	g, err := check(r, d)
	if err != nil {
		return nil, err
	}
	mr := &messagesRequest{Model: d.Model, MaxTokens: DefaultMaxTokens, Stream: stream, Messages: []message{}}
	_ = applyExtensions(mr, r.Extensions) // check accepted every value
	if _, ok := r.Extensions[extMaxTokens]; ok {
		// anthropic.max_tokens carries the output limit instead of the generation key
		// (which Read then left alone): the deployment's cap lowers it the same way
		// (spec/http-api.md, "Generation options").
		mr.MaxTokens = *providerhttp.OutputCap(&mr.MaxTokens, d.MaxOutputTokens)
	}
	applyGeneration(mr, &g)
	marks, _ := breakpoints(r.Extensions, len(r.Input))
	for i := range r.Input {
		p := &r.Input[i]
		switch {
		case p.Type == protocol.PartTool:
			schema := p.Parameters
			if len(bytes.TrimSpace(schema)) == 0 {
				schema = emptySchema
			}
			mr.Tools = append(mr.Tools, tool{Name: p.Name, Description: p.Description, InputSchema: schema, CacheControl: marks[i]})
		case isSystem(p):
			if b, ok := textOf(p); ok {
				b.CacheControl = marks[i]
				mr.System = append(mr.System, b)
			}
		default:
			if role, b, ok := turnBlock(p); ok {
				b.CacheControl = marks[i]
				mr.Messages = providerhttp.AppendTurn(mr.Messages, role, b, (*message).fields)
			}
		}
	}
	for i := range mr.Messages {
		if mr.Messages[i].Role == roleUser {
			toolResultsFirst(mr.Messages[i].Content)
		}
	}
	return mr, nil
}

// turnBlock maps a conversation part that check admitted to its turn's role and content
// block. ok is false for a part that maps to nothing (an empty text).
func turnBlock(p *protocol.Part) (role string, b contentBlock, ok bool) {
	switch p.Type {
	case protocol.PartToolCall:
		input, _ := p.ArgumentsObject()
		// The decoder only accepts tool_call from the assistant; it is the model's turn.
		return roleAssistant, contentBlock{Type: "tool_use", ID: p.CallID, Name: p.Name, Input: input}, true
	case protocol.PartToolResult:
		// Tool results answer the model, so they are always a user turn whatever role
		// the part carries.
		return roleUser, contentBlock{Type: "tool_result", ToolUseID: p.CallID, Content: toolContent(p.Content)}, true
	}
	role = roleUser
	if p.Role == protocol.RoleAssistant {
		role = roleAssistant
	}
	b, ok = content(p)
	return role, b, ok
}

// content maps a text, json or image part.
func content(p *protocol.Part) (contentBlock, bool) {
	if p.Type == protocol.PartImage {
		src := &imageSource{Type: "base64", MediaType: p.MediaType, Data: p.Data}
		if p.URI != "" {
			src = &imageSource{Type: "url", URL: p.URI}
		}
		return contentBlock{Type: "image", Source: src}, true
	}
	return textOf(p)
}

// toolContent maps a tool_result's content: a string stays a string, parts become text
// and image blocks.
func toolContent(c *protocol.ToolContent) any {
	if c == nil {
		return ""
	}
	if c.Text != nil {
		return *c.Text
	}
	blocks := []contentBlock{}
	for i := range c.Parts {
		if b, ok := content(&c.Parts[i]); ok {
			blocks = append(blocks, b)
		}
	}
	return blocks
}

// textOf is the text block of a text part, or of a json part as its JSON text (compact,
// so the same value always reads the same).
func textOf(p *protocol.Part) (contentBlock, bool) {
	text := providerhttp.PartText(p)
	if text == "" {
		return contentBlock{}, false
	}
	return contentBlock{Type: "text", Text: text}, true
}

// fields are a turn's role and content, for providerhttp.AppendTurn.
func (t *message) fields() (*string, *[]contentBlock) { return &t.Role, &t.Content }

// toolResultsFirst moves a user turn's tool_result blocks before its other blocks, keeping
// each group's order: the API requires tool results to open the turn that answers a
// tool use, and a merged turn may have had text first.
func toolResultsFirst(blocks []contentBlock) {
	// A stable sort on "is a result" keeps each group's order.
	slices.SortStableFunc(blocks, func(a, b contentBlock) int { return resultRank(b) - resultRank(a) })
}

// resultRank sorts tool results before everything else.
func resultRank(b contentBlock) int {
	if b.Type == "tool_result" {
		return 1
	}
	return 0
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

// applyGeneration sets the generation options check admitted; those an anthropic.* key
// overrides are already gone from g.
func applyGeneration(mr *messagesRequest, g *protocol.GenerationOptions) {
	if g.MaxOutputTokens != nil {
		mr.MaxTokens = *g.MaxOutputTokens
	}
	if g.Temperature != nil {
		mr.Temperature = g.Temperature
	}
	if g.TopK != nil {
		mr.TopK = g.TopK
	}
	mr.TopP, mr.Stop = g.TopP, g.Stop
	if c := g.ToolChoice; c.Mode != "" {
		mr.ToolChoice = &toolChoice{Type: toolChoiceTypes[c.Mode], Name: c.Name}
	}
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
