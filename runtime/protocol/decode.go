package protocol

import (
	"encoding/json"
	"math/bits"
	"regexp"
	"slices"
	"strings"
	"unicode/utf8"
)

// fieldSet is a set of part fields (every field but "type"), one bit each.
type fieldSet uint16

const (
	idxRole = iota
	idxText
	idxJSON
	idxMediaType
	idxData
	idxURI
	idxName
	idxDescription
	idxParameters
	idxCallID
	idxArguments
	idxContent
	numPartFields
)

const (
	fieldRole        fieldSet = 1 << idxRole
	fieldText        fieldSet = 1 << idxText
	fieldJSON        fieldSet = 1 << idxJSON
	fieldMediaType   fieldSet = 1 << idxMediaType
	fieldData        fieldSet = 1 << idxData
	fieldURI         fieldSet = 1 << idxURI
	fieldName        fieldSet = 1 << idxName
	fieldDescription fieldSet = 1 << idxDescription
	fieldParameters  fieldSet = 1 << idxParameters
	fieldCallID      fieldSet = 1 << idxCallID
	fieldArguments   fieldSet = 1 << idxArguments
	fieldContent     fieldSet = 1 << idxContent
	fieldsAll        fieldSet = 1<<numPartFields - 1
)

// partFieldNames are the JSON names of the part fields, indexed by bit.
var partFieldNames = [numPartFields]string{
	idxRole: "role", idxText: "text", idxJSON: "json", idxMediaType: "media_type",
	idxData: "data", idxURI: "uri", idxName: "name", idxDescription: "description",
	idxParameters: "parameters", idxCallID: "call_id", idxArguments: "arguments",
	idxContent: "content",
}

// index is the bit number of the lowest field in s.
func (s fieldSet) index() int { return bits.TrailingZeros16(uint16(s)) }

// names lists the JSON names of the fields in s, in bit order.
func (s fieldSet) names() []string {
	var out []string
	for i, name := range partFieldNames {
		if s&(1<<i) != 0 {
			out = append(out, name)
		}
	}
	return out
}

// partRule is what one part type allows and requires besides "type". Media parts add
// "exactly one of data and uri", checked separately. The decoder and the JSON Schema are
// both derived from this table.
type partRule struct {
	allowed, required fieldSet
}

const mediaFields = fieldRole | fieldMediaType | fieldData | fieldURI

var partRules = map[PartType]partRule{
	PartText:       {allowed: fieldRole | fieldText, required: fieldText},
	PartJSON:       {allowed: fieldRole | fieldJSON, required: fieldJSON},
	PartImage:      {allowed: mediaFields, required: fieldMediaType},
	PartAudio:      {allowed: mediaFields, required: fieldMediaType},
	PartVideo:      {allowed: mediaFields, required: fieldMediaType},
	PartFile:       {allowed: mediaFields | fieldName, required: fieldMediaType},
	PartTool:       {allowed: fieldRole | fieldName | fieldDescription | fieldParameters, required: fieldName | fieldParameters},
	PartToolCall:   {allowed: fieldRole | fieldCallID | fieldName | fieldArguments, required: fieldRole | fieldCallID | fieldName | fieldArguments},
	PartToolResult: {allowed: fieldRole | fieldCallID | fieldContent, required: fieldCallID | fieldContent},
}

// mediaTypePrefix is the top-level media type image, audio and video parts must carry, so
// that the modality routing infers from the part type is the one the payload has.
var mediaTypePrefix = map[PartType]struct {
	prefix string
	rule   rule
}{
	PartImage: {"image/", rImageType},
	PartAudio: {"audio/", rAudioType},
	PartVideo: {"video/", rVideoType},
}

