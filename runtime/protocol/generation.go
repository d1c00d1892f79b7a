package protocol

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
)

// The provider-neutral generation extension keys (spec/http-api.md, "Generation
// options"). They mean the same whatever model a route picks: every bundled adapter
// maps each to its provider's field, or declines the request in its encode check when
// its provider cannot honour the value.
const (
	// GenerationPrefix starts every generation key.
	GenerationPrefix             = "generation."
	GenerationMaxOutputTokens    = "generation.max_output_tokens"
	GenerationTemperature        = "generation.temperature"
	GenerationTopP               = "generation.top_p"
	GenerationTopK               = "generation.top_k"
	GenerationStop               = "generation.stop"
	GenerationSeed               = "generation.seed"
	GenerationToolChoice         = "generation.tool_choice"
	GenerationResponseFormat     = "generation.response_format"
	GenerationResponseSchema     = "generation.response_schema"
	GenerationResponseSchemaName = "generation.response_schema_name"
)

// GenerationKeys lists the generation keys in the fixed order they are checked in, so
// that the first bad one decides.
var GenerationKeys = []string{
	GenerationMaxOutputTokens, GenerationTemperature, GenerationTopP, GenerationTopK, GenerationStop,
	GenerationSeed, GenerationToolChoice, GenerationResponseFormat, GenerationResponseSchema,
	GenerationResponseSchemaName,
}

// Bounds of the generation options.
const (
	// MaxGenerationTokens bounds generation.max_output_tokens: beyond what any model
	// produces in one answer.
	MaxGenerationTokens = 1_000_000
	// MaxGenerationTopK bounds generation.top_k: beyond any model's vocabulary.
	MaxGenerationTopK = 1_000_000
	// MaxGenerationStop bounds generation.stop: OpenAI takes at most four sequences, the
	// fewest of the bundled providers.
	MaxGenerationStop = 4
	// ToolChoicePattern is the grammar of generation.tool_choice: auto, none, required,
	// or tool: followed by a tool name (ToolNamePattern).
	ToolChoicePattern = `^(auto|none|required|tool:[A-Za-z0-9_-]{1,64})$`
	// DefaultResponseSchemaName is the schema's name when generation.response_schema_name
	// is absent.
	DefaultResponseSchemaName = "response"
)

// ToolChoiceMode is what a tool choice asks of the model.
type ToolChoiceMode string

const (
	// ToolChoiceAuto lets the model decide whether to call a tool.
	ToolChoiceAuto ToolChoiceMode = "auto"
	// ToolChoiceNone forbids tool calls.
	ToolChoiceNone ToolChoiceMode = "none"
	// ToolChoiceRequired makes the model call at least one tool.
	ToolChoiceRequired ToolChoiceMode = "required"
	// ToolChoiceTool makes the model call the tool ToolChoice.Name.
	ToolChoiceTool ToolChoiceMode = "tool"
)

// ToolChoice is a parsed generation.tool_choice.
type ToolChoice struct {
	// Mode is empty when the request sets no tool choice, or sets auto or none without
	// defining a tool (there is nothing to choose from, so nothing to send).
	Mode ToolChoiceMode
	// Name is the tool of ToolChoiceTool, one the request defines.
	Name string
}

// GenerationOptions are a request's generation options as typed values. A field is nil
// (empty, false) when its key is absent.
type GenerationOptions struct {
	MaxOutputTokens *int64
	Temperature     *float64
	TopP            *float64
	TopK            *int64
	// Stop holds at most MaxGenerationStop sequences; an empty list is nil.
	Stop       []string
	Seed       *int64
	ToolChoice ToolChoice
	// JSON is generation.response_format "json": the answer is one JSON value.
	JSON bool
	// ResponseSchema is generation.response_schema, compacted: the answer is JSON that
	// follows it (structured output).
	ResponseSchema json.RawMessage
	// ResponseSchemaName is the schema's name, DefaultResponseSchemaName unless the
	// request names it; empty without ResponseSchema.
	ResponseSchemaName string
}

// Has reports whether the option of a generation key is set.
func (g *GenerationOptions) Has(key string) bool {
	switch key {
	case GenerationMaxOutputTokens:
		return g.MaxOutputTokens != nil
	case GenerationTemperature:
		return g.Temperature != nil
	case GenerationTopP:
		return g.TopP != nil
	case GenerationTopK:
		return g.TopK != nil
	case GenerationStop:
		return len(g.Stop) > 0
	case GenerationSeed:
		return g.Seed != nil
	case GenerationToolChoice:
		return g.ToolChoice.Mode != ""
	case GenerationResponseFormat:
		return g.JSON
	case GenerationResponseSchema:
		return g.ResponseSchema != nil
	case GenerationResponseSchemaName:
		return g.ResponseSchemaName != ""
	}
	return false
}

