package protocol

import "strconv"

// Validation errors are "<schema path>: <rule>", both taken from closed sets built at
// package initialisation. A message therefore names where the schema was violated
// ("input[].media_type"), never where in the caller's document (no indices, no keys) and
// never what the caller sent (spec/http-api.md, "Errors"). The sets exist so tests can
// prove that: the fuzz target checks every message it sees against them.

// schemaPath is a location in the request schema.
type schemaPath string

// rule is a fixed description of a violated rule.
type rule string

var (
	schemaPaths     = map[schemaPath]bool{}
	validationRules = map[rule]bool{}
)

func newPath(s string) schemaPath {
	p := schemaPath(s)
	schemaPaths[p] = true
	return p
}

func newRule(s string) rule {
	r := rule(s)
	validationRules[r] = true
	return r
}

// violation is the only constructor of validation errors.
func violation(p schemaPath, r rule) *Error {
	return NewError(CodeInvalidRequest, string(p)+": "+string(r))
}

// RequestTooLarge is the error for a body over the size limit; the HTTP layer returns it
// when its bounded reader gives up.
func RequestTooLarge() *Error {
	return NewError(CodeRequestTooLarge, "body: exceeds the request size limit")
}

var (
	pBody          = newPath("body")
	pAbility       = newPath("ability")
	pInput         = newPath("input")
	pRequirements  = newPath("requirements")
	pRequirement   = newPath("requirements[]")
	pRouting       = newPath("routing")
	pPrefer        = newPath("routing.prefer")
	pPreferItem    = newPath("routing.prefer[]")
	pOnly          = newPath("routing.only")
	pOnlyItem      = newPath("routing.only[]")
	pMaxAttempts   = newPath("routing.max_attempts")
	pDeadline      = newPath("deadline_ms")
	pMetadata      = newPath("metadata")
	pMetadataValue = newPath("metadata{}")
	pExtensions    = newPath("extensions")
	pExtensionVal  = newPath("extensions{}")

	inputPaths   = newPartPaths("input[]")
	contentPaths = newPartPaths("input[].content[]")
)

// partPaths are the schema paths of one part's fields, for top-level input parts or for
// parts nested in a tool_result's content.
type partPaths struct {
	part   schemaPath
	typ    schemaPath
	fields [numPartFields]schemaPath // indexed by field bit
}

func newPartPaths(prefix string) *partPaths {
	ps := &partPaths{part: newPath(prefix), typ: newPath(prefix + ".type")}
	for i, name := range partFieldNames {
		ps.fields[i] = newPath(prefix + "." + name)
	}
	return ps
}

func (ps *partPaths) field(f fieldSet) schemaPath { return ps.fields[f.index()] }

var (
	rNotJSON        = newRule("not valid JSON")
	rObject         = newRule("must be an object")
	rDuplicateKey   = newRule("duplicate object key")
	rUnknownField   = newRule("unknown field")
	rRequired       = newRule("required")
	rString         = newRule("must be a string")
	rArray          = newRule("must be an array")
	rStringOrParts  = newRule("must be a string or an array of parts")
	rNotForType     = newRule("not allowed for this part type")
	rRoleInContent  = newRule("not allowed inside tool_result content")
	rAbility        = newRule("must match " + AbilityPattern + " and be at most " + strconv.Itoa(MaxAbilityLength) + " characters")
	rInputCount     = newRule("must hold 1 to " + strconv.Itoa(MaxInputParts) + " parts")
	rContentCount   = newRule("must hold at most " + strconv.Itoa(MaxContentParts) + " parts")
	rPartType       = newRule("must be one of text, json, image, audio, video, file, tool, tool_call, tool_result")
	rContentType    = newRule("must be one of text, json, image, audio, video, file")
	rRole           = newRule("must be one of system, user, assistant, tool")
	rToolCallRole   = newRule("tool_call parts require role assistant")
	rMediaType      = newRule("must match " + MediaTypePattern + " and be at most " + strconv.Itoa(MaxMediaTypeLength) + " characters")
	rImageType      = newRule("must be an image/ media type for image parts")
	rAudioType      = newRule("must be an audio/ media type for audio parts")
	rVideoType      = newRule("must be a video/ media type for video parts")
	rBase64         = newRule("must be non-empty canonical standard base64 (padded, no line breaks)")
	rURI            = newRule("must be an absolute URI of printable ASCII, at most " + strconv.Itoa(MaxURILength) + " characters")
	rDataOrURI      = newRule("exactly one of data and uri is required for image, audio, video and file parts")
	rFileName       = newRule("must be 1 to " + strconv.Itoa(MaxFileNameLength) + " characters without control characters")
	rToolName       = newRule("must match " + ToolNamePattern)
	rCallID         = newRule("must be 1 to " + strconv.Itoa(MaxCallIDLength) + " characters")
	rRequirements   = newRule("must hold at most " + strconv.Itoa(MaxRequirements) + " unique capability ids")
	rCapability     = newRule("must be a known capability id")
	rPreferCount    = newRule("must hold at most " + strconv.Itoa(MaxPrefer) + " references")
	rDeploymentRef  = newRule("must be namespace/name: a DNS-1123 label, a slash and a DNS-1123 subdomain")
	rMaxAttempts    = newRule("must be an integer from 1 to " + strconv.Itoa(MaxAttemptsLimit))
	rDeadline       = newRule("must be an integer from 1 to " + strconv.Itoa(MaxDeadlineMs))
	rMetadataCount  = newRule("must hold at most " + strconv.Itoa(MaxMetadataEntries) + " entries")
	rMetadataKey    = newRule("keys must match " + MetadataKeyPattern)
	rMetadataValue  = newRule("must be a string of at most " + strconv.Itoa(MaxMetadataValueLength) + " characters")
	rExtensionCount = newRule("must hold at most " + strconv.Itoa(MaxExtensions) + " keys")
	rExtensionSize  = newRule("must be at most " + strconv.Itoa(MaxExtensionsBytes) + " bytes as sent")
	rExtensionKey   = newRule("keys must match " + ExtensionKeyPattern)
	rUndocumented   = newRule("key is not documented by any bundled adapter")
	rExtensionValue = newRule("value does not match the type or range its key documents")
	rSchemaValue    = newRule("schema numbers must be from -1e" + strconv.Itoa(maxParameterExponent) + " to 1e" +
		strconv.Itoa(maxParameterExponent) + ", strings neither URLs nor data URIs, and $ref values must start with #")
)

// requiredRules says, per part field, which types need it. Role is "required" only for
// tool_call parts, and then only as assistant.
var requiredRules = [numPartFields]rule{
	idxRole:       rToolCallRole,
	idxText:       newRule("required for text parts"),
	idxJSON:       newRule("required for json parts"),
	idxMediaType:  newRule("required for image, audio, video and file parts"),
	idxName:       newRule("required for tool and tool_call parts"),
	idxParameters: newRule("required for tool parts"),
	idxCallID:     newRule("required for tool_call and tool_result parts"),
	idxArguments:  newRule("required for tool_call parts"),
	idxContent:    newRule("required for tool_result parts"),
}
