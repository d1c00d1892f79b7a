package protocol

import (
	"encoding/json"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/invopop/jsonschema"
)

// Extension value types.
const (
	ExtensionString  = "string"
	ExtensionNumber  = "number"
	ExtensionInteger = "integer"
	// ExtensionObject is an object of model parameters: at most MaxParameters names
	// matching ParameterNamePattern, each with a scalar value (see ParameterValue).
	ExtensionObject = "object"
	// ExtensionStrings is an array of at most MaxItems non-empty strings of at most
	// MaxLength characters each (stop sequences).
	ExtensionStrings = "array"
	// ExtensionSchema is a JSON Schema object (a structured output's schema): any JSON
	// object, bounded by MaxExtensionsBytes, whose numbers are of magnitude at most 1e308
	// and whose strings are neither URLs nor data URIs, except the string value of a
	// "$ref" member, which must start with "#" (a reference inside the schema). So a
	// schema can name no document a provider would fetch, and carries no media.
	ExtensionSchema = "schema"
)

// Bounds of an ExtensionObject value. A parameter value is a boolean, a number of
// magnitude at most 1e308 (so it is finite in every JSON parser), or a string of at most
// MaxParameterValueLength characters that is neither a URL (it contains "://") nor a
// data URI: media and files reach a model only through input parts, which routing
// matches against the deployment's declared capabilities.
const (
	// MaxParameters bounds the parameters of an ExtensionObject value.
	MaxParameters = 32
	// MaxParameterValueLength bounds a string parameter value, in characters.
	MaxParameterValueLength = 4096
	// ParameterNamePattern is the grammar of a parameter name.
	ParameterNamePattern = `^[A-Za-z_][A-Za-z0-9_]{0,63}$`
	// urlValuePattern and dataURIPattern find the string values that are refused. Both
	// are in the common subset of RE2 and ECMA-262, for the decoder and the schema.
	urlValuePattern = `://`
	dataURIPattern  = `^[\t\n\r ]*[Dd][Aa][Tt][Aa]:`
	// maxParameterExponent: |number| ≤ 10^maxParameterExponent.
	maxParameterExponent = 308
)

// CacheBreakpointPattern is the grammar of one anthropic.cache_control entry: an input
// part's index (below MaxInputParts), optionally with the cache TTL.
const CacheBreakpointPattern = `^(0|[1-9][0-9]{0,2})(:(5m|1h))?$`

// ExtensionSpec documents one request extension key that a bundled adapter reads
// (spec/http-api.md, "Request"). DecodeRequest accepts only documented keys, and only
// values of the documented type and range, so a bad value fails at submission rather
// than mid-attempt. Adapter READMEs list the same keys.
type ExtensionSpec struct {
	// Key is the extension key, "<provider>.<field>".
	Key string
	// Source is the provider API field the adapter passes the value to; empty for the
	// provider-neutral generation.* keys, which every adapter maps to its own field
	// (GenerationOptions).
	Source string
	// Type is ExtensionString, ExtensionNumber, ExtensionInteger, ExtensionObject,
	// ExtensionStrings or ExtensionSchema.
	Type string
	// Minimum and Maximum bound number and integer values, inclusive.
	Minimum, Maximum int64
	// MaxLength bounds string values (each string of ExtensionStrings), in characters.
	MaxLength int
	// MaxItems bounds the strings of ExtensionStrings.
	MaxItems int
	// Pattern constrains string values (each string of ExtensionStrings).
	Pattern string

	re *regexp.Regexp
}

