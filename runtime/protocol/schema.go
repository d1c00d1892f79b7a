package protocol

import (
	"encoding/json"
	"strconv"

	"github.com/invopop/jsonschema"
)

// The JSON Schema of the execution request (spec/schema/execution-request.json) is
// reflected from these types by hack/genschema. Struct tags give the property names and
// which are required; the methods below add every other rule from the same constants,
// patterns and part table DecodeRequest uses, and spec/conformance vectors check that
// the schema and the decoder accept exactly the same bodies.

// JSONSchemaExtend adds the request's bounds.
func (Request) JSONSchemaExtend(s *jsonschema.Schema) {
	ability := schemaProperty(s, "ability")
	ability.MaxLength = schemaCount(MaxAbilityLength)
	ability.Pattern = AbilityPattern

	input := schemaProperty(s, "input")
	input.MinItems = schemaCount(1)
	input.MaxItems = schemaCount(MaxInputParts)

	reqs := schemaProperty(s, "requirements")
	reqs.MaxItems = schemaCount(MaxRequirements)
	reqs.UniqueItems = true

	deadline := schemaProperty(s, "deadline_ms")
	deadline.Minimum = schemaNumber(1)
	deadline.Maximum = schemaNumber(MaxDeadlineMs)
	deadline.Default = schemaNumber(DefaultDeadlineMs)

	md := schemaProperty(s, "metadata")
	md.MaxProperties = schemaCount(MaxMetadataEntries)
	md.PropertyNames = &jsonschema.Schema{Pattern: MetadataKeyPattern}
	md.AdditionalProperties = &jsonschema.Schema{Type: "string", MaxLength: schemaCount(MaxMetadataValueLength)}

	ext := schemaProperty(s, "extensions")
	ext.MaxProperties = schemaCount(MaxExtensions)
	ext.Comments = "The extensions object must also be at most " + strconv.Itoa(MaxExtensionsBytes) +
		" bytes as sent, which JSON Schema cannot measure."
	keys := []any{}
	ext.Properties = jsonschema.NewProperties()
	for _, spec := range DocumentedExtensions() {
		keys = append(keys, spec.Key)
		ext.Properties.Set(spec.Key, spec.schema())
	}
	ext.PropertyNames = &jsonschema.Schema{Pattern: ExtensionKeyPattern, Enum: keys}
	ext.AdditionalProperties = jsonschema.FalseSchema
}

// schema is the JSON Schema of the extension's value.
func (s *ExtensionSpec) schema() *jsonschema.Schema {
	out := &jsonschema.Schema{Type: s.Type, Description: "Passed to the provider's " + s.Source + " field."}
	if s.Source == "" {
		out.Description = "Provider-neutral generation option: each adapter maps it to its provider's field, " +
			"or declines the request when its provider cannot honour the value (spec/http-api.md, \"Generation options\")."
	}
	switch s.Type {
	case ExtensionObject:
		return parametersSchema(out)
	case ExtensionSchema:
		out.Type = "object"
		return schemaObjectSchema(out)
	}
	if s.Type == ExtensionString {
		out.MaxLength = schemaCount(s.MaxLength)
		out.Pattern = s.Pattern
		return out
	}
	if s.Type == ExtensionStrings {
		out.MaxItems = schemaCount(s.MaxItems)
		out.Items = &jsonschema.Schema{Type: "string", MinLength: schemaCount(1), MaxLength: schemaCount(s.MaxLength), Pattern: s.Pattern}
		return out
	}
	out.Minimum = schemaNumber(s.Minimum)
	out.Maximum = schemaNumber(s.Maximum)
	return out
}

// JSONSchemaExtend adds the routing hints' bounds.
func (Routing) JSONSchemaExtend(s *jsonschema.Schema) {
	prefer := schemaProperty(s, "prefer")
	prefer.MaxItems = schemaCount(MaxPrefer)
	prefer.Items.Pattern = DeploymentRefPattern
	prefer.Items.AllOf = []*jsonschema.Schema{{Pattern: deploymentRefLengths}}
	only := schemaProperty(s, "only")
	only.MaxItems = schemaCount(MaxPrefer)
	only.Items.Pattern = DeploymentRefPattern
	only.Items.AllOf = []*jsonschema.Schema{{Pattern: deploymentRefLengths}}

	attempts := schemaProperty(s, "max_attempts")
	attempts.Minimum = schemaNumber(1)
	attempts.Maximum = schemaNumber(MaxAttemptsLimit)
	attempts.Default = schemaNumber(DefaultMaxAttempts)
}

