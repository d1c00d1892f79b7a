package gemini

import (
	"encoding/json"
	"net/url"
	"slices"
	"strings"

	"github.com/switchboard-dev/switchboard/runtime/engine"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
	"github.com/switchboard-dev/switchboard/runtime/providers/providerhttp"
	"github.com/switchboard-dev/switchboard/runtime/routing"
)

// generateRequest is the GenerateContentRequest body, the same for both providers (the
// model is in the URL). Only the fields the adapter sets exist here, so nothing else can
// reach the provider — in particular no extension can add contents, tools, a model,
// safety settings or cached content.
type generateRequest struct {
	Contents          []content         `json:"contents"`
	SystemInstruction *content          `json:"systemInstruction,omitempty"`
	Tools             []tool            `json:"tools,omitempty"`
	ToolConfig        *toolConfig       `json:"toolConfig,omitempty"`
	GenerationConfig  *generationConfig `json:"generationConfig,omitempty"`
}

// toolConfig holds the function calling mode of a tool choice.
type toolConfig struct {
	FunctionCallingConfig functionCallingConfig `json:"functionCallingConfig"`
}

// functionCallingConfig is mode AUTO, NONE or ANY, the last optionally limited to
// allowedFunctionNames.
type functionCallingConfig struct {
	Mode                 string   `json:"mode"`
	AllowedFunctionNames []string `json:"allowedFunctionNames,omitempty"`
}

// content is one turn: role "user" or "model" (omitted for the system instruction).
type content struct {
	Role  string `json:"role,omitempty"`
	Parts []part `json:"parts"`
}

// part is a request Part; exactly one field is set.
type part struct {
	Text             *string           `json:"text,omitempty"`
	InlineData       *blob             `json:"inlineData,omitempty"`
	FileData         *fileData         `json:"fileData,omitempty"`
	FunctionCall     *functionCall     `json:"functionCall,omitempty"`
	FunctionResponse *functionResponse `json:"functionResponse,omitempty"`
}

type blob struct {
	MimeType string `json:"mimeType"`
	Data     string `json:"data"`
}

type fileData struct {
	MimeType string `json:"mimeType"`
	FileURI  string `json:"fileUri"`
}

// functionCall is an earlier call of the model, replayed in a model turn. The call id is
// not sent: Gemini matches a response to its call by name and order, and ids minted by
// other providers mean nothing to it.
type functionCall struct {
	Name string          `json:"name"`
	Args json.RawMessage `json:"args"`
}

// functionResponse answers a call. response is the object {"output": …} the API
// documents for a function's output.
type functionResponse struct {
	Name     string     `json:"name"`
	Response toolOutput `json:"response"`
}

// toolOutput is a string, or a list of strings for a result given as several parts.
type toolOutput struct {
	Output any `json:"output"`
}

type tool struct {
	FunctionDeclarations []functionDeclaration `json:"functionDeclarations"`
}

// functionDeclaration declares a caller's tool. Its parameters go to
// parametersJsonSchema, which takes a JSON Schema as it is; the older parameters field
// takes only an OpenAPI subset and would refuse common JSON Schema keywords.
type functionDeclaration struct {
	Name                 string          `json:"name"`
	Description          string          `json:"description,omitempty"`
	ParametersJSONSchema json.RawMessage `json:"parametersJsonSchema,omitempty"`
}

type generationConfig struct {
	Temperature     *float64        `json:"temperature,omitempty"`
	TopP            *float64        `json:"topP,omitempty"`
	TopK            *int64          `json:"topK,omitempty"`
	MaxOutputTokens *int64          `json:"maxOutputTokens,omitempty"`
	Seed            *int64          `json:"seed,omitempty"`
	StopSequences   []string        `json:"stopSequences,omitempty"`
	ThinkingConfig  *thinkingConfig `json:"thinkingConfig,omitempty"`
	// ResponseMimeType is application/json for JSON or structured output.
	ResponseMimeType string `json:"responseMimeType,omitempty"`
	// ResponseJSONSchema takes a JSON Schema as it is; the older responseSchema field
	// takes only an OpenAPI subset.
	ResponseJSONSchema json.RawMessage `json:"responseJsonSchema,omitempty"`
}