// documentedExtensions is the registry. Values are options only: nothing here can add a
// tool, change a core field, choose the model, version or endpoint, or carry a
// credential, and nothing takes a URL (which is why, for instance, replicate's webhook
// settings are absent).
var documentedExtensions = []ExtensionSpec{
	// Reasoning effort (low, medium, ...); a pattern, not a list, as OpenAI adds values.
	{Key: "openai.reasoning_effort", Source: "reasoning_effort", Type: ExtensionString, MaxLength: 16, Pattern: `^[a-z]+$`},
	// Sampling temperature, 0 to 2.
	{Key: "openai.temperature", Source: "temperature", Type: ExtensionNumber, Minimum: 0, Maximum: 2},
	// Nucleus sampling probability mass, 0 to 1.
	{Key: "openai.top_p", Source: "top_p", Type: ExtensionNumber, Minimum: 0, Maximum: 1},
	// Output token cap, reasoning tokens included.
	{Key: "openai.max_completion_tokens", Source: "max_completion_tokens", Type: ExtensionInteger, Minimum: 1, Maximum: math.MaxInt32},
	// Best-effort deterministic sampling.
	{Key: "openai.seed", Source: "seed", Type: ExtensionInteger, Minimum: math.MinInt64, Maximum: math.MaxInt64},
	// Output token cap; the adapter applies its own default otherwise.
	{Key: "anthropic.max_tokens", Source: "max_tokens", Type: ExtensionInteger, Minimum: 1, Maximum: math.MaxInt32},
	// Sampling temperature, 0 to 1.
	{Key: "anthropic.temperature", Source: "temperature", Type: ExtensionNumber, Minimum: 0, Maximum: 1},
	// Sample only from the k most likely tokens.
	{Key: "anthropic.top_k", Source: "top_k", Type: ExtensionInteger, Minimum: 0, Maximum: math.MaxInt32},
	// Prompt-cache breakpoints: the input parts whose blocks carry cache_control
	// {"type":"ephemeral"}, each named by its index in input, with ":1h" for a one-hour
	// TTL (":5m", the default, may be written too); the API allows four. It places
	// markers on content the request already holds and adds none.
	{Key: "anthropic.cache_control", Source: "cache_control", Type: ExtensionStrings, MaxItems: 4, MaxLength: 6, Pattern: CacheBreakpointPattern},
	// Sampling temperature, 0 to 2.
	{Key: "gemini.temperature", Source: "generationConfig.temperature", Type: ExtensionNumber, Minimum: 0, Maximum: 2},
	// Nucleus sampling probability mass, 0 to 1.
	{Key: "gemini.top_p", Source: "generationConfig.topP", Type: ExtensionNumber, Minimum: 0, Maximum: 1},
	// Sample only from the k most likely tokens.
	{Key: "gemini.top_k", Source: "generationConfig.topK", Type: ExtensionInteger, Minimum: 1, Maximum: math.MaxInt32},
	// Output token cap.
	{Key: "gemini.max_output_tokens", Source: "generationConfig.maxOutputTokens", Type: ExtensionInteger, Minimum: 1, Maximum: math.MaxInt32},
	// Best-effort deterministic sampling.
	{Key: "gemini.seed", Source: "generationConfig.seed", Type: ExtensionInteger, Minimum: math.MinInt32, Maximum: math.MaxInt32},
	// Sequences that stop generation; the API takes up to five.
	{Key: "gemini.stop_sequences", Source: "generationConfig.stopSequences", Type: ExtensionStrings, MaxItems: 5, MaxLength: 256},
	// Thinking token budget: -1 for dynamic, 0 to turn thinking off where the model allows.
	{Key: "gemini.thinking_budget", Source: "generationConfig.thinkingConfig.thinkingBudget", Type: ExtensionInteger, Minimum: -1, Maximum: math.MaxInt32},
	// Thinking level (low, high, ...); a pattern, not a list, as Google adds values.
	{Key: "gemini.thinking_level", Source: "generationConfig.thinkingConfig.thinkingLevel", Type: ExtensionString, MaxLength: 16, Pattern: `^[a-z]+$`},
	// Output token cap.
	{Key: "bedrock.max_tokens", Source: "inferenceConfig.maxTokens", Type: ExtensionInteger, Minimum: 1, Maximum: math.MaxInt32},
	// Sampling temperature, 0 to 1.
	{Key: "bedrock.temperature", Source: "inferenceConfig.temperature", Type: ExtensionNumber, Minimum: 0, Maximum: 1},
	// Nucleus sampling probability mass, 0 to 1.
	{Key: "bedrock.top_p", Source: "inferenceConfig.topP", Type: ExtensionNumber, Minimum: 0, Maximum: 1},
	// Sequences that stop generation.
	{Key: "bedrock.stop_sequences", Source: "inferenceConfig.stopSequences", Type: ExtensionStrings, MaxItems: 8, MaxLength: 256},
	// Model parameters (aspect ratio, steps, seed, ...). The adapter sends only names the
	// deployment allows (spec/modeldeployments.md, "Allowed parameters") and never lets
	// one replace the prompt or a media input; the model and version come from the
	// deployment alone.
	{Key: "replicate.input", Source: "input", Type: ExtensionObject},

	// Provider-neutral generation options (spec/http-api.md, "Generation options"): every
	// bundled adapter maps each to its provider's field, or declines the request in its
	// encode check when its provider cannot honour the value, so routing moves on to a
	// model that can. The bounds are the widest any bundled provider takes; an adapter
	// whose provider takes less declines the rest.
	// Output token cap (reasoning tokens included where the provider counts them).
	{Key: GenerationMaxOutputTokens, Type: ExtensionInteger, Minimum: 1, Maximum: MaxGenerationTokens},
	// Sampling temperature, 0 to 2 (Anthropic and Bedrock take 0 to 1).
	{Key: GenerationTemperature, Type: ExtensionNumber, Minimum: 0, Maximum: 2},
	// Nucleus sampling probability mass, 0 to 1.
	{Key: GenerationTopP, Type: ExtensionNumber, Minimum: 0, Maximum: 1},
	// Sample only from the k most likely tokens.
	{Key: GenerationTopK, Type: ExtensionInteger, Minimum: 1, Maximum: MaxGenerationTopK},
	// Sequences that stop generation: at most four, OpenAI's limit and the smallest of
	// the bundled providers'.
	{Key: GenerationStop, Type: ExtensionStrings, MaxItems: MaxGenerationStop, MaxLength: 256},
	// Best-effort deterministic sampling.
	{Key: GenerationSeed, Type: ExtensionInteger, Minimum: math.MinInt64, Maximum: math.MaxInt64},
	// Whether and which tool the model must call: auto, none, required or tool:<name>.
	{Key: GenerationToolChoice, Type: ExtensionString, MaxLength: 69, Pattern: ToolChoicePattern},
	// JSON output mode: the model answers one JSON value.
	{Key: GenerationResponseFormat, Type: ExtensionString, MaxLength: 4, Pattern: `^json$`},
	// The JSON Schema the answer must follow (structured output).
	{Key: GenerationResponseSchema, Type: ExtensionSchema},
	// The schema's name, for providers that want one; default "response".
	{Key: GenerationResponseSchemaName, Type: ExtensionString, MaxLength: 64, Pattern: `^[A-Za-z0-9_-]{1,64}$`},
}

