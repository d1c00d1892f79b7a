package openai

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/switchboard-dev/switchboard/runtime/compat"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
)

// Decoding and translating a Responses request (spec/compat.md, "OpenAI Responses":
// "Request"). The door walks the body member by member: every field it knows is mapped
// onto the native request or refused with a fixed message naming OpenAI's schema
// location ("input[].content[].image_url"), any other field is refused as unknown, and
// no message ever holds what the caller sent — no value, no key, no index. The native
// request it builds then goes through protocol.DecodeRequest in Kit.Submit like any
// other, so every native limit holds too.

// respPath is a location in OpenAI's request schema, without indices; respRule is a
// fixed description of a violated rule. Both come from closed sets built at package
// initialisation, which the fuzz target checks every message against.
type (
	respPath string
	respRule string
)

var (
	respPaths = map[respPath]bool{}
	respRules = map[respRule]bool{}
)

func newRespPath(s string) respPath {
	p := respPath(s)
	respPaths[p] = true
	return p
}

func newRespRule(s string) respRule {
	r := respRule(s)
	respRules[r] = true
	return r
}

// respInvalid is the only constructor of the door's validation errors.
func respInvalid(p respPath, r respRule) *protocol.Error {
	return protocol.NewError(protocol.CodeInvalidRequest, string(p)+": "+string(r))
}

// respContentPaths are the schema locations of one content part's fields: in a
// message's content, or in a function_call_output's output.
type respContentPaths struct {
	part, typ, text, imageURL, fileID, fileData, fileURL, filename respPath
}

func newRespContentPaths(prefix string) *respContentPaths {
	return &respContentPaths{
		part: newRespPath(prefix), typ: newRespPath(prefix + ".type"), text: newRespPath(prefix + ".text"),
		imageURL: newRespPath(prefix + ".image_url"), fileID: newRespPath(prefix + ".file_id"),
		fileData: newRespPath(prefix + ".file_data"), fileURL: newRespPath(prefix + ".file_url"),
		filename: newRespPath(prefix + ".filename"),
	}
}

var (
	rpBody               = newRespPath("body")
	rpModel              = newRespPath("model")
	rpInput              = newRespPath("input")
	rpItem               = newRespPath("input[]")
	rpItemType           = newRespPath("input[].type")
	rpItemRole           = newRespPath("input[].role")
	rpItemContent        = newRespPath("input[].content")
	rpItemCallID         = newRespPath("input[].call_id")
	rpItemName           = newRespPath("input[].name")
	rpItemArguments      = newRespPath("input[].arguments")
	rpItemOutput         = newRespPath("input[].output")
	rpItemStatus         = newRespPath("input[].status")
	rpContent            = newRespContentPaths("input[].content[]")
	rpOutputContent      = newRespContentPaths("input[].output[]")
	rpInstructions       = newRespPath("instructions")
	rpTools              = newRespPath("tools")
	rpTool               = newRespPath("tools[]")
	rpToolType           = newRespPath("tools[].type")
	rpToolName           = newRespPath("tools[].name")
	rpToolDescription    = newRespPath("tools[].description")
	rpToolParameters     = newRespPath("tools[].parameters")
	rpToolStrict         = newRespPath("tools[].strict")
	rpToolChoice         = newRespPath("tool_choice")
	rpToolChoiceType     = newRespPath("tool_choice.type")
	rpToolChoiceName     = newRespPath("tool_choice.name")
	rpMaxOutputTokens    = newRespPath("max_output_tokens")
	rpTemperature        = newRespPath("temperature")
	rpTopP               = newRespPath("top_p")
	rpText               = newRespPath("text")
	rpTextVerbosity      = newRespPath("text.verbosity")
	rpFormat             = newRespPath("text.format")
	rpFormatType         = newRespPath("text.format.type")
	rpFormatName         = newRespPath("text.format.name")
	rpFormatSchema       = newRespPath("text.format.schema")
	rpFormatDescription  = newRespPath("text.format.description")
	rpFormatStrict       = newRespPath("text.format.strict")
	rpMetadata           = newRespPath("metadata")
	rpStream             = newRespPath("stream")
	rpBackground         = newRespPath("background")
	rpStore              = newRespPath("store")
	rpPreviousResponseID = newRespPath("previous_response_id")
)