var (
	abilityRE       = regexp.MustCompile(AbilityPattern)
	toolNameRE      = regexp.MustCompile(ToolNamePattern)
	metadataKeyRE   = regexp.MustCompile(MetadataKeyPattern)
	extensionKeyRE  = regexp.MustCompile(ExtensionKeyPattern)
	deploymentRefRE = regexp.MustCompile(DeploymentRefPattern)
	refLengthsRE    = regexp.MustCompile(deploymentRefLengths)
	mediaTypeRE     = regexp.MustCompile(MediaTypePattern)
	uriRE           = regexp.MustCompile(URIPattern)
	fileNameRE      = regexp.MustCompile(fileNamePattern)
)

// Request and routing fields, by bit in the decoder's "seen" sets.
const (
	reqAbility = iota
	reqInput
	reqRequirements
	reqRouting
	reqDeadline
	reqMetadata
	reqExtensions
)

const (
	routingPrefer = iota
	routingMaxAttempts
	routingOnly
)

var (
	requestFieldNames = []string{
		reqAbility: "ability", reqInput: "input", reqRequirements: "requirements", reqRouting: "routing",
		reqDeadline: "deadline_ms", reqMetadata: "metadata", reqExtensions: "extensions",
	}
	routingFieldNames = []string{routingPrefer: "prefer", routingMaxAttempts: "max_attempts", routingOnly: "only"}
	partTypeNames     = enumNames(PartTypes)
	contentTypeNames  = enumNames(ContentPartTypes)
	roleNames         = enumNames(Roles)
	capabilityNames   = enumNames(Capabilities)
)

func enumNames[T ~string](values []T) []string {
	out := make([]string, len(values))
	for i, v := range values {
		out[i] = string(v)
	}
	return out
}

// DecodeRequest decodes an execution request body and enforces every rule of
// spec/http-api.md, "Request": one JSON object and nothing after it, no unknown fields,
// no null where a value is expected, no duplicate keys at any depth, and every bound.
// Defaults are not applied; absent optional fields stay nil. The body size limit is the
// HTTP layer's (RequestTooLarge).
//
// Every error is an *Error with code invalid_request whose message is a fixed template
// naming the schema location (see validation.go); it never contains caller data.
//
// Why a walker instead of json.Decoder with DisallowUnknownFields: encoding/json keeps
// the last of duplicate keys (a body could then mean one thing to us and another to a
// proxy or the schema), accepts null for any field, and its errors quote the input —
// including map keys from metadata and extensions, which must never reach an error
// body. The walker reuses encoding/json for validity and for unquoting strings.
func DecodeRequest(body []byte) (*Request, error) {
	// json.Valid is a single allocation-free pass; after it the decoder cannot meet a
	// syntax error, so it needs no error paths that could echo input.
	if !json.Valid(body) {
		return nil, violation(pBody, rNotJSON)
	}
	d := requestDecoder{jsonCursor: jsonCursor{data: body}}
	r := new(Request)
	if err := d.request(r); err != nil {
		return nil, err
	}
	return r, nil
}

type requestDecoder struct {
	jsonCursor
}

func (d *requestDecoder) request(r *Request) error {
	if d.peek() != '{' {
		return violation(pBody, rObject)
	}
	var seen uint
	err := d.members(func(key []byte) error {
		i := slices.Index(requestFieldNames, string(key))
		if i < 0 {
			return violation(pBody, rUnknownField)
		}
		if seen&(1<<i) != 0 {
			return violation(pBody, rDuplicateKey)
		}
		seen |= 1 << i
		switch i {
		case reqAbility:
			return d.ability(r)
		case reqInput:
			if d.peek() != '[' {
				return violation(pInput, rArray)
			}
			parts, err := d.parts(inputPaths, false, MaxInputParts, pInput, rInputCount)
			if err != nil {
				return err
			}
			if len(parts) == 0 {
				return violation(pInput, rInputCount)
			}
			r.Input = parts
			return nil
		case reqRequirements:
			return d.requirements(r)
		case reqRouting:
			return d.routing(r)
		case reqDeadline:
			n, ok := d.integer(1, MaxDeadlineMs)
			if !ok {
				return violation(pDeadline, rDeadline)
			}
			r.DeadlineMs = &n
			return nil
		case reqMetadata:
			return d.metadata(r)
		default: // reqExtensions
			return d.extensions(r)
		}
	})
	if err != nil {
		return err
	}
	if seen&(1<<reqAbility) == 0 {
		return violation(pAbility, rRequired)
	}
	if seen&(1<<reqInput) == 0 {
		return violation(pInput, rRequired)
	}
	return nil
}