var (
	parameterNameRE = regexp.MustCompile(ParameterNamePattern)
	urlValueRE      = regexp.MustCompile(urlValuePattern)
	dataURIRE       = regexp.MustCompile(dataURIPattern)

	rParameterCount = newRule("must hold at most " + strconv.Itoa(MaxParameters) + " parameters")
	rParameterName  = newRule("parameter names must match " + ParameterNamePattern)
	rParameterValue = newRule("parameter values must be booleans, numbers from -1e" + strconv.Itoa(maxParameterExponent) +
		" to 1e" + strconv.Itoa(maxParameterExponent) + ", or strings of at most " + strconv.Itoa(MaxParameterValueLength) +
		" characters that are neither URLs nor data URIs")
)

var extensionIndex = func() map[string]int {
	m := make(map[string]int, len(documentedExtensions))
	for i := range documentedExtensions {
		s := &documentedExtensions[i]
		if s.Pattern != "" {
			s.re = regexp.MustCompile(s.Pattern)
		}
		m[s.Key] = i
	}
	return m
}()

// DocumentedExtensions lists every documented extension key, sorted by key.
func DocumentedExtensions() []ExtensionSpec {
	out := slices.Clone(documentedExtensions)
	slices.SortFunc(out, func(a, b ExtensionSpec) int { return strings.Compare(a.Key, b.Key) })
	return out
}