var (
	rrNotJSON        = newRespRule("not valid JSON")
	rrObject         = newRespRule("must be an object")
	rrDuplicate      = newRespRule("duplicate object key")
	rrUnknown        = newRespRule("unknown field")
	rrRequired       = newRespRule("required")
	rrString         = newRespRule("must be a string")
	rrNonEmpty       = newRespRule("must be a non-empty string")
	rrBool           = newRespRule("must be a boolean")
	rrArray          = newRespRule("must be an array")
	rrInput          = newRespRule("must be a string or an array of items")
	rrContent        = newRespRule("must be a string or an array of content parts")
	rrItemType       = newRespRule("must be message, function_call or function_call_output")
	rrRole           = newRespRule("must be user, assistant, system or developer")
	rrContentType    = newRespRule("must be input_text, input_image or input_file (output_text in assistant messages)")
	rrOutputType     = newRespRule("must be input_text, input_image or input_file")
	rrAssistantMedia = newRespRule("assistant messages hold only text")
	rrImageURL       = newRespRule("must be a data: URL of base64 image data or an http(s) URL")
	rrFileRef        = newRespRule("file references are not supported: send the content inline")
	rrFileData       = newRespRule("must be a data: URL of base64 content, or base64 content")
	rrFileName       = newRespRule("must be 1 to 255 characters without control characters")
	rrCallID         = newRespRule("must be 1 to 256 characters")
	rrName           = newRespRule("must match " + protocol.ToolNamePattern)
	rrToolType       = newRespRule("only function tools are supported")
	rrSchema         = newRespRule("must be a JSON Schema object")
	rrToolChoice     = newRespRule("must be auto, none, required or a function tool choice naming a tool")
	rrFormatType     = newRespRule("must be text, json_object or json_schema")
	rrMaxTokens      = newRespRule("must be an integer from 1 to " + strconv.Itoa(respMaxOutputTokens))
	rrTemperature    = newRespRule("must be a number from 0 to 2")
	rrTopP           = newRespRule("must be a number from 0 to 1")
	rrMetadata       = newRespRule("must be an object of strings")
	rrUnsupported    = newRespRule("not supported by this front door")
	rrStatus         = newRespRule("must be in_progress, completed or incomplete")
	rrStored         = newRespRule("stored conversations are not supported: send the whole conversation in input")
)

// respMaxOutputTokens bounds max_output_tokens as generation.max_output_tokens is
// bounded (protocol's registry).
const respMaxOutputTokens = 1_000_000

// respUnsupported are request fields of OpenAI's Responses API that this front door
// does not implement: a non-null value is refused naming the field (a location of
// OpenAI's schema, not the caller's data).
var respUnsupported = func() map[string]respPath {
	m := map[string]respPath{}
	for _, name := range []string{
		"conversation", "include", "max_tool_calls", "parallel_tool_calls", "prompt", "prompt_cache_key",
		"prompt_cache_retention", "reasoning", "safety_identifier", "service_tier", "stream_options",
		"top_logprobs", "truncation", "user", "context_management",
	} {
		m[name] = newRespPath(name)
	}
	return m
}()

var (
	respToolNameRE = regexp.MustCompile(protocol.ToolNamePattern)
)

// responsesRequest is a decoded POST /v1/responses body: the native request it
// translates into (Ability and Routing are set from the model once it is resolved), and
// how it is to be answered.
type responsesRequest struct {
	model      string
	stream     bool
	background bool
	native     protocol.Request
}

