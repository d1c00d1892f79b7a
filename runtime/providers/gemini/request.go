package gemini

import (
	"bytes"
	"encoding/json"
	"math"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/switchboard-dev/switchboard/runtime/engine"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
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
	GenerationConfig  *generationConfig `json:"generationConfig,omitempty"`
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
}

// empty reports whether gc sets nothing, so that no empty generationConfig is sent.
func (gc *generationConfig) empty() bool {
	return gc.Temperature == nil && gc.TopP == nil && gc.TopK == nil && gc.MaxOutputTokens == nil &&
		gc.Seed == nil && len(gc.StopSequences) == 0 && gc.ThinkingConfig == nil
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
// their API fields): the request body is the same GenerateContentRequest on either.
const (
	extTemperature     = "gemini.temperature"
	extTopP            = "gemini.top_p"
	extTopK            = "gemini.top_k"
	extMaxOutputTokens = "gemini.max_output_tokens"
	extSeed            = "gemini.seed"
	extStopSequences   = "gemini.stop_sequences"
	extThinkingBudget  = "gemini.thinking_budget"
	extThinkingLevel   = "gemini.thinking_level"
)

// Bounds of gemini.stop_sequences: the API takes up to five sequences; each is bounded
// as the registry bounds every list of strings.
const (
	maxStopSequences      = 5
	maxStopSequenceLength = 256
)

// thinkingLevel is the grammar of gemini.thinking_level: a pattern, not a list, as
// Google adds levels; the value is sent as the enum name (upper case).
var thinkingLevel = regexp.MustCompile(`^[a-z]{1,16}$`)

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
	if req == nil || d == nil {
		return invalid(msgMissing)
	}
	return check(req, d.Provider, d.Capabilities)
}

var _ engine.EncodeCheck = CanEncode