func (d *requestDecoder) ability(r *Request) error {
	if d.peek() != '"' {
		return violation(pAbility, rString)
	}
	s := d.str()
	if len(s) > MaxAbilityLength || !abilityRE.MatchString(s) {
		return violation(pAbility, rAbility)
	}
	r.Ability = s
	return nil
}

// integer consumes a value and returns it if it is an integer within [lo, hi]. Like JSON
// Schema, it accepts any integral number literal (2.0, 2e0).
func (d *requestDecoder) integer(lo, hi int64) (int64, bool) {
	if !isNumberStart(d.peek()) {
		return 0, false
	}
	n := parseExactNumber(d.number())
	if !n.integral() || !n.within(lo, hi) {
		return 0, false
	}
	v := int64(n.intPart)
	if n.neg {
		v = -v
	}
	return v, true
}

func (d *requestDecoder) requirements(r *Request) error {
	if d.peek() != '[' {
		return violation(pRequirements, rArray)
	}
	reqs := []Capability{}
	err := d.elements(func() error {
		if d.peek() != '"' {
			return violation(pRequirement, rString)
		}
		i := d.strIn(capabilityNames)
		if i < 0 {
			return violation(pRequirement, rCapability)
		}
		c := Capabilities[i]
		if len(reqs) == MaxRequirements || slices.Contains(reqs, c) {
			return violation(pRequirements, rRequirements)
		}
		reqs = append(reqs, c)
		return nil
	})
	if err != nil {
		return err
	}
	r.Requirements = reqs
	return nil
}

func (d *requestDecoder) routing(r *Request) error {
	if d.peek() != '{' {
		return violation(pRouting, rObject)
	}
	rt := &Routing{}
	var seen uint
	err := d.members(func(key []byte) error {
		i := slices.Index(routingFieldNames, string(key))
		if i < 0 {
			return violation(pRouting, rUnknownField)
		}
		if seen&(1<<i) != 0 {
			return violation(pRouting, rDuplicateKey)
		}
		seen |= 1 << i
		if i == routingMaxAttempts {
			n, ok := d.integer(1, MaxAttemptsLimit)
			if !ok {
				return violation(pMaxAttempts, rMaxAttempts)
			}
			attempts := int(n)
			rt.MaxAttempts = &attempts
			return nil
		}
		list, item := pPrefer, pPreferItem
		if i == routingOnly {
			list, item = pOnly, pOnlyItem
		}
		if d.peek() != '[' {
			return violation(list, rArray)
		}
		refs := []string{}
		err := d.elements(func() error {
			if d.peek() != '"' {
				return violation(item, rString)
			}
			s := d.str()
			if !deploymentRefRE.MatchString(s) || !refLengthsRE.MatchString(s) {
				return violation(item, rDeploymentRef)
			}
			if len(refs) == MaxPrefer {
				return violation(list, rPreferCount)
			}
			refs = append(refs, s)
			return nil
		})
		if i == routingOnly {
			rt.Only = refs
		} else {
			rt.Prefer = refs
		}
		return err
	})
	if err != nil {
		return err
	}
	r.Routing = rt
	return nil
}