// Clear unsets the option of a generation key: what an adapter does when the request
// also sets the provider key that overrides it (the provider-specific key wins).
func (g *GenerationOptions) Clear(key string) {
	switch key {
	case GenerationMaxOutputTokens:
		g.MaxOutputTokens = nil
	case GenerationTemperature:
		g.Temperature = nil
	case GenerationTopP:
		g.TopP = nil
	case GenerationTopK:
		g.TopK = nil
	case GenerationStop:
		g.Stop = nil
	case GenerationSeed:
		g.Seed = nil
	case GenerationToolChoice:
		g.ToolChoice = ToolChoice{}
	case GenerationResponseFormat:
		g.JSON = false
	case GenerationResponseSchema:
		g.ResponseSchema, g.ResponseSchemaName = nil, ""
	case GenerationResponseSchemaName:
		if g.ResponseSchema != nil {
			g.ResponseSchemaName = DefaultResponseSchemaName
		}
	}
}

// Refusals of Generation, fixed messages naming no value. Both are invalid_request: no
// model could honour the request as given.
var (
	errGenerationValue = NewError(CodeInvalidRequest, "a generation extension has a value of the wrong type or range")
	errToolChoiceTools = NewError(CodeInvalidRequest, "a tool choice of required or tool: needs a tool part in the request")
	errToolChoiceName  = NewError(CodeInvalidRequest, "the tool choice names a tool the request does not define")
)

// Generation reads the generation options of req, the one parser every adapter uses. It
// checks each value again as DecodeRequest does (ExtensionSpec.Valid), because an
// adapter must not trust that every request went through the decoder, and it checks
// the tool choice against the request's tools: required or tool:<name> without a tool
// part, or a name no tool part has, is refused. A refusal is invalid_request with a
// fixed message.
func Generation(req *Request) (GenerationOptions, *Error) {
	var g GenerationOptions
	if req == nil {
		return g, nil
	}
	for _, key := range GenerationKeys {
		raw, ok := req.Extensions[key]
		if !ok {
			continue
		}
		spec, _ := lookupExtension(key)
		if !spec.Valid(raw) {
			return GenerationOptions{}, errGenerationValue.Clone()
		}
		if err := g.read(req, key, raw); err != nil {
			return GenerationOptions{}, err
		}
	}
	return g, nil
}

// read sets the option of key from raw, a value ExtensionSpec.Valid accepted.
func (g *GenerationOptions) read(req *Request, key string, raw json.RawMessage) *Error {
	switch key {
	case GenerationMaxOutputTokens:
		g.MaxOutputTokens = exactInteger(raw)
	case GenerationTopK:
		g.TopK = exactInteger(raw)
	case GenerationSeed:
		g.Seed = exactInteger(raw)
	case GenerationTemperature:
		g.Temperature = floatOf(raw)
	case GenerationTopP:
		g.TopP = floatOf(raw)
	case GenerationStop:
		var stop []string
		_ = json.Unmarshal(raw, &stop)
		if len(stop) > 0 {
			g.Stop = stop
		}
	case GenerationToolChoice:
		return g.toolChoice(req, unquote(bytes.TrimSpace(raw)))
	case GenerationResponseFormat:
		g.JSON = true // "json", the only value
	case GenerationResponseSchema:
		var buf bytes.Buffer
		_ = json.Compact(&buf, raw)
		g.ResponseSchema = buf.Bytes()
		if g.ResponseSchemaName == "" {
			g.ResponseSchemaName = DefaultResponseSchemaName
		}
	case GenerationResponseSchemaName:
		// Read after the schema (GenerationKeys' order); a name without one names nothing.
		if g.ResponseSchema != nil {
			g.ResponseSchemaName = unquote(bytes.TrimSpace(raw))
		}
	}
	return nil
}

// toolChoice sets the tool choice v (which matches ToolChoicePattern), checked against
// the request's tool parts.
func (g *GenerationOptions) toolChoice(req *Request, v string) *Error {
	name, forced := strings.CutPrefix(v, "tool:")
	hasTools, defined := false, false
	for i := range req.Input {
		if p := &req.Input[i]; p.Type == PartTool {
			hasTools = true
			defined = defined || p.Name == name
		}
	}
	switch mode := ToolChoiceMode(v); {
	case !hasTools && (mode == ToolChoiceAuto || mode == ToolChoiceNone):
		// Nothing to choose from: the choice is moot, and providers refuse a tool
		// choice without tools.
	case !hasTools:
		return errToolChoiceTools.Clone()
	case forced && !defined:
		return errToolChoiceName.Clone()
	case forced:
		g.ToolChoice = ToolChoice{Mode: ToolChoiceTool, Name: name}
	default:
		g.ToolChoice = ToolChoice{Mode: mode}
	}
	return nil
}

// exactInteger reads an integer literal ExtensionSpec.Valid accepted (within int64,
// perhaps written 1e3 or 2.0) without rounding it.
func exactInteger(raw json.RawMessage) *int64 {
	n := parseExactNumber(bytes.TrimSpace(raw))
	// Valid bounded the value to int64; 2^63, the magnitude of -2^63, converts to -2^63,
	// which negates to itself.
	v := int64(n.intPart)
	if n.neg {
		v = -v
	}
	return &v
}

// floatOf reads a number literal ExtensionSpec.Valid accepted (within its key's bounds, so
// finite).
func floatOf(raw json.RawMessage) *float64 {
	f, _ := strconv.ParseFloat(string(bytes.TrimSpace(raw)), 64)
	return &f
}
