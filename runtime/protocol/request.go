package protocol

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
)

// Bounds and defaults of the execution request (spec/http-api.md, "Request"). The strict
// decoder and the generated JSON Schema both read these constants, so the two cannot
// drift apart.
const (
	// MaxAbilityLength bounds Request.Ability.
	MaxAbilityLength = 64
	// MaxInputParts bounds Request.Input (at least one part is required).
	MaxInputParts = 256
	// MaxContentParts bounds the parts of one tool_result's content.
	MaxContentParts = 256
	// MaxRequirements bounds Request.Requirements.
	MaxRequirements = 16
	// MaxPrefer bounds Routing.Prefer and Routing.Only.
	MaxPrefer = 8
	// MaxAttemptsLimit is the largest Routing.MaxAttempts a caller may ask for.
	MaxAttemptsLimit = 5
	// DefaultMaxAttempts applies when Routing.MaxAttempts is absent.
	DefaultMaxAttempts = 3
	// MaxDeadlineMs is the largest DeadlineMs a caller may ask for (one hour).
	MaxDeadlineMs = 3_600_000
	// DefaultDeadlineMs applies when DeadlineMs is absent (five minutes).
	DefaultDeadlineMs = 300_000
	// MaxMetadataEntries bounds Request.Metadata.
	MaxMetadataEntries = 16
	// MaxMetadataValueLength bounds each metadata value, in characters (code points).
	MaxMetadataValueLength = 256
	// MaxExtensions bounds the number of Request.Extensions keys.
	MaxExtensions = 32
	// MaxExtensionsBytes bounds the extensions object as it appears in the body.
	MaxExtensionsBytes = 64 << 10
	// DefaultMaxRequestBytes is the default body limit (--max-request-bytes). The HTTP
	// layer enforces it while reading the body, before DecodeRequest runs.
	DefaultMaxRequestBytes = 8 << 20

	// MaxMediaTypeLength bounds Part.MediaType (RFC 6838 allows 127 + "/" + 127 plus
	// parameters; longer values are never real media types).
	MaxMediaTypeLength = 255
	// MaxURILength bounds Part.URI. Larger content belongs in Part.Data.
	MaxURILength = 8192
	// MaxFileNameLength bounds Part.Name on file parts, the common file-system limit.
	MaxFileNameLength = 255
	// MaxCallIDLength bounds Part.CallID. Provider call ids are short; the bound keeps
	// the ids echoed in events and snapshots small.
	MaxCallIDLength = 256
)