// empty reports whether gc sets nothing, so that no empty generationConfig is sent.
func (gc *generationConfig) empty() bool {
	return gc.Temperature == nil && gc.TopP == nil && gc.TopK == nil && gc.MaxOutputTokens == nil &&
		gc.Seed == nil && len(gc.StopSequences) == 0 && gc.ThinkingConfig == nil && gc.ResponseMimeType == ""
}

type thinkingConfig struct {
	ThinkingBudget *int64 `json:"thinkingBudget,omitempty"`
	ThinkingLevel  string `json:"thinkingLevel,omitempty"`
}

// Wire roles. Gemini has no system or tool role inside contents: system text goes to
// systemInstruction, function responses travel in user turns.
const (
	roleUser  = "user"
	roleModel = "model"
)

// Extension keys read by the adapter, for both providers (README.md lists them with
// their API fields): the request body is the same GenerateContentRequest on either. The
// registry (protocol.LookupExtension) holds each key's type and range, checked by the
// request decoder and again by applyExtensions.
var (
	specTemperature     = documented("gemini.temperature")
	specTopP            = documented("gemini.top_p")
	specTopK            = documented("gemini.top_k")
	specMaxOutputTokens = documented("gemini.max_output_tokens")
	specSeed            = documented("gemini.seed")
	specStopSequences   = documented("gemini.stop_sequences")
	// -1 asks for a dynamic budget, 0 turns thinking off where the model allows it.
	specThinkingBudget = documented("gemini.thinking_budget")
	// A pattern, not a list, as Google adds levels; sent as the enum name (upper case).
	specThinkingLevel = documented("gemini.thinking_level")
)

// generation is what both providers take of the generation options (README.md,
// "Generation options"): all of them, seeds within 32 bits. Each gemini.* key overrides
// the generation key of its field; gemini.max_output_tokens is lowered to the
// deployment's output cap like the generation key (buildRequest).
var generation = providerhttp.GenerationSupport{
	Adapter: "gemini",
	Honours: []string{
		protocol.GenerationMaxOutputTokens, protocol.GenerationTemperature, protocol.GenerationTopP,
		protocol.GenerationTopK, protocol.GenerationStop, protocol.GenerationSeed, protocol.GenerationToolChoice,
		protocol.GenerationResponseFormat, protocol.GenerationResponseSchema,
	},
	Seed32: true,
	Overrides: map[string]string{
		specTemperature.Key:     protocol.GenerationTemperature,
		specTopP.Key:            protocol.GenerationTopP,
		specTopK.Key:            protocol.GenerationTopK,
		specMaxOutputTokens.Key: protocol.GenerationMaxOutputTokens,
		specSeed.Key:            protocol.GenerationSeed,
		specStopSequences.Key:   protocol.GenerationStop,
	},
}

// callingModes maps the generation tool choices to function calling modes; a choice of
// one tool is ANY limited to it.
var callingModes = map[protocol.ToolChoiceMode]string{
	protocol.ToolChoiceAuto: "AUTO", protocol.ToolChoiceNone: "NONE",
	protocol.ToolChoiceRequired: "ANY", protocol.ToolChoiceTool: "ANY",
}

// documented returns the registered spec of key; a key missing from the registry is a
// programming error caught by every test of the package.
func documented(key string) protocol.ExtensionSpec {
	s, ok := protocol.LookupExtension(key)
	if !ok {
		panic("gemini: extension " + key + " is not documented in runtime/protocol")
	}
	return s
}

// Refusals of requests the adapter cannot send. Routing asks CanEncode before it chooses
// a deployment (spec/routing.md, "Eligibility"), so Execute meets them only for requests
// that did not go through routing; either way nothing is sent. A request the API cannot
// express, or one that needs a capability the deployment does not declare (so a policy
// that disables tools keeps them disabled), is unsupported_capability: another
// deployment may take it. A request that is itself malformed for this wire format (tool
// arguments that are not an object, a tool result whose call is not in the request) is
// invalid_request. Messages are fixed: part types and provider names come from closed
// sets, never from caller content.
func unsupported(msg string) *protocol.Error {
	return protocol.NewError(protocol.CodeUnsupportedCapability, msg)
}

