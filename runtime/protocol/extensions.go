package protocol

import (
	"math"
	"regexp"
	"slices"
	"strings"
	"unicode/utf8"
)

// Extension value types.
const (
	ExtensionString  = "string"
	ExtensionNumber  = "number"
	ExtensionInteger = "integer"
)

// ExtensionSpec documents one request extension key that a bundled adapter reads
// (CONTRACT §4.1, §9). DecodeRequest accepts only documented keys, and only values of the
// documented type and range, so a bad value fails at submission rather than mid-attempt.
// Adapter READMEs list the same keys.
type ExtensionSpec struct {
	// Key is the extension key, "<provider>.<field>".
	Key string
	// Source is the provider API field the adapter passes the value to.
	Source string
	// Type is ExtensionString, ExtensionNumber or ExtensionInteger.
	Type string
	// Minimum and Maximum bound number and integer values, inclusive.
	Minimum, Maximum int64
	// MaxLength bounds string values, in characters.
	MaxLength int
	// Pattern constrains string values.
	Pattern string

	re *regexp.Regexp
}

// documentedExtensions is the registry. Values are options only: nothing here can add a
// tool, change a core field or carry a credential, and nothing takes a URL (which is why,
// for instance, replicate's webhook settings are absent).
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
	// Model version to run, when the deployment's model does not pin one.
	{Key: "replicate.version", Source: "version", Type: ExtensionString, MaxLength: 256, Pattern: `^[A-Za-z0-9][A-Za-z0-9._/:-]*$`},
}

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

// accepts consumes the value at the cursor and reports whether it has the documented
// type and range.
func (s *ExtensionSpec) accepts(c *jsonCursor) bool {
	b := c.peek()
	switch s.Type {
	case ExtensionString:
		if b != '"' {
			return false
		}
		v := c.str()
		return utf8.RuneCountInString(v) <= s.MaxLength && (s.re == nil || s.re.MatchString(v))
	case ExtensionNumber, ExtensionInteger:
		if !isNumberStart(b) {
			return false
		}
		n := parseExactNumber(c.number())
		if s.Type == ExtensionInteger && !n.integral() {
			return false
		}
		return n.within(s.Minimum, s.Maximum)
	}
	return false
}