// Patterns of the request grammar, written in the common subset of RE2 and ECMA-262 so
// the same text serves the decoder (regexp) and the JSON Schema "pattern" keyword.
const (
	// AbilityPattern is the grammar of an ability name.
	AbilityPattern = `^[a-z][a-z0-9]*([._-][a-z0-9]+)*$`
	// ToolNamePattern is the grammar of a tool or tool call name.
	ToolNamePattern = `^[A-Za-z0-9_-]{1,64}$`
	// MetadataKeyPattern is the grammar of a metadata key.
	MetadataKeyPattern = `^[a-z][a-z0-9_.-]{0,62}$`
	// ExtensionKeyPattern is the grammar of an extension key: "<provider>.<field>".
	ExtensionKeyPattern = `^[a-z][a-z0-9-]*\.[a-z][a-z0-9_.-]*$`
	// DeploymentRefPattern is the grammar of a Routing.Prefer entry "namespace/name": a
	// DNS-1123 label (at most 63 characters), a slash, and a DNS-1123 subdomain.
	DeploymentRefPattern = `^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?/[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	// deploymentRefLengths adds the subdomain's 253-character limit, which the structural
	// pattern cannot express on its own.
	deploymentRefLengths = `^[^/]{1,63}/[^/]{1,253}$`
	// MediaTypePattern is the grammar of Part.MediaType: a lower-case type/subtype (RFC
	// 6838 restricted names) with optional parameters such as "; codecs=opus".
	MediaTypePattern = `^[a-z0-9][a-z0-9!#$&^_.+-]{0,126}/[a-z0-9][a-z0-9!#$&^_.+-]{0,126}(; ?[a-z0-9!#$&^_.+-]+=[A-Za-z0-9!#$&^_.+-]+)*$`
	// URIPattern requires an absolute URI (a scheme) of printable ASCII without spaces.
	URIPattern = `^[A-Za-z][A-Za-z0-9+.-]*:[!-~]+$`
	// Base64Pattern is canonical standard base64 (RFC 4648 §4): padded, no line breaks,
	// and zero padding bits, so every accepted value has exactly one byte decoding.
	Base64Pattern = `^([A-Za-z0-9+/]{4})*([A-Za-z0-9+/][AQgw]==|[A-Za-z0-9+/]{2}[AEIMQUYcgkosw048]=)?$`
	// fileNamePattern keeps control characters out of file names, which adapters forward
	// in multipart headers.
	fileNamePattern = `^[^\x00-\x1f\x7f]*$`
)

// Request is the body of POST /v1/executions (spec/http-api.md, "Request"). Decode
// untrusted bodies with DecodeRequest, which enforces every rule of the contract;
// optional fields stay nil when absent so policy caps can tell "absent" from "asked for".
type Request struct {
	// ability names what the caller wants done, e.g. "chat" or "summarize"; it selects
	// the ModelDeployments that serve it.
	Ability string `json:"ability"`
	// input is the ordered conversation and context: 1 to 256 parts.
	Input []Part `json:"input"`
	// requirements lists capability ids the chosen model must have beyond what the input
	// implies; at most 16, unique.
	Requirements []Capability `json:"requirements,omitempty"`
	// routing holds optional routing hints.
	Routing *Routing `json:"routing,omitempty"`
	// deadline_ms bounds the whole execution, all attempts included, in milliseconds;
	// default 300000, capped by policy.
	DeadlineMs *int64 `json:"deadline_ms,omitempty"`
	// metadata holds caller labels echoed in the execution's status; at most 16 entries,
	// values at most 256 characters.
	Metadata map[string]string `json:"metadata,omitempty"`
	// extensions holds provider-specific options, keyed "<provider>.<field>", and
	// provider-neutral generation options, keyed "generation.<field>"; only documented
	// keys are accepted, at most 32 keys and 64 KiB in total.
	Extensions map[string]json.RawMessage `json:"extensions,omitempty"`
}

// Routing holds a request's routing hints.
type Routing struct {
	// prefer lists ModelDeployments ("namespace/name") to try first, in this order, when
	// they are eligible; at most 8.
	Prefer []string `json:"prefer,omitempty"`
	// only restricts routing to these ModelDeployments ("namespace/name"), at most 8:
	// no other is tried, even when none of them is eligible. A front door pins the
	// deployment a caller names as its model with it.
	Only []string `json:"only,omitempty"`
	// max_attempts is the number of models to try before giving up, 1 to 5; default 3,
	// capped by policy.
	MaxAttempts *int `json:"max_attempts,omitempty"`
}

// DeadlineOrDefault is the requested deadline in milliseconds, or DefaultDeadlineMs.
func (r *Request) DeadlineOrDefault() int64 {
	if r.DeadlineMs != nil {
		return *r.DeadlineMs
	}
	return DefaultDeadlineMs
}

// MaxAttemptsOrDefault is the requested number of attempts, or DefaultMaxAttempts.
func (r *Request) MaxAttemptsOrDefault() int {
	if r.Routing != nil && r.Routing.MaxAttempts != nil {
		return *r.Routing.MaxAttempts
	}
	return DefaultMaxAttempts
}

// Validate reports whether r would be accepted by DecodeRequest, with the same error. It
// lets a client check a request it built before sending it.
func (r *Request) Validate() error {
	b, err := json.Marshal(r)
	if err != nil {
		return NewError(CodeInvalidRequest, "body: cannot be encoded as JSON")
	}
	_, err = DecodeRequest(b)
	return err
}

// Role is the author of an input part.
type Role string

const (
	RoleSystem    Role = "system"
	RoleUser      Role = "user"
	RoleAssistant Role = "assistant"
	RoleTool      Role = "tool"
)

// Roles lists every role, in a fixed order.
var Roles = []Role{RoleSystem, RoleUser, RoleAssistant, RoleTool}

// Known reports whether r is one of the four roles.
func (r Role) Known() bool {
	switch r {
	case RoleSystem, RoleUser, RoleAssistant, RoleTool:
		return true
	}
	return false
}

// PartTypes lists every part type, in a fixed order.
var PartTypes = []PartType{
	PartText, PartJSON, PartImage, PartAudio, PartVideo, PartFile,
	PartTool, PartToolCall, PartToolResult,
}

// ContentPartTypes lists the part types allowed inside a tool_result's content.
var ContentPartTypes = []PartType{PartText, PartJSON, PartImage, PartAudio, PartVideo, PartFile}

// Part is one input part. It is a single struct for every type: Type says which fields
// are meaningful, and DecodeRequest rejects fields that do not belong to the type, so
// consumers can switch on Type and read only that type's fields.
type Part struct {
	// type is the kind of part: text, json, image, audio, video, file, tool, tool_call or
	// tool_result.
	Type PartType `json:"type"`
	// role is the author of the part: system, user (the default), assistant or tool.
	// tool_call parts require assistant. Not allowed inside tool_result content.
	Role Role `json:"role,omitempty"`
	// text is the content of a text part.
	Text string `json:"text,omitempty"`
	// json is the content of a json part: any JSON value.
	JSON json.RawMessage `json:"json,omitempty"`
	// media_type is the media type of an image, audio, video or file part, e.g.
	// "image/png"; image, audio and video parts need the matching top-level type.
	MediaType string `json:"media_type,omitempty"`
	// data is the inline content of a media part in canonical standard base64; exactly
	// one of data and uri.
	Data string `json:"data,omitempty"`
	// uri references the content of a media part; exactly one of data and uri. The
	// runtime never fetches it: it is passed to the provider as is.
	URI string `json:"uri,omitempty"`
	// name is a file part's file name (optional), or the name of a tool or tool_call
	// (required, matching ^[A-Za-z0-9_-]{1,64}$).
	Name string `json:"name,omitempty"`
	// description explains a tool to the model.
	Description string `json:"description,omitempty"`
	// parameters is a tool's input schema: a JSON Schema object.
	Parameters json.RawMessage `json:"parameters,omitempty"`
	// call_id identifies a tool call; a tool_result answers the tool_call with the same
	// id.
	CallID string `json:"call_id,omitempty"`
	// arguments is a tool_call's arguments as the model produced them (usually a JSON
	// object, kept as a string).
	Arguments string `json:"arguments,omitempty"`
	// content is a tool_result's output: a string, or an array of text, json, image,
	// audio, video and file parts.
	Content *ToolContent `json:"content,omitempty"`
}

// RoleOrDefault is the part's role, or RoleUser when none was given.
func (p *Part) RoleOrDefault() Role {
	if p.Role == "" {
		return RoleUser
	}
	return p.Role
}

// partWire is the encoded form of a Part. Pointers distinguish "absent" from "empty", so
// a required field that may be empty (a text part's text) is still written.
type partWire struct {
	Type        PartType        `json:"type"`
	Role        Role            `json:"role,omitempty"`
	Text        *string         `json:"text,omitempty"`
	JSON        json.RawMessage `json:"json,omitempty"`
	MediaType   *string         `json:"media_type,omitempty"`
	Data        *string         `json:"data,omitempty"`
	URI         *string         `json:"uri,omitempty"`
	Name        *string         `json:"name,omitempty"`
	Description *string         `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters,omitempty"`
	CallID      *string         `json:"call_id,omitempty"`
	Arguments   *string         `json:"arguments,omitempty"`
	Content     *ToolContent    `json:"content,omitempty"`
}

// MarshalJSON writes the fields of the part's type: the required ones always (even when
// empty, e.g. a text part with empty text), the optional ones when set. Fields of other
// types are not written, so an encoded part always has the shape DecodeRequest expects.
func (p Part) MarshalJSON() ([]byte, error) {
	rule, known := partRules[p.Type]
	if !known {
		// Unknown type: write whatever is set and let the receiver reject it.
		rule = partRule{allowed: fieldsAll}
	}
	w := partWire{Type: p.Type, Role: p.Role}
	str := func(f fieldSet, v *string) *string {
		if rule.allowed&f == 0 || (*v == "" && rule.required&f == 0) {
			return nil
		}
		return v
	}
	raw := func(f fieldSet, v json.RawMessage) json.RawMessage {
		if rule.allowed&f == 0 {
			return nil
		}
		if len(v) == 0 && rule.required&f != 0 {
			return json.RawMessage("null")
		}
		return v
	}
	w.Text = str(fieldText, &p.Text)
	w.JSON = raw(fieldJSON, p.JSON)
	w.MediaType = str(fieldMediaType, &p.MediaType)
	w.Data = str(fieldData, &p.Data)
	w.URI = str(fieldURI, &p.URI)
	w.Name = str(fieldName, &p.Name)
	w.Description = str(fieldDescription, &p.Description)
	w.Parameters = raw(fieldParameters, p.Parameters)
	w.CallID = str(fieldCallID, &p.CallID)
	w.Arguments = str(fieldArguments, &p.Arguments)
	if rule.allowed&fieldContent != 0 {
		w.Content = p.Content
		if w.Content == nil && rule.required&fieldContent != 0 {
			w.Content = &ToolContent{Text: new(string)}
		}
	}
	return json.Marshal(w)
}

// ToolContent is a tool_result's output: either Text or Parts is set. On the wire it is a
// JSON string or an array of parts.
type ToolContent struct {
	// Text is the output as a string.
	Text *string
	// Parts is the output as parts (text, json, image, audio, video or file only).
	Parts []Part
}

// MarshalJSON writes Text as a string, otherwise Parts as an array.
func (c ToolContent) MarshalJSON() ([]byte, error) {
	if c.Text != nil {
		return json.Marshal(*c.Text)
	}
	if c.Parts == nil {
		return []byte("[]"), nil
	}
	return json.Marshal(c.Parts)
}

// UnmarshalJSON reads a string or an array of parts. It exists so stored requests can be
// read back with encoding/json; untrusted bodies go through DecodeRequest, which applies
// every rule. Unknown part fields are still rejected because a custom unmarshaler does
// not inherit the caller's Decoder.DisallowUnknownFields.
func (c *ToolContent) UnmarshalJSON(b []byte) error {
	b = bytes.TrimLeft(b, " \t\r\n")
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		*c = ToolContent{Text: &s}
		return nil
	}
	if len(b) == 0 || b[0] != '[' {
		return errors.New("tool content must be a string or an array of parts")
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var parts []Part
	if err := dec.Decode(&parts); err != nil {
		return err
	}
	*c = ToolContent{Parts: parts}
	return nil
}

// ArgumentsObject returns the Arguments of a tool_call part as a compact JSON object,
// the form providers that take arguments as structured input want: empty arguments are
// {}, and anything but a JSON object (an array, a scalar, broken JSON) gives false.
// Arguments are opaque text in the protocol (they are streamed as fragments), so only
// an adapter that must send them as an object makes this check.
func (p Part) ArgumentsObject() (json.RawMessage, bool) {
	trimmed := strings.TrimSpace(p.Arguments)
	if trimmed == "" {
		return json.RawMessage("{}"), true
	}
	if trimmed[0] != '{' {
		return nil, false
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, []byte(trimmed)); err != nil {
		return nil, false
	}
	return buf.Bytes(), true
}
