package bedrock

import (
	"bytes"
	"encoding/json"
	"regexp"
	"slices"

	"github.com/switchboard-dev/switchboard/runtime/engine"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
	"github.com/switchboard-dev/switchboard/runtime/providers/providerhttp"
	"github.com/switchboard-dev/switchboard/runtime/routing"
)

// converseRequest is the body of POST /model/{modelId}/converse and /converse-stream.
// Only the fields the adapter sets exist here, so nothing else can reach the provider —
// in particular no extension can add tools, messages, system text, guardrails, prompt
// variables or raw model fields (additionalModelRequestFields). The model is in the
// path, from the deployment alone.
type converseRequest struct {
	Messages        []message        `json:"messages"`
	System          []systemBlock    `json:"system,omitempty"`
	InferenceConfig *inferenceConfig `json:"inferenceConfig,omitempty"`
	ToolConfig      *toolConfig      `json:"toolConfig,omitempty"`
}

// message is one conversation turn.
type message struct {
	Role    string         `json:"role"`
	Content []contentBlock `json:"content"`
}

// systemBlock is a SystemContentBlock holding text.
type systemBlock struct {
	Text string `json:"text"`
}

// contentBlock is a ContentBlock, a union: exactly one member is set. Inside a
// toolResult's content only text, image, document and video are used (the members
// ToolResultContentBlock shares).
type contentBlock struct {
	Text       string         `json:"text,omitempty"`
	Image      *mediaBlock    `json:"image,omitempty"`
	Video      *mediaBlock    `json:"video,omitempty"`
	Document   *documentBlock `json:"document,omitempty"`
	ToolUse    *toolUseBlock  `json:"toolUse,omitempty"`
	ToolResult *toolResult    `json:"toolResult,omitempty"`
}

// mediaBlock is an ImageBlock or a VideoBlock.
type mediaBlock struct {
	Format string      `json:"format"`
	Source mediaSource `json:"source"`
}

// documentBlock is a DocumentBlock; Bedrock requires its name.
type documentBlock struct {
	Format string      `json:"format"`
	Name   string      `json:"name"`
	Source mediaSource `json:"source"`
}

// mediaSource is an ImageSource, VideoSource or DocumentSource, a union: base64 bytes
// or an S3 location.
type mediaSource struct {
	Bytes      string      `json:"bytes,omitempty"`
	S3Location *s3Location `json:"s3Location,omitempty"`
}

// s3Location names an object in Amazon S3.
type s3Location struct {
	URI string `json:"uri"`
}

// toolUseBlock is an assistant's ToolUseBlock; input must be a JSON object.
type toolUseBlock struct {
	ToolUseID string          `json:"toolUseId"`
	Name      string          `json:"name"`
	Input     json.RawMessage `json:"input"`
}

// toolResult is a user's ToolResultBlock. Its content is always a list, possibly empty.
type toolResult struct {
	ToolUseID string         `json:"toolUseId"`
	Content   []contentBlock `json:"content"`
}

// inferenceConfig is the InferenceConfiguration the bedrock.* extensions fill.
type inferenceConfig struct {
	MaxTokens     *int64   `json:"maxTokens,omitempty"`
	Temperature   *float64 `json:"temperature,omitempty"`
	TopP          *float64 `json:"topP,omitempty"`
	StopSequences []string `json:"stopSequences,omitempty"`
}

// toolConfig is the ToolConfiguration; toolChoice is set by generation.tool_choice only,
// else left to the model's default.
type toolConfig struct {
	Tools      []toolEntry `json:"tools"`
	ToolChoice *toolChoice `json:"toolChoice,omitempty"`
}

// toolChoice is a ToolChoice union: exactly one member is set. Converse has no "none".
type toolChoice struct {
	Auto *struct{}  `json:"auto,omitempty"`
	Any  *struct{}  `json:"any,omitempty"`
	Tool *namedTool `json:"tool,omitempty"`
}

// namedTool is a SpecificToolChoice.
type namedTool struct {
	Name string `json:"name"`
}

// toolEntry is a Tool union holding a toolSpec.
type toolEntry struct {
	ToolSpec toolSpec `json:"toolSpec"`
}

// toolSpec is a ToolSpecification.
type toolSpec struct {
	Name        string      `json:"name"`
	Description string      `json:"description,omitempty"`
	InputSchema inputSchema `json:"inputSchema"`
}

// inputSchema is a ToolInputSchema union holding a JSON Schema document.
type inputSchema struct {
	JSON json.RawMessage `json:"json"`
}

