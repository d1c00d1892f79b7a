package replicate

import (
	"bytes"
	"encoding/json"
	"slices"
	"strconv"
	"strings"

	"github.com/switchboard-dev/switchboard/runtime/engine"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
	"github.com/switchboard-dev/switchboard/runtime/providers/providerhttp"
	"github.com/switchboard-dev/switchboard/runtime/routing"
)

// extInput is the only extension key this adapter reads: model parameters (Replicate's
// "input" fields other than the prompt and media), sent only when the deployment allows
// their names (spec.allowedParameters).
const extInput = "replicate.input"

// promptSeparator joins the text and json parts into input.prompt: a blank line keeps
// parts apart without inventing a chat template the model may not know.
const promptSeparator = "\n\n"

// promptKey is the input field the text and json parts are sent under.
const promptKey = "prompt"

// mediaKeys names the input field each media part type is sent under. Replicate models
// declare their own input schema; these are the names its common models use.
var mediaKeys = map[protocol.PartType]string{
	protocol.PartImage: "image",
	protocol.PartAudio: "audio",
	protocol.PartVideo: "video",
	protocol.PartFile:  "file",
}

// Refusals of requests this adapter cannot send. Routing asks CanEncode before it chooses
// a deployment, so Execute meets them only for requests that did not go through routing;
// either way nothing is sent. Messages are fixed: they never name the caller's parameters
// or values. Each is handed out as a Clone: callers own the errors they get.
var (
	errMissing       = protocol.NewError(protocol.CodeInvalidRequest, "request is missing")
	errPartType      = protocol.NewError(protocol.CodeUnsupportedCapability, "the request has a part type replicate does not know")
	errTools         = protocol.NewError(protocol.CodeUnsupportedCapability, "replicate deployments cannot take tool, tool_call or tool_result parts")
	errUndeclared    = protocol.NewError(protocol.CodeUnsupportedCapability, "the deployment does not declare an input modality the request uses")
	errMediaTwice    = protocol.NewError(protocol.CodeUnsupportedCapability, "replicate takes at most one part of each media type")
	errParamValue    = protocol.NewError(protocol.CodeInvalidRequest, "the replicate model parameters are not an object of allowed values")
	errParamAllowed  = protocol.NewError(protocol.CodeInvalidRequest, "a model parameter the request sets is not allowed by the deployment")
	errParamReserved = protocol.NewError(protocol.CodeInvalidRequest,
		"model parameters cannot set the prompt or a media input: those come from the input parts")
)

// CanEncode is the adapter's engine.EncodeCheck, installed by Register: the refusal
// Execute would make for req on d, found without building or sending anything.
//
//   - tool, tool_call and tool_result parts: unsupported_capability (Replicate cannot
//     declare tools);
//   - a part whose modality d does not declare, or a second part of one media type:
//     unsupported_capability;
//   - then, replicate.input that is not an object of allowed values, names the prompt
//     or a media input, or names a parameter outside d.Parameters: invalid_request (the
//     caller asked for something the deployment does not allow).
//
// The output cap never causes a refusal (it is clamped, see withGeneration), so the
// verdict depends only on d's capabilities and parameters, as engine.EncodeCheck
// requires.
func CanEncode(req *protocol.Request, d *routing.Deployment) *protocol.Error {
	return providerhttp.CheckEncode(req, d, encodable)
}

var _ engine.EncodeCheck = CanEncode

// encodable is check on d's configuration, its refusal only.
func encodable(req *protocol.Request, d *routing.Deployment) *protocol.Error {
	_, err := check(req, d)
	return err
}

// check refuses what CanEncode refuses for deployment d, and returns the parameters req
// sets, d's output cap applied. It is the only place refusals are decided:
// createRequest maps only requests it admits.
func check(req *protocol.Request, d *routing.Deployment) (map[string]json.RawMessage, *protocol.Error) {
	if req == nil {
		return nil, errMissing.Clone()
	}
	if err := checkParts(req.Input, d.Capabilities); err != nil {
		return nil, err
	}
	params, err := parameters(req, d.Parameters)
	if err != nil {
		return nil, err
	}
	return withGeneration(req, d, params)
}