// LookupExtension returns the documentation of an extension key.
func LookupExtension(key string) (ExtensionSpec, bool) {
	s, ok := lookupExtension(key)
	if !ok {
		return ExtensionSpec{}, false
	}
	return *s, true
}

func lookupExtension(key string) (*ExtensionSpec, bool) {
	i, ok := extensionIndex[key]
	if !ok {
		return nil, false
	}
	return &documentedExtensions[i], true
}

// Valid reports whether raw is one JSON value of the documented type and range, exactly
// as DecodeRequest checks it. Adapters use it to re-check values of requests that may
// not have come through DecodeRequest.
func (s ExtensionSpec) Valid(raw json.RawMessage) bool {
	if !json.Valid(raw) {
		return false
	}
	c := jsonCursor{data: raw}
	return s.check(&c) == "" && c.peek() == 0
}

// check consumes the value at the cursor and returns the rule it breaks, or "" when it
// has the documented type and range.
func (s *ExtensionSpec) check(c *jsonCursor) rule {
	b := c.peek()
	switch s.Type {
	case ExtensionString:
		if b != '"' {
			return rExtensionValue
		}
		v := c.str()
		if utf8.RuneCountInString(v) > s.MaxLength || (s.re != nil && !s.re.MatchString(v)) {
			return rExtensionValue
		}
		return ""
	case ExtensionNumber, ExtensionInteger:
		if !isNumberStart(b) {
			return rExtensionValue
		}
		n := parseExactNumber(c.number())
		if (s.Type == ExtensionInteger && !n.integral()) || !n.within(s.Minimum, s.Maximum) {
			return rExtensionValue
		}
		return ""
	case ExtensionObject:
		return checkParameters(c)
	case ExtensionSchema:
		return checkSchemaObject(c)
	case ExtensionStrings:
		if b != '[' {
			return rExtensionValue
		}
		n := 0
		bad := false
		_ = c.elements(func() error {
			n++
			if c.peek() != '"' {
				bad = true
				return errStop
			}
			v := c.str()
			if v == "" || utf8.RuneCountInString(v) > s.MaxLength || n > s.MaxItems || (s.re != nil && !s.re.MatchString(v)) {
				bad = true
				return errStop
			}
			return nil
		})
		if bad {
			return rExtensionValue
		}
		return ""
	}
	return rExtensionValue
}

// checkParameters consumes an ExtensionObject value. Like every object in a request, it
// may not repeat a name.
func checkParameters(c *jsonCursor) rule {
	if c.peek() != '{' {
		return rObject
	}
	var (
		names keySet
		n     int
		bad   rule
	)
	_ = c.members(func(name []byte) error {
		switch n++; {
		case !names.add(name):
			bad = rDuplicateKey
		case n > MaxParameters:
			bad = rParameterCount
		case !parameterNameRE.Match(name):
			bad = rParameterName
		case !parameterValue(c):
			bad = rParameterValue
		default:
			return nil
		}
		return errStop
	})
	return bad
}

// parameterValue consumes one parameter value and reports whether it is allowed.
func parameterValue(c *jsonCursor) bool {
	switch b := c.peek(); {
	case b == 't' || b == 'f':
		return c.skip()
	case b == '"':
		v := c.str()
		return utf8.RuneCountInString(v) <= MaxParameterValueLength && !urlValueRE.MatchString(v) && !dataURIRE.MatchString(v)
	case isNumberStart(b):
		return magnitudeAtMost(c.number(), maxParameterExponent)
	}
	return false // null, an array or an object
}

// magnitudeAtMost reports whether the number literal's absolute value is at most
// 10^exp, exactly (as JSON Schema compares numbers), without converting it to a float.
func magnitudeAtMost(lit []byte, exp int) bool {
	_, intDigits, fracDigits, e := numberParts(lit)
	digit, first, last := significand(intDigits, fracDigits)
	if first < 0 {
		return true // zero
	}
	// The value is in [10^(order-1), 10^order); it is 10^exp exactly when its only
	// significant digit is a 1 of that order.
	order := len(intDigits) + e - first
	return order <= exp || (order == exp+1 && first == last && digit(first) == '1')
}