func (d *requestDecoder) metadata(r *Request) error {
	if d.peek() != '{' {
		return violation(pMetadata, rObject)
	}
	md := map[string]string{}
	err := d.members(func(key []byte) error {
		if _, dup := md[string(key)]; dup {
			return violation(pMetadata, rDuplicateKey)
		}
		if len(md) == MaxMetadataEntries {
			return violation(pMetadata, rMetadataCount)
		}
		if !metadataKeyRE.Match(key) {
			return violation(pMetadata, rMetadataKey)
		}
		if d.peek() != '"' {
			return violation(pMetadataValue, rMetadataValue)
		}
		v := d.str()
		if utf8.RuneCountInString(v) > MaxMetadataValueLength {
			return violation(pMetadataValue, rMetadataValue)
		}
		md[string(key)] = v
		return nil
	})
	if err != nil {
		return err
	}
	r.Metadata = md
	return nil
}

func (d *requestDecoder) extensions(r *Request) error {
	if d.peek() != '{' {
		return violation(pExtensions, rObject)
	}
	start := d.pos
	ext := map[string]json.RawMessage{}
	err := d.members(func(key []byte) error {
		if _, dup := ext[string(key)]; dup {
			return violation(pExtensions, rDuplicateKey)
		}
		if len(ext) == MaxExtensions {
			return violation(pExtensions, rExtensionCount)
		}
		if !extensionKeyRE.Match(key) {
			return violation(pExtensions, rExtensionKey)
		}
		spec, ok := lookupExtension(string(key))
		if !ok {
			return violation(pExtensions, rUndocumented)
		}
		d.peek()
		valueStart := d.pos
		if broken := spec.check(&d.jsonCursor); broken != "" {
			return violation(pExtensionVal, broken)
		}
		ext[string(key)] = slices.Clone(d.data[valueStart:d.pos])
		return nil
	})
	if err != nil {
		return err
	}
	if d.pos-start > MaxExtensionsBytes {
		return violation(pExtensions, rExtensionSize)
	}
	r.Extensions = ext
	return nil
}

// parts decodes an array of parts (the cursor is at '['), stopping at the first part
// over limit so an oversized array is not decoded in full.
func (d *requestDecoder) parts(ps *partPaths, nested bool, limit int, arrayPath schemaPath, countRule rule) ([]Part, error) {
	var parts []Part
	err := d.elements(func() error {
		if len(parts) == limit {
			return violation(arrayPath, countRule)
		}
		parts = append(parts, Part{})
		return d.part(&parts[len(parts)-1], ps, nested)
	})
	return parts, err
}

// part decodes one part. Fields may come in any order, so type-specific rules are
// checked once the object is complete.
func (d *requestDecoder) part(p *Part, ps *partPaths, nested bool) error {
	if d.peek() != '{' {
		return violation(ps.part, rObject)
	}
	var seen fieldSet
	typeSeen := false
	err := d.members(func(key []byte) error {
		if string(key) == "type" {
			if typeSeen {
				return violation(ps.part, rDuplicateKey)
			}
			typeSeen = true
			return d.partType(p, ps, nested)
		}
		i := slices.Index(partFieldNames[:], string(key))
		if i < 0 {
			return violation(ps.part, rUnknownField)
		}
		f := fieldSet(1) << i
		if seen&f != 0 {
			return violation(ps.part, rDuplicateKey)
		}
		seen |= f
		return d.partField(p, f, ps, nested)
	})
	if err != nil {
		return err
	}
	if !typeSeen {
		return violation(ps.typ, rRequired)
	}
	return checkPart(p, seen, ps)
}

func (d *requestDecoder) partType(p *Part, ps *partPaths, nested bool) error {
	if d.peek() != '"' {
		return violation(ps.typ, rString)
	}
	if nested {
		i := d.strIn(contentTypeNames)
		if i < 0 {
			return violation(ps.typ, rContentType)
		}
		p.Type = ContentPartTypes[i]
		return nil
	}
	i := d.strIn(partTypeNames)
	if i < 0 {
		return violation(ps.typ, rPartType)
	}
	p.Type = PartTypes[i]
	return nil
}