// generationInputs maps the generation options a Replicate model can take to the input
// names Replicate's language models use for them (spec/http-api.md, "Generation
// options"). Models declare their own inputs, so an option is sent only when the
// deployment allows its name (spec.allowedParameters), the operator's word that the
// model has that input; otherwise it is declined, as are the options that have no
// common input (stop sequences are a comma-separated string on some models, which
// cannot carry a sequence holding a comma; JSON and structured output have none).
var generationInputs = []struct{ key, name string }{
	{protocol.GenerationMaxOutputTokens, maxTokensInput},
	{protocol.GenerationTemperature, "temperature"},
	{protocol.GenerationTopP, "top_p"},
	{protocol.GenerationTopK, "top_k"},
	{protocol.GenerationSeed, "seed"},
}

// withGeneration adds the generation options of req to params, the parameters it sets
// through replicate.input, or declines them, for deployment d. A parameter
// replicate.input sets wins over the generation option of the same input.
//
// d's output cap is sent as max_tokens when d allows that input (spec/http-api.md,
// "Generation options"): the request's generation.max_output_tokens lowered to it, or
// the cap alone; a max_tokens parameter above it is lowered to it (capParameter). A
// model that does not take max_tokens is sent no cap: it cannot be enforced there.
func withGeneration(req *protocol.Request, d *routing.Deployment, params map[string]json.RawMessage) (map[string]json.RawMessage, *protocol.Error) {
	g, err := protocol.Generation(req)
	if err != nil {
		return nil, err
	}
	support := providerhttp.GenerationSupport{Adapter: "replicate"}
	for _, in := range generationInputs {
		if _, set := params[in.name]; set {
			g.Clear(in.key)
		} else if slices.Contains(d.Parameters, in.name) {
			support.Honours = append(support.Honours, in.key)
		}
	}
	if err := support.Check(&g, d.Capabilities); err != nil {
		return nil, err
	}
	support.Limit(&g, d.MaxOutputTokens)
	if raw, set := params[maxTokensInput]; set && d.MaxOutputTokens > 0 {
		params[maxTokensInput] = capParameter(raw, d.MaxOutputTokens)
	}
	for _, in := range generationInputs {
		if v := generationValue(&g, in.key); v != nil {
			if params == nil {
				params = map[string]json.RawMessage{}
			}
			params[in.name] = v
		}
	}
	return params, nil
}

// maxTokensInput is the input generation.max_output_tokens, and a deployment's output
// cap, are sent under.
const maxTokensInput = "max_tokens"

// capParameter lowers raw, a max_tokens parameter of replicate.input, to limit: a number
// not above it is kept as given, and anything else becomes limit — a larger number, or
// a value that is no number (a string or a boolean), which cannot be compared with the
// cap and so cannot be trusted to stay under it.
func capParameter(raw json.RawMessage, limit int64) json.RawMessage {
	var v any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if dec.Decode(&v) == nil {
		if n, ok := v.(json.Number); ok {
			if f, err := n.Float64(); err == nil && f <= float64(limit) {
				return raw
			}
		}
	}
	return strconv.AppendInt(nil, limit, 10)
}

// generationValue is the option of key as a JSON number, or nil when it is not set.
// Integers are written as integers (the request may have spelled one 1e3).
func generationValue(g *protocol.GenerationOptions, key string) json.RawMessage {
	var n *int64
	var f *float64
	switch key {
	case protocol.GenerationMaxOutputTokens:
		n = g.MaxOutputTokens
	case protocol.GenerationTopK:
		n = g.TopK
	case protocol.GenerationSeed:
		n = g.Seed
	case protocol.GenerationTemperature:
		f = g.Temperature
	case protocol.GenerationTopP:
		f = g.TopP
	}
	switch {
	case n != nil:
		return strconv.AppendInt(nil, *n, 10)
	case f != nil:
		b, _ := json.Marshal(*f) // finite: the registry bounds it
		return b
	}
	return nil
}

// checkParts refuses parts a deployment with caps cannot take.
func checkParts(parts []protocol.Part, caps routing.CapSet) *protocol.Error {
	var seen [4]protocol.PartType
	n := 0
	for i := range parts {
		p := &parts[i]
		c, known := p.Type.Implies()
		switch {
		case !known:
			return errPartType.Clone()
		case c == protocol.CapTools:
			return errTools.Clone()
		case !caps.Has(routing.CapsOf(c)):
			return errUndeclared.Clone()
		}
		if _, media := mediaKeys[p.Type]; media {
			if slices.Contains(seen[:n], p.Type) {
				return errMediaTwice.Clone()
			}
			seen[n] = p.Type
			n++
		}
	}
	return nil
}