// Wire roles. Converse has no system or tool role inside messages: system text goes to
// the top-level system field, tool results travel in user turns.
const (
	roleUser      = "user"
	roleAssistant = "assistant"
)

// emptySchema is the input schema of a tool that declares none: the API requires one.
var emptySchema = json.RawMessage(`{"type":"object"}`)

// toolUseIDRE is the documented pattern of ToolUseBlock and ToolResultBlock toolUseId.
var toolUseIDRE = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

// Refusals of requests the adapter cannot send. Routing asks CanEncode before it chooses
// a deployment, so Execute meets them only for requests that did not go through routing;
// either way nothing is sent (spec/routing.md, "Eligibility"). A request Converse cannot
// express, or one that needs a capability the deployment does not declare (so a policy
// that disables tools keeps them disabled), is unsupported_capability: another deployment
// may take it. A value that is wrong whatever the deployment is invalid_request.
// Messages are fixed: they never echo the caller's content or extension keys.
func unsupported(msg string) *protocol.Error {
	return protocol.NewError(protocol.CodeUnsupportedCapability, msg)
}

func invalid(msg string) *protocol.Error {
	return protocol.NewError(protocol.CodeInvalidRequest, msg)
}

const (
	msgImageNotDeclared = "the deployment does not accept image input"
	msgVideoNotDeclared = "the deployment does not accept video input"
	msgFileNotDeclared  = "the deployment does not accept file input"
	msgToolsNotDeclared = "the deployment does not accept tools"
	msgAudio            = "audio input is not supported by the bedrock adapter"
	msgImageFormat      = "the image media type is not one the bedrock adapter can send (png, jpeg, gif, webp)"
	msgVideoFormat      = "the video media type is not one the bedrock adapter can send"
	msgFileFormat       = "the file media type is not one the bedrock adapter can send as a document"
	msgMediaURI         = "media given by uri must be an s3:// uri for the bedrock adapter"
	msgSystemPart       = "system parts must be text or json for this provider"
	msgToolArguments    = "a tool_call's arguments must be a JSON object"
	msgCallID           = "a tool call id does not match the provider's format ([A-Za-z0-9_-], at most 64 characters)"
	msgToolsUndefined   = "a conversation with tool calls or results needs its tool definitions for this provider"
	msgAssistantFirst   = "the conversation must start with a user turn for this provider"
	msgNoMessages       = "the request has no user or assistant content"
	msgExtension        = "a bedrock extension has a value of the wrong type or range"
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
	return generation.Read(r, d, applyExtensions(&converseRequest{}, r.Extensions), checkParts(r, d.Capabilities))
}

// generation is what Converse takes of the generation options (README.md, "Generation
// options"): inferenceConfig's fields, temperatures up to 1, and a tool choice other
// than none. Each bedrock.* key overrides the generation key of its field;
// bedrock.max_tokens is lowered to the deployment's output cap like the generation key
// (buildRequest).
var generation = providerhttp.GenerationSupport{
	Adapter: "bedrock",
	Honours: []string{
		protocol.GenerationMaxOutputTokens, protocol.GenerationTemperature, protocol.GenerationTopP,
		protocol.GenerationStop, protocol.GenerationToolChoice,
	},
	MaxTemperature:   1,
	NoToolChoiceNone: true,
	Overrides: map[string]string{
		specMaxTokens.Key:     protocol.GenerationMaxOutputTokens,
		specTemperature.Key:   protocol.GenerationTemperature,
		specTopP.Key:          protocol.GenerationTopP,
		specStopSequences.Key: protocol.GenerationStop,
	},
}

// checkParts refuses the parts a deployment with caps cannot take.
func checkParts(r *protocol.Request, caps routing.CapSet) *protocol.Error {
	m := mapperOf(caps)
	var (
		first      string // role of the first turn
		toolDefs   bool   // a tool part defines a tool
		toolBlocks bool   // a tool_call or tool_result is in the conversation
	)
	for i := range r.Input {
		p := &r.Input[i]
		switch {
		case p.Type == protocol.PartTool:
			if !m.tools {
				return unsupported(msgToolsNotDeclared)
			}
			toolDefs = true
		case isSystem(p):
			if p.Type != protocol.PartText && p.Type != protocol.PartJSON {
				return unsupported(msgSystemPart)
			}
		default:
			if err := m.check(p); err != nil {
				return err
			}
			toolBlocks = toolBlocks || p.Type == protocol.PartToolCall || p.Type == protocol.PartToolResult
			if first == "" && hasBlock(p) {
				first = roleOf(p)
			}
		}
	}
	switch {
	case first == "":
		return unsupported(msgNoMessages)
	case first == roleAssistant:
		// Converse refuses a conversation that opens with an assistant turn, and the
		// adapter invents no user turn to fix it: another deployment may take it as is.
		return unsupported(msgAssistantFirst)
	case toolBlocks && !toolDefs:
		// Converse refuses toolUse and toolResult blocks without a toolConfig, and the
		// adapter invents no tool definitions.
		return unsupported(msgToolsUndefined)
	}
	return nil
}