// partField decodes one field and checks the rules that do not depend on the type.
func (d *requestDecoder) partField(p *Part, f fieldSet, ps *partPaths, nested bool) error {
	path := ps.field(f)
	switch f {
	case fieldJSON:
		d.peek()
		start := d.pos
		if !d.skip() {
			return violation(path, rDuplicateKey)
		}
		p.JSON = slices.Clone(d.data[start:d.pos])
		return nil
	case fieldParameters:
		if d.peek() != '{' {
			return violation(path, rObject)
		}
		start := d.pos
		if !d.skip() {
			return violation(path, rDuplicateKey)
		}
		p.Parameters = slices.Clone(d.data[start:d.pos])
		return nil
	case fieldContent:
		if nested {
			return violation(path, rNotForType)
		}
		return d.content(p, path)
	case fieldRole:
		if nested {
			return violation(path, rRoleInContent)
		}
		if d.peek() != '"' {
			return violation(path, rString)
		}
		i := d.strIn(roleNames)
		if i < 0 {
			return violation(path, rRole)
		}
		p.Role = Roles[i]
		return nil
	}

	// Every other field is a string.
	if d.peek() != '"' {
		return violation(path, rString)
	}
	s := d.str()
	switch f {
	case fieldText:
		p.Text = s
	case fieldMediaType:
		if len(s) > MaxMediaTypeLength || !mediaTypeRE.MatchString(s) {
			return violation(path, rMediaType)
		}
		p.MediaType = s
	case fieldData:
		if !CanonicalBase64(s) {
			return violation(path, rBase64)
		}
		p.Data = s
	case fieldURI:
		if len(s) > MaxURILength || !uriRE.MatchString(s) {
			return violation(path, rURI)
		}
		p.URI = s
	case fieldName:
		p.Name = s // its grammar depends on the type: checkPart
	case fieldDescription:
		p.Description = s
	case fieldCallID:
		if n := utf8.RuneCountInString(s); n < 1 || n > MaxCallIDLength {
			return violation(path, rCallID)
		}
		p.CallID = s
	case fieldArguments:
		p.Arguments = s
	}
	return nil
}

func (d *requestDecoder) content(p *Part, path schemaPath) error {
	switch d.peek() {
	case '"':
		s := d.str()
		p.Content = &ToolContent{Text: &s}
		return nil
	case '[':
		parts, err := d.parts(contentPaths, true, MaxContentParts, path, rContentCount)
		if err != nil {
			return err
		}
		if parts == nil {
			parts = []Part{}
		}
		p.Content = &ToolContent{Parts: parts}
		return nil
	}
	return violation(path, rStringOrParts)
}

// checkPart applies the rules of the part's type once all its fields are known.
func checkPart(p *Part, seen fieldSet, ps *partPaths) error {
	rule := partRules[p.Type]
	if extra := seen &^ rule.allowed; extra != 0 {
		return violation(ps.field(extra), rNotForType)
	}
	if missing := rule.required &^ seen; missing != 0 {
		return violation(ps.field(missing), requiredRules[missing.index()])
	}
	switch p.Type {
	case PartImage, PartAudio, PartVideo, PartFile:
		if (seen&fieldData != 0) == (seen&fieldURI != 0) {
			return violation(ps.part, rDataOrURI)
		}
		if m, ok := mediaTypePrefix[p.Type]; ok && !strings.HasPrefix(p.MediaType, m.prefix) {
			return violation(ps.field(fieldMediaType), m.rule)
		}
		if seen&fieldName != 0 {
			if n := utf8.RuneCountInString(p.Name); n < 1 || n > MaxFileNameLength || !fileNameRE.MatchString(p.Name) {
				return violation(ps.field(fieldName), rFileName)
			}
		}
	case PartTool, PartToolCall:
		if !toolNameRE.MatchString(p.Name) {
			return violation(ps.field(fieldName), rToolName)
		}
		if p.Type == PartToolCall && p.Role != RoleAssistant {
			return violation(ps.field(fieldRole), rToolCallRole)
		}
	}
	return nil
}