func invalid(msg string) *protocol.Error {
	return protocol.NewError(protocol.CodeInvalidRequest, msg)
}

const (
	msgToolsNotDeclared = "the deployment does not accept tools"
	msgSystemPart       = "system parts must be text or json for this provider"
	msgToolResultMedia  = "tool_result content may only hold text and json parts for this provider"
	msgToolArguments    = "a tool_call's arguments must be a JSON object"
	msgToolResultCall   = "a tool_result must follow the tool_call it answers in the request"
	msgNoContents       = "the request has no user or assistant content"
	msgExtension        = "a gemini extension has a value of the wrong type or range"
	msgPartType         = "the request has a part type the gemini adapter does not know"
	msgMissing          = "request is missing"
	msgGeminiURI        = "media given by uri must be an https URL for the gemini provider"
	msgVertexURI        = "media given by uri must be a gs:// or https URL for the vertex provider"
)

// modality is the capability a media part needs.
var modality = map[protocol.PartType]protocol.Capability{
	protocol.PartImage: protocol.CapInputImage,
	protocol.PartAudio: protocol.CapInputAudio,
	protocol.PartVideo: protocol.CapInputVideo,
	protocol.PartFile:  protocol.CapInputFile,
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

// check returns the first refusal of r for deployment d, or nil, and the generation
// options it sends (d's output cap applied). It is the only place refusals are decided:
// buildRequest maps only requests it admits.
func check(r *protocol.Request, d *routing.Deployment) (protocol.GenerationOptions, *protocol.Error) {
	return generation.Read(r, d, applyExtensions(&generateRequest{}, r.Extensions), checkParts(r, d.Provider, d.Capabilities))
}

// checkParts refuses the parts a deployment of provider with caps cannot take.
func checkParts(r *protocol.Request, provider string, caps routing.CapSet) *protocol.Error {
	m := mapper{provider: provider, caps: caps}
	contents := false // a part becomes a part of a user or model turn
	for i := range r.Input {
		p := &r.Input[i]
		switch {
		case p.Type == protocol.PartTool:
			if !m.has(protocol.CapTools) {
				return unsupported(msgToolsNotDeclared)
			}
		case isSystem(p):
			if p.Type != protocol.PartText && p.Type != protocol.PartJSON {
				// systemInstruction takes text only.
				return unsupported(msgSystemPart)
			}
		default:
			if err := m.check(r.Input, i); err != nil {
				return err
			}
			contents = contents || hasPart(p)
		}
	}
	if !contents {
		// The API requires at least one content.
		return unsupported(msgNoContents)
	}
	return nil
}

// isSystem reports whether p goes to systemInstruction. Tool results answer the model
// whatever role they carry, so they never do.
func isSystem(p *protocol.Part) bool {
	return p.Role == protocol.RoleSystem && p.Type != protocol.PartToolResult
}

// hasPart reports whether a conversation part maps to a request part: an empty text maps
// to none, as the API refuses empty text parts.
func hasPart(p *protocol.Part) bool {
	return p.Type != protocol.PartText || p.Text != ""
}

// mapper checks conversation parts against one deployment.
type mapper struct {
	provider string
	caps     routing.CapSet
}

func (m mapper) has(c protocol.Capability) bool { return m.caps.Has(routing.CapsOf(c)) }

// check refuses the conversation part input[i] (neither a tool nor a system part).
func (m mapper) check(input []protocol.Part, i int) *protocol.Error {
	p := &input[i]
	switch p.Type {
	case protocol.PartToolCall:
		if !m.has(protocol.CapTools) {
			return unsupported(msgToolsNotDeclared)
		}
		if _, ok := p.ArgumentsObject(); !ok {
			return invalid(msgToolArguments)
		}
		return nil
	case protocol.PartToolResult:
		if !m.has(protocol.CapTools) {
			return unsupported(msgToolsNotDeclared)
		}
		if c := p.Content; c != nil && c.Text == nil {
			for j := range c.Parts {
				if t := c.Parts[j].Type; t != protocol.PartText && t != protocol.PartJSON {
					// Multimodal function responses exist only for some models.
					return unsupported(msgToolResultMedia)
				}
			}
		}
		if callName(input, i) == "" {
			// A function response must name its function, which only the call has.
			return invalid(msgToolResultCall)
		}
		return nil
	case protocol.PartText, protocol.PartJSON:
		return nil
	}
	c, ok := modality[p.Type]
	if !ok {
		return unsupported(msgPartType)
	}
	if !m.has(c) {
		// The part type comes from the protocol's closed set, never from caller data.
		return unsupported("the deployment does not accept " + string(p.Type) + " input")
	}
	if p.Data == "" && !uriAllowed(m.provider, p.URI) {
		if m.provider == ProviderVertex {
			return unsupported(msgVertexURI)
		}
		return unsupported(msgGeminiURI)
	}
	return nil
}

// uriAllowed reports whether the provider fetches media from uri: an https URL (public,
// signed, or the Gemini API's own Files API URIs) for both, a Cloud Storage gs:// URI
// for Vertex AI only. URLs with user information are refused.
func uriAllowed(provider, uri string) bool {
	u, err := url.Parse(uri)
	if err != nil || u.Host == "" || u.User != nil {
		return false
	}
	switch u.Scheme {
	case "https":
		return true
	case "gs":
		return provider == ProviderVertex
	}
	return false
}

// callName is the name of the tool_call that input[i], a tool_result, answers: the
// nearest earlier tool_call with its call_id (ids may repeat across the turns of a long
// conversation), or "" when there is none.
func callName(input []protocol.Part, i int) string {
	id := input[i].CallID
	for j := i - 1; j >= 0; j-- {
		if p := &input[j]; p.Type == protocol.PartToolCall && p.CallID == id {
			return p.Name
		}
	}
	return ""
}

// buildRequest maps r to the GenerateContentRequest for deployment d, or returns check's
// refusal.
//
// Parts are taken in order. System parts (text or json) become systemInstruction parts;
// tool parts become function declarations, whatever their role; every other part
// becomes a part of a user or model turn, and consecutive parts of the same role are
// merged into one turn. Nothing is invented: a conversation that starts with a model
// turn is sent as it is, and the API's verdict applies. A json part is data for the
// model: its compact JSON travels as a text part, never as request fields
// (spec/http-api.md, "Request").
func buildRequest(r *protocol.Request, d *routing.Deployment) (*generateRequest, *protocol.Error) {
	g, err := check(r, d)
	if err != nil {
		return nil, err
	}
	gr := &generateRequest{Contents: []content{}}
	_ = applyExtensions(gr, r.Extensions) // check accepted every value
	if gc := gr.GenerationConfig; gc != nil && gc.MaxOutputTokens != nil {
		// gemini.max_output_tokens carries the output limit instead of the generation
		// key (which Read then left alone): the deployment's cap lowers it the same way
		// (spec/http-api.md, "Generation options").
		gc.MaxOutputTokens = providerhttp.OutputCap(gc.MaxOutputTokens, d.MaxOutputTokens)
	}
	applyGeneration(gr, &g)
	var (
		system []part
		decls  []functionDeclaration
	)
	for i := range r.Input {
		p := &r.Input[i]
		switch {
		case p.Type == protocol.PartTool:
			decls = append(decls, functionDeclaration{Name: p.Name, Description: p.Description, ParametersJSONSchema: providerhttp.CompactJSON(p.Parameters)})
		case isSystem(p):
			if pt, ok := textPart(p); ok {
				system = append(system, pt)
			}
		default:
			if role, pt, ok := turnPart(r.Input, i); ok {
				gr.Contents = providerhttp.AppendTurn(gr.Contents, role, pt, (*content).fields)
			}
		}
	}
	if len(system) > 0 {
		gr.SystemInstruction = &content{Parts: system}
	}
	if len(decls) > 0 {
		gr.Tools = []tool{{FunctionDeclarations: decls}}
	}
	for i := range gr.Contents {
		if gr.Contents[i].Role == roleUser {
			functionResponsesFirst(gr.Contents[i].Parts)
		}
	}
	return gr, nil
}

// turnPart maps the conversation part input[i], which check admitted, to its turn's
// role and request part. ok is false for a part that maps to nothing (an empty text).
func turnPart(input []protocol.Part, i int) (role string, pt part, ok bool) {
	p := &input[i]
	switch p.Type {
	case protocol.PartToolCall:
		args, _ := p.ArgumentsObject()
		// The decoder only accepts tool_call from the assistant: it is the model's turn.
		return roleModel, part{FunctionCall: &functionCall{Name: p.Name, Args: args}}, true
	case protocol.PartToolResult:
		// Tool results answer the model, so they are a user turn whatever the role.
		return roleUser, part{FunctionResponse: &functionResponse{Name: callName(input, i), Response: toolOutput{Output: toolText(p.Content)}}}, true
	}
	role = roleUser
	if p.Role == protocol.RoleAssistant {
		role = roleModel
	}
	switch p.Type {
	case protocol.PartText, protocol.PartJSON:
		pt, ok = textPart(p)
		return role, pt, ok
	}
	mt := baseMediaType(p.MediaType)
	if p.Data != "" {
		return role, part{InlineData: &blob{MimeType: mt, Data: p.Data}}, true
	}
	return role, part{FileData: &fileData{MimeType: mt, FileURI: p.URI}}, true
}

// toolText is a tool_result's output: its string, or its parts' texts (json parts as
// their compact JSON) — one string for one part, a list for several.
func toolText(c *protocol.ToolContent) any {
	if c == nil {
		return ""
	}
	if c.Text != nil {
		return *c.Text
	}
	texts := make([]string, 0, len(c.Parts))
	for i := range c.Parts {
		texts = append(texts, providerhttp.PartText(&c.Parts[i]))
	}
	switch len(texts) {
	case 0:
		return ""
	case 1:
		return texts[0]
	}
	return texts
}

// textPart is the text part of a text or json part; ok is false for an empty text.
func textPart(p *protocol.Part) (part, bool) {
	s := providerhttp.PartText(p)
	if s == "" {
		return part{}, false
	}
	return part{Text: &s}, true
}

// fields are a turn's role and parts, for providerhttp.AppendTurn.
func (t *content) fields() (*string, *[]part) { return &t.Role, &t.Parts }

// functionResponsesFirst moves a user turn's function responses before its other parts,
// keeping each group's order: the turn that answers a function call must answer it
// first, and a merged turn may have had text before the results.
func functionResponsesFirst(parts []part) {
	// A stable sort on "is a result" keeps each group's order.
	slices.SortStableFunc(parts, func(a, b part) int { return resultRank(b) - resultRank(a) })
}

// resultRank sorts tool results before everything else.
func resultRank(b part) int {
	if b.FunctionResponse != nil {
		return 1
	}
	return 0
}

// baseMediaType drops media type parameters ("audio/wav; rate=16000" → "audio/wav"):
// mimeType takes the bare type.
func baseMediaType(mt string) string {
	if i := strings.IndexByte(mt, ';'); i >= 0 {
		return strings.TrimSpace(mt[:i])
	}
	return mt
}

// applyExtensions reads the documented gemini.* extensions into gr.generationConfig.
// Other keys — another provider's, or gemini keys this adapter does not document — are
// ignored, so no extension can add contents, tools, a model, safety settings or
// credentials. The request decoder checks types and ranges of documented keys; they are
// checked again here (ExtensionSpec.Valid, the decoder's own check) because an adapter
// must not trust that every caller went through it. Keys are read in a fixed order, so
// the first bad one decides.
func applyExtensions(gr *generateRequest, ext map[string]json.RawMessage) *protocol.Error {
	if len(ext) == 0 {
		return nil
	}
	var gc generationConfig
	var tc thinkingConfig
	for _, f := range []struct {
		spec protocol.ExtensionSpec
		read func(json.RawMessage) error
	}{
		{specTemperature, func(raw json.RawMessage) error { return numberInto(raw, &gc.Temperature) }},
		{specTopP, func(raw json.RawMessage) error { return numberInto(raw, &gc.TopP) }},
		{specTopK, func(raw json.RawMessage) error { return integerInto(raw, &gc.TopK) }},
		{specMaxOutputTokens, func(raw json.RawMessage) error { return integerInto(raw, &gc.MaxOutputTokens) }},
		{specSeed, func(raw json.RawMessage) error { return integerInto(raw, &gc.Seed) }},
		// An empty list sets nothing: stopSequences is omitted when empty.
		{specStopSequences, func(raw json.RawMessage) error { return json.Unmarshal(raw, &gc.StopSequences) }},
		{specThinkingBudget, func(raw json.RawMessage) error { return integerInto(raw, &tc.ThinkingBudget) }},
		{specThinkingLevel, func(raw json.RawMessage) error {
			err := json.Unmarshal(raw, &tc.ThinkingLevel)
			tc.ThinkingLevel = strings.ToUpper(tc.ThinkingLevel)
			return err
		}},
	} {
		raw, ok := ext[f.spec.Key]
		if !ok {
			continue
		}
		if !f.spec.Valid(raw) || f.read(raw) != nil {
			return invalid(msgExtension)
		}
	}
	if tc != (thinkingConfig{}) {
		gc.ThinkingConfig = &tc
	}
	if !gc.empty() {
		gr.GenerationConfig = &gc
	}
	return nil
}

// applyGeneration sets the generation options check admitted into generationConfig and
// toolConfig; those a gemini.* key overrides are already gone from g.
func applyGeneration(gr *generateRequest, g *protocol.GenerationOptions) {
	gc := gr.GenerationConfig
	if gc == nil {
		gc = &generationConfig{}
	}
	if g.Temperature != nil {
		gc.Temperature = g.Temperature
	}
	if g.TopP != nil {
		gc.TopP = g.TopP
	}
	if g.TopK != nil {
		gc.TopK = g.TopK
	}
	if g.MaxOutputTokens != nil {
		gc.MaxOutputTokens = g.MaxOutputTokens
	}
	if g.Seed != nil {
		gc.Seed = g.Seed
	}
	if g.Stop != nil {
		gc.StopSequences = g.Stop
	}
	if g.JSON || g.ResponseSchema != nil {
		gc.ResponseMimeType = "application/json"
		gc.ResponseJSONSchema = g.ResponseSchema
	}
	if !gc.empty() {
		gr.GenerationConfig = gc
	}
	if c := g.ToolChoice; c.Mode != "" {
		fc := functionCallingConfig{Mode: callingModes[c.Mode]}
		if c.Mode == protocol.ToolChoiceTool {
			fc.AllowedFunctionNames = []string{c.Name}
		}
		gr.ToolConfig = &toolConfig{FunctionCallingConfig: fc}
	}
}

// numberInto decodes a number that ExtensionSpec.Valid accepted into *dst.
func numberInto(raw json.RawMessage, dst **float64) error {
	var f float64
	if err := json.Unmarshal(raw, &f); err != nil {
		return err
	}
	*dst = &f
	return nil
}

// integerInto decodes an integer that ExtensionSpec.Valid accepted into *dst. It goes
// through float64 because the registry admits integers written 1e3 or 2.0, which
// encoding/json refuses for an integer type; every integer key is an int32 field, within
// ±2^31, where float64 is exact.
func integerInto(raw json.RawMessage, dst **int64) error {
	var f float64
	if err := json.Unmarshal(raw, &f); err != nil {
		return err
	}
	i := int64(f)
	*dst = &i
	return nil
}