// isSystem reports whether p goes to the top-level system field. Tool results answer the
// model whatever role they carry, so they never do.
func isSystem(p *protocol.Part) bool {
	return p.Role == protocol.RoleSystem && p.Type != protocol.PartToolResult
}

// hasBlock reports whether a conversation part maps to a content block: an empty text
// maps to none, as the API rejects blank text blocks.
func hasBlock(p *protocol.Part) bool {
	switch p.Type {
	case protocol.PartText:
		return p.Text != ""
	case protocol.PartJSON:
		return len(p.JSON) > 0
	}
	return true
}

// roleOf is the wire role of a conversation part's turn. A tool_call is the model's
// turn (the decoder accepts it only from the assistant); a tool_result answers the
// model, so it is a user turn whatever role it carries; role tool and user are user.
func roleOf(p *protocol.Part) string {
	if p.Type == protocol.PartToolCall || (p.Type != protocol.PartToolResult && p.Role == protocol.RoleAssistant) {
		return roleAssistant
	}
	return roleUser
}

// mapper checks conversation parts against one deployment's capabilities.
type mapper struct {
	tools, images, video, files bool
}

func mapperOf(caps routing.CapSet) mapper {
	return mapper{
		tools:  caps.Has(routing.CapsOf(protocol.CapTools)),
		images: caps.Has(routing.CapsOf(protocol.CapInputImage)),
		video:  caps.Has(routing.CapsOf(protocol.CapInputVideo)),
		files:  caps.Has(routing.CapsOf(protocol.CapInputFile)),
	}
}