// parameters returns the model parameters req sets through replicate.input, refusing
// any whose name is not in allowed or is one the adapter derives from the input parts.
func parameters(req *protocol.Request, allowed []string) (map[string]json.RawMessage, *protocol.Error) {
	raw, ok := req.Extensions[extInput]
	if !ok {
		return nil, nil
	}
	// DecodeRequest has checked the value; it is checked again for requests built in
	// code, with the same rules.
	spec, _ := protocol.LookupExtension(extInput)
	var params map[string]json.RawMessage
	if !spec.Valid(raw) || json.Unmarshal(raw, &params) != nil {
		return nil, errParamValue.Clone()
	}
	// Two passes, so the refusal does not depend on map order.
	for name := range params {
		if derived(name) {
			return nil, errParamReserved.Clone()
		}
	}
	for name := range params {
		if !slices.Contains(allowed, name) {
			return nil, errParamAllowed.Clone()
		}
	}
	return params, nil
}

// derived reports whether the adapter fills the input field name from the input parts:
// the prompt or a media input.
func derived(name string) bool {
	if name == promptKey {
		return true
	}
	for _, k := range mediaKeys {
		if name == k {
			return true
		}
	}
	return false
}

// createBody is the body of both create endpoints; version is set only for
// POST /v1/predictions.
type createBody struct {
	Version string                     `json:"version,omitempty"`
	Input   map[string]json.RawMessage `json:"input"`
}

// createRequest returns the create URL and body for req, or CanEncode's refusal. The
// model and version are the deployment's alone: a pinned version ("owner/name:version")
// selects POST /v1/predictions, otherwise the model runs through its official-model
// endpoint.
func (a *adapter) createRequest(req *protocol.Request) (string, []byte, *protocol.Error) {
	params, perr := check(req, a.d)
	if perr != nil {
		return "", nil, perr
	}
	body := createBody{Version: a.version, Input: buildInput(req.Input, params)}
	target := a.base + "/v1/models/" + a.owner + "/" + a.name + "/predictions"
	if body.Version != "" {
		target = a.base + "/v1/predictions"
	}
	b, err := json.Marshal(body)
	if err != nil {
		// Only raw JSON from a request built past DecodeRequest (a json part) can fail.
		return "", nil, protocol.NewError(protocol.CodeInvalidRequest, "the request cannot be encoded for replicate")
	}
	return target, b, nil
}

// buildInput maps the parts CanEncode admitted, and the allowed parameters, to a
// prediction's input object:
//
//   - text parts and json parts, in order and whatever their role, are joined with a
//     blank line into "prompt"; a json part contributes its compact JSON text. A json
//     part is data for the model, never input fields: its keys cannot add a media input
//     or a tool, or replace the prompt;
//   - an image, audio, video or file part goes under "image", "audio", "video" or "file":
//     its uri as given, or its data as a data URI ("data:<media_type>;base64,<data>");
//   - each parameter goes under its own name; none is "prompt" or a media key.
func buildInput(parts []protocol.Part, params map[string]json.RawMessage) map[string]json.RawMessage {
	input := make(map[string]json.RawMessage, len(params)+2)
	for name, v := range params {
		input[name] = v
	}
	var texts []string
	for i := range parts {
		p := &parts[i]
		switch p.Type {
		case protocol.PartText:
			texts = append(texts, p.Text)
		case protocol.PartJSON:
			texts = append(texts, providerhttp.PartText(p))
		default:
			input[mediaKeys[p.Type]] = jsonString(mediaValue(p))
		}
	}
	if len(texts) > 0 {
		input[promptKey] = jsonString(strings.Join(texts, promptSeparator))
	}
	return input
}

// mediaValue is what Replicate accepts for a file input: an HTTP URL, or a data URI for
// inline content. The runtime never fetches the uri; Replicate does.
func mediaValue(p *protocol.Part) string {
	if p.URI != "" {
		return p.URI
	}
	// RFC 2397 writes media type parameters without spaces ("audio/ogg;codecs=opus").
	return "data:" + strings.ReplaceAll(p.MediaType, " ", "") + ";base64," + p.Data
}

// jsonString encodes s as a JSON string. Encoding a string cannot fail.
func jsonString(s string) json.RawMessage {
	b, _ := json.Marshal(s)
	return b
}