// check returns the first refusal of r for a deployment of provider with caps, or nil.
// It is the only place refusals are decided: buildRequest maps only requests it admits.
func check(r *protocol.Request, provider string, caps routing.CapSet) *protocol.Error {
	if err := applyExtensions(&generateRequest{}, r.Extensions); err != nil {
		return err
	}
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
		if _, ok := argumentsObject(p.Arguments); !ok {
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

// buildRequest maps r to the GenerateContentRequest for a deployment of provider with
// capabilities caps, or returns check's refusal.
//
// Parts are taken in order. System parts (text or json) become systemInstruction parts;
// tool parts become function declarations, whatever their role; every other part
// becomes a part of a user or model turn, and consecutive parts of the same role are
// merged into one turn. Nothing is invented: a conversation that starts with a model
// turn is sent as it is, and the API's verdict applies. A json part is data for the
// model: its compact JSON travels as a text part, never as request fields
// (spec/http-api.md, "Request").
func buildRequest(r *protocol.Request, provider string, caps routing.CapSet) (*generateRequest, *protocol.Error) {
	if err := check(r, provider, caps); err != nil {
		return nil, err
	}
	gr := &generateRequest{Contents: []content{}}
	_ = applyExtensions(gr, r.Extensions) // check accepted every value
	var (
		system []part
		decls  []functionDeclaration
	)
	for i := range r.Input {
		p := &r.Input[i]
		switch {
		case p.Type == protocol.PartTool:
			decls = append(decls, functionDeclaration{Name: p.Name, Description: p.Description, ParametersJSONSchema: compact(p.Parameters)})
		case isSystem(p):
			if pt, ok := textPart(p); ok {
				system = append(system, pt)
			}
		default:
			if role, pt, ok := turnPart(r.Input, i); ok {
				gr.Contents = appendPart(gr.Contents, role, pt)
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
		args, _ := argumentsObject(p.Arguments)
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
		texts = append(texts, textOf(&c.Parts[i]))
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
	s := textOf(p)
	if s == "" {
		return part{}, false
	}
	return part{Text: &s}, true
}

// textOf is a text part's text, or a json part's JSON text (compact, so the same value
// always reads the same).
func textOf(p *protocol.Part) string {
	if p.Type == protocol.PartJSON {
		return string(compact(p.JSON))
	}
	return p.Text
}

// appendPart adds pt to the last turn when it has the same role, else starts a new turn.
func appendPart(contents []content, role string, pt part) []content {
	if n := len(contents); n > 0 && contents[n-1].Role == role {
		contents[n-1].Parts = append(contents[n-1].Parts, pt)
		return contents
	}
	return append(contents, content{Role: role, Parts: []part{pt}})
}

// functionResponsesFirst moves a user turn's function responses before its other parts,
// keeping each group's order: the turn that answers a function call must answer it
// first, and a merged turn may have had text before the results.
func functionResponsesFirst(parts []part) {
	out := make([]part, 0, len(parts))
	for _, p := range parts {
		if p.FunctionResponse != nil {
			out = append(out, p)
		}
	}
	if len(out) == 0 || len(out) == len(parts) {
		return
	}
	for _, p := range parts {
		if p.FunctionResponse == nil {
			out = append(out, p)
		}
	}
	copy(parts, out)
}

// argumentsObject parses a tool_call's arguments, which the API needs as an object
// (functionCall.args is a Struct). An empty string means no arguments.
func argumentsObject(args string) (json.RawMessage, bool) {
	trimmed := strings.TrimSpace(args)
	if trimmed == "" {
		return json.RawMessage("{}"), true
	}
	if trimmed[0] != '{' || !json.Valid([]byte(trimmed)) {
		return nil, false
	}
	return compact(json.RawMessage(trimmed)), true
}

// compact removes insignificant whitespace from validated JSON; it keeps the input as
// is in the (impossible after DecodeRequest) case that it is not valid JSON.
func compact(raw json.RawMessage) json.RawMessage {
	if len(bytes.TrimSpace(raw)) == 0 {
		return nil
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		return raw
	}
	return buf.Bytes()
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
// credentials. The request decoder checks types and ranges of registered keys; they are
// checked again here because an adapter must not trust that every caller went through
// it. Keys are read in a fixed order, so the first bad one decides.
func applyExtensions(gr *generateRequest, ext map[string]json.RawMessage) *protocol.Error {
	if len(ext) == 0 {
		return nil
	}
	var gc generationConfig
	var tc thinkingConfig
	for _, f := range []struct {
		key  string
		read func(json.RawMessage) bool
	}{
		{extTemperature, func(raw json.RawMessage) (ok bool) { gc.Temperature, ok = number(raw, 0, 2); return }},
		{extTopP, func(raw json.RawMessage) (ok bool) { gc.TopP, ok = number(raw, 0, 1); return }},
		{extTopK, func(raw json.RawMessage) (ok bool) { gc.TopK, ok = integer(raw, 1); return }},
		{extMaxOutputTokens, func(raw json.RawMessage) (ok bool) {
			gc.MaxOutputTokens, ok = integer(raw, 1)
			return
		}},
		{extSeed, func(raw json.RawMessage) (ok bool) { gc.Seed, ok = integer(raw, math.MinInt32); return }},
		{extStopSequences, func(raw json.RawMessage) (ok bool) { gc.StopSequences, ok = stopSequences(raw); return }},
		// -1 asks for a dynamic budget, 0 turns thinking off where the model allows it.
		{extThinkingBudget, func(raw json.RawMessage) (ok bool) {
			tc.ThinkingBudget, ok = integer(raw, -1)
			return
		}},
		{extThinkingLevel, func(raw json.RawMessage) bool {
			var s string
			if json.Unmarshal(raw, &s) != nil || !thinkingLevel.MatchString(s) {
				return false
			}
			tc.ThinkingLevel = strings.ToUpper(s)
			return true
		}},
	} {
		raw, ok := ext[f.key]
		if !ok {
			continue
		}
		// The request decoder checked the value against the registry already; the
		// same check here keeps a request built past the decoder to the same rules.
		if spec, documented := protocol.LookupExtension(f.key); !documented || !spec.Valid(raw) || !f.read(raw) {
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

// stopSequences reads a JSON array of at most maxStopSequences non-empty strings of at
// most maxStopSequenceLength characters; an empty array sets nothing.
func stopSequences(raw json.RawMessage) ([]string, bool) {
	if t := bytes.TrimSpace(raw); len(t) == 0 || t[0] != '[' {
		return nil, false // null is not a list
	}
	var ss []string
	if json.Unmarshal(raw, &ss) != nil || len(ss) > maxStopSequences {
		return nil, false
	}
	for _, s := range ss {
		if s == "" || utf8.RuneCountInString(s) > maxStopSequenceLength {
			return nil, false
		}
	}
	return ss, true
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
func number(raw json.RawMessage, lo, hi float64) (*float64, bool) {
	n, ok := jsonNumber(raw)
	if !ok {
		return nil, false
	}
	f, err := n.Float64()
	if err != nil || math.IsNaN(f) || f < lo || f > hi {
		return nil, false
	}
	return &f, true
}

// integer reads an integral JSON number within [lo, math.MaxInt32] (every integer field
// of generationConfig is an int32); 1e3 and 2.0 count as integers, as they do for the
// request decoder. The bounds are within ±2^31, where float64 is exact, so the float
// fallback cannot round a value into range.
func integer(raw json.RawMessage, lo int64) (*int64, bool) {
	const hi = math.MaxInt32
	n, ok := jsonNumber(raw)
	if !ok {
		return nil, false
	}
	if i, err := strconv.ParseInt(n.String(), 10, 64); err == nil {
		return &i, i >= lo && i <= hi
	}
	f, err := n.Float64()
	if err != nil || f != math.Trunc(f) || f < float64(lo) || f > float64(hi) {
		return nil, false
	}
	i := int64(f)
	return &i, true
}