// check refuses a conversation part (neither a tool nor a system part).
func (m mapper) check(p *protocol.Part) *protocol.Error {
	switch p.Type {
	case protocol.PartToolCall:
		if !m.tools {
			return unsupported(msgToolsNotDeclared)
		}
		if !toolUseIDRE.MatchString(p.CallID) {
			return unsupported(msgCallID)
		}
		if _, ok := p.ArgumentsObject(); !ok {
			return invalid(msgToolArguments)
		}
		return nil
	case protocol.PartToolResult:
		if !m.tools {
			return unsupported(msgToolsNotDeclared)
		}
		if !toolUseIDRE.MatchString(p.CallID) {
			return unsupported(msgCallID)
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

// checkContent refuses a text, json or media part the deployment cannot take, or whose
// media type or URI Converse cannot carry.
func (m mapper) checkContent(p *protocol.Part) *protocol.Error {
	switch p.Type {
	case protocol.PartText, protocol.PartJSON:
		return nil
	case protocol.PartImage:
		if !m.images {
			return unsupported(msgImageNotDeclared)
		}
		if _, ok := imageFormat(p.MediaType); !ok {
			return unsupported(msgImageFormat)
		}
	case protocol.PartVideo:
		if !m.video {
			return unsupported(msgVideoNotDeclared)
		}
		if _, ok := videoFormat(p.MediaType); !ok {
			return unsupported(msgVideoFormat)
		}
	case protocol.PartFile:
		if !m.files {
			return unsupported(msgFileNotDeclared)
		}
		if _, ok := documentFormat(p.MediaType); !ok {
			return unsupported(msgFileFormat)
		}
	default:
		// audio has no Converse content block; unknown types cannot occur past the
		// decoder. The text is fixed either way.
		return unsupported(msgAudio)
	}
	if _, ok := sourceOf(p); !ok {
		return unsupported(msgMediaURI)
	}
	return nil
}

// buildRequest maps r to the Converse body for deployment d, or returns check's
// refusal.
//
// Parts are taken in order. System parts (text or json) become the top-level system
// blocks; tool parts the toolConfig; every other part a content block of a user or
// assistant turn, and consecutive blocks of the same role are merged into one turn, so
// the turns alternate as the API requires. A json part is data for the model: its
// compact JSON travels as a text block (in a tool result too), never as request fields
// or as a toolResult json block.
func buildRequest(r *protocol.Request, d *routing.Deployment) (*converseRequest, *protocol.Error) {
	g, err := check(r, d)
	if err != nil {
		return nil, err
	}
	cr := &converseRequest{Messages: []message{}}
	_ = applyExtensions(cr, r.Extensions) // check accepted every value
	if cfg := cr.InferenceConfig; cfg != nil && cfg.MaxTokens != nil {
		// bedrock.max_tokens carries the output limit instead of the generation key
		// (which Read then left alone): the deployment's cap lowers it the same way
		// (spec/http-api.md, "Generation options").
		cfg.MaxTokens = providerhttp.OutputCap(cfg.MaxTokens, d.MaxOutputTokens)
	}
	names := newDocumentNamer()
	for i := range r.Input {
		p := &r.Input[i]
		switch {
		case p.Type == protocol.PartTool:
			schema := p.Parameters
			if len(bytes.TrimSpace(schema)) == 0 {
				schema = emptySchema
			}
			if cr.ToolConfig == nil {
				cr.ToolConfig = &toolConfig{}
			}
			cr.ToolConfig.Tools = append(cr.ToolConfig.Tools, toolEntry{ToolSpec: toolSpec{
				Name: p.Name, Description: p.Description, InputSchema: inputSchema{JSON: schema}}})
		case isSystem(p):
			if text, ok := textOf(p); ok {
				cr.System = append(cr.System, systemBlock{Text: text})
			}
		default:
			if b, ok := turnBlock(p, names); ok {
				cr.Messages = providerhttp.AppendTurn(cr.Messages, roleOf(p), b, (*message).fields)
			}
		}
	}
	for i := range cr.Messages {
		if cr.Messages[i].Role == roleUser {
			toolResultsFirst(cr.Messages[i].Content)
		}
	}
	applyGeneration(cr, &g)
	return cr, nil
}

// applyGeneration sets the generation options check admitted into inferenceConfig and
// toolConfig (which a tool choice implies: it is set only for a request with tool
// parts); those a bedrock.* key overrides are already gone from g.
func applyGeneration(cr *converseRequest, g *protocol.GenerationOptions) {
	cfg := cr.InferenceConfig
	if cfg == nil {
		cfg = &inferenceConfig{}
	}
	if g.MaxOutputTokens != nil {
		cfg.MaxTokens = g.MaxOutputTokens
	}
	if g.Temperature != nil {
		cfg.Temperature = g.Temperature
	}
	if g.TopP != nil {
		cfg.TopP = g.TopP
	}
	if g.Stop != nil {
		cfg.StopSequences = g.Stop
	}
	if cfg.MaxTokens != nil || cfg.Temperature != nil || cfg.TopP != nil || cfg.StopSequences != nil {
		cr.InferenceConfig = cfg
	}
	switch c := g.ToolChoice; c.Mode {
	case "", protocol.ToolChoiceNone: // none is declined by check
	case protocol.ToolChoiceAuto:
		cr.ToolConfig.ToolChoice = &toolChoice{Auto: &struct{}{}}
	case protocol.ToolChoiceRequired:
		cr.ToolConfig.ToolChoice = &toolChoice{Any: &struct{}{}}
	case protocol.ToolChoiceTool:
		cr.ToolConfig.ToolChoice = &toolChoice{Tool: &namedTool{Name: c.Name}}
	}
}

// turnBlock maps a conversation part that check admitted to its content block. ok is
// false for a part that maps to nothing (an empty text).
func turnBlock(p *protocol.Part, names *documentNamer) (contentBlock, bool) {
	switch p.Type {
	case protocol.PartToolCall:
		input, _ := p.ArgumentsObject()
		return contentBlock{ToolUse: &toolUseBlock{ToolUseID: p.CallID, Name: p.Name, Input: input}}, true
	case protocol.PartToolResult:
		return contentBlock{ToolResult: &toolResult{ToolUseID: p.CallID, Content: toolContent(p.Content, names)}}, true
	}
	return content(p, names)
}

// content maps a text, json or media part.
func content(p *protocol.Part, names *documentNamer) (contentBlock, bool) {
	switch p.Type {
	case protocol.PartImage:
		format, _ := imageFormat(p.MediaType)
		src, _ := sourceOf(p)
		return contentBlock{Image: &mediaBlock{Format: format, Source: src}}, true
	case protocol.PartVideo:
		format, _ := videoFormat(p.MediaType)
		src, _ := sourceOf(p)
		return contentBlock{Video: &mediaBlock{Format: format, Source: src}}, true
	case protocol.PartFile:
		format, _ := documentFormat(p.MediaType)
		src, _ := sourceOf(p)
		return contentBlock{Document: &documentBlock{Format: format, Name: names.name(p.Name), Source: src}}, true
	}
	text, ok := textOf(p)
	return contentBlock{Text: text}, ok
}

// toolContent maps a tool_result's content: a string becomes one text block, parts
// become text, image, video and document blocks. Content that maps to nothing (an empty
// string) is an empty list, which the API takes; a blank text block it would refuse.
func toolContent(c *protocol.ToolContent, names *documentNamer) []contentBlock {
	blocks := []contentBlock{}
	if c == nil {
		return blocks
	}
	if c.Text != nil {
		if *c.Text != "" {
			blocks = append(blocks, contentBlock{Text: *c.Text})
		}
		return blocks
	}
	for i := range c.Parts {
		if b, ok := content(&c.Parts[i], names); ok {
			blocks = append(blocks, b)
		}
	}
	return blocks
}

// textOf is the text of a text part, or of a json part its compact JSON text
// (providerhttp.PartText). ok is false for empty text.
func textOf(p *protocol.Part) (string, bool) {
	text := providerhttp.PartText(p)
	return text, text != ""
}

// fields are a turn's role and content, for providerhttp.AppendTurn.
func (t *message) fields() (*string, *[]contentBlock) { return &t.Role, &t.Content }

// toolResultsFirst moves a user turn's toolResult blocks before its other blocks, keeping
// each group's order: models behind Converse (Anthropic's among them) want the results
// to open the turn that answers a tool use, and a merged turn may have had text first.
func toolResultsFirst(blocks []contentBlock) {
	// A stable sort on "is a result" keeps each group's order.
	slices.SortStableFunc(blocks, func(a, b contentBlock) int { return resultRank(b) - resultRank(a) })
}

// resultRank sorts tool results before everything else.
func resultRank(b contentBlock) int {
	if b.ToolResult != nil {
		return 1
	}
	return 0
}

// Extension keys read by the adapter (README.md lists them with their Converse fields),
// as the request decoder documents and checks them (protocol.DocumentedExtensions).
var (
	specMaxTokens     = documented("bedrock.max_tokens")
	specTemperature   = documented("bedrock.temperature")
	specTopP          = documented("bedrock.top_p")
	specStopSequences = documented("bedrock.stop_sequences")
)

// documented returns the registered spec of key; a key missing from the registry is a
// programming error caught by every test of the package.
func documented(key string) protocol.ExtensionSpec {
	s, ok := protocol.LookupExtension(key)
	if !ok {
		panic("bedrock: extension " + key + " is not documented in runtime/protocol")
	}
	return s
}

// applyExtensions reads the documented bedrock.* extensions into cr. Other keys —
// another provider's, or bedrock keys this adapter does not document (such as
// bedrock.additional_model_request_fields, which would pass raw provider fields) — are
// ignored, so no extension can add tools, messages, a model or credentials. The request
// decoder checks documented keys first; they are checked again here because an adapter
// must not trust that every caller went through it.
func applyExtensions(cr *converseRequest, ext map[string]json.RawMessage) *protocol.Error {
	cfg := &inferenceConfig{}
	set := false
	if raw, ok := ext[specMaxTokens.Key]; ok {
		if !specMaxTokens.Valid(raw) {
			return invalid(msgExtension)
		}
		n := int64(numberOf(raw))
		cfg.MaxTokens, set = &n, true
	}
	if raw, ok := ext[specTemperature.Key]; ok {
		if !specTemperature.Valid(raw) {
			return invalid(msgExtension)
		}
		f := numberOf(raw)
		cfg.Temperature, set = &f, true
	}
	if raw, ok := ext[specTopP.Key]; ok {
		if !specTopP.Valid(raw) {
			return invalid(msgExtension)
		}
		f := numberOf(raw)
		cfg.TopP, set = &f, true
	}
	if raw, ok := ext[specStopSequences.Key]; ok {
		var seqs []string
		if !specStopSequences.Valid(raw) || json.Unmarshal(raw, &seqs) != nil {
			return invalid(msgExtension)
		}
		if len(seqs) > 0 {
			cfg.StopSequences, set = seqs, true
		}
	}
	if set {
		cr.InferenceConfig = cfg
	}
	return nil
}

// numberOf reads a JSON number that ExtensionSpec.Valid accepted (within ±2^31 here, so
// exact as a float64; an integer may be written 1e3).
func numberOf(raw json.RawMessage) float64 {
	var f float64
	_ = json.Unmarshal(raw, &f)
	return f
}