// checkSchemaObject consumes an ExtensionSchema value. Like every object in a request, no
// object inside it may repeat a name.
func checkSchemaObject(c *jsonCursor) rule {
	if c.peek() != '{' {
		return rObject
	}
	return schemaValue(c, false)
}

// schemaValue consumes one value of an ExtensionSchema and returns the rule it breaks,
// or "". ref says that the value is that of a "$ref" member, whose string must start
// with "#".
func schemaValue(c *jsonCursor, ref bool) rule {
	var bad rule
	switch b := c.peek(); {
	case b == '{':
		var names keySet
		_ = c.members(func(name []byte) error {
			if !names.add(name) {
				bad = rDuplicateKey
			} else {
				bad = schemaValue(c, string(name) == "$ref")
			}
			if bad != "" {
				return errStop
			}
			return nil
		})
	case b == '[':
		_ = c.elements(func() error {
			if bad = schemaValue(c, false); bad != "" {
				return errStop
			}
			return nil
		})
	case b == '"':
		v := c.str()
		if ref {
			if !strings.HasPrefix(v, "#") {
				bad = rSchemaValue
			}
		} else if urlValueRE.MatchString(v) || dataURIRE.MatchString(v) {
			bad = rSchemaValue
		}
	case isNumberStart(b):
		if !magnitudeAtMost(c.number(), maxParameterExponent) {
			bad = rSchemaValue
		}
	default: // true, false, null
		c.skip()
	}
	return bad
}

// schemaObjectSchema completes out, the schema of an ExtensionSchema value, from the
// same patterns checkSchemaObject uses. The value is recursive, so its parts are named
// by anchors (local to the document, as every reference of a schema must be).
func schemaObjectSchema(out *jsonschema.Schema) *jsonschema.Schema {
	const objectAnchor, valueAnchor = "extension-schema-object", "extension-schema-value"
	value := &jsonschema.Schema{Ref: "#" + valueAnchor}
	limit := json.Number("1e" + strconv.Itoa(maxParameterExponent))
	// A "$ref" member holds a string starting with "#", or any other schema value.
	ref := &jsonschema.Schema{AnyOf: []*jsonschema.Schema{
		{Type: "string", Pattern: "^#"},
		{Not: &jsonschema.Schema{Type: "string"}, Ref: "#" + valueAnchor},
	}}
	out.Anchor = objectAnchor
	out.Properties = jsonschema.NewProperties()
	out.Properties.Set("$ref", ref)
	out.AdditionalProperties = value
	out.Definitions = jsonschema.Definitions{"value": {
		Anchor: valueAnchor,
		AnyOf: []*jsonschema.Schema{
			{Type: "null"},
			{Type: "boolean"},
			{Type: "number", Minimum: "-" + limit, Maximum: limit},
			{
				Type: "string",
				Not:  &jsonschema.Schema{AnyOf: []*jsonschema.Schema{{Pattern: urlValuePattern}, {Pattern: dataURIPattern}}},
			},
			{Type: "array", Items: value},
			{Ref: "#" + objectAnchor},
		},
	}}
	return out
}

// parametersSchema completes out, the schema of an ExtensionObject value, from the same
// constants and patterns checkParameters uses.
func parametersSchema(out *jsonschema.Schema) *jsonschema.Schema {
	out.MaxProperties = schemaCount(MaxParameters)
	out.PropertyNames = &jsonschema.Schema{Pattern: ParameterNamePattern}
	limit := json.Number("1e" + strconv.Itoa(maxParameterExponent))
	out.AdditionalProperties = &jsonschema.Schema{AnyOf: []*jsonschema.Schema{
		{Type: "boolean"},
		{Type: "number", Minimum: "-" + limit, Maximum: limit},
		{
			Type:      "string",
			MaxLength: schemaCount(MaxParameterValueLength),
			Not:       &jsonschema.Schema{AnyOf: []*jsonschema.Schema{{Pattern: urlValuePattern}, {Pattern: dataURIPattern}}},
		},
	}}
	return out
}