// decodeResponsesRequest decodes and translates a Responses request body. Every error is
// an invalid_request *protocol.Error with a fixed message.
func decodeResponsesRequest(body []byte) (*responsesRequest, error) {
	if !json.Valid(body) {
		return nil, respInvalid(rpBody, rrNotJSON)
	}
	d := &respDecoder{req: &responsesRequest{}}
	var (
		instructions *string
		input        []protocol.Part
		tools        []protocol.Part
		hasModel     bool
	)
	err := respMembers(body, rpBody, func(key string, v json.RawMessage) error {
		if isNull(v) && key != "model" {
			return nil // an optional field sent as null is absent, as OpenAI reads it
		}
		switch key {
		case "model":
			s, err := respString(v, rpModel)
			if err != nil {
				return err
			}
			if s == "" {
				return respInvalid(rpModel, rrNonEmpty)
			}
			d.req.model, hasModel = s, true
		case "input":
			parts, err := d.input(v)
			input = parts
			return err
		case "instructions":
			s, err := respString(v, rpInstructions)
			instructions = &s
			return err
		case "tools":
			parts, err := d.tools(v)
			tools = parts
			return err
		case "tool_choice":
			return d.toolChoice(v)
		case "max_output_tokens":
			n, ok := respInteger(v, 1, respMaxOutputTokens)
			if !ok {
				return respInvalid(rpMaxOutputTokens, rrMaxTokens)
			}
			d.extension(protocol.GenerationMaxOutputTokens, strconv.FormatInt(n, 10))
		case "temperature":
			return d.number(v, rpTemperature, rrTemperature, 2, protocol.GenerationTemperature)
		case "top_p":
			return d.number(v, rpTopP, rrTopP, 1, protocol.GenerationTopP)
		case "text":
			return d.text(v)
		case "metadata":
			return d.metadata(v)
		case "stream":
			return respBool(v, rpStream, &d.req.stream)
		case "background":
			return respBool(v, rpBackground, &d.req.background)
		case "store":
			var ignored bool // every execution is kept for its retention anyway
			return respBool(v, rpStore, &ignored)
		case "previous_response_id":
			return respInvalid(rpPreviousResponseID, rrStored)
		default:
			if p, ok := respUnsupported[key]; ok {
				return respInvalid(p, rrUnsupported)
			}
			return respInvalid(rpBody, rrUnknown)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if !hasModel {
		return nil, respInvalid(rpModel, rrRequired)
	}
	n := &d.req.native
	if instructions != nil {
		n.Input = append(n.Input, protocol.Part{Type: protocol.PartText, Role: protocol.RoleSystem, Text: *instructions})
	}
	n.Input = append(n.Input, input...)
	n.Input = append(n.Input, tools...)
	return d.req, nil
}

// respDecoder accumulates the native request while the members are walked.
type respDecoder struct {
	req *responsesRequest
}

// extension sets a generation key to a JSON value.
func (d *respDecoder) extension(key, value string) {
	n := &d.req.native
	if n.Extensions == nil {
		n.Extensions = map[string]json.RawMessage{}
	}
	n.Extensions[key] = json.RawMessage(value)
}

// require adds a capability the request needs beyond what its parts imply.
func (d *respDecoder) require(c protocol.Capability) {
	if !slices.Contains(d.req.native.Requirements, c) {
		d.req.native.Requirements = append(d.req.native.Requirements, c)
	}
}

// number maps a sampling parameter in [0, hi] onto its generation key.
func (d *respDecoder) number(v json.RawMessage, at respPath, rule respRule, hi float64, key string) error {
	f, ok := respFloat(v)
	if !ok || f < 0 || f > hi {
		return respInvalid(at, rule)
	}
	d.extension(key, strconv.FormatFloat(f, 'g', -1, 64))
	return nil
}

func (d *respDecoder) metadata(v json.RawMessage) error {
	m := map[string]string{}
	err := respMembers(v, rpMetadata, func(key string, val json.RawMessage) error {
		s, err := respString(val, rpMetadata)
		if err != nil {
			return respInvalid(rpMetadata, rrMetadata)
		}
		m[key] = s
		return nil
	})
	if err != nil {
		return err
	}
	// Empty metadata is no metadata; the native decoder checks keys and values.
	if len(m) > 0 {
		d.req.native.Metadata = m
	}
	return nil
}

// input translates input: a string is one user message; an array holds items.
func (d *respDecoder) input(v json.RawMessage) ([]protocol.Part, error) {
	if s, ok := respStringValue(v); ok {
		return []protocol.Part{{Type: protocol.PartText, Text: s}}, nil
	}
	if firstByte(v) != '[' {
		return nil, respInvalid(rpInput, rrInput)
	}
	var parts []protocol.Part
	err := respElements(v, func(item json.RawMessage) error {
		var err error
		parts, err = d.item(item, parts)
		return err
	})
	return parts, err
}

// item translates one input item, appending its parts to parts.
func (d *respDecoder) item(v json.RawMessage, parts []protocol.Part) ([]protocol.Part, error) {
	if firstByte(v) != '{' {
		return parts, respInvalid(rpItem, rrObject)
	}
	fields := map[string]json.RawMessage{}
	if err := respMembers(v, rpItem, func(key string, val json.RawMessage) error {
		fields[key] = bytes.Clone(val)
		return nil
	}); err != nil {
		return parts, err
	}
	typ := "message" // an item without a type is an easy input message
	if t, ok := fields["type"]; ok {
		s, err := respString(t, rpItemType)
		if err != nil {
			return parts, err
		}
		typ = s
	}
	switch typ {
	case "message":
		return d.message(fields, parts)
	case "function_call":
		return d.functionCall(fields, parts)
	case "function_call_output":
		return d.functionCallOutput(fields, parts)
	}
	return parts, respInvalid(rpItemType, rrItemType)
}

// checkFields refuses the fields of an item that its type does not have, and checks the
// optional status every item of a previous response's output carries.
func checkFields(fields map[string]json.RawMessage, allowed ...string) error {
	for key, v := range fields {
		if !slices.Contains(allowed, key) {
			return respInvalid(rpItem, rrUnknown)
		}
		if key == "status" && !isNull(v) {
			s, ok := respStringValue(v)
			if !ok || (s != "in_progress" && s != "completed" && s != "incomplete") {
				return respInvalid(rpItemStatus, rrStatus)
			}
		}
	}
	return nil
}

// message translates a message item: role and content. The id, status and phase of an
// output message passed back in are accepted and ignored.
func (d *respDecoder) message(fields map[string]json.RawMessage, parts []protocol.Part) ([]protocol.Part, error) {
	if err := checkFields(fields, "type", "role", "content", "id", "status", "phase"); err != nil {
		return parts, err
	}
	for _, key := range []string{"id", "phase"} {
		if v, ok := fields[key]; ok && !isNull(v) {
			if _, ok := respStringValue(v); !ok {
				return parts, respInvalid(rpItem, rrUnknown)
			}
		}
	}
	rv, ok := fields["role"]
	if !ok {
		return parts, respInvalid(rpItemRole, rrRequired)
	}
	r, _ := respStringValue(rv)
	var role protocol.Role
	switch r {
	case "user":
		role = protocol.RoleUser
	case "assistant":
		role = protocol.RoleAssistant
	case "system", "developer":
		role = protocol.RoleSystem
	default:
		return parts, respInvalid(rpItemRole, rrRole)
	}
	cv, ok := fields["content"]
	if !ok {
		return parts, respInvalid(rpItemContent, rrRequired)
	}
	if s, ok := respStringValue(cv); ok {
		return append(parts, protocol.Part{Type: protocol.PartText, Role: role, Text: s}), nil
	}
	if firstByte(cv) != '[' {
		return parts, respInvalid(rpItemContent, rrContent)
	}
	err := respElements(cv, func(c json.RawMessage) error {
		p, err := d.content(c, rpContent, role)
		if err == nil {
			p.Role = role
			parts = append(parts, p)
		}
		return err
	})
	return parts, err
}

// functionCall translates a function_call item, the model's call as an earlier response
// gave it, into a tool_call part.
func (d *respDecoder) functionCall(fields map[string]json.RawMessage, parts []protocol.Part) ([]protocol.Part, error) {
	if err := checkFields(fields, "type", "call_id", "name", "arguments", "id", "status"); err != nil {
		return parts, err
	}
	callID, err := callIDField(fields)
	if err != nil {
		return parts, err
	}
	nv, ok := fields["name"]
	if !ok {
		return parts, respInvalid(rpItemName, rrRequired)
	}
	name, ok := respStringValue(nv)
	if !ok || !respToolNameRE.MatchString(name) {
		return parts, respInvalid(rpItemName, rrName)
	}
	av, ok := fields["arguments"]
	if !ok {
		return parts, respInvalid(rpItemArguments, rrRequired)
	}
	args, ok := respStringValue(av)
	if !ok {
		return parts, respInvalid(rpItemArguments, rrString)
	}
	if v, ok := fields["id"]; ok && !isNull(v) {
		if _, ok := respStringValue(v); !ok {
			return parts, respInvalid(rpItem, rrUnknown)
		}
	}
	return append(parts, protocol.Part{Type: protocol.PartToolCall, Role: protocol.RoleAssistant,
		CallID: callID, Name: name, Arguments: args}), nil
}

// functionCallOutput translates a function_call_output item, the caller's answer to a
// call, into a tool_result part.
func (d *respDecoder) functionCallOutput(fields map[string]json.RawMessage, parts []protocol.Part) ([]protocol.Part, error) {
	// The tool's name, which newer SDKs send beside the call id, is the call's already.
	if err := checkFields(fields, "type", "call_id", "output", "id", "status", "name"); err != nil {
		return parts, err
	}
	callID, err := callIDField(fields)
	if err != nil {
		return parts, err
	}
	for _, key := range []string{"id", "name"} {
		if v, ok := fields[key]; ok && !isNull(v) {
			if _, ok := respStringValue(v); !ok {
				return parts, respInvalid(rpItem, rrUnknown)
			}
		}
	}
	ov, ok := fields["output"]
	if !ok {
		return parts, respInvalid(rpItemOutput, rrRequired)
	}
	content := &protocol.ToolContent{}
	if s, ok := respStringValue(ov); ok {
		content.Text = &s
	} else if firstByte(ov) == '[' {
		content.Parts = []protocol.Part{}
		err := respElements(ov, func(c json.RawMessage) error {
			p, err := d.content(c, rpOutputContent, protocol.RoleUser)
			content.Parts = append(content.Parts, p)
			return err
		})
		if err != nil {
			return parts, err
		}
	} else {
		return parts, respInvalid(rpItemOutput, rrContent)
	}
	return append(parts, protocol.Part{Type: protocol.PartToolResult, CallID: callID, Content: content}), nil
}

// callIDField reads an item's call_id.
func callIDField(fields map[string]json.RawMessage) (string, error) {
	v, ok := fields["call_id"]
	if !ok {
		return "", respInvalid(rpItemCallID, rrRequired)
	}
	s, ok := respStringValue(v)
	if !ok || s == "" || len(s) > protocol.MaxCallIDLength {
		return "", respInvalid(rpItemCallID, rrCallID)
	}
	return s, nil
}

// content translates one content part of a message (of role) or of a function call's
// output (ps says which). The part has no role; the caller sets it.
func (d *respDecoder) content(v json.RawMessage, ps *respContentPaths, role protocol.Role) (protocol.Part, error) {
	if firstByte(v) != '{' {
		return protocol.Part{}, respInvalid(ps.part, rrObject)
	}
	fields := map[string]json.RawMessage{}
	if err := respMembers(v, ps.part, func(key string, val json.RawMessage) error {
		fields[key] = bytes.Clone(val)
		return nil
	}); err != nil {
		return protocol.Part{}, err
	}
	tv, ok := fields["type"]
	if !ok {
		return protocol.Part{}, respInvalid(ps.typ, rrRequired)
	}
	typ, _ := respStringValue(tv)
	typeRule := rrContentType
	if ps == rpOutputContent {
		typeRule = rrOutputType
	}
	only := func(allowed ...string) error {
		for key := range fields {
			if !slices.Contains(allowed, key) {
				return respInvalid(ps.part, rrUnknown)
			}
		}
		return nil
	}
	switch typ {
	case "input_text", "output_text":
		if typ == "output_text" && (ps == rpOutputContent || role != protocol.RoleAssistant) {
			return protocol.Part{}, respInvalid(ps.typ, typeRule)
		}
		// An output_text passed back from a response carries its annotations and
		// logprobs, which mean nothing as input.
		if err := only("type", "text", "annotations", "logprobs"); err != nil {
			return protocol.Part{}, err
		}
		t, ok := fields["text"]
		if !ok {
			return protocol.Part{}, respInvalid(ps.text, rrRequired)
		}
		s, ok := respStringValue(t)
		if !ok {
			return protocol.Part{}, respInvalid(ps.text, rrString)
		}
		return protocol.Part{Type: protocol.PartText, Text: s}, nil
	case "input_image":
		if role == protocol.RoleAssistant {
			return protocol.Part{}, respInvalid(ps.typ, rrAssistantMedia)
		}
		if err := only("type", "image_url", "file_id", "detail"); err != nil {
			return protocol.Part{}, err
		}
		if v, ok := fields["file_id"]; ok && !isNull(v) {
			return protocol.Part{}, respInvalid(ps.fileID, rrFileRef)
		}
		if v, ok := fields["detail"]; ok && !isNull(v) {
			if _, ok := respStringValue(v); !ok {
				return protocol.Part{}, respInvalid(ps.part, rrUnknown)
			}
		}
		u, ok := fields["image_url"]
		if !ok || isNull(u) {
			return protocol.Part{}, respInvalid(ps.imageURL, rrRequired)
		}
		s, _ := respStringValue(u)
		p, refused := imagePart(s)
		if refused != "" {
			return protocol.Part{}, respInvalid(ps.imageURL, rrImageURL)
		}
		return p, nil
	case "input_file":
		if role == protocol.RoleAssistant {
			return protocol.Part{}, respInvalid(ps.typ, rrAssistantMedia)
		}
		if err := only("type", "file_data", "file_id", "file_url", "filename", "detail"); err != nil {
			return protocol.Part{}, err
		}
		if v, ok := fields["file_id"]; ok && !isNull(v) {
			return protocol.Part{}, respInvalid(ps.fileID, rrFileRef)
		}
		if v, ok := fields["file_url"]; ok && !isNull(v) {
			return protocol.Part{}, respInvalid(ps.fileURL, rrFileRef)
		}
		if v, ok := fields["detail"]; ok && !isNull(v) {
			if _, ok := respStringValue(v); !ok {
				return protocol.Part{}, respInvalid(ps.part, rrUnknown)
			}
		}
		var name string
		if v, ok := fields["filename"]; ok && !isNull(v) {
			s, ok := respStringValue(v)
			if !ok || s == "" || len([]rune(s)) > protocol.MaxFileNameLength || strings.ContainsFunc(s, isControl) {
				return protocol.Part{}, respInvalid(ps.filename, rrFileName)
			}
			name = s
		}
		dv, ok := fields["file_data"]
		if !ok || isNull(dv) {
			return protocol.Part{}, respInvalid(ps.fileData, rrRequired)
		}
		s, _ := respStringValue(dv)
		p, _, refused := filePart(s, name)
		if refused != "" {
			return protocol.Part{}, respInvalid(ps.fileData, rrFileData)
		}
		return p, nil
	}
	return protocol.Part{}, respInvalid(ps.typ, typeRule)
}

// tools translates tools: function tools only, in OpenAI's flattened shape.
func (d *respDecoder) tools(v json.RawMessage) ([]protocol.Part, error) {
	if firstByte(v) != '[' {
		return nil, respInvalid(rpTools, rrArray)
	}
	var parts []protocol.Part
	err := respElements(v, func(t json.RawMessage) error {
		p, err := d.tool(t)
		parts = append(parts, p)
		return err
	})
	return parts, err
}

func (d *respDecoder) tool(v json.RawMessage) (protocol.Part, error) {
	if firstByte(v) != '{' {
		return protocol.Part{}, respInvalid(rpTool, rrObject)
	}
	p := protocol.Part{Type: protocol.PartTool}
	var typ string
	err := respMembers(v, rpTool, func(key string, val json.RawMessage) error {
		switch key {
		case "type":
			s, err := respString(val, rpToolType)
			typ = s
			return err
		case "name":
			s, ok := respStringValue(val)
			if !ok || !respToolNameRE.MatchString(s) {
				return respInvalid(rpToolName, rrName)
			}
			p.Name = s
		case "description":
			if isNull(val) {
				return nil
			}
			s, err := respString(val, rpToolDescription)
			p.Description = s
			return err
		case "parameters":
			if isNull(val) {
				return nil
			}
			if firstByte(val) != '{' {
				return respInvalid(rpToolParameters, rrSchema)
			}
			p.Parameters = compactJSON(val)
		case "strict":
			// Strict argument checking has no native counterpart; accepted, not applied
			// (spec/compat.md, "OpenAI Responses").
			if isNull(val) {
				return nil
			}
			var ignored bool
			return respBool(val, rpToolStrict, &ignored)
		default:
			return respInvalid(rpTool, rrUnknown)
		}
		return nil
	})
	if err != nil {
		return protocol.Part{}, err
	}
	if typ != "function" {
		return protocol.Part{}, respInvalid(rpToolType, rrToolType)
	}
	if p.Name == "" {
		return protocol.Part{}, respInvalid(rpToolName, rrRequired)
	}
	if p.Parameters == nil {
		// A function without parameters takes none; the native tool needs a schema.
		p.Parameters = json.RawMessage(`{"type":"object","properties":{}}`)
	}
	return p, nil
}

// toolChoice translates tool_choice into generation.tool_choice.
func (d *respDecoder) toolChoice(v json.RawMessage) error {
	if s, ok := respStringValue(v); ok {
		switch s {
		case "auto", "none", "required":
			d.extension(protocol.GenerationToolChoice, strconv.Quote(s))
			return nil
		}
		return respInvalid(rpToolChoice, rrToolChoice)
	}
	if firstByte(v) != '{' {
		return respInvalid(rpToolChoice, rrToolChoice)
	}
	var typ, name string
	err := respMembers(v, rpToolChoice, func(key string, val json.RawMessage) error {
		switch key {
		case "type":
			s, err := respString(val, rpToolChoiceType)
			typ = s
			return err
		case "name":
			s, ok := respStringValue(val)
			if !ok || !respToolNameRE.MatchString(s) {
				return respInvalid(rpToolChoiceName, rrName)
			}
			name = s
		default:
			return respInvalid(rpToolChoice, rrToolChoice)
		}
		return nil
	})
	if err != nil {
		return err
	}
	if typ != "function" || name == "" {
		return respInvalid(rpToolChoice, rrToolChoice)
	}
	d.extension(protocol.GenerationToolChoice, strconv.Quote("tool:"+name))
	return nil
}

// text translates text: its format; verbosity has no native counterpart.
func (d *respDecoder) text(v json.RawMessage) error {
	return respMembers(v, rpText, func(key string, val json.RawMessage) error {
		if isNull(val) {
			return nil
		}
		switch key {
		case "format":
			return d.format(val)
		case "verbosity":
			return respInvalid(rpTextVerbosity, rrUnsupported)
		}
		return respInvalid(rpText, rrUnknown)
	})
}

// format translates text.format: json_object and json_schema ask for JSON output, of a
// schema for json_schema, and require the capability that promises it.
func (d *respDecoder) format(v json.RawMessage) error {
	var (
		typ, name string
		schema    json.RawMessage
	)
	err := respMembers(v, rpFormat, func(key string, val json.RawMessage) error {
		switch key {
		case "type":
			s, err := respString(val, rpFormatType)
			typ = s
			return err
		case "name":
			s, ok := respStringValue(val)
			if !ok || !respToolNameRE.MatchString(s) {
				return respInvalid(rpFormatName, rrName)
			}
			name = s
		case "schema":
			if firstByte(val) != '{' {
				return respInvalid(rpFormatSchema, rrSchema)
			}
			schema = compactJSON(val)
		case "description":
			if isNull(val) {
				return nil
			}
			// The schema's description has no native counterpart; dropped.
			_, err := respString(val, rpFormatDescription)
			return err
		case "strict":
			if isNull(val) {
				return nil
			}
			var ignored bool // structured output is always asked for strictly
			return respBool(val, rpFormatStrict, &ignored)
		default:
			return respInvalid(rpFormat, rrUnknown)
		}
		return nil
	})
	if err != nil {
		return err
	}
	switch typ {
	case "text":
		if name != "" || schema != nil {
			return respInvalid(rpFormat, rrUnknown)
		}
	case "json_object":
		if name != "" || schema != nil {
			return respInvalid(rpFormat, rrUnknown)
		}
		d.extension(protocol.GenerationResponseFormat, `"json"`)
		d.require(protocol.CapOutputJSON)
	case "json_schema":
		if name == "" {
			return respInvalid(rpFormatName, rrRequired)
		}
		if schema == nil {
			return respInvalid(rpFormatSchema, rrRequired)
		}
		d.extension(protocol.GenerationResponseSchema, string(upstreamSchema(schema)))
		d.extension(protocol.GenerationResponseSchemaName, strconv.Quote(name))
		d.require(protocol.CapStructuredOutput)
	case "":
		return respInvalid(rpFormatType, rrRequired)
	default:
		return respInvalid(rpFormatType, rrFormatType)
	}
	return nil
}

// The JSON helpers below work on values json.Valid accepted as part of the body, so a
// syntax error cannot occur; they never quote what they read in an error.

// respWalk is how the shared walker reads Responses objects: each object the decoder
// walks gets its own walker, located at its schema path (a respPath, entered as one
// segment), so the walker's own refusals name the same closed set of locations.
var respWalk = compat.WalkOptions{Duplicate: string(rrDuplicate)}

// respMembers calls fn with each member of the JSON object v, in order, refusing a key
// that repeats (encoding/json would keep the last one, and the body would mean one thing
// here and another to a proxy). val is valid until fn returns.
func respMembers(v json.RawMessage, at respPath, fn func(key string, val json.RawMessage) error) error {
	w := compat.NewWalker(v, &respWalk)
	w.Enter(string(at))
	return respError(w.Object(func(key string) error {
		val, err := w.RawValue()
		if err != nil {
			return err
		}
		return fn(key, val)
	}))
}

// respElements calls fn with each element of the JSON array v; el is valid until fn
// returns.
func respElements(v json.RawMessage, fn func(el json.RawMessage) error) error {
	w := compat.NewWalker(v, &respWalk)
	return respError(w.Array(func(int) error {
		el, err := w.RawValue()
		if err != nil {
			return err
		}
		return fn(el)
	}))
}

// respError is err as the door's errors are, a *protocol.Error: the walker's refusals
// carry their location in their message already.
func respError(err error) error {
	var re *compat.Refusal
	if errors.As(err, &re) {
		return re.Err
	}
	return err
}

// firstByte is the first byte of a JSON value, which says its kind.
func firstByte(v json.RawMessage) byte {
	v = bytes.TrimLeft(v, " \t\r\n")
	if len(v) == 0 {
		return 0
	}
	return v[0]
}

func isNull(v json.RawMessage) bool { return firstByte(v) == 'n' }

// respStringValue returns the string v holds, if it is one.
func respStringValue(v json.RawMessage) (string, bool) {
	if firstByte(v) != '"' {
		return "", false
	}
	var s string
	if err := json.Unmarshal(v, &s); err != nil {
		return "", false
	}
	return s, true
}

func respString(v json.RawMessage, at respPath) (string, error) {
	s, ok := respStringValue(v)
	if !ok {
		return "", respInvalid(at, rrString)
	}
	return s, nil
}

func respBool(v json.RawMessage, at respPath, dst *bool) error {
	switch string(bytes.TrimSpace(v)) {
	case "true":
		*dst = true
	case "false":
		*dst = false
	default:
		return respInvalid(at, rrBool)
	}
	return nil
}

// respFloat returns the number v holds, if it is a finite one.
func respFloat(v json.RawMessage) (float64, bool) {
	b := firstByte(v)
	if b != '-' && (b < '0' || b > '9') {
		return 0, false
	}
	f, err := strconv.ParseFloat(string(bytes.TrimSpace(v)), 64)
	if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
		return 0, false
	}
	return f, true
}

// respInteger returns the integer v holds, if it is one within [lo, hi]; like JSON
// Schema it accepts any integral number literal (2.0, 2e0).
func respInteger(v json.RawMessage, lo, hi int64) (int64, bool) {
	f, ok := respFloat(v)
	if !ok || f != math.Trunc(f) || f < float64(lo) || f > float64(hi) {
		return 0, false
	}
	return int64(f), true
}

// compactJSON is v without insignificant whitespace; v is valid JSON.
func compactJSON(v json.RawMessage) json.RawMessage {
	var b bytes.Buffer
	if err := json.Compact(&b, v); err != nil {
		return bytes.Clone(v)
	}
	return b.Bytes()
}

// errGetBody answers a GET whose body is not what the OpenAI SDKs send (nothing, or
// {"stream": true}).
var errGetBody = respInvalid(rpBody, rrUnknown)

// decodeGetBody reads the body of GET /v1/responses/{id}: openai-go's GetStreaming
// sends {"stream":true} there (and no Content-Type) rather than in the query. It
// returns whether it asks for a stream.
func decodeGetBody(body io.Reader) (bool, error) {
	data, err := io.ReadAll(io.LimitReader(body, respMaxGetBody+1))
	if err != nil {
		return false, respInvalid(rpBody, rrNotJSON)
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return false, nil
	}
	if len(data) > respMaxGetBody || !json.Valid(data) {
		return false, errGetBody
	}
	var stream bool
	err = respMembers(data, rpBody, func(key string, v json.RawMessage) error {
		if key != "stream" {
			return errGetBody
		}
		return respBool(v, rpStream, &stream)
	})
	if errors.Is(err, errGetBody) {
		return false, errGetBody
	}
	return stream, err
}

// respMaxGetBody bounds the body of a GET: what the SDKs send there is a few bytes.
const respMaxGetBody = 1 << 10