// JSONSchemaExtend adds the field grammars and, per part type, one if/then rule listing
// the fields the type requires and the only fields it allows (from partRules).
func (Part) JSONSchemaExtend(s *jsonschema.Schema) {
	mediaType := schemaProperty(s, "media_type")
	mediaType.MaxLength = schemaCount(MaxMediaTypeLength)
	mediaType.Pattern = MediaTypePattern

	data := schemaProperty(s, "data")
	data.MinLength = schemaCount(1)
	data.Pattern = Base64Pattern
	data.ContentEncoding = "base64"

	uri := schemaProperty(s, "uri")
	uri.MaxLength = schemaCount(MaxURILength)
	uri.Pattern = URIPattern

	callID := schemaProperty(s, "call_id")
	callID.MinLength = schemaCount(1)
	callID.MaxLength = schemaCount(MaxCallIDLength)

	schemaProperty(s, "parameters").Type = "object"

	for _, t := range PartTypes {
		rule := partRules[t]
		allowed := []any{"type"}
		for _, name := range rule.allowed.names() {
			allowed = append(allowed, name)
		}
		then := &jsonschema.Schema{
			Required:      rule.required.names(),
			PropertyNames: &jsonschema.Schema{Enum: allowed},
		}
		props := jsonschema.NewProperties()
		switch t {
		case PartImage, PartAudio, PartVideo, PartFile:
			then.OneOf = []*jsonschema.Schema{{Required: []string{"data"}}, {Required: []string{"uri"}}}
			if m, ok := mediaTypePrefix[t]; ok {
				props.Set("media_type", &jsonschema.Schema{Pattern: "^" + m.prefix})
			}
			if t == PartFile {
				props.Set("name", &jsonschema.Schema{
					MinLength: schemaCount(1), MaxLength: schemaCount(MaxFileNameLength), Pattern: fileNamePattern,
				})
			}
		case PartTool:
			props.Set("name", &jsonschema.Schema{Pattern: ToolNamePattern})
		case PartToolCall:
			props.Set("name", &jsonschema.Schema{Pattern: ToolNamePattern})
			props.Set("role", &jsonschema.Schema{Const: string(RoleAssistant)})
		}
		if props.Len() > 0 {
			then.Properties = props
		}
		ifType := jsonschema.NewProperties()
		ifType.Set("type", &jsonschema.Schema{Const: string(t)})
		s.AllOf = append(s.AllOf, &jsonschema.Schema{
			If:   &jsonschema.Schema{Properties: ifType, Required: []string{"type"}},
			Then: then,
		})
	}
}

// JSONSchema describes the two forms of a tool_result's content. Parts nested here are
// ordinary parts restricted to content types and without a role.
func (ToolContent) JSONSchema() *jsonschema.Schema {
	types := []any{}
	for _, t := range ContentPartTypes {
		types = append(types, string(t))
	}
	item := jsonschema.NewProperties()
	item.Set("type", &jsonschema.Schema{Enum: types})
	item.Set("role", jsonschema.FalseSchema)
	return &jsonschema.Schema{
		Description: "A tool_result's output: a string, or an array of text, json, image, audio, video and file parts.",
		OneOf: []*jsonschema.Schema{
			{Type: "string"},
			{
				Type:     "array",
				MaxItems: schemaCount(MaxContentParts),
				Items:    &jsonschema.Schema{Ref: "#/$defs/Part", Properties: item},
			},
		},
	}
}

// JSONSchemaExtend lists the part types.
func (PartType) JSONSchemaExtend(s *jsonschema.Schema) { s.Enum = enumValues(PartTypes) }

// JSONSchemaExtend lists the roles.
func (Role) JSONSchemaExtend(s *jsonschema.Schema) { s.Enum = enumValues(Roles) }

// JSONSchemaExtend lists the capability ids.
func (Capability) JSONSchemaExtend(s *jsonschema.Schema) { s.Enum = enumValues(Capabilities) }

func enumValues[T ~string](values []T) []any {
	out := make([]any, len(values))
	for i, v := range values {
		out[i] = string(v)
	}
	return out
}

// property returns the schema of a reflected property; a missing one is a programming
// error in this file, caught by generating the schema.
func schemaProperty(s *jsonschema.Schema, name string) *jsonschema.Schema {
	p, ok := s.Properties.Get(name)
	if !ok {
		panic("protocol: schema has no property " + name)
	}
	return p
}

func schemaCount(n int) *uint64 {
	v := uint64(n)
	return &v
}

func schemaNumber(n int64) json.Number { return json.Number(strconv.FormatInt(n, 10)) }
